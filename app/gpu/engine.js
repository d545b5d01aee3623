// engine.js — the WebGPU llama engine (hand-written WGSL in shaders/), usable in a page, a worker, or Node + Dawn.
//
// API
//   const engine = await createEngine(gpu, opts)
//     gpu   navigator.gpu in a page/worker, or Dawn's `create([...])` result in Node. The engine never reads
//           `navigator` itself.
//     opts  {shaderBase?: URL|string of the folder holding the .wgsl files (default: ../../shaders/ next to this
//            module; the page must serve /shaders/ beside /app/), shaderSource?: async (name) -> WGSL text
//            (overrides shaderBase), adapterOptions?: for requestAdapter, maxRows?: rows per chunk (default 64),
//            subgroups?: matmul_sg.wgsl (default on GPUs whose subgroup size is fixed, off on CPU adapters),
//            lanes?: invocations per weight-row pair in matmul.wgsl (default 32; 1 on CPU adapters such as
//            SwiftShader/llvmpipe), matmulWg?: matmul workgroup size (64), attnWg?: attention workgroup size (256 GPU / 64 CPU), timestamps?: GPU time
//            per forward in model.stats.gpu_ms and model.profile() (bench only), maxBindingBytes?: cap on one
//            weight binding (tests use it to force splits), tile1?/tile8?: GPU matmul pipelines that decode each
//            weight once for 1 row (dispatches of one row) / 8 rows (dispatches of more than 4 rows) besides the
//            4-row one (default on where lanes > 1; every row runs the same slot code in all three),
//            ksplit?: subgroups per weight-row pair in matmul_sg.wgsl (1 default; 2 or 4: each takes an
//            interleaved share of the units, the shares summed in a fixed order; more warps for small matrices),
//            emulatedSubgroups?: (tests) shaderSource serves matmul_sg.wgsl with one-lane subgroups emulated,
//            splits?: command buffers per forward, submitted one by one so the GPU starts while the rest is
//            still being translated (default 4 on GPUs, 1 on CPU adapters),
//            fuse?: false | 'attn' | true | 'auto' (default 'auto', false with emulatedSubgroups: true where
//            matmul_sg.wgsl runs with ksplit 1,
//            else false, and a model the fused kernels cannot take runs unfused, see model.fused; an explicit true
//            or 'attn' refuses such a model with an error instead): fewer dispatches per forward,
//            only with matmul_sg.wgsl (GPUs with a fixed subgroup size, or emulatedSubgroups) and ksplit 1. 'attn': attention + O projection in
//            one kernel (attn_o.wgsl, per-head split-K partials summed by the gate/up matmul's prologue,
//            matmul_sg_pro.wgsl): 4 * n_layers + 2 dispatches. true: also the FFN in one kernel per slice of hidden
//            units (ffn_sg.wgsl, down-projection partials summed by the next qkv matmul's / the head's prologue):
//            3 * n_layers + 2. Partials are summed in a fixed order, so forwards stay batch invariant (not bitwise
//            equal to fuse: false: the residual adds are grouped differently).
//            fuseSlice?: hidden units per FFN workgroup (multiple of 32, default 32), fuseWg?: workgroup size of
//            ffn_sg.wgsl (default 512 GPU / 64 CPU adapters), fuseHeadWg?/fuseHeadPairs?: workgroup size (default
//            256 GPU / 64 CPU) and row pairs per subgroup (default 4) of the head's prologue matmul (fuse true),
//            fuseMatmulWg?: workgroup size of the qkv (fuse true) / gate-up (fuse 'attn') prologue matmuls (default
//            matmulWg: fewer, larger workgroups stage x fewer times)}
//   engine.adapterInfo  {vendor, architecture, device, description, isFallbackAdapter, features,
//                        maxStorageBufferBindingSize, subgroupMinSize, subgroupMaxSize, kernels: which variants}
//   engine.destroy()    destroys the device (and every model)
//   const model = await engine.loadModel(description, readSlice, {seq_len})
//     description  formats.describe(): {config: ModelConfig fields (dim, hidden_dim, n_layers, n_heads,
//                  n_kv_heads, head_dim, vocab_size, seq_len, rope_theta, rope_dim, norm_eps, tied_embeddings),
//                  tensors: [{name, ggml_type ('F32'|'F16'|'BF16'|'Q4_0'|'Q4_1'|'Q8_0'), shape (numpy order),
//                  offset (absolute), nbytes, qk_permuted?}]}. GGUF names (blk.N.attn_q.weight, ...) or
//                  Hugging Face names (model.layers.N.self_attn.q_proj.weight, ...).
//     readSlice    async (offset, nbytes) -> ArrayBuffer of the model file (OPFS slice, fs read, ...).
//     seq_len      KV capacity (default and maximum: config.seq_len).
//   model.config             the description's config (seq_len replaced by the KV capacity)
//   model.length             logical KV length (positions filled)
//   await model.forward(tokens /* Int32Array|number[] */, start_pos /* === length */, n_out /* default n */)
//       -> Float32Array (n_out * vocab_size): logits of the LAST n_out positions, row-major. One queue
//          submission, one readback. Batch-invariant: a position's row is bitwise the same whatever split of
//          forwards (1 token, k+1 verify blocks, prefill chunks) produced it.
//   model.truncate(n)        O(1): logical KV length := n (0 <= n <= length); nothing is zeroed.
//   model.stats              last forward: {dispatches, command_buffers, chunks, encode_ms, submit_ms, wait_ms, pre_encoded, gpu_ms}
//   model.weightBytes        bytes of weights on the GPU
//   model.fused              the fused kernels this model runs: false | 'attn' | true (see opts.fuse)
//   await model.profile(n)   bench only (timestamps): GPU microseconds per kind of dispatch for n rows
//   model.destroy()          frees GPU buffers
// Speed notes: one compute pass per forward (embed, then per layer qkv+RoPE+KV write, attention, o+residual,
// gate/up+SwiGLU, down+residual, then the head for the rows asked: 5 * n_layers + 2 dispatches; fuse 'attn':
// 4 * n_layers + 2, fuse true: 3 * n_layers + 2, see opts.fuse), split into
// `splits` command buffers submitted one after another (a small first one, so the GPU starts early); the command
// buffers for the next forward of the same shape are encoded while the GPU runs this one.
// Errors: device loss makes forward reject with an Error whose message starts with "device lost"; other GPU
// errors with "gpu error"; bad arguments/files with a message naming the problem. Forwards are serialised.

