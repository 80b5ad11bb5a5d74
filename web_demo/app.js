// The voice demo page: microphone -> Realtime session (WebSocket or WebRTC) ->
// live transcripts, streamed agent text and audio, barge-in, latency.
//
// Test hooks: everything that happens is recorded on window.voiceDemo
// (state, counters, latencies, errors, transcripts, events, marks); times are
// performance.now() milliseconds of this page.

import { WebSocketTransport, bytesFromB64 } from './realtime-ws.js';
import { WebRTCTransport } from './realtime-webrtc.js';

const WIRE_RATE = 24000;
const LOUD = 0.01; // peak above which a played block counts as "not silent"
const MAX_EVENTS = 3000;

const $ = (id) => document.getElementById(id);
const now = () => performance.now();

function freshDemo() {
  return {
    state: 'idle', // idle | connecting | connected | closed | error
    transport: null,
    sessionId: null,
    counters: {
      audioFramesPlayed: 0, // output frames rendered from agent audio (context rate)
      playedMs: 0, // agent audio rendered, ms
      loudMs: 0, // of which not silent (WebRTC: measured on the remote track)
      lastLevel: 0, // last output block peak (0..1)
      maxLevel: 0,
      micLevel: 0, // last mic chunk RMS
      micChunks: 0,
      micMs: 0,
      audioDeltas: 0,
      receivedMs: 0, // agent audio received, ms
      flushes: 0, // flush commands sent to the player
      truncates: 0,
      eventsReceived: 0,
    },
    latencies: [], // ms, speech_stopped -> first agent audio played, one per turn
    latencyDetails: [],
    errors: [], // {t, source, code, message}
    user: [], // {itemId, text, final}
    agent: [], // {itemId, responseId, text, heardText, cut, cutMs, status, reason, receivedMs}
    events: [], // {t, type}
    marks: {
      micStartAt: null, // first mic chunk
      speechStarted: [], // {t, audioStartMs, itemId, onsetAt}
      speechStopped: [], // {t, audioEndMs}
      flushes: [], // {t, reason, ackAt, wasPlaying, dropped, lastLoudAt, stoppedAt, stoppedFrame}
      paused: [], // {t, responseId, audioEndMs}: voice_agent.output_audio.paused
      resumed: [], // {t, responseId, audioEndMs}: ... .resumed
      firstAudioAt: [], // {t, responseId}
      lastLoudAt: null, // page time of the last non-silent output block
      lastLoudFrame: null, // the same, in output frames (exact; page times jitter by ~10 ms)
      connectedAt: null,
    },
    sampleRate: null,
  };
}

const demo = (window.voiceDemo = freshDemo());

// ---------------------------------------------------------------- UI helpers

const ui = {};

function setState(state, detail) {
  demo.state = state;
  const pill = ui.state;
  pill.textContent = detail ? `${state}: ${detail}` : state;
  pill.dataset.state = state;
  const busy = state === 'connecting' || state === 'connected';
  ui.talk.textContent = busy ? 'Stop' : 'Talk';
  ui.talk.classList.toggle('active', busy);
  ui.talk.setAttribute('aria-pressed', busy ? 'true' : 'false');
  for (const el of ui.lockWhileBusy) el.disabled = busy;
}

function showError(source, code, message) {
  const e = { t: now(), source, code: code || null, message: message || String(code) };
  demo.errors.push(e);
  const li = document.createElement('li');
  li.className = 'error-item';
  li.textContent = `${source}${code ? ' [' + code + ']' : ''}: ${e.message}`;
  ui.errors.append(li); // oldest first, like the conversation
  while (ui.errors.children.length > 6) ui.errors.firstChild.remove();
  ui.errorsBox.hidden = false;
}

function scrollLog() {
  ui.log.scrollTop = ui.log.scrollHeight;
}

function bubble(kind, id) {
  const el = document.createElement('div');
  el.className = `bubble ${kind}`;
  el.dataset.id = id || '';
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = kind === 'user' ? 'You' : 'Agent';
  const text = document.createElement('div');
  text.className = 'text';
  el.append(who, text);
  ui.log.append(el);
  ui.empty.hidden = true;
  scrollLog();
  return el;
}

// ---------------------------------------------------------------- user turns

const userTurns = new Map(); // itemId -> {rec, el}

