// core.js — the worker's platform-independent core: Pyodide with the exactspec wheel, the WebGPU engine (or the CPU
// fallback), the models, and generate / cancel / timings through exactspec.session. No postMessage, no OPFS, no
// fetch of /manifest.json: its hosts are app/worker.js (the page's module worker) and bench/product/node_host.mjs
// (Node + Dawn, models read from disk), so a benchmark under Node runs exactly the page's code path.
//
//   const core = new Core(host)
//     host.log(level, message)                 a log line ('info' | 'warn' | 'error')
//     host.event(kind, payload)                a one-way event (EVT.STAGE: boot stages)
//     host.files(name) -> {meta, files}        a stored model: meta {format: 'gguf' | 'hf', files: [{file}]} and its
//                                              files as Blobs (main file first; Blob.slice feeds the GPU engine)
//     host.mount(py, dir, meta, files)         make those files readable by Python under dir (an existing empty
//                                              folder): WORKERFS in a worker, NODEFS in Node
//     host.updateDraftProvenance?()            after a model is loaded: set core.state.draftProvenance (the page)
//   await core.bootRuntime({loadPyodide, indexURL, wheel, options})   stages 'runtime' and 'packages'
//       loadPyodide(options): the pyodide module's loadPyodide (or a function importing it first, so that the
//       'runtime' stage times the import too); wheel: a URL micropip installs (http(s): in a page, emfs: in Node)
//   await core.stage('gpu', () => core.initGpu(gpu, params, engineOptions))   gpu: navigator.gpu or Dawn's create()
//   core.startSession()
//   await core.loadModel(name, role, want?)  -> {name, role, config, summary, backend, draft_provenance}
//       role 'draft' with a draft head's GGUF: the head slot (state.active.head); on WebGPU the head runs on the
//       engine beside the champion (engine.loadHead: it reads the champion's features on the GPU), on the CPU
//       fallback in numpy (exactspec.drafters.head.HeadModel)
//   await core.generate(params, onTokens?)   -> the session's answer {text, token_ids, finish_reason, stats, ...}
//   core.cancel(), core.status(), await core.timings(params) (exactspec.timing: pass times for benchmarks)
//     host.faults?                             an app/faults.js WorkerFaults (the armed faults; issue 12)
//     host.kill?()                             end this worker as a crash would (an armed worker_killed)
// Recovery (issue 12; app/recovery.js): a lost GPU device mid-answer -> a new device, else the CPU fallback, and the
// answer goes on from its last committed token (exactspec.session drives it through `recover`); an allocation
// failure at load -> the draft dropped (answers go on without it) or the champion on the CPU fallback; every answer's
// receipt gets the GPU buffer and wasm heap sizes.

import { REQ, EVT } from './protocol.js';
import { WorkerFaults } from './faults.js';
import { DeviceRecovery, isLost, isOutOfMemory, loadOnGpu } from './recovery.js';

export const GPU_MAX_CONTEXT = 2048;   // KV capacity on the GPU (SmolLM2's 8192 would take ~380 MB of KV)
// The files of a Hugging Face folder a model needs (others are ignored).
export const HF_FILE_RE = /^(config\.json|tokenizer\.json|tokenizer_config\.json|generation_config\.json|[\w.-]+\.safetensors)$/;

// The last meaningful line of a Python traceback (e.g. "FormatError: truncated GGUF: ...").
export function errorText(e) {
  if (!e) return 'unknown error';
  const msg = String(e.message || e);
  if (e.type || /Traceback \(most recent call last\)/.test(msg)) {
    const lines = msg.split('\n').map((l) => l.trim()).filter(Boolean);
    const last = lines[lines.length - 1] || msg;
    return last.replace(/^exactspec\.[\w.]+\./, '');
  }
  return msg;
}

function mountDir(name) { return `/models/${name}`; }

// The model slots: the champion, the draft model and the draft head (loaded with role 'draft'; both drafts stay
// loaded, so the drafter can be picked per request).
const SLOTS = ['champion', 'draft', 'head'];
const roleOf = (slot) => (slot === 'head' ? 'draft' : slot);

export class Core {
  constructor(host) {
    this.host = host;
    this.state = {
      host, py: null, sessionMod: null, session: null,
      backend: 'cpu', gpu: null, gpuReason: '', stages: [], active: { champion: null, draft: null, head: null },
      mounted: new Set(), gpuModels: {}, modelBackend: {}, draftProvenance: null,
    };
    this.faults = host.faults || new WorkerFaults();
    this.recovery = new DeviceRecovery(this);     // app/recovery.js: device loss, allocation failures, draft loss
  }