import { openDevice } from './device.js';
import { createKernels, defaultShaderSource, MODE, STEP_BYTES, WG_SIZE } from './kernels.js';
import { readVector, uploadLinear } from './weights.js';

const CONFIG_KEYS = ['dim', 'hidden_dim', 'n_layers', 'n_heads', 'n_kv_heads', 'head_dim', 'vocab_size', 'seq_len'];

function hfToGguf(name) {
  const m = /^model\.layers\.(\d+)\.(.*)$/.exec(name);
  const map = {
    'input_layernorm.weight': 'attn_norm.weight', 'self_attn.q_proj.weight': 'attn_q.weight',
    'self_attn.k_proj.weight': 'attn_k.weight', 'self_attn.v_proj.weight': 'attn_v.weight',
    'self_attn.o_proj.weight': 'attn_output.weight', 'post_attention_layernorm.weight': 'ffn_norm.weight',
    'mlp.gate_proj.weight': 'ffn_gate.weight', 'mlp.up_proj.weight': 'ffn_up.weight',
    'mlp.down_proj.weight': 'ffn_down.weight',
  };
  if (m) return map[m[2]] ? `blk.${m[1]}.${map[m[2]]}` : null;
  return { 'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight',
    'lm_head.weight': 'output.weight' }[name] ?? null;
}

export async function createEngine(gpu, opts = {}) {
  const { device, adapterInfo, state, lostPromise } = await openDevice(gpu, opts);
  const shaderSource = opts.shaderSource ?? defaultShaderSource(opts.shaderBase ?? new URL('../../shaders/', import.meta.url));
  let kernels;
  try {
    const cpu = isCpuAdapter(adapterInfo);
    // subgroup reductions (matmul_sg.wgsl) need one fixed subgroup size S that divides the workgroup
    const S = adapterInfo.subgroupMinSize === adapterInfo.subgroupMaxSize ? adapterInfo.subgroupMinSize : 0;
    const sgOk = device.features.has('subgroups') && S >= 4 && S <= WG_SIZE && WG_SIZE % S === 0;
    const useSg = sgOk && (opts.subgroups ?? !cpu);
    if (opts.subgroups === true && !sgOk) throw new Error(`subgroups requested but the adapter has none of a fixed size (${adapterInfo.subgroupMinSize}..${adapterInfo.subgroupMaxSize})`);
    const lanes = useSg ? S : (opts.lanes ?? (cpu ? 1 : 32));
    const matmulWg = opts.matmulWg ?? WG_SIZE;
    const ksplit = opts.ksplit ?? 1;
    if (![1, 2, 4].includes(ksplit)) throw new Error(`ksplit ${ksplit} must be 1, 2 or 4`);
    if (ksplit > 1 && !useSg && !opts.emulatedSubgroups) throw new Error('ksplit > 1 needs the subgroup matmul (matmul_sg.wgsl)');
    if (matmulWg % (lanes * ksplit)) throw new Error(`matmul workgroup ${matmulWg} is not a multiple of lanes ${lanes} x ksplit ${ksplit}`);
    // default: the fused engine (3 dispatches per layer, FFN slices of 32) wherever matmul_sg.wgsl runs — measured
    // on an H200 (bench/h200/h200_results.md): 7-10% less GPU time per token than unfused, same verify cost for
    // k <= 3; a model it cannot take (split attention/FFN bindings, small workgroup memory) runs unfused
    const fuseReq = opts.fuse ?? (opts.emulatedSubgroups ? false : 'auto');   // (tests emulate the unfused kernel)
    if (![false, true, 'attn', 'auto'].includes(fuseReq)) throw new Error(`fuse ${JSON.stringify(fuseReq)} must be false, true, 'attn' or 'auto'`);
    const fuseAuto = fuseReq === 'auto';
    let fuse = fuseAuto ? (useSg || !!opts.emulatedSubgroups) && ksplit === 1 : fuseReq;
    if (fuse && !useSg && !opts.emulatedSubgroups) throw new Error('fuse needs the subgroup matmul (matmul_sg.wgsl): a GPU with a fixed subgroup size');
    if (fuse && ksplit > 1) throw new Error('fuse needs ksplit 1');
    // default workgroup sizes within the device's limit (WebGPU guarantees 256 invocations; many GPUs give 1024)
    const maxInv = device.limits.maxComputeInvocationsPerWorkgroup;
    const fitWg = (want) => Math.max(lanes, Math.min(want, Math.floor(maxInv / lanes) * lanes));
    const fuseWg = opts.fuseWg ?? (cpu ? 64 : fitWg(512));
    const fuseSlice = opts.fuseSlice ?? 32;
    const fuseHeadPairs = opts.fuseHeadPairs ?? 4;
    const fuseHeadWg = opts.fuseHeadWg ?? (cpu ? 64 : fitWg(256));
    const fuseMatmulWg = opts.fuseMatmulWg ?? matmulWg;
    for (const [k, v] of [['fuseWg', fuseWg], ['fuseHeadWg', fuseHeadWg], ['fuseMatmulWg', fuseMatmulWg]]) {
      if (fuse && (!Number.isInteger(v) || v < lanes || v % lanes || v > maxInv)) {
        throw new Error(`${k} ${v} must be a multiple of the subgroup size ${lanes} within the device's workgroup limit`);
      }
    }
    if (fuse && (!Number.isInteger(fuseSlice) || fuseSlice < 32 || fuseSlice % 32)) throw new Error(`fuseSlice ${fuseSlice} must be a positive multiple of 32`);
    if (fuse && (!Number.isInteger(fuseHeadPairs) || fuseHeadPairs < 1 || fuseHeadPairs > 64)) throw new Error(`fuseHeadPairs ${fuseHeadPairs} must be in 1..64`);
    const kopts = { lanes, attnWg: opts.attnWg ?? (cpu ? 64 : 256), subgroups: useSg, matmulWg, ksplit };
    try {
      kernels = await createKernels(device, shaderSource, { ...kopts, fuse: !!fuse });
    } catch (e) {
      if (!(fuseAuto && fuse)) throw e;
      // fused only by default: an implementation that rejects the fused kernels still gets the unfused engine
      console.warn(`exactspec engine: fused kernels unavailable (${e.message}); running unfused`);
      fuse = false;
      kernels = await createKernels(device, shaderSource, { ...kopts, fuse: false });
    }
    kernels.fuseOpts = fuse ? { fuse, fuseWg, fuseSlice, fuseHeadWg, fuseHeadPairs, fuseMatmulWg, auto: fuseAuto } : null;
    adapterInfo.kernels = { matmul: (useSg ? `matmul_sg (LANES=${S}` : `matmul (LANES=${kernels.lanes}`) + (ksplit > 1 ? `, KSPLIT=${ksplit})` : ')'),
      attention_wg: opts.attnWg ?? (cpu ? 64 : 256), fuse: kernels.fuseOpts ?? false };
  } catch (e) {
    device.destroy();
    throw e;
  }
  const maxBinding = device.limits.maxStorageBufferBindingSize;
  const weightBinding = Math.min(maxBinding, opts.maxBindingBytes ?? Infinity);
  const models = new Set();
  return {
    adapterInfo,
    device,
    kernels,
    async loadModel(description, readSlice, lopts = {}) {
      const m = await loadModel({ device, kernels, state, lostPromise, maxBinding, weightBinding,
        timestamps: !!opts.timestamps && device.features.has('timestamp-query'), maxRows: opts.maxRows ?? 64,
        tile8: opts.tile8 ?? kernels.lanes > 1, tile1: opts.tile1 ?? kernels.lanes > 1, splits: opts.splits ?? (isCpuAdapter(adapterInfo) ? 1 : 4) },
        description, readSlice, lopts);
      models.add(m);
      return m;
    },
    destroy() {
      for (const m of models) m.destroy();
      device.destroy();
    },
  };
}