function userTurn(itemId) {
  let t = userTurns.get(itemId);
  if (!t) {
    const rec = { itemId, text: '', final: false };
    demo.user.push(rec);
    const el = bubble('user', itemId);
    el.classList.add('partial');
    el.querySelector('.text').textContent = '…';
    t = { rec, el };
    userTurns.set(itemId, t);
  }
  return t;
}

function renderUser(t) {
  const txt = t.el.querySelector('.text');
  txt.textContent = t.rec.text || (t.rec.final ? '(nothing recognised)' : '…');
  t.el.classList.toggle('partial', !t.rec.final);
  scrollLog();
}

// ---------------------------------------------------------------- agent turns

const agentTurns = new Map(); // itemId -> turn

function agentTurn(itemId, responseId) {
  let t = agentTurns.get(itemId);
  if (!t) {
    const rec = { itemId, responseId, text: '', heardText: null, cut: false, cutMs: null,
                  status: 'in_progress', receivedMs: 0 };
    demo.agent.push(rec);
    const el = bubble('agent', itemId);
    t = { rec, el, recvSamples: 0, segStart: 0, segments: [], truncated: false };
    agentTurns.set(itemId, t);
  }
  return t;
}

// same rule as the server (voice_server/session/items.py cut_transcript)
function cutTranscript(segments, endMs) {
  let out = '';
  for (const seg of segments) {
    if (seg.end <= endMs) {
      out += seg.text;
      continue;
    }
    if (seg.start < endMs && seg.end > seg.start) {
      const words = seg.text.split(/\s+/).filter(Boolean);
      const n = Math.floor((words.length * (endMs - seg.start)) / (seg.end - seg.start));
      if (n) {
        const lead = seg.text.slice(0, seg.text.length - seg.text.trimStart().length);
        out += lead + words.slice(0, n).join(' ');
      }
    }
    break;
  }
  return out;
}

function renderAgent(t) {
  const txt = t.el.querySelector('.text');
  txt.textContent = '';
  const r = t.rec;
  if (r.cut && r.heardText !== null) {
    const heard = document.createElement('span');
    heard.className = 'heard';
    heard.textContent = r.heardText;
    const rest = document.createElement('span');
    rest.className = 'unheard';
    rest.textContent = r.text.slice(r.heardText.length);
    const tag = document.createElement('span');
    tag.className = 'tag';
    tag.textContent = `interrupted at ${(r.cutMs / 1000).toFixed(1)} s`;
    txt.append(heard, rest, tag);
  } else {
    txt.textContent = r.text || (r.status === 'in_progress' ? '…' : '');
    if (r.status === 'failed' || r.status === 'incomplete') {
      const tag = document.createElement('span');
      tag.className = r.status === 'failed' ? 'tag bad' : 'tag';
      tag.textContent = r.status === 'incomplete' ? `incomplete: ${r.reason}` : r.status;
      txt.append(tag);
    }
  }
  t.el.classList.toggle('cut', r.cut);
  t.el.classList.toggle('failed', r.status === 'failed');
  scrollLog();
}

// ---------------------------------------------------------------- audio

let ctx = null;
let micStream = null;
let capture = null;
let player = null;
let remote = null; // {stream, el, source, analyser, timer, buf}
let transport = null;
let latencyFrom = null; // page time of the last speech_stopped waiting for audio
let gated = false; // WebRTC: output muted locally after a barge-in
let droppedResponses = new Set(); // responses whose audio was flushed
let currentResponse = null;
const captureTimes = []; // [sentMsStart, pageTime] per mic chunk (WebSocket timeline)
let micSentMs = 0;

function ctxTimeToPage(ctxTime) {
  // when a frame rendered at context time ctxTime reaches the output
  try {
    const ts = ctx.getOutputTimestamp();
    if (ts && ts.performanceTime) return ts.performanceTime + (ctxTime - ts.contextTime) * 1000;
  } catch (_) { /* older browsers */ }
  return now();
}

function frameToPage(frame) {
  return ctxTimeToPage(frame / ctx.sampleRate);
}

function captureTimeOf(ms) {
  // page time at which the mic sample at input-timeline ms was captured
  if (!captureTimes.length) return null;
  let lo = 0;
  let hi = captureTimes.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (captureTimes[mid][0] <= ms) lo = mid;
    else hi = mid - 1;
  }
  const [start, t] = captureTimes[lo];
  return t + (ms - start);
}

function setMeter(el, level) {
  // level 0..1 (linear); show on a dB scale from -60 dBFS
  const db = level > 0 ? 20 * Math.log10(level) : -100;
  const frac = Math.max(0, Math.min(1, (db + 60) / 60));
  el.style.transform = `scaleX(${frac.toFixed(3)})`;
}

