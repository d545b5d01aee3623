// engine_env.mjs — what the Node + Dawn scripts share (tests/gpu/driver.mjs, engine_server.mjs, bench/gpu/*.mjs, bench/product/node_host.mjs):
// Dawn's GPU object, a file/folder reader for loadModel, createEngine options from a test spec or from environment
// variables, and the one-lane subgroup emulation.
import { closeSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { create, globals } from 'webgpu';
import { defaultShaderSource } from '../../app/gpu/kernels.js';

/** Dawn for a backend ('opengl': llvmpipe here; 'vulkan' on a GPU host). The reference is kept: a garbage-collected
 * `create()` result crashes Node. */
export function dawnGpu(backend = 'opengl') {
  Object.assign(globalThis, globals);
  const flags = [`backend=${backend}`];
  if (backend === 'vulkan') flags.push('disable-dawn-features=timestamp_quantization');
  const gpu = create(flags);
  globalThis.__dawnGPU = gpu;
  return gpu;
}

/** createEngine's adapterOptions for a Dawn backend. */
export function adapterOptions(backend = 'opengl') {
  return backend === 'opengl' ? { featureLevel: 'compatibility' } : { powerPreference: 'high-performance' };
}

/** loadModel's readSlice(offset, nbytes, file) over a GGUF file, or a Hugging Face folder (file: a shard in it);
 * close() closes the files. */
export function fileReader(path) {
  const fds = new Map();
  const fdOf = (file) => {
    const p = file ? join(path, file) : path;
    if (!fds.has(p)) fds.set(p, openSync(p, 'r'));
    return fds.get(p);
  };
  const readSlice = async (offset, nbytes, file) => {
    const b = Buffer.alloc(nbytes);
    const got = readSync(fdOf(file), b, 0, nbytes, offset);
    return b.buffer.slice(b.byteOffset, b.byteOffset + got);
  };
  readSlice.close = () => { for (const fd of fds.values()) closeSync(fd); fds.clear(); };
  return readSlice;
}

/** createEngine options of a test spec (tests/gpu/dawn_harness.py): {backend, max_rows, max_binding_bytes, lanes,
 * emulate_sg, ksplit, engine_opts, break_shader, shader_dir}, then env EXACTSPEC_ENGINE_OPTS (variants on a GPU host). */
export function specEngineOptions(spec) {
  const files = shaderFiles(spec.shader_dir);
  const base = spec.emulate_sg ? emulatedSubgroups(files) : files;
  return {
    adapterOptions: adapterOptions(spec.backend ?? 'opengl'),
    maxRows: spec.max_rows ?? undefined, maxBindingBytes: spec.max_binding_bytes ?? undefined, lanes: spec.lanes ?? undefined,
    ...(spec.emulate_sg || spec.shader_dir ? { shaderSource: base } : {}),
    ...(spec.emulate_sg ? { lanes: 1, subgroups: false, tile8: true, tile1: true, emulatedSubgroups: true,
      ksplit: spec.ksplit ?? 1 } : {}),
    ...(spec.engine_opts ?? {}),   // the test's own extra options (e.g. {"fuse": true, "fuseSlice": 32})
    // spec.break_shader: that kernel's WGSL is served broken (tests of what the engine does when a kernel is rejected);
    // 'FILE:DEFINE' breaks only the variants of FILE compiled with DEFINE (a line under `#if DEFINE` that cannot parse)
    ...(spec.break_shader ? { shaderSource: breakShader(spec.break_shader, base) } : {}),
    ...JSON.parse(process.env.EXACTSPEC_ENGINE_OPTS || '{}'),
  };
}

/** A shader source serving `what` ('FILE' or 'FILE:DEFINE') broken, every other file from base. */
function breakShader(what, base) {
  const [file, define] = what.split(':');
  return async (name) => {
    if (name !== file) return base(name);
    return define ? `${await base(name)}\n// #if ${define}\nfn broken( {\n// #endif\n` : 'fn main( {';
  };
}

/** The fused engine from the environment: FUSE=0 (unfused: 5 dispatches per layer) | FUSE=1 (3) | FUSE=attn (4), FUSE_SLICE (hidden units
 * per FFN workgroup), FUSE_WG (its workgroup size), FUSE_HEAD_WG / FUSE_HEAD_PAIRS (the head's prologue matmul),
 * FUSE_MM_WG (the qkv / gate-up prologue matmuls' workgroup size). */
export function fuseOpts(env) {
  const o = {};
  if (env.FUSE === '0') o.fuse = false;              // unfused (the engine's default is fused where it can be)
  else if (env.FUSE) o.fuse = env.FUSE === 'attn' ? 'attn' : true;
  for (const [k, e] of [['fuseSlice', 'FUSE_SLICE'], ['fuseWg', 'FUSE_WG'], ['fuseHeadWg', 'FUSE_HEAD_WG'],
    ['fuseHeadPairs', 'FUSE_HEAD_PAIRS'], ['fuseMatmulWg', 'FUSE_MM_WG'], ['fuseQkvPairs', 'FUSE_QKV_PAIRS']]) {
    if (env[e]) o[k] = Number(env[e]);
  }
  return o;
}

// spec.emulate_sg: run shaders/matmul_sg.wgsl (the subgroup kernel) on an adapter without subgroups, with
// subgroups of ONE lane (LANES = 1: subgroupAdd is the identity, the lane is 0): every part of that kernel but the
// cross-lane sum (tiles, quad/oct slots, norm4, epilogues) runs and is checked. A shader source (kernels.js reads
// every kernel file and fragment through it; the engine asks for 'matmul' where it has no subgroups): 'matmul' is
// served matmul_sg.wgsl, every file's subgroupAdd becomes sg_add1, and a kernel file that enables subgroups
// (matmul_sg.wgsl, ffn_sg.wgsl, any new one) loses that line and its subgroup_invocation_id and gains sg_add1.
export function emulatedSubgroups(base) {
  return async (name) => {
    let src = await base(name === 'matmul' ? 'matmul_sg' : name);
    const kernel = /^enable subgroups;$/m.test(src);
    src = src.replace(/^enable subgroups;$/gm, '').replace(/^diagnostic\(off, subgroup_uniformity\);$/gm, '');
    src = src.replace(/subgroupAdd\(/g, 'sg_add1(');
    src = src.replace(/,\s*@builtin\(subgroup_invocation_id\) sid: u32\) \{/g, ') {\n  let sid = 0u;   // emulated: one lane');
    return kernel ? `${src}\nfn sg_add1(v: vec4<f32>) -> vec4<f32> { return v; }\n` : src;
  };
}

/** The repository's shaders/ (or spec.shader_dir: another folder of kernel files, e.g. a revision's, for tests). */
function shaderFiles(dir) {
  return defaultShaderSource(dir ? pathToFileURL(`${dir}/`) : new URL('../../shaders/', import.meta.url));
}

export const emulateSubgroups = emulatedSubgroups(shaderFiles());

/** createEngine options of the bench variants (bench/gpu/*.mjs, bench/h200/*.sh), from environment variables. */
export function envEngineOptions(env) {
  const num = (k) => (env[k] ? Number(env[k]) : undefined);
  const flag = (k) => (env[k] ? env[k] === '1' : undefined);
  const rows = env.ROW_TILES ? (env.ROW_TILES === 'all' ? 'all' : env.ROW_TILES.split(',')) : undefined;
  return { lanes: num('LANES'), subgroups: flag('SUBGROUPS'), matmulWg: num('MATMUL_WG'), splits: num('SPLITS'),
    passSplits: num('PASS_SPLITS'), attnWg: num('ATTN_WG'), ksplit: num('KSPLIT'), tile8: flag('TILE8'), tile1: flag('TILE1'),
    rowTiles: rows, rowTilesMax: num('ROW_TILES_MAX'), attnSplit: num('ATTN_SPLIT'), headSum: flag('HEAD_SUM'),
    aheadMax: num('AHEAD_MAX'),
    ...fuseOpts(env), ...emulationOpts(env), ...JSON.parse(env.EXACTSPEC_ENGINE_OPTS || '{}') };
}

/** EMULATE_SG=1 (bench here, on llvmpipe): matmul_sg.wgsl and the fused kernels with one-lane subgroups. */
export function emulationOpts(env) {
  if (env.EMULATE_SG !== '1') return {};
  return { shaderSource: emulateSubgroups, lanes: 1, subgroups: false, tile8: true, tile1: true, emulatedSubgroups: true };
}
