// The module worker: owns Pyodide, the GPU engine and the OPFS weight store. All Python runs here.
// Boot stages (each reported as an event.stage): runtime -> packages -> gpu -> weights -> ready.

import { REQ, EVT } from './protocol.js';
import { WeightStore, StoreError, readResponse, readBlob, modelNameFrom } from './store/opfs.js';

const state = {
  manifest: null, py: null, session: null, store: null,
  backend: 'cpu', gpu: null, gpuReason: '', stages: [], active: { champion: null, draft: null },
  booting: null, mounted: new Set(), gpuModels: {}, modelBackend: {},
};
const HF_FILE_RE = /^(config\.json|tokenizer\.json|tokenizer_config\.json|generation_config\.json|[\w.-]+\.safetensors)$/;
const GPU_MAX_CONTEXT = 2048;   // KV capacity on the GPU (SmolLM2's 8192 would take ~380 MB of KV)

function post(msg, transfer) { self.postMessage(msg, transfer || []); }
function event(kind, payload) { post({ kind, ...payload }); }
function log(level, message) { event(EVT.LOG, { level, message }); }

// The last meaningful line of a Python traceback (e.g. "FormatError: truncated GGUF: ...").
function errorText(e) {
  if (!e) return 'unknown error';
  const msg = String(e.message || e);
  if (e.type || /Traceback \(most recent call last\)/.test(msg)) {
    const lines = msg.split('\n').map((l) => l.trim()).filter(Boolean);
    const last = lines[lines.length - 1] || msg;
    return last.replace(/^exactspec\.[\w.]+\./, '');
  }
  return msg;
}

async function stage(name, fn) {
  const t0 = performance.now();
  event(EVT.STAGE, { stage: name, state: 'start' });
  try {
    const detail = (await fn()) || {};
    const ms = Math.round(performance.now() - t0);
    state.stages.push({ stage: name, ms, ...detail });
    event(EVT.STAGE, { stage: name, state: 'done', ms, detail });
    return detail;
  } catch (e) {
    const ms = Math.round(performance.now() - t0);
    state.stages.push({ stage: name, ms, error: errorText(e) });
    event(EVT.STAGE, { stage: name, state: 'error', ms, detail: { error: errorText(e) } });
    throw e;
  }
}

// ---- boot ---------------------------------------------------------------------------------------------------------
async function boot(params = {}) {
  const r = await fetch('/manifest.json', { cache: 'no-cache' });
  if (!r.ok) throw new Error(`cannot read /manifest.json (HTTP ${r.status})`);
  state.manifest = await r.json();
  const m = state.manifest;

  await stage('runtime', async () => {
    const { loadPyodide } = await import(m.pyodide + 'pyodide.mjs');
    state.py = await loadPyodide({
      indexURL: m.pyodide,
      stdout: (s) => log('info', s),
      stderr: (s) => log('warn', s),
    });
    return { pyodide: state.py.version };
  });

  await stage('packages', async () => {
    const py = state.py;
    await py.loadPackage(['numpy', 'micropip'], { messageCallback: () => {}, errorCallback: (s) => log('warn', s) });
    const micropip = py.pyimport('micropip');
    await micropip.install(new URL(m.wheel, self.location.origin).href);
    micropip.destroy();
    const mod = py.pyimport('exactspec.session');
    state.sessionMod = mod;
    return { wheel: m.wheel.split('/').pop() };
  });

  await stage('gpu', async () => initGpu(params));
  state.session = state.sessionMod.Session(state.backend);

  await stage('weights', async () => {
    state.store = await WeightStore.open();
    const imported = [], errors = [];
    const defaults = (m.models || []).filter((x) => x.default !== false);
    for (const dm of defaults) {
      const have = await state.store.get(dm.name);
      if (have && have.sha256 === dm.sha256 && await state.store.intact(dm.name)) continue;
      if (have) await state.store.delete(dm.name);
      try {
        await importFromUrl({ url: dm.url, name: dm.name, role: dm.role, size: dm.size, sha256: dm.sha256,
          source: 'default' });
        imported.push(dm.name);
      } catch (e) {   // the page stays usable: a person can still import a model of their own
        errors.push(`import of ${dm.name} failed: ${errorText(e)}`);
        log('error', errors[errors.length - 1]);
      }
    }
    const stored = await state.store.list();
    const pick = (role, wanted) => {
      if (wanted && stored.find((s) => s.name === wanted)) return wanted;
      const d = defaults.find((x) => x.role === role && stored.find((s) => s.name === x.name));
      if (d) return d.name;
      const s = stored.find((x) => x.role === role);
      return s ? s.name : null;
    };
    const loaded = [];
    const candidates = [pick('champion', params.champion), pick('champion', null), ...stored.map((x) => x.name)];
    for (const name of [...new Set(candidates.filter(Boolean))]) {
      try {
        await loadModel(name, 'champion');
        loaded.push(name);
        break;
      } catch (e) {
        errors.push(`${name}: ${errorText(e)}`);
        log('error', `loading ${name} failed: ${errorText(e)}`);
      }
    }
    const draft = pick('draft', params.draft);
    if (draft && !loaded.includes(draft)) {
      try { await loadModel(draft, 'draft'); loaded.push(draft); } catch (e) { errors.push(`draft ${draft}: ${errorText(e)}`); }
    }
    return { imported, loaded, errors };
  });

  await stage('ready', async () => ({ backend: state.backend }));
  return status();
}