async function startAudio(aec) {
  ctx = new AudioContext({ latencyHint: 'interactive' });
  demo.sampleRate = ctx.sampleRate;
  await ctx.audioWorklet.addModule('audio-worklet.js');
  if (ctx.state !== 'running') await ctx.resume().catch(() => {});
  micStream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: aec, noiseSuppression: aec, autoGainControl: aec },
  });
  const src = ctx.createMediaStreamSource(micStream);
  capture = new AudioWorkletNode(ctx, 'mic-capture', {
    numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1],
    processorOptions: { targetRate: WIRE_RATE, chunkMs: 20 },
  });
  const sink = ctx.createGain();
  sink.gain.value = 0; // keeps the capture node pulled without making it audible
  src.connect(capture).connect(sink).connect(ctx.destination);
  capture.port.onmessage = (e) => onMicChunk(e.data);

  player = new AudioWorkletNode(ctx, 'pcm-player', {
    numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
    processorOptions: { inputRate: WIRE_RATE, silenceThreshold: LOUD },
  });
  player.connect(ctx.destination);
  player.port.onmessage = (e) => onPlayerMessage(e.data);
}

function onMicChunk(m) {
  if (m.type !== 'chunk') return;
  const t = now();
  const pcm = new Int16Array(m.pcm);
  const ms = (pcm.length * 1000) / WIRE_RATE;
  if (demo.marks.micStartAt === null) demo.marks.micStartAt = t - ms;
  demo.counters.micChunks += 1;
  demo.counters.micMs += ms;
  demo.counters.micLevel = m.rms;
  setMeter(ui.micMeter, Math.min(1, m.rms * 3));
  if (transport && transport.kind === 'websocket') {
    captureTimes.push([micSentMs, t - ms]);
    if (captureTimes.length > 60000) captureTimes.splice(0, 10000);
    micSentMs += ms;
    transport.sendAudio(pcm);
  }
}

function onPlayerMessage(m) {
  const c = demo.counters;
  if (m.type === 'stats') {
    c.audioFramesPlayed = m.framesPlayed;
    c.playedMs = (m.framesPlayed * 1000) / ctx.sampleRate;
    c.lastLevel = m.level;
    if (m.level > c.maxLevel) c.maxLevel = m.level;
    if (m.level >= LOUD) c.loudMs += (128 * 4 * 1000) / ctx.sampleRate;
    noteLastLoud(m.lastLoudFrame);
    setMeter(ui.outMeter, m.level);
    for (const [itemId, samples] of Object.entries(m.played)) {
      const t = agentTurns.get(itemId);
      if (t) t.playedSamples = samples;
    }
  } else if (m.type === 'started') {
    const at = frameToPage(m.frame);
    demo.marks.firstAudioAt.push({ t: at, itemId: m.itemId });
    noteFirstAudio(at);
  } else if (m.type === 'flushed') {
    const f = demo.marks.flushes.find((x) => x.id === m.reason);
    if (f) {
      f.ackAt = now();
      f.wasPlaying = m.wasPlaying;
      f.dropped = m.dropped;
      f.lastLoudAt = m.lastLoudFrame >= 0 ? frameToPage(m.lastLoudFrame) : null;
      f.stoppedAt = frameToPage(m.frame); // the queue was dropped at this frame
      f.stoppedFrame = m.frame;
    }
    noteLastLoud(m.lastLoudFrame);
    c.audioFramesPlayed = m.framesPlayed;
    c.playedMs = (m.framesPlayed * 1000) / ctx.sampleRate;
    afterFlush(m.played);
  }
}

function noteLastLoud(frame) {
  if (frame < 0) return;
  demo.marks.lastLoudFrame = frame;
  demo.marks.lastLoudAt = frameToPage(frame);
}

function noteFirstAudio(at) {
  if (latencyFrom === null) return;
  const ms = Math.max(0, at - latencyFrom);
  demo.latencies.push(Math.round(ms));
  demo.latencyDetails.push({ from: latencyFrom, firstAudioAt: at, ms });
  latencyFrom = null;
  const last = demo.latencies[demo.latencies.length - 1];
  const sorted = [...demo.latencies].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const med = sorted.length % 2 ? sorted[mid] : Math.round((sorted[mid - 1] + sorted[mid]) / 2);
  ui.latency.textContent = `${last} ms`;
  ui.latencyMore.textContent = demo.latencies.length > 1
    ? `median ${med} ms over ${demo.latencies.length} turns` : 'first turn';
}