/** The matmul pipeline for a dispatch of `rows` chunk rows: weights decoded once per 1, 4 or 8 rows. */
function pickPipeline(op, rows) {
  if (rows > 4 && op.pipeline8) return op.pipeline8;
  if (rows === 1 && op.pipeline1) return op.pipeline1;
  return op.pipeline;
}

/** SwiftShader / llvmpipe / WARP: workgroup barriers are very expensive there, so matmul runs barrier-free. */
export function isCpuAdapter(info) {
  return !!info.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe|warp|software/i.test(
    `${info.vendor} ${info.architecture} ${info.device} ${info.description}`);
}

function checkConfig(cfg) {
  if (!cfg || typeof cfg !== 'object') throw new Error('model description has no config');
  for (const k of CONFIG_KEYS) {
    if (!Number.isInteger(cfg[k]) || cfg[k] <= 0) throw new Error(`model config: ${k} must be a positive integer, got ${cfg[k]}`);
  }
  if (cfg.n_heads % cfg.n_kv_heads) throw new Error('model config: n_heads must be a multiple of n_kv_heads');
  if (cfg.head_dim % 16 || cfg.head_dim > 256) throw new Error(`model config: head_dim ${cfg.head_dim} must be a multiple of 16 and <= 256`);
  const rd = cfg.rope_dim || cfg.head_dim;
  if (rd % 2 || rd > cfg.head_dim) throw new Error(`model config: bad rope_dim ${cfg.rope_dim}`);
  if ((cfg.arch ?? 'llama') !== 'llama') throw new Error(`model config: arch ${cfg.arch} is not supported (llama only)`);
}

