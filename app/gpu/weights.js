// weights.js — stream a model's tensors from its file(s) (readSlice(offset, nbytes, file) -> ArrayBuffer; `file` is
// the tensor's `file` in the description: undefined for a GGUF, the safetensors shard of a Hugging Face folder) into
// GPU buffers, as stored.
//
// Quantised blocks are kept bit for bit; the only change is word alignment of blocks whose size is not a multiple
// of 4 bytes (Q4_0: 18 -> 20 B, Q8_0: 34 -> 36 B: two zero bytes after the f16 scale). Rows may be reordered
// (GGUF Q/K permutation for un-permuted sources, gate/up interleaving) and a linear is split into parts of whole
// row pairs when it exceeds the device's storage binding limit. Reads go in slices of at most SLICE_BYTES, so no
// whole tensor (let alone a model) is held in JS memory.

import { WTYPE_IDS } from './kernels.js';

const SLICE_BYTES = 8 << 20;
// name -> [elements per block, stored bytes per block, packed bytes per block]
export const TYPE_INFO = {
  F32: [1, 4, 4], F16: [1, 2, 2], BF16: [1, 2, 2], Q4_0: [32, 18, 20], Q4_1: [32, 20, 20], Q8_0: [32, 34, 36],
};

export function typeInfo(name, what) {
  const ti = TYPE_INFO[name];
  if (!ti) throw new Error(`${what}: weight type ${name} is not supported by the WebGPU engine (supported: ${Object.keys(TYPE_INFO).join(', ')})`);
  return ti;
}

export function rowBytes(type, K) {
  const [be, sb, pb] = typeInfo(type, 'row');
  return { stored: (K / be) * sb, packed: (K / be) * pb };
}

/** src (nrows * stored row bytes) -> packed rows. */
export function repackRows(src, type, nrows, K) {
  const [be, sb, pb] = TYPE_INFO[type];
  if (sb === pb) return src;
  const nb = (K / be) * nrows;
  const dst = new Uint8Array(nb * pb);
  const head = type === 'Q8_0' || type === 'Q4_0' ? 2 : 0;
  for (let b = 0; b < nb; b++) {
    const s = b * sb;
    const d = b * pb;
    dst[d] = src[s];
    dst[d + 1] = src[s + 1];
    dst.set(src.subarray(s + head, s + sb), d + 4);
  }
  return dst;
}