async function initGpu(params) {
  if (params.force_cpu) { state.gpuReason = 'CPU requested'; return { backend: 'cpu', reason: state.gpuReason }; }
  if (!self.navigator.gpu) { state.gpuReason = 'no WebGPU in this browser'; return { backend: 'cpu', reason: state.gpuReason }; }
  let mod;
  try {
    mod = await import('./gpu/engine.js');
  } catch (e) {
    state.gpuReason = `no WebGPU engine (${e.message || e})`;
    return { backend: 'cpu', reason: state.gpuReason };
  }
  try {
    if (typeof mod.createEngine !== 'function') throw new Error('gpu/engine.js has no createEngine()');
    const engine = await mod.createEngine(self.navigator.gpu, { shaderBase: new URL('/shaders/', self.location.origin) });
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

// The GPU failed for good (device lost): reload the active models on the CPU; the answer so far stays committed.
async function fallbackToCpu(reason) {
  log('error', `WebGPU failed (${reason}); switching to the CPU fallback`);
  state.backend = 'cpu';
  state.gpuReason = `WebGPU failed: ${reason}`;
  state.gpu = null;
  state.gpuModels = {};
  for (const role of ['champion', 'draft']) {
    const name = state.active[role];
    if (!name) continue;
    try { await loadModel(name, role); } catch (e) { log('error', `reloading ${name} on the CPU failed: ${errorText(e)}`); }
  }
}

function status() {
  return { backend: state.modelBackend.champion || state.backend, gpu_reason: state.gpuReason, active: state.active, stages: state.stages,
    draft_provenance: state.draftProvenance || null, bridge: state.bridgeInfo || null, models: [] };
}

// Does the active draft have a provenance manifest (served with the default models) naming the active champion?
// 'verified' | 'unverified' (no manifest for this draft) | 'other-champion' (its manifest names another champion).
async function updateDraftProvenance() {
  state.draftProvenance = null;
  // how the draft meets the champion's vocabulary (exactspec.vocab via Session.bridge_info): null without both
  state.bridgeInfo = state.session ? JSON.parse(state.session.bridge_info()) : null;
  if (!state.active.draft) return;
  const stored = await state.store.list();
  const sha = (name) => (stored.find((x) => x.name === name) || {}).sha256;
  const draftSha = sha(state.active.draft);
  const champSha = state.active.champion ? sha(state.active.champion) : null;
  const known = ((state.manifest && state.manifest.models) || []).map((x) => x.provenance).filter(Boolean)
    .filter((p) => p.draft_sha256 === draftSha);
  const status = !known.length ? 'unverified'
    : known.some((p) => p.champion_sha256 === champSha) ? 'verified' : 'other-champion';
  state.draftProvenance = { draft: state.active.draft, champion: state.active.champion, status };
}

// ---- models ---------------------------------------------------------------------------------------------------
function mountDir(name) { return `/models/${name}`; }

function mount(name, files) {
  const FS = state.py.FS;
  const dir = mountDir(name);
  if (state.mounted.has(dir)) { try { FS.unmount(dir); } catch (e) { /* already gone */ } state.mounted.delete(dir); }
  FS.mkdirTree(dir);
  FS.mount(FS.filesystems.WORKERFS, { blobs: files.map((f) => ({ name: f.name, data: f })) }, dir);
  state.mounted.add(dir);
  return dir;
}

function unmount(name) {
  const dir = mountDir(name);
  if (!state.mounted.has(dir)) return;
  try { state.py.FS.unmount(dir); } catch (e) { /* ignore */ }
  state.mounted.delete(dir);
}

// Put the active models on the backend a request asks for ('webgpu' | 'cpu'); later requests stay there.
async function useBackend(want) {
  if (want !== 'webgpu' && want !== 'cpu') throw new Error(`backend must be 'webgpu' or 'cpu', got ${JSON.stringify(want)}`);
  if (want === 'webgpu' && !state.gpu) {
    throw new Error(`the WebGPU backend is not available here (${state.gpuReason || 'no adapter'}): use backend 'cpu'`);
  }
  for (const role of ['champion', 'draft']) {
    const name = state.active[role];
    if (!name || state.modelBackend[role] === want) continue;
    const out = await loadModel(name, role, want);
    if (out.backend !== want) throw new Error(`${name} could not be loaded on the ${want} backend (see the log)`);
  }
}

async function loadModel(name, role, want = null) {
  const { meta, files } = await state.store.files(name);
  const hf = meta.format === 'hf';
  const dir = mount(name, files.map((f, i) => new File([f], meta.files[i].file)));
  const path = hf ? dir : `${dir}/${meta.files[0].file}`;
  let backend, backendName = 'cpu';
  if (hf && state.backend === 'webgpu') log('info', `${name}: Hugging Face folders run on the CPU fallback`);
  if (!hf && state.gpu && (want ? want === 'webgpu' : state.backend === 'webgpu')) {
    try {
      const desc = JSON.parse(state.session.describe(path));
      const file = files[0];
      const readSlice = async (off, n) => file.slice(off, off + n).arrayBuffer();
      const seqLen = Math.min(desc.config.seq_len, GPU_MAX_CONTEXT);
      const jsModel = await state.gpu.engine.loadModel(desc, readSlice, { seq_len: seqLen });
      if (state.gpuModels[role]) { try { state.gpuModels[role].destroy(); } catch (e) { /* gone */ } }
      state.gpuModels[role] = jsModel;
      backend = state.py.pyimport('exactspec.bridge').JsBackend(jsModel);
      backendName = 'webgpu';
    } catch (e) {
      log('warn', `${name}: the WebGPU engine could not load it (${errorText(e)}); using the CPU fallback`);
    }
  }
  const out = JSON.parse(state.session.load(name, path, role, backend, backendName));
  out.backend = backendName;
  const other = role === 'champion' ? 'draft' : 'champion';
  if (state.active[other] === name) {          // a model holds one role at a time (the session dropped the other)
    state.active[other] = null;
    delete state.modelBackend[other];
    if (state.gpuModels[other]) { try { state.gpuModels[other].destroy(); } catch (e) { /* gone */ } delete state.gpuModels[other]; }
  }
  state.active[role] = name;
  state.modelBackend[role] = backendName;
  await updateDraftProvenance();
  out.draft_provenance = state.draftProvenance;
  return out;
}

async function validate(meta, files) {
  const tmpName = `validate-${meta.name}`;
  const dir = mount(tmpName, files.map((f, i) => new File([f], meta.files[i].file)));
  try {
    const summary = JSON.parse(state.session.inspect(meta.format === 'hf' ? dir : `${dir}/${meta.files[0].file}`));
    return { summary, role: meta.role || (summary.has_tokenizer ? 'champion' : 'draft') };
  } catch (e) {
    throw new StoreError(`${meta.name} is not a usable model: ${errorText(e)}`);
  } finally {
    unmount(tmpName);
  }
}

function progress(task, name) {
  return ({ loaded, total }) => event(EVT.PROGRESS, { task, name, loaded, total });
}

async function importFromUrl({ url, name, role, size, sha256, source }) {
  let u;
  try { u = new URL(url, self.location.origin); } catch (e) { throw new StoreError(`invalid URL ${url}`); }
  if (u.origin !== self.location.origin) {
    throw new StoreError(`only this site's own URLs can be imported (${u.origin} is another origin; ` +
      'download the file and import it from disk)');
  }
  name = name || modelNameFrom(decodeURIComponent(u.pathname.split('/').pop() || 'model'));
  const resp = await fetch(u.href, { cache: 'no-store' });
  if (!resp.ok) throw new StoreError(`download of ${u.pathname} failed: HTTP ${resp.status}`);
  const len = Number(resp.headers.get('Content-Length')) || 0;
  return state.store.importSources(
    { name, role, source: source || u.pathname, format: 'gguf' },
    [{ file: 'model.gguf', size: size || len, sha256, read: () => readResponse(resp) }],
    { validate, onProgress: progress('import', name) });
}

async function importFiles({ files, name, role, sha256 }) {
  files = Array.from(files || []);
  if (!files.length) throw new StoreError('no file given');
  const gguf = files.filter((f) => /\.gguf$/i.test(f.name));
  if (gguf.length === 1 && files.length === 1) {
    name = name || modelNameFrom(gguf[0].name);
    return state.store.importSources(
      { name, role, source: gguf[0].name, format: 'gguf' },
      [{ file: 'model.gguf', size: gguf[0].size, sha256, read: () => readBlob(gguf[0]) }],
      { validate, onProgress: progress('import', name) });
  }
  // A Hugging Face folder: config.json + *.safetensors (+ tokenizer.json, tokenizer_config.json); other files ignored.
  const keep = files.filter((f) => HF_FILE_RE.test(f.name));
  const names = keep.map((f) => f.name);
  if (!names.includes('config.json') || !names.some((n) => /\.safetensors$/i.test(n))) {
    throw new StoreError('pick one .gguf file, or a Hugging Face folder with config.json and .safetensors files ' +
      `(got ${files.map((f) => f.name).join(', ')})`);
  }
  if (new Set(names).size !== names.length) throw new StoreError('the folder has two files with the same name');
  if (!name) {
    const rel = files[0].webkitRelativePath || '';
    name = modelNameFrom(rel.includes('/') ? rel.split('/')[0] : 'hf-model');
  }
  // config.json first: it is what identifies the model (meta.sha256 is the first file's)
  keep.sort((a, b) => (a.name === 'config.json' ? -1 : b.name === 'config.json' ? 1 : a.name.localeCompare(b.name)));
  return state.store.importSources(
    { name, role, source: 'folder', format: 'hf' },
    keep.map((f) => ({ file: f.name, size: f.size, read: () => readBlob(f) })),
    { validate, onProgress: progress('import', name) });
}

// ---- requests -------------------------------------------------------------------------------------------------
function needReady() {
  if (!state.session) throw new Error('not ready: call boot first');
}

const handlers = {
  async [REQ.BOOT](msg) {
    if (!state.booting) state.booting = boot(msg.params || {});
    return state.booting;
  },
  async [REQ.STATUS]() { return status(); },
  async [REQ.GENERATE](msg) {
    needReady();
    const want = (msg.params || {}).backend;
    if (want !== undefined && want !== null) await useBackend(want);
    const emit = (json) => {
      const d = JSON.parse(json);
      event(EVT.TOKENS, { request_id: msg.id, text: d.text, token_ids: d.token_ids });
    };
    const out = JSON.parse(await state.session.generate_json(JSON.stringify(msg.params || {}), emit));
    if (out.finish_reason === 'error' && state.modelBackend.champion === 'webgpu' &&
        /device lost|gpu error/i.test(out.error || '')) {
      await fallbackToCpu(out.error);
      out.fallback = 'cpu';
    }
    return out;
  },
  async [REQ.CANCEL]() {
    return { cancelled: state.session ? Boolean(state.session.cancel()) : false };
  },
  async [REQ.LIST_MODELS]() {
    if (!state.store) state.store = await WeightStore.open();
    const list = await state.store.list();
    return list.map((x) => ({
      name: x.name, size: x.size, sha256: x.sha256, role: x.role, source: x.source, format: x.format,
      loaded: state.active.champion === x.name ? 'champion' : state.active.draft === x.name ? 'draft' : null,
    }));
  },
  async [REQ.IMPORT_MODEL](msg) {
    needReady();
    const p = msg.params || {};
    const meta = p.url ? await importFromUrl(p) : await importFiles(p);
    return { name: meta.name, size: meta.size, sha256: meta.sha256, role: meta.role };
  },
  async [REQ.DELETE_MODEL](msg) {
    if (!state.store) state.store = await WeightStore.open();
    const name = (msg.params || {}).name;
    if (state.active.champion === name || state.active.draft === name) {
      state.session.unload(name);
      unmount(name);
      if (state.active.champion === name) state.active.champion = null;
      if (state.active.draft === name) state.active.draft = null;
    }
    const deleted = await state.store.delete(name);
    await updateDraftProvenance();
    return { deleted };
  },
  async [REQ.LOAD_MODEL](msg) {
    needReady();
    const { name, role = 'champion' } = msg.params || {};
    return loadModel(name, role);
  },
};

self.onmessage = async (ev) => {
  const msg = ev.data || {};
  const h = handlers[msg.kind];
  if (!h) { post({ id: msg.id, ok: false, error: `unknown request kind ${JSON.stringify(msg.kind)}` }); return; }
  try {
    const result = await h(msg);
    post({ id: msg.id, ok: true, result });
  } catch (e) {
    post({ id: msg.id, ok: false, error: errorText(e), detail: String((e && e.message) || e) });
  }
};