  log(level, message) { this.host.log(level, message); }

  async stage(name, fn) {
    const state = this.state;
    const t0 = performance.now();
    this.host.event(EVT.STAGE, { stage: name, state: 'start' });
    try {
      const detail = (await fn()) || {};
      const ms = Math.round(performance.now() - t0);
      state.stages.push({ stage: name, ms, ...detail });
      this.host.event(EVT.STAGE, { stage: name, state: 'done', ms, detail });
      return detail;
    } catch (e) {
      const ms = Math.round(performance.now() - t0);
      state.stages.push({ stage: name, ms, error: errorText(e) });
      this.host.event(EVT.STAGE, { stage: name, state: 'error', ms, detail: { error: errorText(e) } });
      throw e;
    }
  }

  // ---- boot -------------------------------------------------------------------------------------------------------
  async bootRuntime({ loadPyodide, indexURL, wheel, options = {} }) {
    const state = this.state;
    await this.stage('runtime', async () => {
      state.py = await loadPyodide({
        indexURL,
        stdout: (s) => this.log('info', s),
        stderr: (s) => this.log('warn', s),
        ...options,
      });
      return { pyodide: state.py.version };
    });
    await this.stage('packages', async () => {
      const py = state.py;
      await py.loadPackage(['numpy', 'micropip'], { messageCallback: () => {}, errorCallback: (s) => this.log('warn', s) });
      const micropip = py.pyimport('micropip');
      await micropip.install(wheel);
      micropip.destroy();
      state.sessionMod = py.pyimport('exactspec.session');
      return { wheel: String(wheel).split('/').pop() };
    });
  }

  // The WebGPU engine on `gpu` (navigator.gpu, or Dawn's GPU object in Node); the CPU fallback when there is none.
  async initGpu(gpu, params = {}, engineOptions = {}) {
    const state = this.state;
    this.recovery.gpuArgs = { gpu, engineOptions };     // a new device after a loss is made the same way
    if (params.force_cpu) { state.gpuReason = 'CPU requested'; return { backend: 'cpu', reason: state.gpuReason }; }
    if (!gpu) { state.gpuReason = 'no WebGPU in this browser'; return { backend: 'cpu', reason: state.gpuReason }; }
    let mod;
    try {
      mod = await import('./gpu/engine.js');
    } catch (e) {
      state.gpuReason = `no WebGPU engine (${e.message || e})`;
      return { backend: 'cpu', reason: state.gpuReason };
    }
    try {
      if (typeof mod.createEngine !== 'function') throw new Error('gpu/engine.js has no createEngine()');
      const engine = await mod.createEngine(gpu, engineOptions);
      state.gpu = { mod, engine };
      state.backend = 'webgpu';
      const info = engine.adapterInfo || {};
      return { backend: 'webgpu', adapter: { vendor: info.vendor, architecture: info.architecture,
        description: info.description, is_fallback_adapter: Boolean(info.isFallbackAdapter) } };
    } catch (e) {
      state.gpuReason = `WebGPU unavailable (${e.message || e})`;
      return { backend: 'cpu', reason: state.gpuReason };
    }
  }

  startSession() {
    this.state.session = this.state.sessionMod.Session(this.state.backend);
  }

  // The CPU kernel's threads (app/cpu_pool.js) for CPU models loaded from now on, when the backend is the CPU:
  // threads undefined = the machine's cores (at most 4), 1 = none. -> {threads, why?} (the 'cpu' stage's detail)
  async initCpuPool(threads) {
    const state = this.state;
    if (threads !== undefined) state.cpuThreads = threads;
    if (state.backend !== 'cpu' || !state.session) return { threads: 0, why: 'not on the CPU' };
    if (!state.cpuPool) {
      const { CpuPool } = await import('./cpu_pool.js');
      state.cpuPool = await CpuPool.create({ threads: state.cpuThreads, heap: () => state.py._module.HEAPU8 });
      state.cpuPoolWhy = CpuPool.why;
      if (!state.cpuPool) this.log('info', `the CPU kernel runs on one thread: ${CpuPool.why}`);
    }
    const n = state.session.set_cpu_pool(state.cpuPool || null);
    return state.cpuPool ? { threads: n } : { threads: 1, why: state.cpuPoolWhy };
  }

