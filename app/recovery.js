// recovery.js — the worker core's recoveries (issue 12), used by app/core.js; platform-independent like it.
//   - a GPU device lost mid-answer: a new device first (the active models reloaded on it), else the CPU fallback; the
//     Python session then goes on with the answer from its last committed token (Session.generate's `recover`);
//   - a GPU device lost while a model loads: a new device and the load again, else the CPU fallback;
//   - an allocation failure (out of memory) while a model loads: the draft is dropped (answers go on without
//     speculation, with a notice), or the champion goes to the CPU fallback; the message says which and why;
//   - receipts get the host's facts: GPU buffer bytes, the wasm heap, the Pyodide version, the stored sha256s.
// Armed faults (app/faults.js) fire here: worker_killed / draft_only / device_lost / gpu_alloc at load, and the
// decode loop's host kinds (device_lost, worker_killed) through faultHost.

import { EVT } from './protocol.js';
import { failNextAllocation } from './faults.js';

const text = (e) => String((e && e.message) || e);
export const isLost = (e) => /device lost|device was lost|destroyed device|device is lost/i.test(text(e));
export const isOutOfMemory = (e) => e instanceof RangeError || /out of memory|outofmemory|allocation failed/i.test(text(e));

/** engine.loadModel inside an out-of-memory error scope (a real OOM is reported there, not thrown); armed device_lost
 * and gpu_alloc faults of the load phase fire first. */
export async function loadOnGpu(core, name, load) {
  const device = core.state.gpu.engine.device;
  if (core.faults.take('device_lost', 'load', name)) device.destroy();
  if (core.faults.take('gpu_alloc', 'load', name)) failNextAllocation(device);
  let scoped = false;
  try { device.pushErrorScope('out-of-memory'); scoped = true; } catch (e) { /* a lost device */ }
  let model = null, err = null;
  try { model = await load(); } catch (e) { err = e; }
  if (scoped) {
    let oom = null;
    try { oom = await device.popErrorScope(); } catch (e) { /* a lost device */ }
    if (oom && !err) {
      try { model.destroy(); } catch (e) { /* gone */ }
      err = new Error(`out of memory: ${oom.message}`);
    }
  }
  if (err) throw err;
  return model;
}

async function sha256Text(s) {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(s)));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

export class DeviceRecovery {
  constructor(core) {
    this.core = core;
    this.gpuArgs = null;            // {gpu, engineOptions} of initGpu: how a new device is made
    this.draftUnavailable = null;   // {name, why}: the draft failed to load; answers go on without it
    this.peakGpu = 0;
    this.answerLosses = 0;
    this.retrying = new Set();
  }

  notice(level, code, message, extra = {}) {
    this.core.log(level === 'info' ? 'info' : level === 'warn' ? 'warn' : 'error', message);
    this.core.host.event(EVT.NOTICE, { level, code, message, ...extra });
  }

  killNow() {
    if (this.core.host.kill) this.core.host.kill();
  }

  // ---- loads ----------------------------------------------------------------------------------------------------
  beforeLoad(name, role) {
    const f = this.core.faults;
    if (f.take('worker_killed', 'load', name)) {
      this.killNow();
      throw new Error('the worker was killed (an armed worker_killed fault)');
    }
    if (role === 'draft' && f.take('draft_only', 'load', name)) {
      const why = "its backend failed while it loaded (an armed draft_only fault)";
      this.dropDraft(name, why, 'draft_only');
      throw new Error(`draft ${name}: ${why}; answers go on without speculation`);
    }
  }

  dropDraft(name, why, cause = 'backend_error') {
    const state = this.core.state;
    this.draftUnavailable = { name, why, cause };
    if (state.active.draft) {           // no half state: the draft role is empty until a draft loads again
      const old = state.active.draft;
      try { state.session.unload(old); } catch (e) { /* not loaded */ }
      this.core.unmount(old);
      if (state.gpuModels.draft) { try { state.gpuModels.draft.destroy(); } catch (e) { /* gone */ } delete state.gpuModels.draft; }
      delete state.modelBackend.draft;
      state.active.draft = null;
    }
    this.notice('warn', 'draft_dropped', `The draft model ${name} could not be loaded (${why}): answers go on without ` +
      'speculation.', { name });
  }

  /** A GPU load failed for want of memory or of a device: recover, or say why not. Returns loadModel's result. */
  async gpuLoadFailed(e, name, role, want) {
    const core = this.core, state = core.state, why = text(e);
    if (isLost(e)) {
      if (!this.retrying.has(name) && await this.newDevice(why)) {
        this.notice('warn', 'new_device', `The GPU device was lost while ${name} loaded: loading it on a new device.`, { name });
        this.retrying.add(name);
        try { return await core.loadModel(name, role, want); } finally { this.retrying.delete(name); }
      }
      await core.fallbackToCpu(why);
      this.notice('error', 'cpu_fallback', `The GPU device was lost while ${name} loaded and no new device came: ` +
        'running on the CPU fallback.', { name });
      return core.loadModel(name, role, 'cpu');
    }
    if (role === 'draft') {
      this.dropDraft(name, `the GPU ran out of memory for it: ${why}`, /injected/.test(why) ? 'gpu_alloc' : 'backend_error');
      throw new Error(`draft ${name} did not fit in GPU memory (${why}): answers go on without speculation`);
    }
    state.backend = 'cpu';
    state.gpuReason = `the champion did not fit in GPU memory (${why})`;
    this.notice('error', 'cpu_fallback', `The champion ${name} did not fit in GPU memory (${why}): running on the CPU ` +
      'fallback.', { name });
    return core.loadModel(name, role, 'cpu');
  }