let flushSeq = 0;

// Stop local playback now (barge-in, cancelled response, server cleared).
function flush(reason) {
  demo.counters.flushes += 1;
  const id = `${reason}#${++flushSeq}`;
  demo.marks.flushes.push({ id, t: now(), reason, ackAt: null });
  if (currentResponse) droppedResponses.add(currentResponse);
  if (player) player.port.postMessage({ type: 'flush', reason: id });
  if (remote) {
    gated = true;
    remote.gain.gain.value = 0;
  }
  setMeter(ui.outMeter, 0);
}

// After the player dropped its queue: tell the server what was heard.
function afterFlush(played) {
  for (const t of agentTurns.values()) {
    if (t.truncated || !t.recvSamples) continue;
    const heard = played[t.rec.itemId] || 0;
    if (heard >= t.recvSamples) continue; // played to the end
    t.truncated = true;
    const endMs = Math.min(Math.floor((heard * 1000) / WIRE_RATE),
                           Math.floor((t.recvSamples * 1000) / WIRE_RATE));
    t.rec.cut = true;
    t.rec.cutMs = endMs;
    t.rec.heardText = cutTranscript(t.segments, endMs);
    renderAgent(t);
    if (transport) {
      transport.send({ type: 'conversation.item.truncate', item_id: t.rec.itemId,
                       content_index: 0, audio_end_ms: endMs });
      demo.counters.truncates += 1;
    }
  }
}

function setupRemote(stream) {
  // WebRTC: the agent's voice arrives as a remote track.  Chrome only pulls a
  // remote stream into WebAudio while a media element also plays it (muted).
  if (remote) return;
  const el = new Audio();
  el.muted = true;
  el.srcObject = stream;
  el.play().catch(() => {});
  const source = ctx.createMediaStreamSource(stream);
  const gain = ctx.createGain();
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 1024;
  source.connect(gain).connect(analyser).connect(ctx.destination);
  const buf = new Float32Array(analyser.fftSize);
  let last = now();
  const timer = setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    let peak = 0;
    for (let i = 0; i < buf.length; i++) peak = Math.max(peak, Math.abs(buf[i]));
    const t = now();
    const dt = t - last;
    last = t;
    const c = demo.counters;
    c.lastLevel = peak;
    if (peak > c.maxLevel) c.maxLevel = peak;
    setMeter(ui.outMeter, peak);
    if (peak >= LOUD) {
      c.loudMs += dt;
      c.playedMs += dt;
      c.audioFramesPlayed += Math.round((dt * ctx.sampleRate) / 1000);
      demo.marks.lastLoudAt = t;
      if (latencyFrom !== null) {
        demo.marks.firstAudioAt.push({ t, itemId: null });
        noteFirstAudio(t);
      }
    }
  }, 20);
  remote = { stream, el, source, gain, analyser, timer };
}

// ---------------------------------------------------------------- events

function record(ev) {
  demo.counters.eventsReceived += 1;
  if (demo.events.length >= MAX_EVENTS) demo.events.splice(0, 500);
  const e = { t: now(), type: ev.type };
  if (ev.response_id) e.responseId = ev.response_id;
  if (ev.item_id) e.itemId = ev.item_id;
  demo.events.push(e);
  ui.eventCount.textContent = String(demo.counters.eventsReceived);
}

