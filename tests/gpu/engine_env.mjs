// engine_env.mjs — createEngine options from environment variables (bench.mjs, bench/product/node_host.mjs) and the one-lane
// subgroup emulation (driver.mjs, bench.mjs EMULATE_SG=1).
import { readFileSync } from 'node:fs';

/** The fused engine from the environment: FUSE=0 (unfused: 5 dispatches per layer) | FUSE=1 (3) | FUSE=attn (4), FUSE_SLICE (hidden units
 * per FFN workgroup), FUSE_WG (its workgroup size), FUSE_HEAD_WG / FUSE_HEAD_PAIRS (the head's prologue matmul),
 * FUSE_MM_WG (the qkv / gate-up prologue matmuls' workgroup size). */
export function fuseOpts(env) {
  const o = {};
  if (env.FUSE === '0') o.fuse = false;              // unfused (the engine's default is fused where it can be)
  else if (env.FUSE) o.fuse = env.FUSE === 'attn' ? 'attn' : true;
  for (const [k, e] of [['fuseSlice', 'FUSE_SLICE'], ['fuseWg', 'FUSE_WG'], ['fuseHeadWg', 'FUSE_HEAD_WG'],
    ['fuseHeadPairs', 'FUSE_HEAD_PAIRS'], ['fuseMatmulWg', 'FUSE_MM_WG']]) {
    if (env[e]) o[k] = Number(env[e]);
  }
  return o;
}

// spec.emulate_sg: run shaders/matmul_sg.wgsl (the subgroup kernel) on an adapter without subgroups, with
// subgroups of ONE lane (LANES = 1: subgroupAdd is the identity, the lane is 0): every part of that kernel but the
// cross-lane sum (tiles, quad/oct slots, norm4, epilogues) runs and is checked.
export async function emulateSubgroups(name) {
  const base = new URL('../../shaders/', import.meta.url);
  // the subgroup kernels: matmul_sg.wgsl (asked for as 'matmul') and the fused engine's matmul_sg_pro / ffn_sg
  if (!['matmul', 'matmul_sg_pro', 'ffn_sg'].includes(name)) return readFileSync(new URL(`${name}.wgsl`, base), 'utf8');
  let src = readFileSync(new URL(name === 'matmul' ? 'matmul_sg.wgsl' : `${name}.wgsl`, base), 'utf8');
  src = src.replace(/^enable subgroups;$/m, '').replace(/^diagnostic\(off, subgroup_uniformity\);$/m, '');
  src = src.replace(/subgroupAdd\(/g, 'sg_add1(');
  src = src.replace(/,\s*@builtin\(subgroup_invocation_id\) sid: u32\) \{/, ') {\n  let sid = 0u;   // emulated: one lane');
  return src + '\nfn sg_add1(v: vec4<f32>) -> vec4<f32> { return v; }\n';
}

/** EMULATE_SG=1 (bench here, on llvmpipe): matmul_sg.wgsl and the fused kernels with one-lane subgroups. */
export function emulationOpts(env) {
  if (env.EMULATE_SG !== '1') return {};
  return { shaderSource: emulateSubgroups, lanes: 1, subgroups: false, tile8: true, tile1: true, emulatedSubgroups: true };
}