  // The GPU failed for good (device lost): reload the active models on the CPU; the answer so far stays committed.
  async fallbackToCpu(reason) {
    const state = this.state;
    this.log('error', `WebGPU failed (${reason}); switching to the CPU fallback`);
    state.backend = 'cpu';
    state.gpuReason = `WebGPU failed: ${reason}`;
    state.gpu = null;
    state.gpuModels = {};
    try { await this.initCpuPool(); } catch (e) { this.log('warn', `no CPU threads: ${errorText(e)}`); }
    for (const slot of SLOTS) {
      const name = state.active[slot];
      if (!name) continue;
      try { await this.loadModel(name, roleOf(slot)); } catch (e) { this.log('error', `reloading ${name} on the CPU failed: ${errorText(e)}`); }
    }
  }

  status() {
    const state = this.state;
    // bridge: how the draft meets the champion's vocabulary (exactspec.vocab via Session.bridge_info), null without both
    const bridge = state.session ? JSON.parse(state.session.bridge_info()) : null;
    return { backend: state.modelBackend.champion || state.backend, gpu_reason: state.gpuReason, active: state.active, stages: state.stages,
      draft_provenance: state.draftProvenance || null, bridge, models: [] };
  }

  adapterInfo() {
    const e = this.state.gpu && this.state.gpu.engine;
    return e ? e.adapterInfo : null;
  }

  // ---- models -------------------------------------------------------------------------------------------------
  mount(name, meta, files) {
    const FS = this.state.py.FS;
    const dir = mountDir(name);
    if (this.state.mounted.has(dir)) { try { FS.unmount(dir); } catch (e) { /* already gone */ } this.state.mounted.delete(dir); }
    FS.mkdirTree(dir);
    this.host.mount(this.state.py, dir, meta, files);
    this.state.mounted.add(dir);
    return dir;
  }

  unmount(name) {
    const dir = mountDir(name);
    if (!this.state.mounted.has(dir)) return;
    try { this.state.py.FS.unmount(dir); } catch (e) { /* ignore */ }
    this.state.mounted.delete(dir);
  }

  // Put the active models on the backend a request asks for ('webgpu' | 'cpu'); later requests stay there.
  async useBackend(want) {
    const state = this.state;
    if (want !== 'webgpu' && want !== 'cpu') throw new Error(`backend must be 'webgpu' or 'cpu', got ${JSON.stringify(want)}`);
    if (want === 'webgpu' && !state.gpu) {
      throw new Error(`the WebGPU backend is not available here (${state.gpuReason || 'no adapter'}): use backend 'cpu'`);
    }
    for (const slot of SLOTS) {
      const name = state.active[slot];
      if (!name || state.modelBackend[slot] === want) continue;
      const out = await this.loadModel(name, roleOf(slot), want);
      if (out.backend !== want) throw new Error(`${name} could not be loaded on the ${want} backend (see the log)`);
    }
  }

