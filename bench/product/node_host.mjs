// node_host.mjs — the page's worker core (app/core.js: Pyodide + exactspec, the Python decode loop, bridge.py,
// app/gpu/engine.js) under Node: the GPU from Dawn (npm `webgpu`) or none (the CPU fallback: numpy in Pyodide),
// the Pyodide runtime from npm `pyodide`, models read from disk. The product's own code path minus the page shell,
// for benchmarks on machines whose browser cannot reach the GPU (py/bench/product.py drives it).
//
//   node bench/product/node_host.mjs      then JSON lines on stdin, one request each (app/protocol.js kinds):
//     {"id": 1, "kind": "boot", "params": {"backend": "opengl" | "vulkan" | "cpu", "champion": PATH, "draft": PATH?,
//                                          "head": PATH? (a draft head, loaded beside the draft),
//                                          "wheel": PATH (the exactspec wheel), "engine_opts": {...}?}}
//     {"id": 2, "kind": "generate", "params": {the page's generate request}}     also "cancel", "status",
//     {"id": 3, "kind": "timings", "params": {...}}                               "load_model" {name, role, path?}
//   stdout: one JSON line per reply {"id", "ok": true, "result"} | {"id", "ok": false, "error"} and per event
//   ({"kind": "event.stage" | "event.log" | "event.tokens", ...}). End of stdin (or {"kind": "quit"}) exits.
// Backends: 'opengl' (Mesa llvmpipe here: XDG_RUNTIME_DIR=/tmp EGL_PLATFORM=surfaceless; featureLevel
// 'compatibility'), 'vulkan' (a GPU host: VK_DRIVER_FILES naming its ICD), 'cpu' (no GPU object: the page's CPU
// fallback). Env EXACTSPEC_ENGINE_OPTS: extra createEngine options (JSON); FUSE, EMULATE_SG=1 as in bench/gpu/bench.mjs;
// EXACTSPEC_TRACE=FILE: the engine's timeline (createEngine's `trace`: each batched call's start and end, each
// submission's submit and readback) written to FILE as JSON lines at exit.
// Pyodide: runtime files from node_modules/pyodide (its package.json makes them CommonJS, as Node needs), numpy /
// micropip / packaging wheels from static/pyodide/<version>/ (`python build.py setup`), or EXACTSPEC_PYODIDE_DIR /
// EXACTSPEC_PYODIDE_PACKAGES (the H200 run unpacks them under /tmp).
import { createInterface } from 'node:readline';
import { openAsBlob, readFileSync, readdirSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Core, HF_FILE_RE, coreHandlers, dispatch, errorText } from '../../app/core.js';
import { REQ, EVT } from '../../app/protocol.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function send(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }
function log(level, message) { send({ kind: EVT.LOG, level, message }); }

const paths = new Map();   // model name -> its GGUF file or Hugging Face folder on disk (links resolved: NODEFS
                           // cannot follow a link that leaves the mounted folder)
const onDisk = (p) => realpathSync(path.resolve(p));

// A model on disk as the core wants it: meta {name, format, files: [{file}]} and Blobs of its files.
async function files(name) {
  const p = paths.get(name);
  if (!p) throw new Error(`no model named ${name}`);
  if (statSync(p).isDirectory()) {
    const names = readdirSync(p).filter((n) => HF_FILE_RE.test(n))
      .sort((a, b) => (a === 'config.json' ? -1 : b === 'config.json' ? 1 : a.localeCompare(b)));
    return { meta: { name, format: 'hf', files: names.map((file) => ({ file })) },
      files: await Promise.all(names.map((n) => openAsBlob(path.join(p, n)))) };
  }
  return { meta: { name, format: 'gguf', files: [{ file: path.basename(p) }] }, files: [await openAsBlob(p)] };
}

const core = new Core({
  log,
  event: (kind, payload) => send({ kind, ...payload }),
  files,
  // NODEFS: Python reads the file's own folder in place
  mount(py, dir, meta) {
    const p = paths.get(meta.name);
    py.mountNodeFS(dir, statSync(p).isDirectory() ? p : path.dirname(p));
  },
});

function modelName(p) { return path.basename(p).replace(/\.gguf$/i, '').replace(/[^A-Za-z0-9._-]+/g, '-'); }

async function dawnGpu(backend) {
  const { create, globals } = await import('webgpu');
  Object.assign(globalThis, globals);
  const flags = [`backend=${backend}`];
  if (backend === 'vulkan') flags.push('disable-dawn-features=timestamp_quantization');
  const gpu = create(flags);
  globalThis.__dawnGPU = gpu;   // keep the reference alive (GC of it crashes Node)
  return gpu;
}

