// The module worker: the page's glue around app/core.js (Pyodide, the GPU engine, the models, generate — the same
// core that bench/product/node_host.mjs runs under Node): the postMessage protocol (app/protocol.js), the OPFS
// weight store (imports, provenance) and /manifest.json.
// Boot stages (each reported as an event.stage): runtime -> packages -> gpu -> weights -> ready.

import { REQ, EVT } from './protocol.js';
import { Core, HF_FILE_RE, coreHandlers, dispatch, errorText } from './core.js';
import { WorkerFaults } from './faults.js';
import { WeightStore, StoreError, readResponse, readBlob, modelNameFrom } from './store/opfs.js';

let dead = false;       // ended by an armed worker_killed fault: as after a crash, nothing more reaches the page
function post(msg, transfer) { if (!dead) self.postMessage(msg, transfer || []); }
function event(kind, payload) { post({ kind, ...payload }); }
function log(level, message) { event(EVT.LOG, { level, message }); }

// Liveness: this worker holds a Web Lock named after it until it ends; the page (app/client.js) waits on the same
// lock and so learns of a crash, a kill or a close at once, however busy the worker was.
if (self.navigator.locks && self.name) {
  self.navigator.locks.request(self.name, () => {
    event(EVT.ALIVE, { lock: self.name });      // only once held: the page's request then waits behind it
    return new Promise(() => {});
  }).catch(() => {});
}

const faults = new WorkerFaults((rec) => event(EVT.FAULT, { fault: rec }));

const core = new Core({
  log, event, faults,
  kill() { dead = true; self.close(); },
  files: (name) => state.store.files(name, { verify: true }),   // each stored file's sha256 checked (once)
  // WORKERFS: Python reads the stored Blobs in place (no copy into the wasm heap)
  mount(py, dir, meta, files) {
    py.FS.mount(py.FS.filesystems.WORKERFS, { blobs: files.map((f, i) => ({ name: meta.files[i].file, data: f })) }, dir);
  },
  updateDraftProvenance,
});
// core.state: py, session, backend, gpu, gpuReason, stages, active, gpuModels, modelBackend, draftProvenance
const state = Object.assign(core.state, { manifest: null, store: null, booting: null });

// ---- boot ---------------------------------------------------------------------------------------------------------
async function boot(params = {}) {
  faults.set(params.faults);
  const r = await fetch('/manifest.json', { cache: 'no-cache' });
  if (!r.ok) throw new Error(`cannot read /manifest.json (HTTP ${r.status})`);
  state.manifest = await r.json();
  const m = state.manifest;

  await core.bootRuntime({
    loadPyodide: async (opts) => (await import(m.pyodide + 'pyodide.mjs')).loadPyodide(opts),
    indexURL: m.pyodide,
    wheel: new URL(m.wheel, self.location.origin).href,
  });
  await core.stage('gpu', async () => core.initGpu(self.navigator.gpu, params,
    { shaderBase: new URL('/shaders/', self.location.origin) }));
  core.startSession();
  await core.stage('cpu', async () => core.initCpuPool(params.threads));

  await core.stage('weights', async () => {
    state.store = await WeightStore.open();
    state.store.faults = faults;
    const imported = [], errors = [], damaged = [];
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
      if (damaged.includes(name)) continue;
      try {
        await core.loadModel(name, 'champion');
        loaded.push(name);
        break;
      } catch (e) {
        errors.push(`${name}: ${errorText(e)}`);
        log('error', `loading ${name} failed: ${errorText(e)}`);
        if (e.code === 'damaged') damaged.push(offerReimport(name, e));
      }
    }
    const draft = pick('draft', params.draft);
    if (draft && !loaded.includes(draft) && !damaged.includes(draft)) {
      try { await core.loadModel(draft, 'draft'); loaded.push(draft); } catch (e) {
        errors.push(`draft ${draft}: ${errorText(e)}`);
        if (e.code === 'damaged') damaged.push(offerReimport(draft, e));
      }
    }
    return { imported, loaded, errors, damaged };
  });

  await core.stage('ready', async () => ({ backend: state.backend }));
  return core.status();
}