  async loadModel(name, role, want = null) {
    const state = this.state;
    const log = (level, message) => this.log(level, message);
    this.recovery.beforeLoad(name, role);        // armed load-phase faults: worker_killed, draft_only
    const { meta, files } = await state.host.files(name);
    const hf = meta.format === 'hf';
    const dir = this.mount(name, meta, files);
    const path = hf ? dir : `${dir}/${meta.files[0].file}`;
    // a draft head (it reads the champion's features) has its own slot: the draft model stays loaded beside it
    const slot = role === 'draft' && !hf && this.isHead(path) ? 'head' : role;
    let backend, backendName = 'cpu', newGpu = null;
    if (state.gpu && (want ? want === 'webgpu' : state.backend === 'webgpu')) {
      try {
        const desc = JSON.parse(state.session.describe(path));   // a GGUF, or a Hugging Face folder's shards
        const byName = new Map(files.map((f, i) => [meta.files[i].file, f]));
        const readSlice = async (off, n, file) => {
          const f = file ? byName.get(file) : files[0];
          if (!f) throw new Error(`${file} is not among the model's files`);
          return f.slice(off, off + n).arrayBuffer();
        };
        const bridge = state.py.pyimport('exactspec.bridge');
        let jsModel;
        if (slot === 'head') {   // on the engine beside the champion, reading its features on the GPU
          const champ = state.modelBackend.champion === 'webgpu' ? state.gpuModels.champion : null;
          if (!champ) throw new Error('the champion is not on the WebGPU engine');
          jsModel = await loadOnGpu(this, name, () => state.gpu.engine.loadHead(desc, readSlice, champ, { seq_len: champ.config.seq_len }));
        } else {
          const seqLen = Math.min(desc.config.seq_len, GPU_MAX_CONTEXT);
          // (an out-of-memory error scope around it; armed device_lost / gpu_alloc faults fire here)
          jsModel = await loadOnGpu(this, name, () => state.gpu.engine.loadModel(desc, readSlice, { seq_len: seqLen }));
        }
        // the previous model of the slot is freed first (a head's only once the session took the new one)
        if (slot !== 'head' && state.gpuModels[slot]) { try { state.gpuModels[slot].destroy(); } catch (e) { /* gone */ } }
        if (slot !== 'head') state.gpuModels[slot] = jsModel;
        newGpu = jsModel;
        backend = slot === 'head' ? bridge.JsHead(jsModel) : bridge.JsBackend(jsModel);
        backendName = 'webgpu';
      } catch (e) {
        if (isOutOfMemory(e) || isLost(e)) return this.recovery.gpuLoadFailed(e, name, role, want);
        log('warn', `${name}: the WebGPU engine could not load it (${errorText(e)}); using the CPU fallback`);
      }
    }
    let out;
    try {
      out = JSON.parse(state.session.load(name, path, role, backend, backendName));
    } catch (e) {
      if (newGpu) {
        try { newGpu.destroy(); } catch (e2) { /* gone */ }
        if (state.gpuModels[slot] === newGpu) delete state.gpuModels[slot];
      }
      throw e;
    }
    if (slot === 'head') {
      if (state.gpuModels.head && state.gpuModels.head !== newGpu) { try { state.gpuModels.head.destroy(); } catch (e) { /* gone */ } }
      if (newGpu) state.gpuModels.head = newGpu; else delete state.gpuModels.head;
    }
    await this.recovery.loaded(name, role, meta);   // the stored sha256s for receipts; the draft is available again
    out.backend = backendName;
    for (const other of SLOTS) {                 // a model holds one slot at a time (the session dropped the other)
      if (other === slot || state.active[other] !== name) continue;
      state.active[other] = null;
      delete state.modelBackend[other];
      if (state.gpuModels[other]) { try { state.gpuModels[other].destroy(); } catch (e) { /* gone */ } delete state.gpuModels[other]; }
    }
    if (slot === 'champion' && state.gpuModels.head && backendName !== 'webgpu') {
      // a GPU head cannot read a CPU champion's features: the next head request tells the user to load it again
      this.log('warn', `${state.active.head}: the draft head runs on the GPU and the champion now on the CPU: load the head again`);
    }
    state.active[slot] = name;
    state.modelBackend[slot] = backendName;
    if (state.host.updateDraftProvenance) await state.host.updateDraftProvenance();
    out.draft_provenance = state.draftProvenance || null;
    return out;
  }

  /** Is the GGUF at `path` (mounted) a draft head (exactspec.drafters.head)? */
  isHead(path) {
    const mod = this.state.py.pyimport('exactspec.drafters.head');
    try { return Boolean(mod.is_head_gguf(path)); } finally { mod.destroy(); }
  }

  // A model's files as Python reads them, for a check before import (the session's inspect); unmounted after.
  inspectFiles(tmpName, meta, files) {
    const dir = this.mount(tmpName, meta, files);
    try {
      return JSON.parse(this.state.session.inspect(meta.format === 'hf' ? dir : `${dir}/${meta.files[0].file}`));
    } finally {
      this.unmount(tmpName);
    }
  }

  // ---- requests -------------------------------------------------------------------------------------------------
  needReady() {
    if (!this.state.session) throw new Error('not ready: call boot first');
  }

  // params: the page's generate request (exactspec.session.Session.generate), backend?: 'webgpu' | 'cpu' moves the
  // active models there first; onTokens({text, token_ids}) gets each newly committed piece.
  async generate(params = {}, onTokens = null) {
    const state = this.state;
    this.needReady();
    const want = params.backend;
    if (want !== undefined && want !== null) await this.useBackend(want);
    const emit = (json) => { if (onTokens) onTokens(JSON.parse(json)); };
    await state.gpu?.engine?.idle?.();               // (a decodeAhead continuation the last answer did not take)
    const run = this.recovery.beginAnswer(params);   // the decode faults, a dropped draft's notice, host callbacks
    const out = JSON.parse(await state.session.generate_json(JSON.stringify(run.params), emit, run.faultHost,
      run.recover, run.onFault));
    if (out.finish_reason === 'error' && state.modelBackend.champion === 'webgpu' &&
        /device lost|gpu error/i.test(out.error || '')) {
      await this.fallbackToCpu(out.error);
      out.fallback = 'cpu';
    }
    return this.recovery.endAnswer(run, out);
  }

