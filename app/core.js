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

export class Core {
  constructor(host) {
    this.host = host;
    this.state = {
      host, py: null, sessionMod: null, session: null,
      backend: 'cpu', gpu: null, gpuReason: '', stages: [], active: { champion: null, draft: null },
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

  // The GPU failed for good (device lost): reload the active models on the CPU; the answer so far stays committed.
  async fallbackToCpu(reason) {
    const state = this.state;
    this.log('error', `WebGPU failed (${reason}); switching to the CPU fallback`);
    state.backend = 'cpu';
    state.gpuReason = `WebGPU failed: ${reason}`;
    state.gpu = null;
    state.gpuModels = {};
    for (const role of ['champion', 'draft']) {
      const name = state.active[role];
      if (!name) continue;
      try { await this.loadModel(name, role); } catch (e) { this.log('error', `reloading ${name} on the CPU failed: ${errorText(e)}`); }
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
    for (const role of ['champion', 'draft']) {
      const name = state.active[role];
      if (!name || state.modelBackend[role] === want) continue;
      const out = await this.loadModel(name, role, want);
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
    let backend, backendName = 'cpu';
    if (state.gpu && (want ? want === 'webgpu' : state.backend === 'webgpu')) {
      try {
        const desc = JSON.parse(state.session.describe(path));   // a GGUF, or a Hugging Face folder's shards
        const byName = new Map(files.map((f, i) => [meta.files[i].file, f]));
        const readSlice = async (off, n, file) => {
          const f = file ? byName.get(file) : files[0];
          if (!f) throw new Error(`${file} is not among the model's files`);
          return f.slice(off, off + n).arrayBuffer();
        };
        const seqLen = Math.min(desc.config.seq_len, GPU_MAX_CONTEXT);
        // (an out-of-memory error scope around it; armed device_lost / gpu_alloc faults fire here)
        const jsModel = await loadOnGpu(this, name, () => state.gpu.engine.loadModel(desc, readSlice, { seq_len: seqLen }));
        if (state.gpuModels[role]) { try { state.gpuModels[role].destroy(); } catch (e) { /* gone */ } }
        state.gpuModels[role] = jsModel;
        backend = state.py.pyimport('exactspec.bridge').JsBackend(jsModel);
        backendName = 'webgpu';
      } catch (e) {
        if (isOutOfMemory(e) || isLost(e)) return this.recovery.gpuLoadFailed(e, name, role, want);
        log('warn', `${name}: the WebGPU engine could not load it (${errorText(e)}); using the CPU fallback`);
      }
    }
    const out = JSON.parse(state.session.load(name, path, role, backend, backendName));
    await this.recovery.loaded(name, role, meta);   // the stored sha256s for receipts; the draft is available again
    out.backend = backendName;
    const other = role === 'champion' ? 'draft' : 'champion';
    if (state.active[other] === name) {          // a model holds one role at a time (the session dropped the other)
      state.active[other] = null;
      delete state.modelBackend[other];
      if (state.gpuModels[other]) { try { state.gpuModels[other].destroy(); } catch (e) { /* gone */ } delete state.gpuModels[other]; }
    }
    state.active[role] = name;
    state.modelBackend[role] = backendName;
    if (state.host.updateDraftProvenance) await state.host.updateDraftProvenance();
    out.draft_provenance = state.draftProvenance || null;
    return out;
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
