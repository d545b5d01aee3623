// kernels.js — the engine's WGSL kernels: compiled modules, and per kernel its interface read from the WGSL
// (signature.js): bind group layout, bind groups and uniform parameter blocks built BY NAME, pipelines specialised
// by override constants (by name too). Each kernel is a file of shaders/ EXPANDED by wgsl.js (its `// #include`s of
// shaders/lib/ and its variant's defines) before it is compiled and before signature.js reads it:
//   matmul      shaders/matmul.wgsl, or matmul_sg.wgsl (subgroup reductions) where the adapter has subgroups
//   attention   shaders/attention.wgsl          embed   shaders/embed.wgsl          pick   shaders/pick.wgsl
//   residual    shaders/residual.wgsl (the final residual: the head's input with headSum, the kept features)
//   chain       shaders/chain.wgsl (ngramChain: the n-gram drafter's rounds between two verify passes)
//   fused engine (opts.fuse, subgroup GPUs only): matmul_pro shaders/matmul_sg.wgsl with define PRO, attn_o
//   shaders/attention.wgsl with define O_PROJ, ffn shaders/ffn_sg.wgsl; with opts.fuseQkvAttn also qkv_attn
//   shaders/attention.wgsl with defines O_PROJ and QKV (a decode pass's qkv + attention in one dispatch) and ffn_kv
//   shaders/ffn_sg.wgsl with define KVCOPY (the FFN that also moves that pass's k, v into the cache); with
//   opts.attnBlock also attn_o_blocks and ffn_blocks (blockKernelFiles, compiled at the first model that runs them):
//   the same files with define BLOCKS too (the attention's keys in blocks; a pass that reaches position attnBlock
//   runs them, one before it attn_o and ffn: graph.js)
//   a draft head's own (headKernelFiles, compiled at its first loadHead, app/gpu/head.js): head_in, head_out,
//   head_logits, vocab_mask (shaders/<same name>.wgsl), head_attention shaders/attention.wgsl with define WINDOW

import { packStruct, parseSignature } from './signature.js';
import { cachedLoader, expandWgsl } from './wgsl.js';

export const WTYPE_IDS = { F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 8, BF16: 30 };
export const MODE = { store: 0, add: 1, swiglu: 2, qkv: 3 };
export const WG_SIZE = 64;

/** Default shader loader: the text of `${base}${name}.wgsl` (name: 'matmul', or 'lib/step' for a fragment), fetched
 * next to the app (browser) or read from the file (Node: file: URLs). */
export function defaultShaderSource(base) {
  return async (name) => {
    const url = new URL(`${name}.wgsl`, base);
    if (url.protocol === 'file:') {
      const fs = await import('node:fs/promises');
      return fs.readFile(url, 'utf8');
    }
    const r = await fetch(url);
    if (!r.ok) throw new Error(`could not load shader ${url}: HTTP ${r.status}`);
    return r.text();
  };
}

/** One kernel: its module, interface (parsed from the WGSL), layout and cached pipelines. */
class Kernel {
  constructor(device, name, module, sig, dummies) {
    this.device = device;
    this.name = name;
    this.module = module;
    this.sig = sig;
    this.dummies = dummies;
    this.layout = device.createBindGroupLayout({ label: name, entries: sig.bindings.map((b) => ({
      binding: b.binding, visibility: GPUShaderStage.COMPUTE,
      buffer: b.space === 'uniform' ? { type: 'uniform', hasDynamicOffset: b.dynamic, minBindingSize: b.size }
        : { type: b.space === 'read' ? 'read-only-storage' : 'storage' },
    })) });
    this.pipelineLayout = device.createPipelineLayout({ bindGroupLayouts: [this.layout] });
    this.cache = new Map();
  }

  /** The compute pipeline with these override constants (by name; WG_SIZE defaults to kernels.js's WG_SIZE) and
   * those of `optional` that the kernel declares (a hint an older kernel file may lack: the pinned revisions of
   * tests/gpu/test_wgsl_golden.py run through the same engine). */
  pipeline(constants = {}, optional = {}) {
    for (const [k, v] of Object.entries(optional)) if (this.sig.overrides.has(k)) constants = { ...constants, [k]: v };
    const key = JSON.stringify(constants);
    if (!this.cache.has(key)) {
      this.cache.set(key, this.device.createComputePipelineAsync({
        label: `${this.name}${key}`, layout: this.pipelineLayout,
        compute: { module: this.module, entryPoint: 'main', constants: { WG_SIZE, ...constants } },
      }));
    }
    return this.cache.get(key);
  }

  /** The byte size of a uniform binding's struct (e.g. 'step'). */
  uniformBytes(binding) {
    const b = this.sig.bindings.find((x) => x.name === binding && x.space === 'uniform');
    if (!b) throw new Error(`kernel ${this.name}: no uniform binding ${binding}`);
    return b.size;
  }

  /** A uniform block (e.g. 'params') packed by field name: Uint32Array for a buffer. */
  pack(binding, values) {
    const b = this.sig.bindings.find((x) => x.name === binding && x.space === 'uniform');
    if (!b) throw new Error(`kernel ${this.name}: no uniform binding ${binding}`);
    return packStruct(this.sig.structs[b.type], values, `kernel ${this.name} ${binding}`);
  }

