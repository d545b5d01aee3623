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
//   Faults and recovery (issue 12): await exactspec.faults.arm({kind, phase, round} | 'kind@phase:round,...'),
//   exactspec.faults.list() -> {armed, fired}, exactspec.faults.clear(); exactspec.receipt() -> the last answer's
//   privacy-safe receipt (py/exactspec/receipts.py). A worker that dies (its liveness lock is released) is replaced:
//   the new one boots from OPFS and the answer in flight is finished from its last committed token
//   (app/supervisor.js); on('worker', fn) reports {state: 'lost' | 'restarted' | 'failed', why, ms}; 'notice' events
//   say what the status line should ({level, code, message}).

import { REQ, EVT } from './protocol.js';
import { FaultRegistry } from './faults.js';
import { Conversation } from './supervisor.js';

const EVENT_NAMES = { [EVT.STAGE]: 'stage', [EVT.PROGRESS]: 'progress', [EVT.TOKENS]: 'tokens', [EVT.LOG]: 'log',
  [EVT.FAULT]: 'fault', [EVT.NOTICE]: 'notice' };
const MAX_RESTARTS = 3;     // per answer (and per boot)

export class ExactSpecClient {
  constructor(workerUrl = new URL('./worker.js', import.meta.url)) {
    this.workerUrl = workerUrl;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Map();
    this.stages = [];
    this.bootResult = null;
    this._boot = null;
    this.generation = 0;           // which worker this is (1, 2, ... after restarts)
    this.restarting = null;        // a promise while a new worker boots
    this.bootParams = {};
    this.active = { champion: null, draft: null };
    this.conv = new Conversation();
    this.lastReceipt = null;
    this._faults = new FaultRegistry();
    this.sentFaults = [];
    const client = this;
    this.faults = {               // exactspec.faults: arm / list / clear (app/faults.js)
      async arm(spec) { const a = client._faults.arm(spec); await client._pushFaults(); return a; },
      list() { return client._faults.list(); },
      async clear() { client._faults.clear(); await client._pushFaults(); },
    };
    this._spawn();
  }

  _spawn() {
    const gen = ++this.generation;
    const lock = `exactspec-worker-${gen}-${Math.random().toString(36).slice(2)}`;
    const w = new Worker(this.workerUrl, { type: 'module', name: lock });
    this.worker = w;
    this.alive = false;
    w.onmessage = (ev) => { if (this.worker === w) this._onMessage(ev.data, w); };
    w.onerror = (ev) => {
      if (this.worker !== w) return;
      const err = new Error(`worker failed: ${ev.message || 'script error'}`);
      if (!this.alive) {              // it never started: nothing to restart into
        for (const p of this.pending.values()) p.reject(err);
        this.pending.clear();
      }
      this._emit('log', { level: 'error', message: err.message });
    };
  }

  // The worker died (crash, kill, close): every pending request fails with workerLost; a new worker boots (again, if
  // the new one dies while booting: MAX_RESTARTS in all).
  _onDeath(w, why) {
    if (this.worker !== w) return;
    this._faults.workerDied(this.sentFaults);
    const err = new Error(`the worker stopped (${why})`);
    err.workerLost = true;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this._emit('worker', { state: 'lost', why });
    this._emit('log', { level: 'error', message: `${err.message}: starting a new one` });
    if (this.restarting) return;        // a new worker died while booting: the loop below starts another
    const t0 = performance.now();
    this.restarting = (async () => {
      let last = null;
      for (let i = 0; i < MAX_RESTARTS; i++) {
        this._spawn();
        this._boot = null;
        this.stages = [];
        try {
          await this._bootOnce({ ...this.bootParams, ...(this.active.champion ? { champion: this.active.champion } : {}),
            ...(this.active.draft ? { draft: this.active.draft } : {}) });
          this._emit('worker', { state: 'restarted', why, ms: performance.now() - t0 });
          return performance.now() - t0;
        } catch (e) {
          last = e;
          if (!e.workerLost) break;
        }
      }
      this._emit('worker', { state: 'failed', why: last && last.message });
      throw last;
    })();
    this.restarting.catch(() => {}).finally(() => { this.restarting = null; });
  }

  async _pushFaults() {
    if (!this.bootResult || this.restarting) return;     // boot sends them (a restart too)
    const armed = this._faults.armed();
    this.sentFaults = armed.map((f) => f.id);
    await this.request(REQ.FAULTS, { armed });
  }