function onEvent(ev) {
  record(ev);
  switch (ev.type) {
    case 'session.created':
      demo.sessionId = ev.session && ev.session.id;
      demo.marks.connectedAt = now();
      setState('connected');
      break;
    case 'input_audio_buffer.speech_started': {
      const t = now();
      // barge-in: stop what is playing at once, before anything else
      flush('speech_started');
      const onsetAt = transport && transport.kind === 'websocket'
        ? captureTimeOf(ev.audio_start_ms) : null;
      demo.marks.speechStarted.push({ t, audioStartMs: ev.audio_start_ms, itemId: ev.item_id, onsetAt });
      latencyFrom = null;
      if (ev.item_id) userTurn(ev.item_id);
      ui.listening.hidden = false;
      break;
    }
    case 'input_audio_buffer.speech_stopped':
      latencyFrom = now();
      demo.marks.speechStopped.push({ t: latencyFrom, audioEndMs: ev.audio_end_ms });
      ui.listening.hidden = true;
      break;
    case 'conversation.item.input_audio_transcription.delta': {
      const t = userTurn(ev.item_id);
      t.rec.text += ev.delta || '';
      renderUser(t);
      break;
    }
    case 'conversation.item.input_audio_transcription.completed': {
      const t = userTurn(ev.item_id);
      t.rec.text = ev.transcript || '';
      t.rec.final = true;
      renderUser(t);
      break;
    }
    case 'conversation.item.input_audio_transcription.failed': {
      const t = userTurn(ev.item_id);
      t.rec.final = true;
      renderUser(t);
      showError('transcription', ev.error && ev.error.code, ev.error && ev.error.message);
      break;
    }
    case 'response.created':
      currentResponse = ev.response && ev.response.id;
      if (remote && gated) {
        gated = false;
        remote.gain.gain.value = 1;
      }
      break;
    case 'output_audio_buffer.started':
      if (remote && gated) {
        gated = false;
        remote.gain.gain.value = 1;
      }
      break;
    case 'output_audio_buffer.cleared':
      flush('output_audio_buffer.cleared');
      break;
    // server extension: the user made a sound over the reply; the server
    // decides whether it is an interruption (then response.done cancelled
    // follows) or a backchannel / noise (then resumed, the same reply goes on)
    case 'voice_agent.output_audio.paused':
    case 'voice_agent.output_audio.resumed': {
      const pause = ev.type === 'voice_agent.output_audio.paused';
      (pause ? demo.marks.paused : demo.marks.resumed).push(
        { t: now(), responseId: ev.response_id, audioEndMs: ev.audio_end_ms });
      if (player) player.port.postMessage({ type: pause ? 'pause' : 'resume' });
      if (remote && !gated) remote.gain.gain.value = pause ? 0 : 1;
      break;
    }
    case 'response.output_audio.delta': {
      if (droppedResponses.has(ev.response_id)) break;
      const bytes = bytesFromB64(ev.delta || '');
      const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
      const f = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
      const t = agentTurn(ev.item_id, ev.response_id);
      t.recvSamples += pcm.length;
      t.rec.receivedMs = (t.recvSamples * 1000) / WIRE_RATE;
      demo.counters.audioDeltas += 1;
      demo.counters.receivedMs += (pcm.length * 1000) / WIRE_RATE;
      if (player) player.port.postMessage({ type: 'push', samples: f, itemId: ev.item_id }, [f.buffer]);
      break;
    }
    case 'response.output_audio_transcript.delta':
    case 'response.output_text.delta': {
      const t = agentTurn(ev.item_id, ev.response_id);
      const d = ev.delta || '';
      t.rec.text += d;
      const endMs = (t.recvSamples * 1000) / WIRE_RATE;
      t.segments.push({ start: t.segStart, end: endMs, text: d });
      t.segStart = endMs;
      if (!t.rec.cut) renderAgent(t);
      break;
    }
    case 'response.done': {
      const r = ev.response || {};
      for (const t of agentTurns.values()) {
        if (t.rec.responseId === r.id) {
          t.rec.status = r.status;
          t.rec.reason = (r.status_details && r.status_details.reason) || null;
          renderAgent(t);
        }
      }
      if (r.status === 'cancelled') {
        if (!droppedResponses.has(r.id)) flush('response.cancelled');
      } else if (r.status === 'failed') {
        const err = (r.status_details && r.status_details.error) || {};
        showError('response failed', err.code || err.type,
                  err.message || `the reply stopped (${err.code || err.type || 'server error'})`);
      } else if (r.status === 'incomplete') {
        // the token budget (max_output_tokens) cut the reply: its bubble says so;
        // any other reason is worth an error line
        const why = r.status_details && r.status_details.reason;
        if (why !== 'max_output_tokens') {
          showError('response incomplete', why, `response ${r.id} stopped early (${why})`);
        }
      }
      if (currentResponse === r.id) currentResponse = null;
      break;
    }
    case 'conversation.item.truncated':
      break;
    case 'error': {
      const e = ev.error || {};
      showError('server', e.code || e.type, e.message);
      break;
    }
    default:
      break;
  }
}

// ---------------------------------------------------------------- session

function onTransportState(state, detail) {
  if (state === 'closed') {
    if (demo.state === 'idle') return;
    const abnormal = detail && !detail.byUs;
    if (abnormal) {
      const why = detail.reason || (detail.opened ? `closed (${detail.code})` : 'could not connect');
      showError('connection', detail.code, why);
    }
    teardown(abnormal ? 'closed' : 'idle', abnormal ? String(detail.code) : undefined);
  } else if (state === 'connecting') {
    setState('connecting');
  }
}