  /** A bind group from {binding name: GPUBuffer | {buffer, offset, size} | null (unused: a dummy buffer)}. */
  bind(label, resources) {
    const names = new Set(this.sig.bindings.map((b) => b.name));
    for (const k of Object.keys(resources)) {
      if (!names.has(k)) throw new Error(`kernel ${this.name}: no binding ${k} (bindings: ${[...names].join(', ')})`);
    }
    const entries = this.sig.bindings.map((b) => {
      let r = resources[b.name];
      if (r === undefined) throw new Error(`kernel ${this.name} (${label}): binding ${b.name} not given`);
      if (r === null) {
        if (b.space === 'uniform') throw new Error(`kernel ${this.name}: uniform ${b.name} cannot be left unbound`);
        r = this.dummies(b);
      }
      const res = r.buffer ? r : { buffer: r };
      return { binding: b.binding, resource: b.dynamic ? { offset: 0, size: b.size, ...res } : res };
    });
    return this.device.createBindGroup({ label, layout: this.layout, entries });
  }
}

/** The kernels the engine runs: {files: {kernel: file of shaders/}, defines: {kernel: its variant's defines}}. */
export function kernelFiles({ subgroups = false, fuse = false, qkvAttn = false } = {}) {
  const files = { matmul: subgroups ? 'matmul_sg' : 'matmul', attention: 'attention', embed: 'embed', pick: 'pick',
    residual: 'residual', chain: 'chain', chain_copy: 'chain', draft_chain: 'draft_chain' };
  if (fuse) Object.assign(files, { matmul_pro: 'matmul_sg', attn_o: 'attention', ffn: 'ffn_sg' });
  if (fuse && qkvAttn) Object.assign(files, { qkv_attn: 'attention', ffn_kv: 'ffn_sg' });
  // a kernel's variant of its file
  const defines = { matmul_pro: { PRO: true }, attn_o: { O_PROJ: true }, qkv_attn: { O_PROJ: true, QKV: true },
    ffn_kv: { KVCOPY: true }, chain_copy: { COPY: true } };
  return { files, defines };
}

/** The key blocks' kernels (engine option attnBlock, fused engine), compiled at the first model that runs them
 * (model.js): passes before position attnBlock run attn_o / ffn, later ones these (graph.js). */
export function blockKernelFiles() {
  return { files: { attn_o_blocks: 'attention', ffn_blocks: 'ffn_sg' },
    defines: { attn_o_blocks: { O_PROJ: true, BLOCKS: true }, ffn_blocks: { BLOCKS: true } } };
}

/** A draft head's own kernels (app/gpu/head.js), as kernelFiles gives the engine's. */
export function headKernelFiles() {
  const files = { head_in: 'head_in', head_attention: 'attention', head_out: 'head_out', head_logits: 'head_logits',
    vocab_mask: 'vocab_mask' };
  return { files, defines: { head_attention: { WINDOW: true } } };
}

/** Compile the kernels the engine runs (subgroups: matmul_sg.wgsl; fuse: the fused engine's three). */
export async function createKernels(device, shaderSource, { subgroups = false, fuse = false, qkvAttn = false } = {}) {
  const { files, defines } = kernelFiles({ subgroups, fuse, qkvAttn });
  return compileKernels(device, shaderSource, files, defines);
}

/** Compile the kernels {name: file of shaders/} ({name: defines} choose a file's variant), each file expanded by
 * wgsl.js with shaderSource as its loader (async (name) -> the text of shaders/NAME.wgsl). Each module is compiled in
 * an error scope, so a rejected module is this call's error (the engine may go on without it). */
export async function compileKernels(device, shaderSource, files, defines = {}) {
  const names = Object.keys(files);
  const load = cachedLoader(shaderSource);
  const srcs = await Promise.all(names.map((n) => expandWgsl(files[n], load, defines[n]).catch((e) => {
    throw new Error(`WGSL ${n}: ${e.message}`);
  })));
  const dummyR = device.createBuffer({ label: 'dummy_r', size: 16, usage: GPUBufferUsage.STORAGE });
  const dummyW = new Map();   // one per binding number: two unused writable bindings never alias
  const dummies = (b) => {
    if (b.space === 'read') return dummyR;
    if (!dummyW.has(b.binding)) dummyW.set(b.binding, device.createBuffer({ label: `dummy_w${b.binding}`, size: 16, usage: GPUBufferUsage.STORAGE }));
    return dummyW.get(b.binding);
  };
  const kernels = {};
  for (const [i, name] of names.entries()) {
    const { text, origin } = srcs[i];
    device.pushErrorScope('validation');
    const m = device.createShaderModule({ code: text, label: name });
    const scopeErr = await device.popErrorScope();
    if (m.getCompilationInfo) {
      const info = await m.getCompilationInfo();
      const errs = info.messages.filter((x) => x.type === 'error');
      // each message at its source line (file:line of the kernel or fragment) and its column
      const at = (e) => `${origin[e.lineNum - 1] ?? `line ${e.lineNum}`}:${e.linePos}`;
      if (errs.length) throw new Error(`WGSL ${name}: ${errs.map((e) => `${at(e)} ${e.message}`).join('; ')}`);
    }
    if (scopeErr) throw new Error(`WGSL ${name}: ${scopeErr.message}`);
    kernels[name] = new Kernel(device, name, m, parseSignature(text, `WGSL ${name}`), dummies);
  }
  return kernels;
}