async function loadModel(ctx, description, readSlice, lopts) {
  const { device, kernels, state, maxBinding, weightBinding } = ctx;
  const cfg0 = description?.config;
  checkConfig(cfg0);
  const seqLen = lopts.seq_len ?? cfg0.seq_len;
  if (!Number.isInteger(seqLen) || seqLen <= 0 || seqLen > cfg0.seq_len) {
    throw new Error(`seq_len ${seqLen} must be an integer in 1..${cfg0.seq_len}`);
  }
  const cfg = { ...cfg0, seq_len: seqLen };
  const { dim, hidden_dim: hidden, n_layers: nL, n_heads: nH, n_kv_heads: nKV, head_dim: hd, vocab_size: vocab } = cfg;
  const ropeDim = cfg.rope_dim || hd;
  const qDim = nH * hd;
  const kvDim = nKV * hd;
  const eps = cfg.norm_eps ?? 1e-5;
  const theta = cfg.rope_theta ?? 10000;
  const maxRows = Math.max(1, Math.min(ctx.maxRows, seqLen));

  // ---- tensors by GGUF name
  const T = new Map();
  for (const t of description.tensors ?? []) {
    const name = t.name.startsWith('blk.') || ['token_embd.weight', 'output_norm.weight', 'output.weight'].includes(t.name) ? t.name : hfToGguf(t.name);
    if (name) T.set(name, { ...t, hf: name !== t.name });
  }
  const need = (name, rows, cols) => {
    const t = T.get(name);
    if (!t) throw new Error(`model file lacks tensor ${name}`);
    const numel = (t.shape ?? []).reduce((a, b) => a * b, 1);
    if (numel !== rows * cols) throw new Error(`${t.name}: shape ${JSON.stringify(t.shape)} does not match (${rows}, ${cols})`);
    if (!Number.isSafeInteger(t.offset) || !Number.isSafeInteger(t.nbytes) || t.offset < 0 || t.nbytes <= 0) {
      throw new Error(`${t.name}: bad offset/nbytes`);
    }
    return t;
  };
  const buffers = [];
  const mk = (label, size, usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC) => {
    if (size > maxBinding && usage & GPUBufferUsage.STORAGE) throw new Error(`${label}: ${size} bytes exceed the storage binding limit ${maxBinding}; use a smaller seq_len`);
    const b = device.createBuffer({ label, size: Math.max(16, Math.ceil(size / 16) * 16), usage });
    buffers.push(b);
    return b;
  };
  const vec = async (name, n) => {
    const v = await readVector(readSlice, need(name, 1, n), n);
    const b = mk(name, n * 4);
    device.queue.writeBuffer(b, 0, v);
    return b;
  };
  // Q/K row order in the GPU buffer: within each head, adjacent rows (2i, 2i+1) are the reference's (HF
  // rotate-half) RoPE pair (i, i + rope_dim/2) for 2i < rope_dim, then the unrotated dims in order. For GGUF files
  // (llama.cpp-permuted rows) with rope_dim == head_dim this is exactly the stored order (no gather).
  const permFor = (t) => {
    const hfSrc = !!(t.hf || t.qk_permuted === false);
    const f = (b) => {   // buffer row within a head -> stored row within the head
      const j = b < ropeDim ? (b % 2) * (ropeDim / 2) + Math.floor(b / 2) : b;   // HF dim
      return hfSrc ? j : (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
    };
    let identity = true;
    for (let b = 0; b < hd; b++) if (f(b) !== b) identity = false;
    if (identity) return undefined;
    return (i) => Math.floor(i / hd) * hd + f(i % hd);
  };
  const linear = async (srcs, K, label, interleave = false) => {
    const l = await uploadLinear(device, readSlice, srcs, K, { interleave, maxBinding: weightBinding, label });
    for (const p of l.parts) buffers.push(p.buffer);
    return l;
  };

  const embT = need('token_embd.weight', vocab, dim);
  const emb = await linear([{ t: embT, rows: vocab }], dim, 'token_embd');
  const layers = [];
  for (let i = 0; i < nL; i++) {
    const p = `blk.${i}.`;
    const q = need(p + 'attn_q.weight', qDim, dim);
    const k = need(p + 'attn_k.weight', kvDim, dim);
    const v = need(p + 'attn_v.weight', kvDim, dim);
    const qkvSrc = [{ t: q, rows: qDim, perm: permFor(q) }, { t: k, rows: kvDim, perm: permFor(k) }, { t: v, rows: kvDim }];
    let qkv;
    if (q.ggml_type === k.ggml_type && k.ggml_type === v.ggml_type) qkv = [await linear(qkvSrc, dim, p + 'qkv')];
    else {
      qkv = [];
      let row0 = 0;
      for (const s of qkvSrc) {
        const l = await linear([s], dim, s.t.name);
        for (const part of l.parts) part.row0 += row0;
        row0 += s.rows;
        qkv.push(l);
      }
    }
    layers.push({
      attnNorm: await vec(p + 'attn_norm.weight', dim),
      ffnNorm: await vec(p + 'ffn_norm.weight', dim),
      qkv,
      o: await linear([{ t: need(p + 'attn_output.weight', dim, qDim), rows: dim }], qDim, p + 'attn_output'),
      gateUp: await linear([{ t: need(p + 'ffn_gate.weight', hidden, dim), rows: hidden },
        { t: need(p + 'ffn_up.weight', hidden, dim), rows: hidden }], dim, p + 'ffn_gate_up', true),
      down: await linear([{ t: need(p + 'ffn_down.weight', dim, hidden), rows: dim }], hidden, p + 'ffn_down'),
      kv: mk(p + 'kv', 2 * seqLen * kvDim * 4),   // (2, seq_len, kv_dim)
    });
  }
  const outNorm = await vec('output_norm.weight', dim);
  const head = T.has('output.weight') ? await linear([{ t: need('output.weight', vocab, dim), rows: vocab }], dim, 'output') : emb;

  // ---- activations and tables
  const resid = mk('resid', maxRows * dim * 4);          // (max_rows, dim)
  const qbuf = mk('q', maxRows * qDim * 4);              // (max_rows, q_dim)
  const att = mk('attn_out', maxRows * qDim * 4);        // (max_rows, q_dim)
  const hid = mk('hidden', maxRows * hidden * 4);        // (max_rows, hidden_dim)
  const scores = mk('scores', maxRows * nH * seqLen * 4); // (max_rows, n_heads, seq_len)
  const tokBuf = mk('tokens', seqLen * 4);               // (seq_len) token ids of one forward
  const dummyR = mk('dummy_r', 16);
  const dummyW = mk('dummy_w', 16);
  const rope = mk('rope', seqLen * (ropeDim / 2) * 8);   // (seq_len, rope_dim/2) (cos, sin)
  {
    const tab = new Float32Array(seqLen * ropeDim);
    for (let pos = 0; pos < seqLen; pos++) {
      for (let i = 0; i < ropeDim / 2; i++) {
        const a = pos * Math.pow(theta, (-2 * i) / ropeDim);
        tab[(pos * (ropeDim / 2) + i) * 2] = Math.cos(a);
        tab[(pos * (ropeDim / 2) + i) * 2 + 1] = Math.sin(a);
      }
    }
    device.queue.writeBuffer(rope, 0, tab);
  }
  const slot = Math.max(STEP_BYTES, device.limits.minUniformBufferOffsetAlignment);
  const maxChunks = Math.ceil(seqLen / maxRows);
  const stepBuf = mk('step', maxChunks * slot, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
  const stepBinding = { buffer: stepBuf, offset: 0, size: STEP_BYTES };

  const uni = (label, words) => {
    const b = mk(label, words.byteLength, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
    device.queue.writeBuffer(b, 0, words);
    return b;
  };
  // Params of matmul.wgsl: K, N, row0, out_stride, window, q_dim, kv_dim, head_dim, rope_dim, seq_len, n_groups, eps
  const mmParams = (label, K, part, outStride, window) => {
    const a = new Uint32Array(12);
    a.set([K, part.N, part.row0, outStride, window, qDim, kvDim, hd, ropeDim, seqLen, Math.ceil(part.N / 2)]);
    new Float32Array(a.buffer)[11] = eps;
    return uni(label, a);
  };
  const groupsPerWg = kernels.matmulWg / (kernels.lanes * kernels.ksplit);   // row pairs per matmul workgroup
  const mmDims = (part) => {
    const n = Math.ceil(Math.ceil(part.N / 2) / groupsPerWg);
    const x = Math.min(n, 32768);
    return [x, Math.ceil(n / x)];
  };
  const ops = [];   // per chunk, in order: {pipeline, bindGroup, dims: (nc) => [x, y]}
  const addMatmul = async (label, lin, x, gamma, out, kv, mode, outStride) => {
    for (const part of lin.parts) {
      const pipeline = await kernels.matmul(lin.wtype, mode, !!gamma);
      const pipeline8 = ctx.tile8 ? await kernels.matmul(lin.wtype, mode, !!gamma, 8) : pipeline;
      const pipeline1 = ctx.tile1 ? await kernels.matmul(lin.wtype, mode, !!gamma, 1) : pipeline;
      const bindGroup = device.createBindGroup({ layout: kernels.layouts.matmul, entries: [
        { binding: 0, resource: { buffer: mmParams(label, lin.K, part, outStride, 0) } },
        { binding: 1, resource: stepBinding },
        { binding: 2, resource: { buffer: part.buffer } },
        { binding: 3, resource: { buffer: x } },
        { binding: 4, resource: { buffer: gamma ?? dummyR } },
        { binding: 5, resource: { buffer: mode === MODE.qkv ? rope : dummyR } },
        { binding: 6, resource: { buffer: out } },
        { binding: 7, resource: { buffer: kv ?? dummyW } },
      ] });
      const d = mmDims(part);
      ops.push({ label, pipeline, pipeline8, pipeline1, bindGroup, dims: () => d });
    }
  };
  for (const part of emb.parts) {
    const pipeline = await kernels.embed(emb.wtype);
    const bindGroup = device.createBindGroup({ layout: kernels.layouts.embed, entries: [
      { binding: 0, resource: { buffer: uni('embed', new Uint32Array([dim, part.N, part.row0, 0])) } },
      { binding: 1, resource: stepBinding },
      { binding: 2, resource: { buffer: part.buffer } },
      { binding: 3, resource: { buffer: tokBuf } },
      { binding: 4, resource: { buffer: resid } },
    ] });
    ops.push({ label: 'embed', pipeline, bindGroup, dims: (nc) => [nc, 1] });
  }
  const attParams = new Uint32Array(8);
  attParams.set([nH, nKV, hd, seqLen, qDim, kvDim]);
  new Float32Array(attParams.buffer)[6] = 1 / Math.sqrt(hd);
  const attParamBuf = uni('attention', attParams);
  const attPipeline = await kernels.attention();
  const wgMem = device.limits.maxComputeWorkgroupStorageSize;
  let F = kernels.fuseOpts;     // fused engine (opts.fuse): null, or {fuse: 'attn' | true, fuseWg, fuseSlice, fuseHeadPairs}
  if (F) {
    // what the fused kernels need of this model: W_o (and, fuse true, the FFN weights) in one storage binding each,
    // and one row of x (plus an FFN slice) in workgroup memory. Fused by default ('auto'): a model without it runs
    // unfused; fused on request: it is refused, naming why
    const full = F.fuse === true;
    const split = layers.flatMap((L, i) => [['attn_output', L.o], ...(full ? [['ffn_gate_up', L.gateUp], ['ffn_down', L.down]] : [])]
      .map(([what, lin]) => ({ what: `blk.${i}.${what}`, lin }))).find(({ lin }) => lin.parts.length !== 1);
    const why = split
      ? `${split.what} is split over ${split.lin.parts.length} storage bindings (binding limit ${weightBinding} bytes); fused kernels need it in one`
      : (dim + (full ? F.fuseSlice : 0)) * 4 > wgMem ? `one row of dim ${dim} does not fit the device's ${wgMem} bytes of workgroup memory` : null;
    if (why && F.auto) F = null;
    else if (why) throw new Error(`fuse: ${why}`);
  }
  const fused = F ? F.fuse : false;   // what this model runs: false | 'attn' | true
  let headIn = resid;           // the residual buffer the head reads
  let headPro = null;           // fuse true: the head's prologue {parts, npart}
  if (!F) {
    for (let i = 0; i < nL; i++) {
      const L = layers[i];
      for (const lin of L.qkv) await addMatmul(`blk.${i}.qkv`, lin, resid, L.attnNorm, qbuf, L.kv, MODE.qkv, qDim);
      const bindGroup = device.createBindGroup({ layout: kernels.layouts.attention, entries: [
        { binding: 0, resource: { buffer: attParamBuf } },
        { binding: 1, resource: stepBinding },
        { binding: 2, resource: { buffer: qbuf } },
        { binding: 3, resource: { buffer: L.kv } },
        { binding: 4, resource: { buffer: scores } },
        { binding: 5, resource: { buffer: att } },
      ] });
      ops.push({ label: `blk.${i}.attention`, pipeline: attPipeline, bindGroup, dims: (nc) => [nH, nc] });
      await addMatmul(`blk.${i}.attn_output`, L.o, att, null, resid, null, MODE.add, dim);
      await addMatmul(`blk.${i}.ffn_gate_up`, L.gateUp, resid, L.ffnNorm, hid, null, MODE.swiglu, hidden);
      await addMatmul(`blk.${i}.ffn_down`, L.down, hid, null, resid, null, MODE.add, dim);
    }
  } else {
    // Per layer: [qkv (+ prologue: r + the previous layer's FFN partials)], [attention + O slice per head -> P_attn],
    // then fuse 'attn': [gate/up (+ prologue: r + P_attn) + SwiGLU], [down + residual];
    //      fuse true: [ffn_sg: prologue r + P_attn, norm, gate/up slice, SwiGLU, down slice -> P_ffn].
    // The prologues' workgroup 0 writes the summed residual to the other buffer of a ping-pong pair (resid, resid2).
    const full = F.fuse === true;
    const resid2 = mk('resid2', maxRows * dim * 4);                       // (max_rows, dim)
    const pstride = maxRows * dim;                                        // floats per partial
    const dummyW2 = mk('dummy_w2', 16);   // unused r_out (binding 9) beside an unused kv (binding 7): no aliasing
    const pattn = mk('p_attn', nH * pstride * 4);                         // (n_heads, max_rows, dim)
    const nSlices = Math.ceil(hidden / F.fuseSlice);
    const pffn = full ? mk('p_ffn', nSlices * pstride * 4) : null;      // (n_slices, max_rows, dim)
    // fused pipelines stage TILE rows of x (TILE * dim floats) in workgroup memory: tiles that fit (one row does)
    const tiles = (extraPerRow) => {
      const fits = (t) => t * (dim + extraPerRow) * 4 <= wgMem;
      const t4 = fits(4) ? 4 : 1;
      return { t4, t8: ctx.tile8 && fits(8) ? 8 : t4, t1: ctx.tile1 ? 1 : t4 };
    };
    const tp = tiles(0);
    // a matmul whose x is r_in + parts[0] + ... + parts[npart-1] (matmul_sg_pro.wgsl)
    const addMatmulPro = async (label, lin, rIn, parts, npart, gamma, out, kv, mode, outStride, rOut, window = 0,
      pairs = 1, wg = F.fuseMatmulWg, list = ops) => {
      const made = [];
      for (const [j, part] of lin.parts.entries()) {
        const mk3 = (t) => kernels.matmulPro(lin.wtype, mode, !!gamma, t, lin.K, npart, pairs, wg);
        const pipeline = await mk3(tp.t4);
        const pipeline8 = await mk3(tp.t8);
        const pipeline1 = await mk3(tp.t1);
        const a = new Uint32Array(16);
        a.set([lin.K, part.N, part.row0, outStride, window, qDim, kvDim, hd, ropeDim, seqLen, Math.ceil(part.N / 2), 0,
          npart, pstride / 4, rOut && j === 0 ? 1 : 0, 0]);
        new Float32Array(a.buffer)[11] = eps;
        const bindGroup = device.createBindGroup({ layout: kernels.layouts.matmul_pro, entries: [
          { binding: 0, resource: { buffer: uni(label, a) } },
          { binding: 1, resource: stepBinding },
          { binding: 2, resource: { buffer: part.buffer } },
          { binding: 3, resource: { buffer: rIn } },
          { binding: 4, resource: { buffer: gamma ?? dummyR } },
          { binding: 5, resource: { buffer: mode === MODE.qkv ? rope : dummyR } },
          { binding: 6, resource: { buffer: out } },
          { binding: 7, resource: { buffer: kv ?? dummyW } },
          { binding: 8, resource: { buffer: npart ? parts : dummyR } },
          { binding: 9, resource: { buffer: rOut && j === 0 ? rOut : dummyW2 } },
        ] });
        const n = Math.ceil(Math.ceil(part.N / 2) / ((wg / kernels.lanes) * pairs));
        const d = [Math.min(n, 32768), Math.ceil(n / Math.min(n, 32768))];
        made.push({ label, pipeline, pipeline8, pipeline1, bindGroup, dims: () => d });
      }
      list.push(...made);
    };
    const aoParams = new Uint32Array(16);
    aoParams.set([nH, nKV, hd, seqLen, qDim, kvDim, 0, dim, qDim, pstride]);
    new Float32Array(aoParams.buffer)[6] = 1 / Math.sqrt(hd);
    const aoParamBuf = uni('attn_o', aoParams);
    const ffnParams = new Uint32Array(8);
    ffnParams.set([dim, hidden, dim, nH, pstride / 4, 1, 0, 0]);
    new Float32Array(ffnParams.buffer)[6] = eps;
    const ffnParamBuf = uni('ffn', ffnParams);
    const tf = tiles(F.fuseSlice);
    // attn_o.wgsl's unit range of head h (units of 8 columns; whole 32-column blocks for quantised W_o): the most of any head
    const oUnits = (wtype) => {
      let most = 0;
      for (let h = 0; h < nH; h++) {
        const c0 = h * hd;
        const c1 = c0 + hd;
        const q = [2, 3, 8].includes(wtype);
        const u0 = q ? Math.floor(c0 / 32) * 4 : c0 / 8;
        const u1 = q ? Math.ceil(c1 / 32) * 4 : c1 / 8;
        most = Math.max(most, u1 - u0);
      }
      return most;
    };
    let cur = resid;   // buffer holding the residual (before the pending partials)
    for (let i = 0; i < nL; i++) {
      const L = layers[i];
      if (full && i > 0) {
        const rOut = cur === resid ? resid2 : resid;
        for (const [j, lin] of L.qkv.entries()) {
          await addMatmulPro(`blk.${i}.qkv`, lin, cur, pffn, nSlices, L.attnNorm, qbuf, L.kv, MODE.qkv, qDim, j === 0 ? rOut : null);
        }
        cur = rOut;
      } else {
        for (const lin of L.qkv) await addMatmul(`blk.${i}.qkv`, lin, cur, L.attnNorm, qbuf, L.kv, MODE.qkv, qDim);
      }
      const o = L.o.parts[0];
      ops.push({ label: `blk.${i}.attn_o`, pipeline: await kernels.attnO(L.o.wtype, oUnits(L.o.wtype)), dims: (nc) => [nH, nc],
        bindGroup: device.createBindGroup({ layout: kernels.layouts.attn_o, entries: [
          { binding: 0, resource: { buffer: aoParamBuf } },
          { binding: 1, resource: stepBinding },
          { binding: 2, resource: { buffer: qbuf } },
          { binding: 3, resource: { buffer: L.kv } },
          { binding: 4, resource: { buffer: scores } },
          { binding: 5, resource: { buffer: o.buffer } },
          { binding: 6, resource: { buffer: pattn } },
        ] }) });
      const rOut = cur === resid ? resid2 : resid;
      if (full) {
        const gu = L.gateUp.parts[0];
        const dn = L.down.parts[0];
        const mkF = (t) => kernels.ffn(L.gateUp.wtype, L.down.wtype, t, dim, F.fuseSlice, F.fuseWg, nH);
        ops.push({ label: `blk.${i}.ffn`, pipeline: await mkF(tf.t4), pipeline8: await mkF(tf.t8), pipeline1: await mkF(tf.t1),
          // one workgroup row per tile of chunk rows (the tile pickPipeline's choice for that row count uses)
          dims: (nc) => [nSlices, Math.ceil(nc / (nc > 4 ? tf.t8 : nc === 1 ? tf.t1 : tf.t4))],
          bindGroup: device.createBindGroup({ layout: kernels.layouts.ffn, entries: [
            { binding: 0, resource: { buffer: ffnParamBuf } },
            { binding: 1, resource: stepBinding },
            { binding: 2, resource: { buffer: gu.buffer } },
            { binding: 3, resource: { buffer: cur } },
            { binding: 4, resource: { buffer: L.ffnNorm } },
            { binding: 5, resource: { buffer: pattn } },
            { binding: 6, resource: { buffer: rOut } },
            { binding: 7, resource: { buffer: dn.buffer } },
            { binding: 8, resource: { buffer: pffn } },
          ] }) });
      } else {
        await addMatmulPro(`blk.${i}.ffn_gate_up`, L.gateUp, cur, pattn, nH, L.ffnNorm, hid, null, MODE.swiglu, hidden, rOut);
        await addMatmul(`blk.${i}.ffn_down`, L.down, hid, null, rOut, null, MODE.add, dim);
      }
      cur = rOut;
    }
    headIn = cur;
    if (full) headPro = { parts: pffn, npart: nSlices, addMatmulPro };
  }
  // logits ops are rebuilt when the logits buffer grows
  let logitsCap = 0;
  let logitsBuf = null;
  let staging = null;
  let logitOps = [];
  let logitsGen = 0;   // bumps when the logits buffer (and so the commands reading it) changes
  const headPipeline = await kernels.matmul(head.wtype, MODE.store, true);
  const headPipeline8 = ctx.tile8 ? await kernels.matmul(head.wtype, MODE.store, true, 8) : headPipeline;
  const headPipeline1 = ctx.tile1 ? await kernels.matmul(head.wtype, MODE.store, true, 1) : headPipeline;
  const headParams = head.parts.map((part) => mmParams('logits', dim, part, vocab, 1));
  const ensureLogits = async (rows) => {
    if (rows <= logitsCap) return;
    const cap = Math.max(rows, Math.min(maxRows, 16));
    if (cap * vocab * 4 > maxBinding) throw new Error(`n_out ${rows}: logits exceed the binding limit`);
    if (logitsBuf) logitsBuf.destroy();
    if (staging) staging.destroy();
    logitsBuf = device.createBuffer({ label: 'logits', size: cap * vocab * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    staging = device.createBuffer({ label: 'staging', size: cap * vocab * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    if (headPro) {
      // fuse true: the head's prologue adds the last layer's FFN partials (more rows per workgroup: see matmul_sg_pro.wgsl)
      logitOps = [];
      logitsCap = cap;
      logitsGen++;
      return headPro.addMatmulPro('logits', head, headIn, headPro.parts, headPro.npart, outNorm, logitsBuf, null, MODE.store,
        vocab, null, 1, F.fuseHeadPairs, F.fuseHeadWg, logitOps);
    }
    logitOps = head.parts.map((part, j) => ({
      label: 'logits', pipeline: headPipeline, pipeline8: headPipeline8, pipeline1: headPipeline1, dims: (() => { const d = mmDims(part); return () => d; })(),
      bindGroup: device.createBindGroup({ layout: kernels.layouts.matmul, entries: [
        { binding: 0, resource: { buffer: headParams[j] } },
        { binding: 1, resource: stepBinding },
        { binding: 2, resource: { buffer: part.buffer } },
        { binding: 3, resource: { buffer: headIn } },
        { binding: 4, resource: { buffer: outNorm } },
        { binding: 5, resource: { buffer: dummyR } },
        { binding: 6, resource: { buffer: logitsBuf } },
        { binding: 7, resource: { buffer: dummyW } },
      ] }),
    }));
    logitsCap = cap;
    logitsGen++;
  };
  await ensureLogits(1);

  let length = 0;
  let destroyed = false;
  let queue = Promise.resolve();
  const stats = { dispatches: 0, chunks: 0, encode_ms: 0, gpu_ms: null };
  let ts = null;   // timestamp queries around the forward's compute pass (bench only: opts.timestamps)
  if (ctx.timestamps) {
    ts = { set: device.createQuerySet({ type: 'timestamp', count: 2 }),
      buf: device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC }),
      read: device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }) };
  }
  const weightBytes = [emb, ...layers.flatMap((L) => [...L.qkv, L.o, L.gateUp, L.down]), ...(head === emb ? [] : [head])]
    .reduce((a, l) => a + l.bytes, 0);

  let pre = null;   // command buffer pre-encoded for the next forward of the same shape

  /** Encode one forward of n rows (chunked by maxRows) producing the last nOut rows of logits, as ctx.splits
   * command buffers (each one compute pass) that forwardNow submits one by one: the GPU starts on the first while
   * the browser/Dawn still translates the rest (Dawn records its Vulkan/Metal/D3D commands at submit time). */
  function encode(n, nOut) {
    const nChunks = Math.ceil(n / maxRows);
    const firstOut = n - nOut;
    let total = 0;
    for (let c = 0; c < nChunks; c++) {
      const c0 = c * maxRows;
      const nc = Math.min(maxRows, n - c0);
      total += ops.length + (Math.max(0, firstOut - c0) < nc ? logitOps.length : 0);
    }
    // dispatch indices where a new command buffer starts: a small first one (the GPU starts early), then equal parts
    const S = Math.max(1, Math.min(ctx.splits, Math.floor(total / 4)));
    const cuts = new Set();
    if (S > 1) {
      const first = Math.max(1, Math.round(total * 0.06));
      for (let j = 1; j < S; j++) cuts.add(first + Math.round(((total - first) * (j - 1)) / (S - 1)));
    }
    const cbs = [];
    let enc = null;
    let pass = null;
    let last = null;
    const open = () => {
      enc = device.createCommandEncoder();
      pass = enc.beginComputePass(ts && cbs.length === 0 ? { timestampWrites: { querySet: ts.set, beginningOfPassWriteIndex: 0 } } : {});
      last = null;
    };
    const close = (final) => {
      if (final && ts) {
        pass.end();
        // an empty pass carries the end timestamp (after every dispatch of this command buffer)
        enc.beginComputePass({ timestampWrites: { querySet: ts.set, endOfPassWriteIndex: 1 } }).end();
      } else pass.end();
      if (final) {
        enc.copyBufferToBuffer(logitsBuf, 0, staging, 0, nOut * vocab * 4);
        if (ts) {
          enc.resolveQuerySet(ts.set, 0, 2, ts.buf, 0);
          enc.copyBufferToBuffer(ts.buf, 0, ts.read, 0, 16);
        }
      }
      cbs.push(enc.finish());
    };
    let dispatches = 0;
    const offs = [0];
    const run = (op, rows) => {
      if (cuts.has(dispatches)) { close(false); open(); }
      const pipeline = pickPipeline(op, rows);
      if (pipeline !== last) { pass.setPipeline(pipeline); last = pipeline; }
      pass.setBindGroup(0, op.bindGroup, offs);
      const [x, y] = op.dims(rows);
      pass.dispatchWorkgroups(x, y);
      dispatches++;
    };
    open();
    for (let c = 0; c < nChunks; c++) {
      const c0 = c * maxRows;
      const nc = Math.min(maxRows, n - c0);
      const lo = Math.max(0, firstOut - c0);
      offs[0] = c * slot;
      for (const op of ops) run(op, nc);
      if (lo < nc) for (const op of logitOps) run(op, nc - lo);
    }
    close(true);
    return { cbs, dispatches, key: `${n}:${nOut}:${logitsGen}` };
  }

  async function forwardNow(tokens, startPos, nOut) {
    if (destroyed) throw new Error('model destroyed');
    if (state.lost) throw new Error(`device lost: ${state.lost}`);
    const n = tokens.length;
    if (!Number.isInteger(n) || n < 1) throw new Error('forward: tokens must be a non-empty sequence');
    if (startPos !== length) throw new Error(`forward: start_pos ${startPos} must equal length ${length}`);
    if (startPos + n > seqLen) throw new Error(`forward: ${startPos} + ${n} tokens exceed seq_len ${seqLen}`);
    nOut = nOut ?? n;
    if (!Number.isInteger(nOut) || nOut < 1 || nOut > n) throw new Error(`forward: n_out ${nOut} must be in 1..${n}`);
    const tok = new Uint32Array(n);
    for (let i = 0; i < n; i++) {
      const t = tokens[i];
      if (!Number.isInteger(t) || t < 0 || t >= vocab) throw new Error(`forward: token ${t} at ${i} is outside 0..${vocab - 1}`);
      tok[i] = t;
    }
    await ensureLogits(nOut);
    device.queue.writeBuffer(tokBuf, 0, tok);
    const nChunks = Math.ceil(n / maxRows);
    const steps = new Uint32Array((nChunks * slot) / 4);
    const firstOut = n - nOut;
    for (let c = 0; c < nChunks; c++) {
      const c0 = c * maxRows;
      const nc = Math.min(maxRows, n - c0);
      const lo = Math.max(0, firstOut - c0);
      steps.set([nc, startPos + c0, Math.min(lo, nc), c0 + lo - firstOut, c0], (c * slot) / 4);
    }
    const tEnc = performance.now();
    const key = `${n}:${nOut}:${logitsGen}`;
    let cmd;
    if (pre && pre.key === key) cmd = pre;
    else cmd = encode(n, nOut);
    pre = null;
    device.queue.writeBuffer(stepBuf, 0, steps);
    const tSub = performance.now();
    for (const cb of cmd.cbs) device.queue.submit([cb]);
    stats.submit_ms = performance.now() - tSub;
    stats.encode_ms = performance.now() - tEnc;
    stats.dispatches = cmd.dispatches;
    stats.command_buffers = cmd.cbs.length;
    stats.chunks = nChunks;
    stats.pre_encoded = cmd.pre === true;
    // While the GPU runs, encode the command buffer for the next forward of the same shape (the decode loop
    // repeats shapes; positions and tokens travel in buffers written at submit time, not in the commands).
    if (n <= maxRows) {
      pre = encode(n, nOut);
      pre.pre = true;
    }
    const bytes = nOut * vocab * 4;
    try {
      await Promise.race([staging.mapAsync(GPUMapMode.READ, 0, bytes),
        ctx.lostPromise.then((m) => { throw new Error(`device lost: ${m}`); })]);
    } catch (e) {
      // a destroyed/lost device rejects the map before `device.lost` may have settled: give it a moment
      const m = state.lost ?? await Promise.race([ctx.lostPromise, new Promise((r) => setTimeout(() => r(null), 500))]);
      if (m) throw new Error(`device lost: ${m}`);
      throw e;
    }
    stats.wait_ms = performance.now() - tEnc - stats.encode_ms;
    const outArr = new Float32Array(staging.getMappedRange(0, bytes).slice(0));
    staging.unmap();
    if (ts) {
      await ts.read.mapAsync(GPUMapMode.READ);
      const q = new BigUint64Array(ts.read.getMappedRange());
      stats.gpu_ms = Number(q[1] - q[0]) / 1e6;
      ts.read.unmap();
    }
    if (state.error) throw new Error(`gpu error: ${state.error}`);
    length = startPos + n;
    return outArr;
  }

  return {
    config: cfg,
    get length() { return length; },
    stats,
    weightBytes,
    maxRows,
    fused,
    forward(tokens, startPos, nOut) {
      const p = queue.then(() => forwardNow(tokens, startPos, nOut));
      queue = p.catch(() => {});
      return p;
    },
    /** Bench only (needs opts.timestamps): GPU microseconds per kind of dispatch for one forward of n rows at
     * the current length, each dispatch in its own timed pass. The length does not change. */
    async profile(n = 1) {
      if (!ts) throw new Error('profile needs createEngine(gpu, {timestamps: true}) and timestamp-query');
      await queue;
      if (n > maxRows || length + n > seqLen) throw new Error('profile: bad n');
      device.queue.writeBuffer(tokBuf, 0, new Uint32Array(n));
      device.queue.writeBuffer(stepBuf, 0, new Uint32Array([n, length, n - 1, 0, 0, 0, 0, 0]));
      const list = [...ops, ...logitOps];
      const qset = device.createQuerySet({ type: 'timestamp', count: 2 * list.length });
      const qb = device.createBuffer({ size: 16 * list.length, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
      const rb = device.createBuffer({ size: 16 * list.length, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      const enc = device.createCommandEncoder();
      list.forEach((op, i) => {
        const pass = enc.beginComputePass({ timestampWrites: { querySet: qset, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } });
        pass.setPipeline(pickPipeline(op, op.label === 'logits' ? 1 : n));
        pass.setBindGroup(0, op.bindGroup, [0]);
        const [x, y] = op.dims(n);
        pass.dispatchWorkgroups(x, y);
        pass.end();
      });
      enc.resolveQuerySet(qset, 0, 2 * list.length, qb, 0);
      enc.copyBufferToBuffer(qb, 0, rb, 0, 16 * list.length);
      device.queue.submit([enc.finish()]);
      await rb.mapAsync(GPUMapMode.READ);
      const q = new BigUint64Array(rb.getMappedRange().slice(0));
      rb.unmap();
      qset.destroy(); qb.destroy(); rb.destroy();
      const byKind = {};
      list.forEach((op, i) => {
        const kind = op.label.replace(/^blk\.\d+\./, '');
        byKind[kind] = (byKind[kind] ?? 0) + Number(q[2 * i + 1] - q[2 * i]) / 1e3;
      });
      return byKind;
    },
    truncate(n) {
      if (!Number.isInteger(n) || n < 0 || n > length) throw new Error(`truncate: ${n} must be in 0..${length}`);
      length = n;
    },
    destroy() {
      if (destroyed) return;
      destroyed = true;
      for (const b of buffers) b.destroy();
      if (logitsBuf) logitsBuf.destroy();
      if (staging) staging.destroy();
    },
  };
}
