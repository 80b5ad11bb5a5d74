// OpenAI-Realtime WebSocket transport for the browser.
//
// Browsers cannot set an Authorization header on a WebSocket, so the key
// travels as the subprotocol `openai-insecure-api-key.KEY` next to `realtime`.
// Audio goes up as `input_audio_buffer.append` events (24 kHz PCM16, base64)
// and comes down as `response.output_audio.delta` events.

import { deliverServerEvent } from './server-events.js';

function b64FromBytes(bytes) {
  let s = '';
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(s);
}

export function bytesFromB64(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

export function realtimeUrl(base, model) {
  const u = new URL('/v1/realtime', base);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  if (model) u.searchParams.set('model', model);
  return u.toString();
}

export class WebSocketTransport {
  // opts: {baseUrl, apiKey, model, onEvent(ev), onState(state, detail), maxPendingMs}
  constructor(opts) {
    this.kind = 'websocket';
    this.opts = opts;
    this.ws = null;
    this.pending = []; // audio captured before the socket opened (kept in order)
    this.pendingMs = 0;
    this.sentAudioMs = 0;
    this.closedByUs = false;
  }

  connect() {
    const { baseUrl, apiKey, model, onEvent, onState } = this.opts;
    const protocols = ['realtime'];
    if (apiKey) protocols.push('openai-insecure-api-key.' + apiKey);
    onState('connecting');
    return new Promise((resolve, reject) => {
      let opened = false;
      let ws;
      try {
        ws = new WebSocket(realtimeUrl(baseUrl, model), protocols);
      } catch (err) {
        reject(err);
        return;
      }
      this.ws = ws;
      ws.onopen = () => {
        opened = true;
        onState('open');
        for (const chunk of this.pending) this._sendAudioNow(chunk);
        this.pending = [];
        this.pendingMs = 0;
        resolve();
      };
      ws.onmessage = (msg) => {
        if (typeof msg.data === 'string') deliverServerEvent(msg.data, onEvent);
      };
      ws.onerror = () => {
        if (!opened) {
          reject(new Error('WebSocket connection failed (server down, or a wrong API key)'));
        }
      };
      ws.onclose = (e) => {
        const detail = { code: e.code, reason: e.reason, byUs: this.closedByUs, opened };
        onState('closed', detail);
        if (!opened) reject(new Error(`WebSocket closed before it opened (code ${e.code})`));
      };
    });
  }

  get open() {
    return this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  send(ev) {
    if (this.open) this.ws.send(JSON.stringify(ev));
  }

  // pcm: Int16Array at 24 kHz
  sendAudio(pcm) {
    if (this.open) {
      this._sendAudioNow(pcm);
    } else if (this.ws && this.ws.readyState === WebSocket.CONNECTING) {
      const ms = (pcm.length * 1000) / 24000;
      if (this.pendingMs + ms <= (this.opts.maxPendingMs || 10000)) {
        this.pending.push(pcm);
        this.pendingMs += ms;
      }
    }
  }

  _sendAudioNow(pcm) {
    const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
    this.ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: b64FromBytes(bytes) }));
    this.sentAudioMs += (pcm.length * 1000) / 24000;
  }

  close() {
    this.closedByUs = true;
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, 'bye');
  }
}