  async newDevice(why) {
    const state = this.core.state;
    if (!this.gpuArgs || !state.gpu || !this.gpuArgs.gpu) return false;
    try {
      const engine = await state.gpu.mod.createEngine(this.gpuArgs.gpu, this.gpuArgs.engineOptions);
      try { state.gpu.engine.destroy(); } catch (e) { /* already gone */ }
      state.gpu = { mod: state.gpu.mod, engine };
      state.gpuModels = {};
      state.backend = 'webgpu';
      this.core.log('warn', `a new GPU device replaces the lost one (${why})`);
      return true;
    } catch (e) {
      this.core.log('warn', `no new GPU device (${text(e)})`);
      return false;
    }
  }

  /** After a model loaded: its stored sha256s for receipts (the page's store hashed it at import). */
  async loaded(name, role, meta) {
    if (role === 'draft') this.draftUnavailable = null;
    this.gpuBytes();
    if (!meta || !meta.sha256 || !Array.isArray(meta.files)) return;
    const files = meta.files.filter((f) => /^[0-9a-f]{64}$/.test(f.sha256 || ''));
    let sha = meta.sha256;
    if (meta.format === 'hf') {       // as exactspec.session does: the files' sha256s in file-name order, hashed
      const ordered = [...files].sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
      sha = await sha256Text(ordered.map((f) => f.sha256).join(''));
    }
    try {
      this.core.state.session.set_artifact(name, JSON.stringify({ sha256: sha, bytes: meta.size,
        files: files.map((f) => ({ sha256: f.sha256, bytes: f.size })) }));
    } catch (e) { /* not loaded after all */ }
  }

  gpuBytes() {
    let n = 0;
    for (const m of Object.values(this.core.state.gpuModels || {})) {
      for (const b of (m && m.mem && m.mem.buffers) || []) n += b.size || 0;
    }
    this.peakGpu = Math.max(this.peakGpu, n);
    return n;
  }

  // ---- answers ----------------------------------------------------------------------------------------------------
  /** Mid-answer: the device was lost. A new device (once an answer), else the CPU fallback. */
  async recoverDevice(reason) {
    const core = this.core, state = core.state;
    if (this.answerLosses++ === 0 && await this.newDevice(reason)) {
      let ok = true;
      for (const role of ['champion', 'draft']) {
        const name = state.active[role];
        if (!name) continue;
        try {
          const out = await core.loadModel(name, role, 'webgpu');
          if (role === 'champion' && out.backend !== 'webgpu') ok = false;
        } catch (e) {
          if (role === 'champion') ok = false;
          else core.log('warn', `the draft ${name} did not come back on the new device (${text(e)})`);
        }
      }
      if (ok) return { ok: true, how: 'new_device' };
    }
    await core.fallbackToCpu(reason);
    return { ok: Boolean(state.active.champion && state.modelBackend.champion), how: 'cpu_fallback' };
  }

  beginAnswer(params) {
    const core = this.core, state = core.state;
    const p = { ...params };
    const notices = [], recovery = [];
    if ((p.drafter === 'model' || p.drafter === 'head') && !state.active.draft && this.draftUnavailable) {
      notices.push(`The draft model ${this.draftUnavailable.name} is not loaded (${this.draftUnavailable.why}): this ` +
        'answer went without speculation.');
      recovery.push({ cause: this.draftUnavailable.cause, action: 'draft_dropped', at_token: 0, backend: null });
      p.drafter = 'none';
    }
    const faults = core.faults.decodeFaults();
    if (faults.length) p.faults = faults;
    this.answerLosses = 0;
    return {
      params: p, notices, faults, recovery,
      faultHost: (kind) => {
        if (kind === 'device_lost') {
          const e = state.gpu && state.gpu.engine;
          if (e) e.device.destroy();
        } else if (kind === 'worker_killed') {
          this.killNow();
        }
      },
      recover: async (json) => JSON.stringify(await this.recoverDevice((JSON.parse(json) || {}).error || 'device lost')),
      onFault: (json) => core.host.event(EVT.FAULT, { fault: JSON.parse(json) }),
    };
  }

  endAnswer(run, out) {
    const state = this.core.state;
    if (run.notices.length) out.notices = [...run.notices, ...(out.notices || [])];
    if (run.recovery.length) out.recovery = [...run.recovery, ...(out.recovery || [])];
    const r = out.receipt;
    if (r) {
      r.recovery = [...run.recovery, ...r.recovery].slice(0, 64);
      const heap = state.py && state.py._module && state.py._module.HEAPU8 ? state.py._module.HEAPU8.byteLength : null;
      this.gpuBytes();
      r.memory.gpu_buffers_bytes = state.gpu ? this.peakGpu : null;
      r.memory.wasm_heap_bytes = Number.isInteger(heap) ? heap : null;
      r.memory.cpu_pool_bytes = state.cpuPool ? state.cpuPool.bytes : null;   // the CPU kernel's shared memory
      if (state.py && /^[0-9A-Za-z][0-9A-Za-z.+_-]{0,31}$/.test(String(state.py.version))) r.versions.pyodide = String(state.py.version);
      r.versions.engine = state.modelBackend.champion === 'webgpu' ? 'webgpu' : 'cpu';
      const info = state.gpu && state.gpu.engine && state.gpu.engine.adapterInfo;
      r.backend.fallback_adapter = info ? Boolean(info.isFallbackAdapter) : null;
    }
    return out;
  }
}