  _onMessage(msg, w) {
    if (!msg) return;
    if (typeof msg.kind === 'string' && msg.kind.startsWith('event.')) {
      if (msg.kind === EVT.STAGE) this.stages.push(msg);
      if (msg.kind === EVT.ALIVE) {
        this.alive = true;
        if (globalThis.navigator && navigator.locks) {
          navigator.locks.request(msg.lock, () => this._onDeath(w, 'it crashed or was ended')).catch(() => {});
        }
        return;
      }
      if (msg.kind === EVT.FAULT) this._faults.fired(msg.fault);
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

  // Boot the worker (once; a new worker boots again after a restart). params: {champion?, draft?, force_cpu?}.
  // Resolves when a worker is ready (after restarts, if the worker dies while it boots).
  boot(params = {}) {
    if (this.generation === 1 && !this.bootResult && !this._boot) this.bootParams = { ...params };
    return this.ready();
  }

  _bootOnce(params) {
    if (!this._boot) {
      const armed = this._faults.armed();
      this.sentFaults = armed.map((f) => f.id);
      this._boot = this.request(REQ.BOOT, { ...params, faults: armed }).then(async (r) => {
        const models = await this.listModels();
        this.bootResult = { ...r, models };
        this.active = { ...(r.active || {}) };
        return this.bootResult;
      });
      this._boot.catch((e) => {
        if (e.workerLost) this._boot = null;    // the restart boots again
      });
    }
    return this._boot;
  }

  async ready() {
    for (let i = 0; ; i++) {
      if (this.restarting) await this.restarting;
      try {
        return await this._bootOnce(this.bootParams);
      } catch (e) {
        if (!e.workerLost || i >= MAX_RESTARTS) throw e;
        await new Promise((r) => setTimeout(r, 0));       // the death handler starts the restart
      }
    }
  }

  /** The last answer's receipt (privacy-safe: py/exactspec/receipts.py), or null. */
  receipt() { return this.lastReceipt ? JSON.parse(JSON.stringify(this.lastReceipt)) : null; }

  // {onToken(text, token_ids)} streams; returns the final answer. A worker that dies mid-answer is replaced and the
  // answer finished from its last committed token (app/supervisor.js): the caller sees one stream, one result.
  async generate(params = {}, { onToken } = {}) {
    await this.ready();
    // the API applies the chat template unless chat is false; settings left out take the defaults of
    // py/exactspec/settings.py (the worker's Python applies them)
    const req = { chat: true, ...params };
    if (!req.continue) delete req.resume;
    const plan = this.conv.plan(req, this.generation);
    const earlier = { ids: [], texts: [] };      // streamed by workers that died during this answer
    const faultsAtStart = this._faults.list().fired.length;
    const restarts = [];
    let send = plan.send;
    for (;;) {
      await this.ready();
      const got = { ids: [], texts: [] };
      const id = this.nextId;   // the id request() will take
      const off = this.on('tokens', (e) => {
        if (e.request_id !== id) return;
        got.ids.push(...e.token_ids);
        got.texts.push(e.text);
        if (onToken) onToken(e.text, e.token_ids);
      });
      const faultsBefore = this._faults.list().fired.length;
      try {
        const res = await this.request(REQ.GENERATE, send);
        const out = this.conv.finish(plan, res, earlier, restarts, this.generation);
        this.lastReceipt = out.receipt || null;
        const firedIds = this._faults.list().fired.slice(faultsAtStart).map((f) => f.id);
        if (firedIds.length) this._faults.recovered(firedIds, out.recovery || []);   // list() shows what was done
        return out;
      } catch (e) {
        if (!e.workerLost || restarts.length >= MAX_RESTARTS) throw e;
        earlier.ids.push(...got.ids);
        earlier.texts.push(...got.texts);
        const fired = this._faults.list().fired.slice(faultsBefore).find((f) => f.kind === 'worker_killed');
        const t0 = performance.now();
        this._emit('notice', { level: 'warn', code: 'worker_lost', message: 'The worker stopped mid-answer: ' +
          `restarting it and resuming from the last committed token (${earlier.ids.length} tokens in)…` });
        await this.ready();
        restarts.push({ why: fired ? 'an armed worker_killed fault ended it'
          : e.message.replace(/^the worker stopped \((.*)\)$/, '$1'), at_token: earlier.ids.length,
          cause: fired ? 'worker_killed' : 'worker_lost', ms: performance.now() - t0,
          fault: fired ? { phase: fired.phase, round: fired.round, at_round: (fired.fired || {}).at_round } : null });
        send = this.conv.resumeRequest(plan, earlier.ids);
        if (!send) {        // the budget was spent when the worker died: the answer is complete
          const stats = { new_tokens: 0 };
          return this.conv.finish(plan, { text: '', token_ids: [], finish_reason: 'length', stats }, earlier,
            restarts, this.generation);
        }
      } finally {
        off();
      }
    }
  }

  // Continue the last answer (after a stop or a length limit) with the same settings.
  continue(params = {}, opts = {}) { return this.generate({ ...params, continue: true }, opts); }

  cancel() { return this.request(REQ.CANCEL); }
  listModels() { return this.request(REQ.LIST_MODELS); }
  status() { return this.request(REQ.STATUS); }
  deleteModel(name) { return this.request(REQ.DELETE_MODEL, { name }); }
  async loadModel(name, role = 'champion') {
    const out = await this.request(REQ.LOAD_MODEL, { name, role });
    this.active = { ...this.active, [role]: name, ...(role === 'champion' && this.active.draft === name ? { draft: null } : {}),
      ...(role === 'draft' && this.active.champion === name ? { champion: null } : {}) };
    if (role === 'champion') this.conv.reset();
    return out;
  }
  reimportModel(name) { return this.request(REQ.REIMPORT_MODEL, { name }); }
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