  cancel() {
    return { cancelled: this.state.session ? Boolean(this.state.session.cancel()) : false };
  }

  // Memory in use (exactspec.memory(); the bench matrix): per role its model's bytes on its backend (the engine's
  // GPU buffers, or the numpy arrays Python reports: weights, kv, features, scratch, total), all GPU buffers of the
  // loaded models, the WebAssembly heap (Pyodide's; it only grows, so it is also its peak) and the JS heap where the
  // runtime reports one (Chromium's performance.memory, Node's process.memoryUsage()).
  memory() {
    const state = this.state;
    const models = state.session ? JSON.parse(state.session.memory_json()) : {};
    let gpu = null;
    for (const role of ['champion', 'draft']) {
      const m = state.gpuModels[role];
      if (!m || state.modelBackend[role] !== 'webgpu' || typeof m.memoryReport !== 'function') continue;
      const r = m.memoryReport();
      models[role] = { ...(models[role] || {}), ...r, backend: 'webgpu' };
      gpu = (gpu || 0) + r.total;
    }
    const mod = state.py && state.py._module;
    const out = { models, gpu_buffers: gpu, wasm_heap: mod && mod.HEAP8 ? mod.HEAP8.buffer.byteLength : null,
      cpu_pool: state.cpuPool ? state.cpuPool.bytes : null, js_heap_used: null, js_heap_total: null };
    const pm = globalThis.performance && globalThis.performance.memory;
    if (pm) Object.assign(out, { js_heap_used: pm.usedJSHeapSize, js_heap_total: pm.totalJSHeapSize });
    else if (typeof process !== 'undefined' && process.memoryUsage) {
      const u = process.memoryUsage();
      Object.assign(out, { js_heap_used: u.heapUsed, js_heap_total: u.heapTotal });
    }
    return out;
  }

  // The bench matrix's summary and figures from its records (exactspec.benchmatrix: the page's benchmark panel
  // draws what the CLI report draws, from one computation).
  benchFigures(doc = {}) {
    this.needReady();
    const m = this.state.py.pyimport('exactspec.benchmatrix');
    try {
      return JSON.parse(m.figures_json(JSON.stringify(doc)));
    } finally {
      m.destroy();
    }
  }

  // Pass times of the loaded models for the break-even formula (benchmarks; exactspec.timing.measure_json).
  async timings(params = {}) {
    this.needReady();
    const timing = this.state.py.pyimport('exactspec.timing');
    try {
      return JSON.parse(await timing.measure_json(this.state.session, JSON.stringify(params)));
    } finally {
      timing.destroy();
    }
  }
}

// The request handlers every host shares (app/protocol.js kinds); a host adds its own (boot, the store's).
// onTokens(request_id, {text, token_ids}) streams a generate's committed pieces.
export function coreHandlers(core, onTokens) {
  return {
    async [REQ.STATUS]() { return core.status(); },
    async [REQ.GENERATE](msg) { return core.generate(msg.params || {}, (d) => onTokens(msg.id, d)); },
    async [REQ.CANCEL]() { return core.cancel(); },
    async [REQ.LOAD_MODEL](msg) {
      core.needReady();
      const { name, role = 'champion' } = msg.params || {};
      return core.loadModel(name, role);
    },
    async [REQ.TIMINGS](msg) { return core.timings(msg.params || {}); },
    async [REQ.MEMORY]() { core.needReady(); return core.memory(); },
    async [REQ.BENCH_FIGURES](msg) { return core.benchFigures(msg.params || {}); },
  };
}

// One request {id, kind, params} -> its reply {id, ok: true, result} | {id, ok: false, error, detail}.
export async function dispatch(handlers, msg) {
  const h = handlers[msg.kind];
  if (!h) return { id: msg.id, ok: false, error: `unknown request kind ${JSON.stringify(msg.kind)}` };
  try {
    return { id: msg.id, ok: true, result: await h(msg) };
  } catch (e) {
    return { id: msg.id, ok: false, error: errorText(e), detail: String((e && e.message) || e) };
  }
}