async function boot(params) {
  const t0 = performance.now();
  const backend = params.backend ?? 'opengl';
  if (!['opengl', 'vulkan', 'cpu'].includes(backend)) throw new Error(`backend must be opengl, vulkan or cpu, not ${backend}`);
  if (!params.champion) throw new Error('boot: champion (a GGUF path) is required');
  if (!params.wheel) throw new Error('boot: wheel (the exactspec wheel) is required');
  const pyDir = process.env.EXACTSPEC_PYODIDE_DIR || path.join(ROOT, 'node_modules', 'pyodide');
  const version = JSON.parse(readFileSync(path.join(pyDir, 'package.json'), 'utf8')).version;
  const pkgDir = process.env.EXACTSPEC_PYODIDE_PACKAGES || path.join(ROOT, 'static', 'pyodide', version);
  await core.bootRuntime({
    loadPyodide: async (opts) => (await import(pathToFileURL(path.join(pyDir, 'pyodide.mjs')).href)).loadPyodide(opts),
    indexURL: pyDir + path.sep,
    wheel: pathToFileURL(path.resolve(params.wheel)).href,
    options: { packageCacheDir: pkgDir + path.sep, lockFileURL: path.join(pkgDir, 'pyodide-lock.json') },
  });
  // engine variants as tests/gpu/driver.mjs and bench/gpu/bench.mjs take them (FUSE=..., EMULATE_SG=1: the subgroup
  // kernels with one-lane subgroups on an adapter without subgroups, i.e. the fused engine on llvmpipe)
  const env = process.env;
  const variant = env.FUSE || env.EMULATE_SG === '1' ? await import('../../tests/gpu/engine_env.mjs') : null;
  const engineOptions = {
    adapterOptions: backend === 'opengl' ? { featureLevel: 'compatibility' } : { powerPreference: 'high-performance' },
    ...(variant ? { ...variant.fuseOpts(env), ...variant.emulationOpts(env) } : {}),
    ...(params.engine_opts ?? {}),
    ...JSON.parse(env.EXACTSPEC_ENGINE_OPTS || '{}'),
  };
  if (env.EXACTSPEC_TRACE) {        // the engine's call / submission timeline, written to that file at exit (benches)
    const recs = [];
    engineOptions.trace = (r) => recs.push(r);
    process.on('exit', () => writeFileSync(env.EXACTSPEC_TRACE, recs.map((r) => JSON.stringify(r)).join('\n')));
  }
  await core.stage('gpu', async () => core.initGpu(backend === 'cpu' ? null : await dawnGpu(backend),
    { force_cpu: backend === 'cpu' }, engineOptions));
  core.startSession();
  await core.stage('cpu', async () => core.initCpuPool(params.threads));
  await core.stage('weights', async () => {
    const loaded = [];
    for (const [role, p, slot] of [['champion', params.champion, 'champion'], ['draft', params.draft, 'draft'],
      ['draft', params.head, 'head']]) {
      if (!p) continue;
      const name = modelName(p);
      paths.set(name, onDisk(p));
      const out = await core.loadModel(name, role);
      loaded.push({ name, role: slot, backend: out.backend });
    }
    return { loaded };
  });
  await core.stage('ready', async () => ({ backend: core.state.backend }));
  return { ...core.status(), adapter: core.adapterInfo(), node: process.version, pyodide: core.state.py.version,
    boot_ms: performance.now() - t0 };
}

let booting = null;
const handlers = {
  ...coreHandlers(core, (id, d) => send({ kind: EVT.TOKENS, request_id: id, text: d.text, token_ids: d.token_ids })),
  async [REQ.BOOT](msg) {
    if (!booting) booting = boot(msg.params || {});
    return booting;
  },
  async [REQ.LOAD_MODEL](msg) {   // {name, role, path?}: a path registers (or re-points) the name first
    core.needReady();
    const { name, role = 'champion', path: p } = msg.params || {};
    if (p) paths.set(name, onDisk(p));
    return core.loadModel(name, role);
  },
};

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
const pending = new Set();
rl.on('line', (line) => {
  if (!line.trim()) return;
  let msg;
  try { msg = JSON.parse(line); } catch (e) { send({ id: null, ok: false, error: `not JSON: ${errorText(e)}` }); return; }
  if (msg.kind === 'quit') { rl.close(); return; }
  // requests after a boot wait for it; otherwise they run concurrently (a cancel is served while a generate runs)
  const waitBoot = booting && msg.kind !== REQ.BOOT ? booting.catch(() => {}) : null;
  const p = (waitBoot ? waitBoot.then(() => dispatch(handlers, msg)) : dispatch(handlers, msg)).then(send);
  pending.add(p);
  p.finally(() => pending.delete(p));
});
rl.on('close', async () => {
  await Promise.allSettled([...pending]);
  process.exit(0);   // Dawn's GPU object must not be garbage-collected while Node exits on its own
});