async function start() {
  const next = freshDemo();
  for (const k of Object.keys(demo)) delete demo[k];
  Object.assign(demo, next, { ready: true });
  ui.log.querySelectorAll('.bubble').forEach((b) => b.remove());
  ui.empty.hidden = false;
  ui.latency.textContent = '—';
  ui.latencyMore.textContent = 'end of speech → first audio';
  userTurns.clear();
  agentTurns.clear();
  droppedResponses = new Set();
  currentResponse = null;
  latencyFrom = null;
  captureTimes.length = 0;
  micSentMs = 0;
  const kind = ui.form.querySelector('input[name=transport]:checked').value;
  const apiKey = ui.key.value.trim();
  const aec = ui.aec.checked;
  const minSpeech = parseInt(ui.minSpeech.value, 10);
  setState('connecting');
  try {
    await startAudio(aec);
    const opts = {
      baseUrl: window.location.href, apiKey, model: ui.model.value.trim() || undefined,
      onEvent, onState: onTransportState,
    };
    if (kind === 'webrtc') {
      transport = new WebRTCTransport({ ...opts, micStream, onRemoteStream: setupRemote });
    } else {
      transport = new WebSocketTransport(opts);
    }
    demo.transport = kind;
    await transport.connect();
    demo.usedClientSecret = !!transport.usedClientSecret; // WebRTC: minted an ek_ first
    const turnDetection = { type: 'server_vad', create_response: true, interrupt_response: true };
    // server extension: how much speech the VAD needs before speech_started
    // (barge-in); the server's default (250 ms) is on the slow side for a demo
    if (Number.isFinite(minSpeech) && minSpeech >= 0) turnDetection.min_speech_ms = minSpeech;
    transport.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['audio'],
        audio: {
          input: {
            format: { type: 'audio/pcm', rate: WIRE_RATE },
            turn_detection: turnDetection,
          },
          output: { format: { type: 'audio/pcm', rate: WIRE_RATE } },
        },
      },
    });
  } catch (err) {
    showError('connect', null, err && err.message ? err.message : String(err));
    teardown('error', 'could not start');
  }
}

function teardown(state, detail) {
  const t = transport;
  transport = null;
  if (t) t.close();
  if (remote) {
    clearInterval(remote.timer);
    remote.el.srcObject = null;
    remote = null;
  }
  gated = false;
  if (micStream) micStream.getTracks().forEach((tr) => tr.stop());
  micStream = null;
  if (capture) capture.port.postMessage({ type: 'stop' });
  capture = null;
  player = null;
  if (ctx) ctx.close().catch(() => {});
  ctx = null;
  ui.listening.hidden = true;
  setMeter(ui.micMeter, 0);
  setMeter(ui.outMeter, 0);
  setState(state, detail);
}

function stop() {
  teardown('idle');
}

// ---------------------------------------------------------------- boot

function boot() {
  Object.assign(ui, {
    form: $('controls'), talk: $('talk'), key: $('api-key'), model: $('model'), aec: $('aec'),
    minSpeech: $('min-speech'),
    state: $('state'), log: $('log'), empty: $('empty'), errors: $('errors'),
    errorsBox: $('errors-box'), latency: $('latency'), latencyMore: $('latency-more'),
    micMeter: $('mic-meter'), outMeter: $('out-meter'), listening: $('listening'),
    eventCount: $('event-count'),
  });
  ui.lockWhileBusy = [...ui.form.querySelectorAll('input, select')];
  const q = new URLSearchParams(window.location.search);
  if (q.get('transport') === 'webrtc') $('t-webrtc').checked = true;
  if (q.has('key')) ui.key.value = q.get('key');
  if (q.has('model')) ui.model.value = q.get('model');
  if (q.has('aec')) ui.aec.checked = q.get('aec') !== '0';
  if (q.has('min_speech_ms')) ui.minSpeech.value = q.get('min_speech_ms');
  ui.form.addEventListener('submit', (e) => {
    e.preventDefault();
    if (demo.state === 'connecting' || demo.state === 'connected') stop();
    else start();
  });
  $('clear-errors').addEventListener('click', () => {
    ui.errors.textContent = '';
    ui.errorsBox.hidden = true;
  });
  setState('idle');
  demo.ready = true;
  if (q.get('autostart') === '1') start();
}

window.voiceDemoControl = { start: () => start(), stop: () => stop() };
boot();
