// vocab_mask — a draft head's vocabulary subset applied after a FULL LM head (app/gpu/head.js option headVocab
// 'masked', the alternative to head_logits.wgsl's indexed LM head): for the logits rows a chunk produced,
//   out[(step.out_base + j) * vocab + v] = -inf     for every token v outside the subset (bit v of mask clear)
// so a token outside the subset is never proposed (py/exactspec/drafters/head.py).
//
// Work split: grid (ceil(vocab / WG_SIZE), rows): invocation i of workgroup (x, j) takes token x * WG_SIZE + i of
// logits row j. No arithmetic: batch invariant trivially.
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: the chunk's slot)
//   2 mask    array<u32>  (ceil(vocab / 32)) bit v % 32 of word v / 32: token v is in the subset
//   3 out     array<f32>  read_write (rows, vocab) the head's logits
// Includes: lib/step (SRC_LEN=1: the head's Step; bindings 0-1).

override WG_SIZE: u32 = 64;

struct Params {
  vocab: u32,
  neg_inf: u32,     // 0xff800000: the bits of -inf (a WGSL constant cannot hold it)
  _p0: u32, _p1: u32,
};

// #include step SRC_LEN=1
@group(0) @binding(2) var<storage, read> mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let j = wid.y;
  if (j >= step.n - step.out_lo) { return; }
  let v = wid.x * WG_SIZE + lid;
  if (v >= params.vocab) { return; }
  if (((mask[v / 32u] >> (v % 32u)) & 1u) == 0u) {
    out[(step.out_base + j) * params.vocab + v] = bitcast<f32>(params.neg_inf);   // -inf
  }
}
