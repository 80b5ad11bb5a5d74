// AudioWorklet processors for the voice demo (no build step; loaded with
// audioContext.audioWorklet.addModule('audio-worklet.js')).
//
//   'mic-capture'  microphone (context rate) -> 24 kHz PCM16 chunks posted to the
//                  main thread, with the chunk's RMS level.
//   'pcm-player'   24 kHz PCM16/float chunks from the main thread -> speakers
//                  (context rate).  {type:'flush'} drops everything queued at
//                  once (barge-in); stats report what was really rendered.

const WIRE_RATE = 24000;

// Windowed-sinc low-pass taps (Blackman), cutoff given as a fraction of the
// input rate; used before decimating the microphone to 24 kHz.
function lowpassTaps(cutoff, n) {
  const taps = new Float32Array(n);
  const m = (n - 1) / 2;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const x = i - m;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const w = 0.42 - 0.5 * Math.cos((2 * Math.PI * i) / (n - 1)) + 0.08 * Math.cos((4 * Math.PI * i) / (n - 1));
    taps[i] = sinc * w;
    sum += taps[i];
  }
  for (let i = 0; i < n; i++) taps[i] /= sum;
  return taps;
}

class MicCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.outRate = o.targetRate || WIRE_RATE;
    this.chunkSamples = Math.round((this.outRate * (o.chunkMs || 20)) / 1000);
    this.ratio = sampleRate / this.outRate; // input samples per output sample
    this.resample = Math.abs(this.ratio - 1) > 1e-9;
    if (this.resample && this.ratio > 1) {
      this.taps = lowpassTaps((0.45 * this.outRate) / sampleRate, 31);
    } else {
      this.taps = null;
    }
    // history of filtered input for interpolation / FIR state
    this.hist = new Float32Array(64);
    this.histLen = 0;
    this.filt = new Float32Array(0);
    this.pos = 0; // fractional read position into the filtered stream (relative to its start)
    this.out = new Int16Array(this.chunkSamples);
    this.outLen = 0;
    this.sumSq = 0;
    this.peak = 0;
    this.frames = 0;
    this.stopped = false;
    this.port.onmessage = (e) => {
      if (e.data && e.data.type === 'stop') this.stopped = true;
    };
  }

  _emit(v) {
    const s = Math.max(-1, Math.min(1, v));
    this.out[this.outLen++] = s < 0 ? s * 0x8000 : s * 0x7fff;
    this.sumSq += s * s;
    const a = Math.abs(s);
    if (a > this.peak) this.peak = a;
    if (this.outLen === this.chunkSamples) {
      const pcm = this.out;
      this.port.postMessage({
        type: 'chunk', pcm: pcm.buffer, frame: currentFrame,
        rms: Math.sqrt(this.sumSq / this.outLen), peak: this.peak,
      }, [pcm.buffer]);
      this.out = new Int16Array(this.chunkSamples);
      this.outLen = 0;
      this.sumSq = 0;
      this.peak = 0;
    }
  }

  process(inputs) {
    if (this.stopped) return false;
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const x = input[0];
    this.frames += x.length;
    if (!this.resample) {
      for (let i = 0; i < x.length; i++) this._emit(x[i]);
      return true;
    }
    // FIR filter (when decimating) into a working buffer that keeps the
    // previous block's tail for the filter and for interpolation.
    const taps = this.taps;
    const nt = taps ? taps.length : 1;
    const buf = new Float32Array(this.histLen + x.length);
    buf.set(this.hist.subarray(0, this.histLen));
    buf.set(x, this.histLen);
    let y;
    let base; // index in buf of y[0]
    if (taps) {
      const first = Math.max(0, nt - 1);
      if (buf.length <= first) {
        this.hist = buf;
        this.histLen = buf.length;
        return true;
      }
      y = new Float32Array(buf.length - first);
      for (let i = first; i < buf.length; i++) {
        let acc = 0;
        for (let k = 0; k < nt; k++) acc += taps[k] * buf[i - k];
        y[i - first] = acc;
      }
      base = first;
    } else {
      y = buf;
      base = 0;
    }
    // y[j] corresponds to buf[base + j]; this.pos indexes buf coordinates.
    let p = this.pos;
    while (p + 1 < base + y.length) {
      const j = p - base;
      if (j < 0) { p += this.ratio; continue; }
      const i0 = Math.floor(j);
      const f = j - i0;
      const v = y[i0] * (1 - f) + (i0 + 1 < y.length ? y[i0 + 1] * f : 0);
      this._emit(v);
      p += this.ratio;
    }
    // keep the last (nt + 2) input samples
    const keep = Math.min(buf.length, nt + Math.ceil(this.ratio) + 2);
    const drop = buf.length - keep;
    this.hist = buf.slice(drop);
    this.histLen = keep;
    this.pos = p - drop;
    return true;
  }
}

class PcmPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.inRate = o.inputRate || WIRE_RATE;
    this.step = this.inRate / sampleRate; // source samples per output sample
    this.threshold = o.silenceThreshold || 0.01; // "non-silent" peak
    this.statsEvery = o.statsEveryQuanta || 4;
    this.queue = []; // {itemId, data: Float32Array (source rate)}
    this.head = 0; // fractional read position into queue[0].data
    this.queued = 0; // source samples queued
    this.prev = 0; // last sample output (for interpolation across chunks)
    this.played = {}; // itemId -> source samples rendered
    this.framesPlayed = 0; // output frames rendered from audio (not underrun)
    this.lastLoudFrame = -1;
    this.playing = false;
    this.quanta = 0;
    this.level = 0;
    this.currentItem = null;
    this.paused = false; // the server paused the reply: hold the queue, play silence
    this.port.onmessage = (e) => this._onMessage(e.data);
  }

  _onMessage(m) {
    if (!m) return;
    if (m.type === 'push') {
      const data = m.samples instanceof Float32Array ? m.samples : new Float32Array(m.samples);
      if (data.length) {
        this.queue.push({ itemId: m.itemId || null, data });
        this.queued += data.length;
      }
    } else if (m.type === 'pause' || m.type === 'resume') {
      this.paused = m.type === 'pause';
      this.port.postMessage({ type: m.type === 'pause' ? 'paused' : 'resumed', frame: currentFrame,
                              queued: this.queued });
    } else if (m.type === 'flush') {
      const played = this._playedSnapshot();
      const dropped = this.queued - Math.floor(this.head);
      this.queue = [];
      this.head = 0;
      this.queued = 0;
      this.paused = false;
      const wasPlaying = this.playing;
      this.playing = false;
      this.port.postMessage({
        type: 'flushed', reason: m.reason || null, frame: currentFrame,
        dropped: Math.max(0, dropped), wasPlaying, played,
        framesPlayed: this.framesPlayed, lastLoudFrame: this.lastLoudFrame,
      });
    }
  }

  // source samples rendered per item: whole chunks plus the head of the current one
  _playedSnapshot() {
    const played = { ...this.played };
    if (this.queue.length && this.queue[0].itemId) {
      const id = this.queue[0].itemId;
      played[id] = (played[id] || 0) + Math.floor(this.head);
    }
    return played;
  }

  process(inputs, outputs) {
    const out = outputs[0];
    const ch0 = out[0];
    const n = ch0.length;
    let peak = 0;
    let rendered = 0;
    for (let i = 0; i < n; i++) {
      let v = 0;
      if (this.queue.length && !this.paused) {
        const q = this.queue[0];
        const i0 = Math.floor(this.head);
        const f = this.head - i0;
        const a = q.data[i0];
        let b;
        if (i0 + 1 < q.data.length) b = q.data[i0 + 1];
        else if (this.queue.length > 1) b = this.queue[1].data[0];
        else b = a;
        v = a * (1 - f) + b * f;
        rendered++;
        const id = q.itemId;
        if (id !== this.currentItem) this.currentItem = id;
        this.head += this.step;
        while (this.queue.length && this.head >= this.queue[0].data.length) {
          const done = this.queue.shift();
          this.head -= done.data.length;
          this.queued -= done.data.length;
          if (done.itemId) this.played[done.itemId] = (this.played[done.itemId] || 0) + done.data.length;
        }
        if (this.queue.length === 0) this.head = 0;
      }
      const a = Math.abs(v);
      if (a > peak) peak = a;
      for (let c = 0; c < out.length; c++) out[c][i] = v;
    }
    if (rendered) {
      this.framesPlayed += rendered;
      if (!this.playing) {
        this.playing = true;
        this.port.postMessage({ type: 'started', frame: currentFrame, itemId: this.currentItem });
      }
    } else if (this.playing && !this.paused) {
      // (paused is not drained: the reply goes on from its queue on resume)
      this.playing = false;
      this.port.postMessage({ type: 'drained', frame: currentFrame });
    }
    if (peak >= this.threshold) this.lastLoudFrame = currentFrame + n;
    this.level = peak;
    if (++this.quanta % this.statsEvery === 0) {
      const played = this._playedSnapshot();
      this.port.postMessage({
        type: 'stats', frame: currentFrame + n, framesPlayed: this.framesPlayed,
        lastLoudFrame: this.lastLoudFrame, level: peak, queued: this.queued, played,
      });
    }
    return true;
  }
}

registerProcessor('mic-capture', MicCapture);
registerProcessor('pcm-player', PcmPlayer);