// A stored file failed its sha256 check: say so, and offer a re-import (from this site for a default model; the page
// asks for the file again otherwise). Returns the model's name.
function offerReimport(name, e) {
  const dm = ((state.manifest && state.manifest.models) || []).find((x) => x.name === name);
  event(EVT.NOTICE, { level: 'error', code: 'damaged', name, reimport: dm ? 'site' : 'file',
    message: `${errorText(e)}.` + (dm ? ' Re-import it from this site.' : ' Import its file again.') });
  return name;
}

// Does the active draft have a provenance manifest (served with the default models) naming the active champion?
// 'verified' | 'unverified' (no manifest for this draft) | 'other-champion' (its manifest names another champion).
async function updateDraftProvenance() {
  state.draftProvenance = null;
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

// ---- imports (OPFS) -----------------------------------------------------------------------------------------
async function validate(meta, files) {
  try {
    const summary = core.inspectFiles(`validate-${meta.name}`, meta, files);
    return { summary, role: meta.role || (summary.has_tokenizer ? 'champion' : 'draft') };
  } catch (e) {
    throw new StoreError(`${meta.name} is not a usable model: ${errorText(e)}`);
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
const handlers = {
  // generate, cancel, status, load_model, timings: the core's (app/core.js), shared with the Node host
  ...coreHandlers(core, (id, d) => event(EVT.TOKENS, { request_id: id, text: d.text, token_ids: d.token_ids })),
  async [REQ.BOOT](msg) {
    if (!state.booting) state.booting = boot(msg.params || {});
    return state.booting;
  },
  async [REQ.LIST_MODELS]() {
    if (!state.store) state.store = await WeightStore.open();
    const list = await state.store.list();
    return list.map((x) => ({
      name: x.name, size: x.size, sha256: x.sha256, role: x.role, source: x.source, format: x.format,
      loaded: state.active.champion === x.name ? 'champion' : [state.active.draft, state.active.head].includes(x.name) ? 'draft' : null,
    }));
  },
  async [REQ.IMPORT_MODEL](msg) {
    core.needReady();
    const p = msg.params || {};
    const meta = p.url ? await importFromUrl(p) : await importFiles(p);
    return { name: meta.name, size: meta.size, sha256: meta.sha256, role: meta.role };
  },
  async [REQ.LOAD_MODEL](msg) {
    core.needReady();
    const { name, role = 'champion' } = msg.params || {};
    try {
      return await core.loadModel(name, role);
    } catch (e) {
      if (e.code === 'damaged') offerReimport(name, e);
      throw e;
    }
  },
  async [REQ.FAULTS](msg) {
    faults.set(((msg.params || {}).armed) || []);
    return { armed: faults.armed.length };
  },
  async [REQ.REIMPORT_MODEL](msg) {
    core.needReady();
    const name = (msg.params || {}).name;
    const dm = ((state.manifest && state.manifest.models) || []).find((x) => x.name === name);
    if (!dm) throw new StoreError(`${name} was imported from a file: import that file again (delete the damaged copy first)`);
    const role = state.active.champion === name ? 'champion' : state.active.draft === name ? 'draft' : null;
    if (role) { state.session.unload(name); core.unmount(name); state.active[role] = null; }
    await state.store.delete(name);
    const meta = await importFromUrl({ url: dm.url, name: dm.name, role: dm.role, size: dm.size, sha256: dm.sha256,
      source: 'default' });
    if (role) await core.loadModel(name, role);
    return { name: meta.name, size: meta.size, sha256: meta.sha256, role: meta.role, loaded: role };
  },
  async [REQ.DELETE_MODEL](msg) {
    if (!state.store) state.store = await WeightStore.open();
    const name = (msg.params || {}).name;
    if (state.active.champion === name || state.active.draft === name || state.active.head === name) {
      state.session.unload(name);
      core.unmount(name);
      if (state.active.champion === name) state.active.champion = null;
      if (state.active.draft === name) state.active.draft = null;
      if (state.active.head === name) state.active.head = null;
    }
    const deleted = await state.store.delete(name);
    await updateDraftProvenance();
    return { deleted };
  },
};

self.onmessage = async (ev) => post(await dispatch(handlers, ev.data || {}));
