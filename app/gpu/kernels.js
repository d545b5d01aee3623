// kernels.js — WGSL sources, bind group layouts and compute pipelines (specialised by override constants).
//
// shaders/matmul.wgsl (or matmul_sg.wgsl: subgroup reductions)   bindings 0 params, 1 step(dyn), 2 w, 3 x, 4 gamma, 5 rope, 6 out(rw), 7 kv(rw)
// shaders/attention.wgsl bindings 0 params, 1 step(dyn), 2 q, 3 kv, 4 scores(rw), 5 out(rw)
// shaders/embed.wgsl     bindings 0 params, 1 step(dyn), 2 w, 3 tokens, 4 out(rw)
// fused engine (opts.fuse, subgroup GPUs only):
// shaders/matmul_sg_pro.wgsl bindings 0 params, 1 step(dyn), 2 w, 3 r_in, 4 gamma, 5 rope, 6 out(rw), 7 kv(rw), 8 parts, 9 r_out(rw)
// shaders/attn_o.wgsl    bindings 0 params, 1 step(dyn), 2 q, 3 kv, 4 scores(rw), 5 w_o, 6 pattn(rw)
// shaders/ffn_sg.wgsl    bindings 0 params, 1 step(dyn), 2 w gate/up, 3 r_in, 4 gamma, 5 pattn, 6 r_out(rw), 7 w_down, 8 pffn(rw)

export const WTYPE_IDS = { F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 8, BF16: 30 };
export const MODE = { store: 0, add: 1, swiglu: 2, qkv: 3 };
export const WG_SIZE = 64;
export const STEP_BYTES = 32;   // struct Step: 8 x u32

/** Default shader loader: fetch next to the app (browser), or read the file (Node: file: URLs). */
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

function layout(device, kinds) {
  const entries = kinds.map((k, i) => {
    const e = { binding: i, visibility: GPUShaderStage.COMPUTE };
    if (k === 'u') e.buffer = { type: 'uniform' };
    else if (k === 'ud') e.buffer = { type: 'uniform', hasDynamicOffset: true, minBindingSize: STEP_BYTES };
    else if (k === 'r') e.buffer = { type: 'read-only-storage' };
    else e.buffer = { type: 'storage' };
    return e;
  });
  return device.createBindGroupLayout({ entries });
}

export async function createKernels(device, shaderSource, { lanes = 32, attnWg = 64, subgroups = false, matmulWg = WG_SIZE, ksplit = 1,
  fuse = false } = {}) {
  const mm = subgroups ? 'matmul_sg' : 'matmul';
  const names = [['matmul', mm], ['attention', 'attention'], ['embed', 'embed']];
  if (fuse) names.push(['matmul_pro', 'matmul_sg_pro'], ['attn_o', 'attn_o'], ['ffn', 'ffn_sg']);
  const srcs = await Promise.all(names.map(([, n]) => shaderSource(n)));
  const modules = {};
  for (const [i, [name]] of names.entries()) {
    const code = srcs[i];
    // in an error scope, so a rejected module is this call's error, not the device's (the engine may go on without it)
    device.pushErrorScope('validation');
    const m = device.createShaderModule({ code, label: name });
    const scopeErr = await device.popErrorScope();
    if (m.getCompilationInfo) {
      const info = await m.getCompilationInfo();
      const errs = info.messages.filter((x) => x.type === 'error');
      if (errs.length) throw new Error(`WGSL ${name}: ${errs.map((e) => `${e.lineNum}:${e.linePos} ${e.message}`).join('; ')}`);
    }
    if (scopeErr) throw new Error(`WGSL ${name}: ${scopeErr.message}`);
    modules[name] = m;
  }
  const layouts = {
    matmul: layout(device, ['u', 'ud', 'r', 'r', 'r', 'r', 's', 's']),
    attention: layout(device, ['u', 'ud', 'r', 'r', 's', 's']),
    embed: layout(device, ['u', 'ud', 'r', 'r', 's']),
  };
  if (fuse) {
    layouts.matmul_pro = layout(device, ['u', 'ud', 'r', 'r', 'r', 'r', 's', 's', 'r', 's']);
    layouts.attn_o = layout(device, ['u', 'ud', 'r', 'r', 's', 'r', 's']);
    layouts.ffn = layout(device, ['u', 'ud', 'r', 'r', 'r', 'r', 's', 'r', 's']);
  }
  const plLayouts = {};
  for (const k in layouts) plLayouts[k] = device.createPipelineLayout({ bindGroupLayouts: [layouts[k]] });
  const cache = new Map();
  async function pipeline(kind, constants) {
    const key = kind + JSON.stringify(constants);
    if (!cache.has(key)) {
      cache.set(key, device.createComputePipelineAsync({
        label: key, layout: plLayouts[kind],
        compute: { module: modules[kind], entryPoint: 'main', constants: { WG_SIZE, ...constants } },
      }));
    }
    return cache.get(key);
  }
  return {
    layouts,
    lanes,
    subgroups,
    matmulWg,
    ksplit,   // subgroups per row pair (matmul_sg.wgsl)
    // tile: chunk rows per weight decode on the GPU paths (4: quad_dot, 8: oct_dot); matmul.wgsl ignores it when lanes == 1
    matmul: (wtype, mode, norm, tile = 4) => pipeline('matmul', { WG_SIZE: matmulWg, WTYPE: wtype, MODE: mode,
      NORM: norm ? 1 : 0, LANES: lanes, TILE: tile, KSPLIT: ksplit }),
    attention: () => pipeline('attention', { WG_SIZE: attnWg }),
    embed: (wtype) => pipeline('embed', { WTYPE: wtype }),
    // fused engine: K = in features (sizes the x staging), pairs = row pairs per subgroup, wg = workgroup size
    // npart = partials its prologue adds, ou = most W_o units of one head's slice
    matmulPro: (wtype, mode, norm, tile, K, npart, pairs = 1, wg = matmulWg) => pipeline('matmul_pro', { WG_SIZE: wg, WTYPE: wtype,
      MODE: mode, NORM: norm ? 1 : 0, LANES: lanes, TILE: tile, KX: K, PAIRS: pairs, NPART: npart }),
    attnO: (wtype, ou) => pipeline('attn_o', { WG_SIZE: attnWg, WTYPE: wtype, OU: ou }),
    ffn: (wtype, wtypeD, tile, K, slice, wg, npart) => pipeline('ffn', { WG_SIZE: wg, WTYPE: wtype, WTYPE_D: wtypeD, LANES: lanes,
      TILE: tile, KX: K, SLICE: slice, NPART: npart }),
  };
}
