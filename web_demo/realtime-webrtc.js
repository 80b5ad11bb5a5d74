// OpenAI-style WebRTC transport for the browser.
//
//   POST /v1/realtime/client_secrets  (optional: mint a short-lived key from
//                                       the API key, when the server has it)
//   POST /v1/realtime/calls            SDP offer in (application/sdp), SDP answer out
//
// Events travel on the data channel `oai-events`; the microphone goes up as
// the peer connection's audio track and the agent's voice comes back on the
// remote track.  WebRTC-only events: output_audio_buffer.started|stopped|cleared
// (server) and output_audio_buffer.clear (client).

import { deliverServerEvent } from './server-events.js';

async function mintClientSecret(baseUrl, apiKey, model) {
  let resp;
  try {
    resp = await fetch(new URL('/v1/realtime/client_secrets', baseUrl), {
      method: 'POST',
      headers: { Authorization: 'Bearer ' + apiKey, 'Content-Type': 'application/json' },
      body: JSON.stringify({ session: { type: 'realtime', model: model || undefined } }),
    });
  } catch (err) {
    return null; // no such endpoint reachable: use the key itself
  }
  if (resp.status === 404 || resp.status === 405) return null;
  if (!resp.ok) {
    const text = await resp.text();
    throw new Error(`client secret: HTTP ${resp.status} ${text.slice(0, 200)}`);
  }
  const body = await resp.json();
  // GA shape {value, expires_at, session}; beta shape {client_secret: {value}}
  return body.value || (body.client_secret && body.client_secret.value) || null;
}

function waitIceGathering(pc, timeoutMs) {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      pc.removeEventListener('icegatheringstatechange', check);
      clearTimeout(timer);
      resolve();
    };
    const check = () => {
      if (pc.iceGatheringState === 'complete') done();
    };
    const timer = setTimeout(done, timeoutMs);
    pc.addEventListener('icegatheringstatechange', check);
  });
}

export class WebRTCTransport {
  // opts: {baseUrl, apiKey, model, micStream, onEvent(ev), onState(state, detail),
  //        onRemoteStream(stream)}
  constructor(opts) {
    this.kind = 'webrtc';
    this.opts = opts;
    this.pc = null;
    this.dc = null;
    this.callUrl = null;
    this.closedByUs = false;
    this.usedClientSecret = false;
  }

  async connect() {
    const { baseUrl, apiKey, model, micStream, onEvent, onState, onRemoteStream } = this.opts;
    onState('connecting');
    let token = apiKey || null;
    if (apiKey) {
      const secret = await mintClientSecret(baseUrl, apiKey, model);
      if (secret) {
        token = secret;
        this.usedClientSecret = true;
      }
    }
    const pc = new RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    pc.ontrack = (e) => {
      const stream = (e.streams && e.streams[0]) || new MediaStream([e.track]);
      onRemoteStream(stream);
    };
    pc.onconnectionstatechange = () => {
      const s = pc.connectionState;
      if (s === 'failed' || s === 'closed' || s === 'disconnected') {
        onState('closed', { code: s, reason: 'peer connection ' + s, byUs: this.closedByUs, opened: true });
      }
    };
    for (const track of micStream.getAudioTracks()) pc.addTrack(track, micStream);
    const dc = pc.createDataChannel('oai-events');
    this.dc = dc;
    const opened = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('data channel did not open in 15 s')), 15000);
      dc.onopen = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    dc.onmessage = (msg) => deliverServerEvent(msg.data, onEvent);
    dc.onclose = () => onState('closed', { code: 'datachannel', reason: 'data channel closed', byUs: this.closedByUs, opened: true });

    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    // The server may not take trickled candidates: send them all in the offer.
    await waitIceGathering(pc, 3000);
    const url = new URL('/v1/realtime/calls', baseUrl);
    if (model) url.searchParams.set('model', model);
    const headers = { 'Content-Type': 'application/sdp' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const resp = await fetch(url, { method: 'POST', headers, body: pc.localDescription.sdp });
    const answer = await resp.text();
    if (!resp.ok) {
      let msg = answer.slice(0, 300);
      try {
        const j = JSON.parse(answer);
        if (j.error && j.error.message) msg = j.error.message;
      } catch (_) { /* plain text */ }
      throw new Error(`POST /v1/realtime/calls: HTTP ${resp.status}: ${msg}`);
    }
    this.callUrl = resp.headers.get('Location');
    await pc.setRemoteDescription({ type: 'answer', sdp: answer });
    await opened;
    onState('open');
  }

  get open() {
    return this.dc && this.dc.readyState === 'open';
  }

  send(ev) {
    if (this.open) this.dc.send(JSON.stringify(ev));
  }

  sendAudio() {
    // the microphone travels on the peer connection's track
  }

  close() {
    this.closedByUs = true;
    try {
      if (this.dc) this.dc.close();
    } catch (_) { /* already closed */ }
    try {
      if (this.pc) this.pc.close();
    } catch (_) { /* already closed */ }
  }
}