function f16ToF32(h) {
  const s = (h & 0x8000) ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** A 1-D tensor (norm weights) as Float32Array. */
export async function readVector(readSlice, t, n) {
  if (t.nbytes > 64 << 20) throw new Error(`${t.name}: vector too large (${t.nbytes} bytes)`);
  const buf = new Uint8Array(await readSlice(t.offset, t.nbytes, t.file));
  if (buf.byteLength !== t.nbytes) throw new Error(`${t.name}: short read (${buf.byteLength} of ${t.nbytes} bytes)`);
  const out = new Float32Array(n);
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  if (t.ggml_type === 'F32') for (let i = 0; i < n; i++) out[i] = dv.getFloat32(4 * i, true);
  else if (t.ggml_type === 'F16') for (let i = 0; i < n; i++) out[i] = f16ToF32(dv.getUint16(2 * i, true));
  else if (t.ggml_type === 'BF16') for (let i = 0; i < n; i++) out[i] = new Float32Array(new Uint32Array([dv.getUint16(2 * i, true) << 16]).buffer)[0];
  else throw new Error(`${t.name}: a norm weight must be F32, F16 or BF16, not ${t.ggml_type}`);
  return out;
}

/** Source row index -> [tensor, row] for a linear built from `srcs` (concatenated, or interleaved pairwise). */
function rowSource(srcs, interleave, i) {
  if (interleave) return [srcs[i % 2], Math.floor(i / 2)];
  for (const s of srcs) {
    if (i < s.rows) return [s, i];
    i -= s.rows;
  }
  throw new Error('row out of range');
}

/**
 * Upload a linear layer. srcs: [{t (tensor info), rows, perm?: (row) -> stored row}], all of one type with K inputs.
 * Returns {type, wtype, K, rows, parts: [{buffer, row0, N}]}.
 */
export async function uploadLinear(device, readSlice, srcs, K, opts) {
  const { interleave = false, maxBinding, label } = opts;
  const type = srcs[0].t.ggml_type;
  for (const s of srcs) {
    if (s.t.ggml_type !== type) throw new Error(`${label}: ${srcs.map((x) => `${x.t.name}=${x.t.ggml_type}`).join(', ')} must share one type`);
  }
  const [be] = typeInfo(type, label);
  if (K % 32 !== 0) throw new Error(`${label}: input features ${K} must be a multiple of 32`);
  const rb = rowBytes(type, K);
  for (const s of srcs) {
    if (s.t.nbytes !== s.rows * rb.stored) throw new Error(`${s.t.name}: ${s.t.nbytes} bytes, expected ${s.rows} rows x ${rb.stored}`);
  }
  if (interleave && srcs[0].rows !== srcs[1].rows) throw new Error(`${label}: interleaved tensors differ in rows`);
  const rows = srcs.reduce((a, s) => a + s.rows, 0);
  let perPart = Math.floor(maxBinding / rb.packed);
  perPart -= perPart % 2;
  if (perPart < 2) throw new Error(`${label}: one row pair (${2 * rb.packed} B) exceeds the binding limit`);
  const parts = [];
  const sliceRows = Math.max(2, Math.floor(SLICE_BYTES / rb.stored));
  for (let a = 0; a < rows; a += perPart) {
    const b = Math.min(rows, a + perPart);
    const buffer = device.createBuffer({ label: `${label}[${a}]`, size: Math.max(16, (b - a) * rb.packed),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    // fill [a, b) in runs of rows that are contiguous in one stored tensor
    let i = a;
    while (i < b) {
      const [s, r] = rowSource(srcs, interleave, i);
      if (interleave || s.perm) {
        // gather: read whole slices of the source tensors, place rows one by one
        const n = Math.min(b - i, interleave ? 2 * sliceRows : sliceRows);
        const dst = new Uint8Array(n * rb.packed);
        const cache = new Map();
        for (let j = 0; j < n; j++) {
          const [sj, rj] = rowSource(srcs, interleave, i + j);
          const sr = sj.perm ? sj.perm(rj) : rj;
          const key = sj.t.name;
          if (!cache.has(key)) cache.set(key, await readRows(readSlice, sj, sj.perm ? 0 : sr, sj.perm ? sj.rows : Math.min(sj.rows - sr, interleave ? Math.ceil(n / 2) : n), rb, type, K));
          const c = cache.get(key);
          const off = (sr - c.first) * rb.packed;
          dst.set(c.data.subarray(off, off + rb.packed), j * rb.packed);
        }
        device.queue.writeBuffer(buffer, (i - a) * rb.packed, dst);
        i += n;
      } else {
        const n = Math.min(b - i, s.rows - r, sliceRows);
        const c = await readRows(readSlice, s, r, n, rb, type, K);
        device.queue.writeBuffer(buffer, (i - a) * rb.packed, c.data);
        i += n;
      }
    }
    parts.push({ buffer, row0: a, N: b - a });
  }
  return { type, wtype: WTYPE_IDS[type], K, rows, parts, bytes: rows * rb.packed };
}

async function readRows(readSlice, s, first, n, rb, type, K) {
  const nbytes = n * rb.stored;
  const ab = await readSlice(s.t.offset + first * rb.stored, nbytes, s.t.file);
  const src = new Uint8Array(ab);
  if (src.byteLength !== nbytes) throw new Error(`${s.t.name}: short read (${src.byteLength} of ${nbytes} bytes)`);
  return { first, data: repackRows(src, type, n, K) };
}

// ---- a llama model's weights, by GGUF tensor name (Python's formats.describe() maps Hugging Face names to these)

/** The description's tensor `name`, checked to hold rows x cols elements at a sane offset. */
export function tensorOf(T, name, rows, cols) {
  const t = T.get(name);
  if (!t) throw new Error(`model file lacks tensor ${name}`);
  const numel = (t.shape ?? []).reduce((a, b) => a * b, 1);
  if (numel !== rows * cols) throw new Error(`${t.name}: shape ${JSON.stringify(t.shape)} does not match (${rows}, ${cols})`);
  if (!Number.isSafeInteger(t.offset) || !Number.isSafeInteger(t.nbytes) || t.offset < 0 || t.nbytes <= 0) {
    throw new Error(`${t.name}: bad offset/nbytes`);
  }
  return t;
}

/** Q/K row order in the GPU buffer: within each head, adjacent rows (2i, 2i+1) are the reference's (HF rotate-half)
 * RoPE pair (i, i + rope_dim/2) for 2i < rope_dim, then the unrotated dims in order. For GGUF files (llama.cpp-permuted
 * rows) with rope_dim == head_dim this is exactly the stored order (no gather): returns undefined then. */
export function qkPermutation(t, hd, ropeDim) {
  const hfOrder = t.qk_permuted === false;
  const f = (b) => {   // buffer row within a head -> stored row within the head
    const j = b < ropeDim ? (b % 2) * (ropeDim / 2) + Math.floor(b / 2) : b;   // HF dim
    return hfOrder ? j : (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
  };
  let identity = true;
  for (let b = 0; b < hd; b++) if (f(b) !== b) identity = false;
  if (identity) return undefined;
  return (i) => Math.floor(i / hd) * hd + f(i % hd);
}

/**
 * Upload every weight of a llama model. cfg: the model config; opts {maxBinding (per weight binding), alloc(label,
 * n floats) -> GPUBuffer for the norm vectors, own(buffer): the model keeps (and destroys) it}.
 * Returns {emb, layers: [{attnNorm, ffnNorm, qkv: [linear] (one, or q/k/v apart when their types differ), o,
 * gateUp (gate/up rows interleaved), down}], outNorm, head (emb when tied), bytes}.
 */
export async function loadWeights(device, description, readSlice, cfg, { maxBinding, alloc, own }) {
  const { dim, hidden_dim: hidden, n_layers: nL, n_heads: nH, n_kv_heads: nKV, head_dim: hd, vocab_size: vocab } = cfg;
  const ropeDim = cfg.rope_dim || hd;
  const T = new Map((description.tensors ?? []).map((t) => [t.name, t]));
  const need = (name, rows, cols) => tensorOf(T, name, rows, cols);
  const vec = async (name) => {
    const b = alloc(name, dim);
    device.queue.writeBuffer(b, 0, await readVector(readSlice, need(name, 1, dim), dim));
    return b;
  };
  const linear = async (srcs, K, label, interleave = false) => {
    const l = await uploadLinear(device, readSlice, srcs, K, { interleave, maxBinding, label });
    for (const p of l.parts) own(p.buffer);
    return l;
  };
  const emb = await linear([{ t: need('token_embd.weight', vocab, dim), rows: vocab }], dim, 'token_embd');
  const layers = [];
  for (let i = 0; i < nL; i++) {
    const p = `blk.${i}.`;
    const [q, k, v] = [['attn_q', nH], ['attn_k', nKV], ['attn_v', nKV]].map(([n, h]) => need(`${p}${n}.weight`, h * hd, dim));
    const qkvSrc = [{ t: q, rows: nH * hd, perm: qkPermutation(q, hd, ropeDim) },
      { t: k, rows: nKV * hd, perm: qkPermutation(k, hd, ropeDim) }, { t: v, rows: nKV * hd }];
    let qkv;
    if (q.ggml_type === k.ggml_type && k.ggml_type === v.ggml_type) qkv = [await linear(qkvSrc, dim, p + 'qkv')];
    else {   // one linear per type, each part placed at its rows of the q|k|v output
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
      attnNorm: await vec(p + 'attn_norm.weight'),
      ffnNorm: await vec(p + 'ffn_norm.weight'),
      qkv,
      o: await linear([{ t: need(p + 'attn_output.weight', dim, nH * hd), rows: dim }], nH * hd, p + 'attn_output'),
      gateUp: await linear([{ t: need(p + 'ffn_gate.weight', hidden, dim), rows: hidden },
        { t: need(p + 'ffn_up.weight', hidden, dim), rows: hidden }], dim, p + 'ffn_gate_up', true),
      down: await linear([{ t: need(p + 'ffn_down.weight', dim, hidden), rows: dim }], hidden, p + 'ffn_down'),
    });
  }
  const outNorm = await vec('output_norm.weight');
  const head = T.has('output.weight') ? await linear([{ t: need('output.weight', vocab, dim), rows: vocab }], dim, 'output') : emb;
  const bytes = [emb, ...layers.flatMap((L) => [...L.qkv, L.o, L.gateUp, L.down]), ...(head === emb ? [] : [head])]
    .reduce((a, l) => a + l.bytes, 0);
  return { emb, layers, outNorm, head, bytes };
}
