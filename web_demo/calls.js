// The call records page: recent calls (GET /v1/calls), one call's transcript
// with its turn timings as a timeline (GET /v1/calls/{id}) and its recording
// (GET /v1/calls/{id}/recording.wav, fetched with the key, played from a blob).
// State for tests and curious people: window.callsPage.

const $ = (id) => document.getElementById(id);
const page = { ready: false, recordsOff: false, calls: [], call: null, errors: [], audioDuration: 0 };
window.callsPage = page;

function headers() {
  const key = $('api-key').value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function showError(message) {
  page.errors.push(message);
  const li = document.createElement('li');
  li.className = 'error-item';
  li.textContent = message;
  $('errors').append(li);
  $('errors-box').hidden = false;
}

class HttpError extends Error {
  constructor(path, status, error) {
    super(`${path}: HTTP ${status} ${(error && error.message) || ''}`);
    this.status = status;
    this.code = error && error.code;
  }
}

async function getJson(path) {
  const r = await fetch(path, { headers: headers() });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new HttpError(path, r.status, body.error);
  return body;
}

// A server with records off (the default) says so on every path: show how to turn
// them on instead of an empty table.
function showRecordsOff() {
  page.recordsOff = true;
  $('records-off').hidden = false;
  $('access').hidden = true;
  $('calls-box').hidden = true;
  $('call').hidden = true;
}

function failed(e) {
  if (e.code === 'records_disabled') showRecordsOff();
  else showError(e.message);
}

function when(unixS) {
  return new Date(unixS * 1000).toLocaleString();
}

// A call the agent placed (POST /v1/sip/calls) keeps its outcome, answered or not:
// "busy 486 → sip:bob@pbx"; every other call has none.
function placedOutcome(c) {
  const o = c.outbound;
  if (!o) return '—';
  return `${o.status}${o.sip_status ? ` ${o.sip_status}` : ''} → ${o.to}`;
}

async function loadCalls() {
  const body = await getJson('v1/calls?limit=50');
  page.calls = body.data;
  const tbody = $('calls').querySelector('tbody');
  tbody.replaceChildren();
  for (const c of body.data) {
    const tr = document.createElement('tr');
    tr.dataset.id = c.id;
    for (const v of [when(c.started_at), c.transport, c.state, c.turn_count, c.recorded ? 'yes' : '—',
                     placedOutcome(c)]) {
      const td = document.createElement('td');
      td.textContent = String(v);
      tr.append(td);
    }
    tr.addEventListener('click', () => showCall(c.id).catch(failed));
    tbody.append(tr);
  }
  $('no-calls').hidden = body.data.length > 0;
}

function bubble(item) {
  const el = document.createElement('div');
  const who = document.createElement('div');
  who.className = 'who';
  const text = document.createElement('div');
  text.className = 'text';
  if (item.type === 'function_call') {
    el.className = 'bubble agent';
    who.textContent = 'tool call';
    text.textContent = `${item.name}(${item.arguments || ''})`;
  } else if (item.type === 'function_call_output') {
    el.className = 'bubble user';
    who.textContent = 'tool output';
    text.textContent = item.output || '';
  } else {
    el.className = `bubble ${item.role === 'user' ? 'user' : 'agent'}`;
    who.textContent = item.role || 'message';
    text.textContent = item.text || '';
    if (item.truncated_ms != null) {
      const tag = document.createElement('span');
      tag.className = 'tag';
      tag.textContent = `interrupted: heard ${(item.truncated_ms / 1000).toFixed(1)} s`;
      text.append(' ', tag);
    }
  }
  el.append(who, text);
  return el;
}

// segments of one turn, in ms from its reference (end of speech, or the reply's start)
function segments(t) {
  const ref = t.speech_stopped_ms != null ? t.speech_stopped_ms : t.response_started_ms;
  const marks = [
    ['asr', t.speech_stopped_ms, t.transcript_ms],
    ['decide', t.transcript_ms != null ? t.transcript_ms : t.speech_stopped_ms, t.response_started_ms],
    ['think', t.response_started_ms, t.first_token_ms],
    ['speak', t.first_token_ms, t.first_audio_ms],
    ['play', t.first_audio_ms != null ? t.first_audio_ms : t.response_started_ms, t.done_ms],
  ];
  return { ref, parts: marks.filter(([, a, b]) => a != null && b != null && b >= a)
    .map(([kind, a, b]) => ({ kind, from: a - ref, to: b - ref })) };
}

function renderTimeline(turns) {
  const box = $('timeline');
  box.replaceChildren();
  const all = turns.map((t) => ({ turn: t, ...segments(t.timings) }));
  const span = Math.max(1, ...all.flatMap((s) => s.parts.map((p) => p.to)));
  for (const s of all) {
    const t = s.turn.timings;
    const row = document.createElement('div');
    row.className = 'turn-row';
    row.dataset.responseId = s.turn.response_id;
    const label = document.createElement('span');
    label.textContent = s.turn.status + (s.turn.reason ? ` (${s.turn.reason})` : '');
    const bar = document.createElement('div');
    bar.className = 'turn-bar';
    for (const p of s.parts) {
      const seg = document.createElement('div');
      seg.className = `seg ${p.kind}`;
      seg.style.left = `${(100 * Math.max(p.from, 0)) / span}%`;
      seg.style.width = `${(100 * (p.to - Math.max(p.from, 0))) / span}%`;
      seg.title = `${p.kind}: ${Math.round(p.to - p.from)} ms`;
      bar.append(seg);
    }
    const first = document.createElement('span');
    first.className = 'first-audio';
    first.textContent = t.first_audio_ms != null ? `${Math.round(t.first_audio_ms - s.ref)} ms` : '—';
    if (t.barge_in_speech_ms != null) first.textContent += ` · barge-in ${Math.round(t.done_ms - t.barge_in_speech_ms)} ms`;
    row.append(label, bar, first);
    box.append(row);
  }
}

async function loadRecording(call) {
  const audio = $('recording');
  audio.hidden = true;
  page.audioDuration = 0;
  if (!call.recorded) return;
  const r = await fetch(`v1/calls/${encodeURIComponent(call.id)}/recording.wav`, { headers: headers() });
  if (!r.ok) throw new Error(`recording: HTTP ${r.status}`);
  if (audio.src) URL.revokeObjectURL(audio.src);
  audio.src = URL.createObjectURL(await r.blob());
  audio.addEventListener('loadedmetadata', () => { page.audioDuration = audio.duration; }, { once: true });
  audio.hidden = false;
}

async function showCall(id) {
  const call = await getJson(`v1/calls/${encodeURIComponent(id)}`);
  page.call = call;
  for (const tr of $('calls').querySelectorAll('tbody tr')) tr.classList.toggle('selected', tr.dataset.id === id);
  $('call').hidden = false;
  $('call-title').textContent = `${call.transport} call, ${when(call.started_at)} (${call.state})`
    + (call.outbound ? `, placed by the agent: ${placedOutcome(call)}` : '');
  $('transcript').replaceChildren(...call.items.map(bubble));
  renderTimeline(call.turns);
  await loadRecording(call);
}

$('access').addEventListener('submit', (ev) => {
  ev.preventDefault();
  loadCalls().catch(failed);
});

// On opening, list the calls at once when no key is needed; a server that wants a key
// answers 401 and waits for one in the form.
loadCalls()
  .catch((e) => { if (e.status !== 401) failed(e); })
  .finally(() => { page.ready = true; });
