// The page's proxy to the worker: window.exactspec. UI, tests, benches and power users all use this API.
//   await exactspec.ready()            -> {backend: 'webgpu' | 'cpu', models, stages, active}
//   await exactspec.generate({prompt, chat, max_new_tokens, temperature, top_k, top_p, seed, drafter, k, mode,
//                             backend?: 'webgpu' | 'cpu'})   (backend moves the active models there first)
//     JSON mode: add response_format: {type: 'json_schema', schema} (or {type: 'json_object'}); the answer is then
//     JSON valid for the schema; grammar_draft: false turns grammar-forced drafting off
//                                      -> {text, token_ids, finish_reason, stats: {backend, target_passes, ...}}
//   exactspec.cancel(), listModels(), importModel({url | file | files, name?}), deleteModel(name),
//   loadModel(name, role), on(kind, fn) for 'stage' | 'progress' | 'tokens' | 'log' (returns an unsubscribe).
//   await exactspec.timings({chat | prompt, ks, reps, drafters, temperature, seed})
//                                      -> pass times of the loaded models (exactspec.timing; py/bench/product.py)
//   await exactspec.memory()           -> bytes per model (weights, kv, features, scratch) on its backend, GPU buffers,
//                                         WebAssembly heap, JS heap (the bench matrix's peak memory)
//   await exactspec.benchFigures({records, ttft, memory}) -> {summary, figures} (exactspec.benchmatrix)

import { REQ, EVT } from './protocol.js';

const EVENT_NAMES = { [EVT.STAGE]: 'stage', [EVT.PROGRESS]: 'progress', [EVT.TOKENS]: 'tokens', [EVT.LOG]: 'log' };

export class ExactSpecClient {
  constructor(workerUrl = new URL('./worker.js', import.meta.url)) {
    this.worker = new Worker(workerUrl, { type: 'module', name: 'exactspec' });
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Map();
    this.stages = [];
    this.bootResult = null;
    this._boot = null;
    this.worker.onmessage = (ev) => this._onMessage(ev.data);
    this.worker.onerror = (ev) => {
      const err = new Error(`worker failed: ${ev.message || 'script error'}`);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      this._emit('log', { level: 'error', message: err.message });
    };
  }

  _onMessage(msg) {
    if (!msg) return;
    if (typeof msg.kind === 'string' && msg.kind.startsWith('event.')) {
      if (msg.kind === EVT.STAGE) this.stages.push(msg);
      this._emit(EVENT_NAMES[msg.kind] || msg.kind, msg);
      return;
    }
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.ok) p.resolve(msg.result);
    else {
      const e = new Error(msg.error);
      e.detail = msg.detail;
      p.reject(e);
    }
  }

  _emit(name, payload) {
    for (const fn of this.listeners.get(name) || []) {
      try { fn(payload); } catch (e) { console.error(e); }
    }
  }

  on(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(fn);
    return () => this.listeners.get(name).delete(fn);
  }

  request(kind, params = {}, transfer = []) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, kind, params }, transfer);
    });
  }

  // Boot the worker (once). params: {champion?, draft?, force_cpu?}.
  boot(params = {}) {
    if (!this._boot) {
      this._boot = this.request(REQ.BOOT, params).then(async (r) => {
        const models = await this.listModels();
        this.bootResult = { ...r, models };
        return this.bootResult;
      });
    }
    return this._boot;
  }

  ready() { return this.boot(); }

  // {onToken(text, token_ids)} streams; returns the final answer.
  async generate(params = {}, { onToken } = {}) {
    await this.ready();
    // the API applies the chat template unless chat is false; settings left out take the defaults of
    // py/exactspec/settings.py (the worker's Python applies them)
    const req = { chat: true, ...params };
    let off = null;
    const id = this.nextId;   // the id request() will take
    if (onToken) off = this.on('tokens', (e) => { if (e.request_id === id) onToken(e.text, e.token_ids); });
    try {
      return await this.request(REQ.GENERATE, req);
    } finally {
      if (off) off();
    }
  }

  // Continue the last answer (after a stop or a length limit) with the same settings.
  continue(params = {}, opts = {}) { return this.generate({ ...params, continue: true }, opts); }

  cancel() { return this.request(REQ.CANCEL); }
  listModels() { return this.request(REQ.LIST_MODELS); }
  status() { return this.request(REQ.STATUS); }
  deleteModel(name) { return this.request(REQ.DELETE_MODEL, { name }); }
  loadModel(name, role = 'champion') { return this.request(REQ.LOAD_MODEL, { name, role }); }
  async timings(params = {}) {
    await this.ready();
    return this.request(REQ.TIMINGS, { chat: true, ...params });
  }

  async memory() {
    await this.ready();
    const out = await this.request(REQ.MEMORY);
    const pm = globalThis.performance && globalThis.performance.memory;   // Chromium's, on the page's thread
    out.page_js_heap_used = pm ? pm.usedJSHeapSize : null;
    return out;
  }
  async benchFigures(doc) {
    await this.ready();
    return this.request(REQ.BENCH_FIGURES, doc);
  }

  // {url} (this site's own) | {file: File} | {files: File[]}; optional name, role, size, sha256.
  async importModel(src) {
    await this.ready();
    // size / sha256: optional expected values (checked against quota before, and against the bytes after)
    const params = { name: src.name, role: src.role, size: src.size, sha256: src.sha256 };
    if (src.url) params.url = src.url;
    else params.files = src.files ? Array.from(src.files) : [src.file];
    return this.request(REQ.IMPORT_MODEL, params);
  }
}

export const exactspec = new ExactSpecClient();
globalThis.exactspec = exactspec;
