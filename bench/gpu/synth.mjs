// synth.mjs — a SmolLM2-135M-shaped model made in memory for the engine's benches (bench.mjs, ab_engines.mjs): the
// champion's shapes and ggml types (Q4_1 matrices, Q8_0 token_embd, F32 norms of ones) with random quants; speed
// depends on shapes and types only.
import { rowBytes } from '../../app/gpu/weights.js';

/** The description (engine.loadModel) of a SmolLM2-135M-shaped model of nLayers layers. */
export function smolDescription(nLayers = 30) {
  const config = { dim: 576, hidden_dim: 1536, n_layers: nLayers, n_heads: 9, n_kv_heads: 3, head_dim: 64,
    vocab_size: 49152, seq_len: 8192, rope_theta: 100000, rope_dim: 64, norm_eps: 1e-5, tied_embeddings: true, arch: 'llama' };
  const tensors = [];
  let off = 0;
  const add = (name, ggml_type, shape) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const nbytes = ggml_type === 'F32' ? 4 * n : rowBytes(ggml_type, shape[shape.length - 1]).stored * (n / shape[shape.length - 1]);
    tensors.push({ name, ggml_type, shape, offset: off, nbytes, qk_permuted: /attn_[qk]/.test(name) });
    off += nbytes;
  };
  add('token_embd.weight', 'Q8_0', [49152, 576]);
  for (let i = 0; i < nLayers; i++) {
    const p = `blk.${i}.`;
    add(p + 'attn_norm.weight', 'F32', [576]);
    add(p + 'attn_q.weight', 'Q4_1', [576, 576]);
    add(p + 'attn_k.weight', 'Q4_1', [192, 576]);
    add(p + 'attn_v.weight', 'Q4_1', [192, 576]);
    add(p + 'attn_output.weight', 'Q4_1', [576, 576]);
    add(p + 'ffn_norm.weight', 'F32', [576]);
    add(p + 'ffn_gate.weight', 'Q4_1', [1536, 576]);
    add(p + 'ffn_up.weight', 'Q4_1', [1536, 576]);
    add(p + 'ffn_down.weight', 'Q4_1', [576, 1536]);
  }
  add('output_norm.weight', 'F32', [576]);
  return { config, tensors };
}

let seed = 12345;
const rnd = () => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; return seed >>> 0; };
/** nbytes of the model's file from offset (random quants, scales fixed; a stream shared by every call). */
export function synthBytes(desc, offset, nbytes) {
  const b = new Uint8Array(nbytes);
  for (let i = 0; i < nbytes; i += 4) { const r = rnd(); b[i] = r; b[i + 1] = r >> 8; b[i + 2] = r >> 16; b[i + 3] = r >> 24; }
  const t = desc.tensors.find((x) => offset >= x.offset && offset < x.offset + x.nbytes);
  if (t.ggml_type === 'F32') { new Float32Array(b.buffer).fill(1.0); return b.buffer; }
  const bs = t.ggml_type === 'Q8_0' ? 34 : 20;
  for (let p = (bs - ((offset - t.offset) % bs)) % bs; p < nbytes; p += bs) {
    if (t.ggml_type === 'Q8_0') { b[p] = 0x1f; b[p + 1] = 0x21; }       // d = 0.01
    else { b[p] = 0x1f; b[p + 1] = 0x25; b[p + 2] = 0xcd; b[p + 3] = 0xb0; }   // d = 0.02, m = -0.15
  }
  return b.buffer;
}
