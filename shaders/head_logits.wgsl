// head_logits — the draft head's LM head over its vocabulary subset (FR-Spec; py/exactspec/drafters/head.py: E_out
// holds only the subset's rows, every other token's logit is -inf): for each subset index j in this part and each
// chunk row t >= step.out_lo,
//   out[(step.out_base + t - step.out_lo) * vocab + ids[j]] = sum_k E[ids[j], k] * xn[t, k]
// with E the champion's token embedding (its tied LM head) read AS STORED and in place, through the subset's ids (no
// copy of its rows), xn the normalised rows of head_out.wgsl. Only subset columns are written: app/gpu/head.js fills
// the head's logits buffer with -inf once, so a token outside the subset is never proposed.
//
// Weight formats (override WTYPE, ggml ids, as matmul.wgsl): 0 F32, 1 F16, 30 BF16, 3 Q4_1, 2 Q4_0 (20 B padded
// blocks), 8 Q8_0 (36 B padded blocks). The embedding may be split into parts (rows row0 .. row0 + N): one dispatch
// per part, over the subset indices j0 .. j0 + n whose ids fall in it (the ids ascend).
//
// Work split: LANES invocations per subset id, WG_SIZE / LANES ids per workgroup, grid (x, y) flattened. Lane l
// accumulates the 8-value units u = l, l + LANES, ... of the row in ascending order (matmul.wgsl's load_unit/term);
// the LANES partials are summed by a fixed binary tree in workgroup memory (LANES = 1 on CPU adapters: no barrier,
// one invocation per id walks the rows one by one with the weights in its cache).
// BATCH INVARIANCE: a row's sum for an id is the same sequence of operations whatever the chunk or the dispatch.
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: the chunk's slot)
//   2 w       array<u32>        (N rows of this embedding part, layout per WTYPE)   K a multiple of 32
//   3 ids     array<u32>        (n_subset) ascending token ids of the subset
//   4 xn      array<vec4<f32>>  (max_rows, K) normalised chunk rows
//   5 out     array<f32>        read_write (rows, vocab) the head's logits
// Includes: lib/step (SRC_LEN=1: the head's Step; bindings 0-1), lib/quant (struct Unit, the unpacking, load_unit of
// binding w) and lib/term: the matmul family's very decoding and per-unit arithmetic.

override WG_SIZE: u32 = 64;
override WTYPE: u32 = 0;
override LANES: u32 = 1;    // 1, 2, 4, 8, 16 or 32; divides WG_SIZE

struct Params {
  K: u32,        // dim (multiple of 32)
  n: u32,        // subset indices in this part
  j0: u32,       // first subset index of this part
  row0: u32,     // first token id of this embedding part
  vocab: u32,    // floats per logits row
  _p0: u32, _p1: u32, _p2: u32,
};

// #include step SRC_LEN=1
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> ids: array<u32>;
@group(0) @binding(4) var<storage, read> xn: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> red: array<f32, WG_SIZE>;

// #include quant
// #include term

// This lane's partial dot of weight row r with chunk row t: units lane, lane + LANES, ... ascending.
fn lane_dot(r: u32, t: u32, lane: u32) -> f32 {
  let K4 = params.K / 4u;
  var a = 0.0;
  for (var u = lane; u < params.K / 8u; u = u + LANES) {
    let p = load_unit(r, u);
    a = a + term(p, xn[t * K4 + p.i0], xn[t * K4 + p.i1]);
  }
  return a;
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let per_wg = WG_SIZE / LANES;
  let wg = wid.y * nwg.x + wid.x;
  if (wg * per_wg >= params.n) { return; }   // uniform per workgroup
  let jl = wg * per_wg + lid / LANES;        // subset index within this part
  let lane = lid % LANES;
  let have = jl < params.n;
  var id = 0u;
  var r = 0u;
  if (have) {
    id = ids[params.j0 + jl];
    r = id - params.row0;
  }
  for (var t = step.out_lo; t < step.n; t = t + 1u) {
    let orow = step.out_base + (t - step.out_lo);
    if (LANES == 1u) {
      if (have) { out[orow * params.vocab + id] = lane_dot(r, t, 0u); }
    } else {
      var a = 0.0;
      if (have) { a = lane_dot(r, t, lane); }
      red[lid] = a;
      workgroupBarrier();
      for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        if (lane < s) { red[lid] = red[lid] + red[lid + s]; }
        workgroupBarrier();
      }
      if (have && lane == 0u) { out[orow * params.vocab + id] = red[lid]; }
      workgroupBarrier();
    }
  }
}
