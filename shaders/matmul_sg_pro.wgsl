// matmul_sg_pro — matmul_sg.wgsl with a PROLOGUE: the layer input x is not read from one buffer but summed, per
// element, from the residual r_in and npart split-K partial sums (fused engine, `fuse` option of engine.js):
//     x[t, i] = r_in[t, i] + parts[0][t, i] + parts[1][t, i] + ... + parts[npart-1][t, i]   (in that fixed order)
// The partials are what the previous fused kernel left: the FFN slices' down projections (ffn_sg.wgsl) before the
// qkv matmul and the head, or the heads' O-projection slices (attn_o.wgsl) before gate/up (fuse 'attn').
// Workgroup 0 of the dispatch (params.write_r == 1) also writes x to r_out, the OTHER residual buffer (ping-pong:
// no workgroup reads a buffer another one writes in the same dispatch); later kernels read it as the residual.
//
// Work split: as matmul_sg.wgsl (one subgroup per weight-row pair, LANES = subgroup size, lanes over 8-value units,
// tiles of TILE = 1, 4 or 8 chunk rows with each unit decoded once per tile, tiles split over grid z), plus:
//   - per tile, the workgroup first stages the tile's x rows (TILE x K floats) in workgroup memory `xs` (every
//     invocation sums whole vec4s: elements lid, lid + WG_SIZE, ...), a barrier, then the dot loops read xs;
//   - each subgroup takes PAIRS row pairs one after another (pairs wg*G*PAIRS + k*G + g, G = subgroups per
//     workgroup, k = 0..PAIRS-1) so that the staging is shared by more weight rows (the head: 49152 rows).
// Cost of the prologue: each workgroup reads (npart + 1) * K floats per chunk row from L2 (the partials are a few
// tens of KB per row, hot in L2) and adds them. The weights it reads are 2 * PAIRS * G rows * K * (bytes per weight):
// for Q4_1 (0.625 B/weight) and npart = 24 (SmolLM2: 1536 hidden / 64 per FFN workgroup) a workgroup of G = 2
// subgroups and PAIRS = 1 stages 25 * 4 = 100 B per weight column against 2.5 B of weights, so the qkv matmul's
// prologue costs more loads than its dot, but from L2 and in parallel over all workgroups; for the head
// (49152 x 576 Q8_0, 12288 workgroups at G = 2, PAIRS = 1) that ratio would make the prologue dominate, hence
// G = 8 (256 invocations) and PAIRS = 4 there (engine options fuseHeadWg, fuseHeadPairs: 64 weight rows per
// staging, 768 workgroups). The partial loop has a constant trip count (NPART) so its loads are all in flight. The FFN slice size (engine option
// fuseSlice) sets npart: fewer, larger slices cut this prologue but leave fewer FFN workgroups (fewer SMs busy).
// BATCH INVARIANCE: x[t, i] is the same fixed-order sum in every workgroup and every dispatch shape; the dots are
// matmul_sg.wgsl's slot code (reading xs instead of x), so a row's bits do not depend on the chunk's row count.
//
// Bindings: 0 params, 1 step (dynamic offset), 2 w, 3 r_in (max_rows, K) read, 4 gamma, 5 rope, 6 out rw, 7 kv rw,
//           8 parts (npart, max_rows, K) read, 9 r_out (max_rows, K) rw.

enable subgroups;
diagnostic(off, subgroup_uniformity);

override WG_SIZE: u32 = 64;
override WTYPE: u32 = 0;
override MODE: u32 = 0;
override NORM: bool = false;
override TILE: u32 = 4u;   // chunk rows per weight decode: 1 (dot1), 4 (dot4) or 8 (dot8)
override LANES: u32 = 32;  // MUST equal the subgroup size
override KX: u32 = 64u;    // = params.K (sizes the staging array)
override PAIRS: u32 = 1u;  // row pairs per subgroup
override NPART: u32 = 0u;  // partial sums added to r_in (= params.npart)
override STRIDE: u32 = LANES;
const TB: u32 = 8u;

struct Params {
  K: u32,           // in features (multiple of 32)
  N: u32,           // weight rows in this part
  row0: u32,        // global row of this part's first row (even)
  out_stride: u32,  // floats per output row
  window: u32,      // 1: only chunk rows step.out_lo.. written to out rows step.out_base..
  q_dim: u32,
  kv_dim: u32,
  head_dim: u32,
  rope_dim: u32,
  seq_len: u32,
  n_groups: u32,    // number of row pairs in this part: ceil(N / 2)
  eps: f32,
  npart: u32,       // partial sums added to r_in (the kernel uses the override NPART, equal to it)
  pstride: u32,     // vec4s from one partial to the next (max_rows * K / 4)
  write_r: u32,     // 1: workgroup 0 writes x to r_out
  _p0: u32,
};

struct Step {
  n: u32,          // rows in this chunk
  start_pos: u32,  // absolute position of chunk row 0
  out_lo: u32,     // first chunk row that produces logits
  out_base: u32,   // logits row of chunk row out_lo
  tok0: u32,       // index of chunk row 0 in the forward's token list
  _p0: u32, _p1: u32, _p2: u32,
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> r_in: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> gamma: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> rope: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> kv: array<f32>;
@group(0) @binding(8) var<storage, read> parts: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> r_out: array<vec4<f32>>;

var<workgroup> xs: array<vec4<f32>, TILE * KX / 4u>;   // (TILE, K) this tile's x rows (slot s = chunk row t + s)


struct Unit {
  w0: vec4<f32>,   // weights (or raw quants) for x vec4 i0
  w1: vec4<f32>,   // for x vec4 i1
  i0: u32,         // vec4 index within an x row
  i1: u32,
  scale: f32,      // value = scale * q + bias (quantised types)
  bias: f32,
};

fn nib_lo(q: u32) -> vec4<f32> {
  return vec4<f32>(f32(q & 15u), f32((q >> 8u) & 15u), f32((q >> 16u) & 15u), f32((q >> 24u) & 15u));
}
fn nib_hi(q: u32) -> vec4<f32> {
  return vec4<f32>(f32((q >> 4u) & 15u), f32((q >> 12u) & 15u), f32((q >> 20u) & 15u), f32(q >> 28u));
}
fn i8x4(q: u32) -> vec4<f32> {
  let v = vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u), bitcast<i32>(q << 8u), bitcast<i32>(q)) >> vec4<u32>(24u);
  return vec4<f32>(v);
}
fn bf2(q: u32) -> vec2<f32> {
  return vec2<f32>(bitcast<f32>(q << 16u), bitcast<f32>(q & 0xffff0000u));
}

// Unit u (8 consecutive-in-storage values) of weight row r.
fn load_unit(r: u32, u: u32) -> Unit {
  var o: Unit;
  let K = params.K;
  o.scale = 1.0;
  o.bias = 0.0;
  if (WTYPE == 0u) {          // F32: 8 floats
    let b = r * K + 8u * u;
    o.w0 = vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u]));
    o.w1 = vec4<f32>(bitcast<f32>(w[b + 4u]), bitcast<f32>(w[b + 5u]), bitcast<f32>(w[b + 6u]), bitcast<f32>(w[b + 7u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 1u) {   // F16: 4 words of 2 halves
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + 1u]));
    o.w1 = vec4<f32>(unpack2x16float(w[b + 2u]), unpack2x16float(w[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 30u) {  // BF16
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(bf2(w[b]), bf2(w[b + 1u]));
    o.w1 = vec4<f32>(bf2(w[b + 2u]), bf2(w[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 8u) {   // Q8_0 padded: 9 words per block, unit = 2 words = elements 8*sub .. 8*sub+7
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 9u;
    o.scale = unpack2x16float(w[b]).x;
    o.w0 = i8x4(w[b + 1u + 2u * sub]);
    o.w1 = i8x4(w[b + 2u + 2u * sub]);
    o.i0 = blk * 8u + 2u * sub;
    o.i1 = blk * 8u + 2u * sub + 1u;
  } else {                    // Q4_0 padded / Q4_1: 5 words per block, unit = 1 word of qs
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 5u;
    let dm = unpack2x16float(w[b]);
    let q = w[b + 1u + sub];
    o.w0 = nib_lo(q);           // elements 4*sub .. 4*sub+3
    o.w1 = nib_hi(q);           // elements 16+4*sub ..
    o.i0 = blk * 8u + sub;
    o.i1 = blk * 8u + 4u + sub;
    o.scale = dm.x;
    if (WTYPE == 3u) { o.bias = dm.y; } else { o.bias = -8.0 * dm.x; }
  }
  return o;
}

fn epilogue(t: u32, y0: f32, y1: f32, r: u32, have1: bool) {
  if (MODE == 0u) {
    var orow = t;
    if (params.window == 1u) { orow = step.out_base + (t - step.out_lo); }
    out[orow * params.out_stride + r] = y0;
    if (have1) { out[orow * params.out_stride + r + 1u] = y1; }
  } else if (MODE == 1u) {
    let o = t * params.out_stride + r;
    out[o] = out[o] + y0;
    if (have1) { out[o + 1u] = out[o + 1u] + y1; }
  } else if (MODE == 2u) {
    let gate = y0;
    out[t * params.out_stride + r / 2u] = gate / (1.0 + exp(-gate)) * y1;
  } else {
    let pos = step.start_pos + t;
    var v0 = y0;
    var v1 = y1;
    let qk = params.q_dim + params.kv_dim;
    if (r < qk) {
      var dd = r % params.head_dim;
      if (r >= params.q_dim) { dd = (r - params.q_dim) % params.head_dim; }
      if (dd < params.rope_dim) {
        let cs = rope[pos * (params.rope_dim / 2u) + dd / 2u];
        v0 = y0 * cs.x - y1 * cs.y;
        v1 = y0 * cs.y + y1 * cs.x;
      }
    }
    if (r < params.q_dim) {
      out[t * params.q_dim + r] = v0;
      out[t * params.q_dim + r + 1u] = v1;
    } else if (r < qk) {
      let o = pos * params.kv_dim + (r - params.q_dim);
      kv[o] = v0;
      kv[o + 1u] = v1;
    } else {
      let o = params.seq_len * params.kv_dim + pos * params.kv_dim + (r - qk);
      kv[o] = v0;
      kv[o + 1u] = v1;
    }
  }
}

// One unit's contribution to a row's dot product (the same expression on every path and in every slot).
fn term(p: Unit, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
  if (WTYPE == 0u || WTYPE == 1u || WTYPE == 30u) {
    return dot(p.w0, x0) + dot(p.w1, x1);
  } else if (WTYPE == 8u) {
    return p.scale * (dot(p.w0, x0) + dot(p.w1, x1));
  }
  let sx = dot(x0 + x1, vec4<f32>(1.0));
  return p.scale * (dot(p.w0, x0) + dot(p.w1, x1)) + p.bias * sx;
}

struct Oct {
  y0: vec4<f32>,   // row r0 against chunk rows t .. t+3 (slots 0..3)
  y0b: vec4<f32>,  // row r0 against chunk rows t+4 .. t+7 (slots 4..7)
  y1: vec4<f32>,   // row r0 + 1, slots 0..3
  y1b: vec4<f32>,  // row r0 + 1, slots 4..7
  ss: vec4<f32>,   // NORM: sum of x^2 over this lane's units, slots 0..3 (the RMSNorm statistic, same pass)
  ssb: vec4<f32>,  // slots 4..7
};

// x * gamma (the RMSNorm weight) when NORM; the row's scale rsqrt(mean(x^2) + eps) is applied to the finished sum.
fn gx(v: vec4<f32>, i: u32) -> vec4<f32> {
  if (NORM) { return v * gamma[i]; }
  return v;
}

// GPU paths: the pair's partial dot products with S = 1, 4 or 8 chunk rows t .. t+S-1 at once (dot1, dot4, dot8:
// each weight unit read and decoded once for the S rows), and with NORM each row's partial sum of squares from the
// same x loads. Lane l takes the 8-value units u = l, l + LANES, ... (K/8 units per row; consecutive lanes read
// consecutive weight words and x vec4s, so loads coalesce); every slot adds its terms in ascending u, R units per
// loop trip with all loads first (R only changes how many loads are in flight, never the order of the adds). Slots
// past the last row (n < S) repeat the last row and are discarded. EVERY SLOT OF EVERY VARIANT RUNS THE SAME CODE
// (loads, gx, term, one add per unit in ascending u), so a row's bits do not depend on its slot, on S, or on how
// many rows the dispatch has.

fn dot1(r0: u32, have1: bool, t: u32, n: u32, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  var s = vec4<f32>(0.0);
  var sb = vec4<f32>(0.0);
  let K4 = params.K / 4u;
  let U = params.K / 8u;
  var u = lane;
  for (; u + 3u * STRIDE < U; u = u + 4u * STRIDE) {   // 4 units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, u + 1u * STRIDE);
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, u + 1u * STRIDE); }
    let p2 = load_unit(r0, u + 2u * STRIDE);
    var q2 = p2;
    if (have1) { q2 = load_unit(r0 + 1u, u + 2u * STRIDE); }
    let p3 = load_unit(r0, u + 3u * STRIDE);
    var q3 = p3;
    if (have1) { q3 = load_unit(r0 + 1u, u + 3u * STRIDE); }
    let v000 = xs[t * K4 + p0.i0];
    let v001 = xs[t * K4 + p0.i1];
    let g000 = gx(v000, p0.i0);
    let g001 = gx(v001, p0.i1);
    a.x = a.x + term(p0, g000, g001);
    b.x = b.x + term(q0, g000, g001);
    if (NORM) { s.x = s.x + (dot(v000, v000) + dot(v001, v001)); }
    let v100 = xs[t * K4 + p1.i0];
    let v101 = xs[t * K4 + p1.i1];
    let g100 = gx(v100, p1.i0);
    let g101 = gx(v101, p1.i1);
    a.x = a.x + term(p1, g100, g101);
    b.x = b.x + term(q1, g100, g101);
    if (NORM) { s.x = s.x + (dot(v100, v100) + dot(v101, v101)); }
    let v200 = xs[t * K4 + p2.i0];
    let v201 = xs[t * K4 + p2.i1];
    let g200 = gx(v200, p2.i0);
    let g201 = gx(v201, p2.i1);
    a.x = a.x + term(p2, g200, g201);
    b.x = b.x + term(q2, g200, g201);
    if (NORM) { s.x = s.x + (dot(v200, v200) + dot(v201, v201)); }
    let v300 = xs[t * K4 + p3.i0];
    let v301 = xs[t * K4 + p3.i1];
    let g300 = gx(v300, p3.i0);
    let g301 = gx(v301, p3.i1);
    a.x = a.x + term(p3, g300, g301);
    b.x = b.x + term(q3, g300, g301);
    if (NORM) { s.x = s.x + (dot(v300, v300) + dot(v301, v301)); }
  }
  if (u < U) {   // the last 1..3 units: loads (clamped in range) first, then the adds of the units that exist
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, min(u + 1u * STRIDE, U - 1u));
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, min(u + 1u * STRIDE, U - 1u)); }
    let p2 = load_unit(r0, min(u + 2u * STRIDE, U - 1u));
    var q2 = p2;
    if (have1) { q2 = load_unit(r0 + 1u, min(u + 2u * STRIDE, U - 1u)); }
    let v000 = xs[t * K4 + p0.i0];
    let v001 = xs[t * K4 + p0.i1];
    let g000 = gx(v000, p0.i0);
    let g001 = gx(v001, p0.i1);
    a.x = a.x + term(p0, g000, g001);
    b.x = b.x + term(q0, g000, g001);
    if (NORM) { s.x = s.x + (dot(v000, v000) + dot(v001, v001)); }
    if (u + 1u * STRIDE < U) {
      let v100 = xs[t * K4 + p1.i0];
      let v101 = xs[t * K4 + p1.i1];
      let g100 = gx(v100, p1.i0);
      let g101 = gx(v101, p1.i1);
      a.x = a.x + term(p1, g100, g101);
      b.x = b.x + term(q1, g100, g101);
      if (NORM) { s.x = s.x + (dot(v100, v100) + dot(v101, v101)); }
    }
    if (u + 2u * STRIDE < U) {
      let v200 = xs[t * K4 + p2.i0];
      let v201 = xs[t * K4 + p2.i1];
      let g200 = gx(v200, p2.i0);
      let g201 = gx(v201, p2.i1);
      a.x = a.x + term(p2, g200, g201);
      b.x = b.x + term(q2, g200, g201);
      if (NORM) { s.x = s.x + (dot(v200, v200) + dot(v201, v201)); }
    }
  }
  return Oct(a, ab, b, bb, s, sb);
}

fn dot4(r0: u32, have1: bool, t: u32, n: u32, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  var s = vec4<f32>(0.0);
  var sb = vec4<f32>(0.0);
  let t1 = t + min(1u, n - 1u);
  let t2 = t + min(2u, n - 1u);
  let t3 = t + min(3u, n - 1u);
  let K4 = params.K / 4u;
  let U = params.K / 8u;
  var u = lane;
  for (; u + 1u * STRIDE < U; u = u + 2u * STRIDE) {   // 2 units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, u + 1u * STRIDE);
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, u + 1u * STRIDE); }
    let v000 = xs[t * K4 + p0.i0];
    let v001 = xs[t * K4 + p0.i1];
    let g000 = gx(v000, p0.i0);
    let g001 = gx(v001, p0.i1);
    a.x = a.x + term(p0, g000, g001);
    b.x = b.x + term(q0, g000, g001);
    if (NORM) { s.x = s.x + (dot(v000, v000) + dot(v001, v001)); }
    let v010 = xs[t1 * K4 + p0.i0];
    let v011 = xs[t1 * K4 + p0.i1];
    let g010 = gx(v010, p0.i0);
    let g011 = gx(v011, p0.i1);
    a.y = a.y + term(p0, g010, g011);
    b.y = b.y + term(q0, g010, g011);
    if (NORM) { s.y = s.y + (dot(v010, v010) + dot(v011, v011)); }
    let v020 = xs[t2 * K4 + p0.i0];
    let v021 = xs[t2 * K4 + p0.i1];
    let g020 = gx(v020, p0.i0);
    let g021 = gx(v021, p0.i1);
    a.z = a.z + term(p0, g020, g021);
    b.z = b.z + term(q0, g020, g021);
    if (NORM) { s.z = s.z + (dot(v020, v020) + dot(v021, v021)); }
    let v030 = xs[t3 * K4 + p0.i0];
    let v031 = xs[t3 * K4 + p0.i1];
    let g030 = gx(v030, p0.i0);
    let g031 = gx(v031, p0.i1);
    a.w = a.w + term(p0, g030, g031);
    b.w = b.w + term(q0, g030, g031);
    if (NORM) { s.w = s.w + (dot(v030, v030) + dot(v031, v031)); }
    let v100 = xs[t * K4 + p1.i0];
    let v101 = xs[t * K4 + p1.i1];
    let g100 = gx(v100, p1.i0);
    let g101 = gx(v101, p1.i1);
    a.x = a.x + term(p1, g100, g101);
    b.x = b.x + term(q1, g100, g101);
    if (NORM) { s.x = s.x + (dot(v100, v100) + dot(v101, v101)); }
    let v110 = xs[t1 * K4 + p1.i0];
    let v111 = xs[t1 * K4 + p1.i1];
    let g110 = gx(v110, p1.i0);
    let g111 = gx(v111, p1.i1);
    a.y = a.y + term(p1, g110, g111);
    b.y = b.y + term(q1, g110, g111);
    if (NORM) { s.y = s.y + (dot(v110, v110) + dot(v111, v111)); }
    let v120 = xs[t2 * K4 + p1.i0];
    let v121 = xs[t2 * K4 + p1.i1];
    let g120 = gx(v120, p1.i0);
    let g121 = gx(v121, p1.i1);
    a.z = a.z + term(p1, g120, g121);
    b.z = b.z + term(q1, g120, g121);
    if (NORM) { s.z = s.z + (dot(v120, v120) + dot(v121, v121)); }
    let v130 = xs[t3 * K4 + p1.i0];
    let v131 = xs[t3 * K4 + p1.i1];
    let g130 = gx(v130, p1.i0);
    let g131 = gx(v131, p1.i1);
    a.w = a.w + term(p1, g130, g131);
    b.w = b.w + term(q1, g130, g131);
    if (NORM) { s.w = s.w + (dot(v130, v130) + dot(v131, v131)); }
  }
  if (u < U) {   // the last unit
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let v000 = xs[t * K4 + p0.i0];
    let v001 = xs[t * K4 + p0.i1];
    let g000 = gx(v000, p0.i0);
    let g001 = gx(v001, p0.i1);
    a.x = a.x + term(p0, g000, g001);
    b.x = b.x + term(q0, g000, g001);
    if (NORM) { s.x = s.x + (dot(v000, v000) + dot(v001, v001)); }
    let v010 = xs[t1 * K4 + p0.i0];
    let v011 = xs[t1 * K4 + p0.i1];
    let g010 = gx(v010, p0.i0);
    let g011 = gx(v011, p0.i1);
    a.y = a.y + term(p0, g010, g011);
    b.y = b.y + term(q0, g010, g011);
    if (NORM) { s.y = s.y + (dot(v010, v010) + dot(v011, v011)); }
    let v020 = xs[t2 * K4 + p0.i0];
    let v021 = xs[t2 * K4 + p0.i1];
    let g020 = gx(v020, p0.i0);
    let g021 = gx(v021, p0.i1);
    a.z = a.z + term(p0, g020, g021);
    b.z = b.z + term(q0, g020, g021);
    if (NORM) { s.z = s.z + (dot(v020, v020) + dot(v021, v021)); }
    let v030 = xs[t3 * K4 + p0.i0];
    let v031 = xs[t3 * K4 + p0.i1];
    let g030 = gx(v030, p0.i0);
    let g031 = gx(v031, p0.i1);
    a.w = a.w + term(p0, g030, g031);
    b.w = b.w + term(q0, g030, g031);
    if (NORM) { s.w = s.w + (dot(v030, v030) + dot(v031, v031)); }
  }
  return Oct(a, ab, b, bb, s, sb);
}

fn dot8(r0: u32, have1: bool, t: u32, n: u32, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  var s = vec4<f32>(0.0);
  var sb = vec4<f32>(0.0);
  let t1 = t + min(1u, n - 1u);
  let t2 = t + min(2u, n - 1u);
  let t3 = t + min(3u, n - 1u);
  let t4 = t + min(4u, n - 1u);
  let t5 = t + min(5u, n - 1u);
  let t6 = t + min(6u, n - 1u);
  let t7 = t + min(7u, n - 1u);
  let K4 = params.K / 4u;
  let U = params.K / 8u;
  var u = lane;
  for (; u + 1u * STRIDE < U; u = u + 2u * STRIDE) {   // 2 units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, u + 1u * STRIDE);
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, u + 1u * STRIDE); }
    let v000 = xs[t * K4 + p0.i0];
    let v001 = xs[t * K4 + p0.i1];
    let g000 = gx(v000, p0.i0);
    let g001 = gx(v001, p0.i1);
    a.x = a.x + term(p0, g000, g001);
    b.x = b.x + term(q0, g000, g001);
    if (NORM) { s.x = s.x + (dot(v000, v000) + dot(v001, v001)); }
    let v010 = xs[t1 * K4 + p0.i0];
    let v011 = xs[t1 * K4 + p0.i1];
    let g010 = gx(v010, p0.i0);
    let g011 = gx(v011, p0.i1);
    a.y = a.y + term(p0, g010, g011);
    b.y = b.y + term(q0, g010, g011);
    if (NORM) { s.y = s.y + (dot(v010, v010) + dot(v011, v011)); }
    let v020 = xs[t2 * K4 + p0.i0];
    let v021 = xs[t2 * K4 + p0.i1];
    let g020 = gx(v020, p0.i0);
    let g021 = gx(v021, p0.i1);
    a.z = a.z + term(p0, g020, g021);
    b.z = b.z + term(q0, g020, g021);
    if (NORM) { s.z = s.z + (dot(v020, v020) + dot(v021, v021)); }
    let v030 = xs[t3 * K4 + p0.i0];
    let v031 = xs[t3 * K4 + p0.i1];
    let g030 = gx(v030, p0.i0);
    let g031 = gx(v031, p0.i1);
    a.w = a.w + term(p0, g030, g031);
    b.w = b.w + term(q0, g030, g031);
    if (NORM) { s.w = s.w + (dot(v030, v030) + dot(v031, v031)); }
    let v040 = xs[t4 * K4 + p0.i0];
    let v041 = xs[t4 * K4 + p0.i1];
    let g040 = gx(v040, p0.i0);
    let g041 = gx(v041, p0.i1);
    ab.x = ab.x + term(p0, g040, g041);
    bb.x = bb.x + term(q0, g040, g041);
    if (NORM) { sb.x = sb.x + (dot(v040, v040) + dot(v041, v041)); }
    let v050 = xs[t5 * K4 + p0.i0];
    let v051 = xs[t5 * K4 + p0.i1];
    let g050 = gx(v050, p0.i0);
    let g051 = gx(v051, p0.i1);
    ab.y = ab.y + term(p0, g050, g051);
    bb.y = bb.y + term(q0, g050, g051);
    if (NORM) { sb.y = sb.y + (dot(v050, v050) + dot(v051, v051)); }
    let v060 = xs[t6 * K4 + p0.i0];
    let v061 = xs[t6 * K4 + p0.i1];
    let g060 = gx(v060, p0.i0);
    let g061 = gx(v061, p0.i1);
    ab.z = ab.z + term(p0, g060, g061);
    bb.z = bb.z + term(q0, g060, g061);
    if (NORM) { sb.z = sb.z + (dot(v060, v060) + dot(v061, v061)); }
    let v070 = xs[t7 * K4 + p0.i0];
    let v071 = xs[t7 * K4 + p0.i1];
    let g070 = gx(v070, p0.i0);
    let g071 = gx(v071, p0.i1);
    ab.w = ab.w + term(p0, g070, g071);
    bb.w = bb.w + term(q0, g070, g071);
    if (NORM) { sb.w = sb.w + (dot(v070, v070) + dot(v071, v071)); }
    let v100 = xs[t * K4 + p1.i0];
    let v101 = xs[t * K4 + p1.i1];
    let g100 = gx(v100, p1.i0);
    let g101 = gx(v101, p1.i1);
    a.x = a.x + term(p1, g100, g101);
    b.x = b.x + term(q1, g100, g101);
    if (NORM) { s.x = s.x + (dot(v100, v100) + dot(v101, v101)); }
    let v110 = xs[t1 * K4 + p1.i0];
    let v111 = xs[t1 * K4 + p1.i1];
    let g110 = gx(v110, p1.i0);
    let g111 = gx(v111, p1.i1);
    a.y = a.y + term(p1, g110, g111);
    b.y = b.y + term(q1, g110, g111);
    if (NORM) { s.y = s.y + (dot(v110, v110) + dot(v111, v111)); }
    let v120 = xs[t2 * K4 + p1.i0];
    let v121 = xs[t2 * K4 + p1.i1];
    let g120 = gx(v120, p1.i0);
    let g121 = gx(v121, p1.i1);
    a.z = a.z + term(p1, g120, g121);
    b.z = b.z + term(q1, g120, g121);
    if (NORM) { s.z = s.z + (dot(v120, v120) + dot(v121, v121)); }
    let v130 = xs[t3 * K4 + p1.i0];
    let v131 = xs[t3 * K4 + p1.i1];
    let g130 = gx(v130, p1.i0);
    let g131 = gx(v131, p1.i1);
    a.w = a.w + term(p1, g130, g131);
    b.w = b.w + term(q1, g130, g131);
    if (NORM) { s.w = s.w + (dot(v130, v130) + dot(v131, v131)); }
    let v140 = xs[t4 * K4 + p1.i0];
    let v141 = xs[t4 * K4 + p1.i1];
    let g140 = gx(v140, p1.i0);
    let g141 = gx(v141, p1.i1);
    ab.x = ab.x + term(p1, g140, g141);
    bb.x = bb.x + term(q1, g140, g141);
    if (NORM) { sb.x = sb.x + (dot(v140, v140) + dot(v141, v141)); }
    let v150 = xs[t5 * K4 + p1.i0];
    let v151 = xs[t5 * K4 + p1.i1];
    let g150 = gx(v150, p1.i0);
    let g151 = gx(v151, p1.i1);
    ab.y = ab.y + term(p1, g150, g151);
    bb.y = bb.y + term(q1, g150, g151);
    if (NORM) { sb.y = sb.y + (dot(v150, v150) + dot(v151, v151)); }
    let v160 = xs[t6 * K4 + p1.i0];
    let v161 = xs[t6 * K4 + p1.i1];
    let g160 = gx(v160, p1.i0);
    let g161 = gx(v161, p1.i1);
    ab.z = ab.z + term(p1, g160, g161);
    bb.z = bb.z + term(q1, g160, g161);
    if (NORM) { sb.z = sb.z + (dot(v160, v160) + dot(v161, v161)); }
    let v170 = xs[t7 * K4 + p1.i0];
    let v171 = xs[t7 * K4 + p1.i1];
    let g170 = gx(v170, p1.i0);
    let g171 = gx(v171, p1.i1);
    ab.w = ab.w + term(p1, g170, g171);
    bb.w = bb.w + term(q1, g170, g171);
    if (NORM) { sb.w = sb.w + (dot(v170, v170) + dot(v171, v171)); }
  }
  if (u < U) {   // the last unit
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let v000 = xs[t * K4 + p0.i0];
    let v001 = xs[t * K4 + p0.i1];
    let g000 = gx(v000, p0.i0);
    let g001 = gx(v001, p0.i1);
    a.x = a.x + term(p0, g000, g001);
    b.x = b.x + term(q0, g000, g001);
    if (NORM) { s.x = s.x + (dot(v000, v000) + dot(v001, v001)); }
    let v010 = xs[t1 * K4 + p0.i0];
    let v011 = xs[t1 * K4 + p0.i1];
    let g010 = gx(v010, p0.i0);
    let g011 = gx(v011, p0.i1);
    a.y = a.y + term(p0, g010, g011);
    b.y = b.y + term(q0, g010, g011);
    if (NORM) { s.y = s.y + (dot(v010, v010) + dot(v011, v011)); }
    let v020 = xs[t2 * K4 + p0.i0];
    let v021 = xs[t2 * K4 + p0.i1];
    let g020 = gx(v020, p0.i0);
    let g021 = gx(v021, p0.i1);
    a.z = a.z + term(p0, g020, g021);
    b.z = b.z + term(q0, g020, g021);
    if (NORM) { s.z = s.z + (dot(v020, v020) + dot(v021, v021)); }
    let v030 = xs[t3 * K4 + p0.i0];
    let v031 = xs[t3 * K4 + p0.i1];
    let g030 = gx(v030, p0.i0);
    let g031 = gx(v031, p0.i1);
    a.w = a.w + term(p0, g030, g031);
    b.w = b.w + term(q0, g030, g031);
    if (NORM) { s.w = s.w + (dot(v030, v030) + dot(v031, v031)); }
    let v040 = xs[t4 * K4 + p0.i0];
    let v041 = xs[t4 * K4 + p0.i1];
    let g040 = gx(v040, p0.i0);
    let g041 = gx(v041, p0.i1);
    ab.x = ab.x + term(p0, g040, g041);
    bb.x = bb.x + term(q0, g040, g041);
    if (NORM) { sb.x = sb.x + (dot(v040, v040) + dot(v041, v041)); }
    let v050 = xs[t5 * K4 + p0.i0];
    let v051 = xs[t5 * K4 + p0.i1];
    let g050 = gx(v050, p0.i0);
    let g051 = gx(v051, p0.i1);
    ab.y = ab.y + term(p0, g050, g051);
    bb.y = bb.y + term(q0, g050, g051);
    if (NORM) { sb.y = sb.y + (dot(v050, v050) + dot(v051, v051)); }
    let v060 = xs[t6 * K4 + p0.i0];
    let v061 = xs[t6 * K4 + p0.i1];
    let g060 = gx(v060, p0.i0);
    let g061 = gx(v061, p0.i1);
    ab.z = ab.z + term(p0, g060, g061);
    bb.z = bb.z + term(q0, g060, g061);
    if (NORM) { sb.z = sb.z + (dot(v060, v060) + dot(v061, v061)); }
    let v070 = xs[t7 * K4 + p0.i0];
    let v071 = xs[t7 * K4 + p0.i1];
    let g070 = gx(v070, p0.i0);
    let g071 = gx(v071, p0.i1);
    ab.w = ab.w + term(p0, g070, g071);
    bb.w = bb.w + term(q0, g070, g071);
    if (NORM) { sb.w = sb.w + (dot(v070, v070) + dot(v071, v071)); }
  }
  return Oct(a, ab, b, bb, s, sb);
}


fn pick(v: vec4<f32>, vb: vec4<f32>, i: u32) -> f32 {   // slot i of an oct (0..3 in v, 4..7 in vb)
  if (i < 4u) { return v[i]; }
  return vb[i - 4u];
}

// Stage chunk rows t .. t+n4-1 of x = r_in + parts[0] + ... (fixed order) in xs; workgroup 0 writes them to r_out.
fn stage(t: u32, n4: u32, lid: u32, writer: bool) {
  let K4 = params.K / 4u;
  for (var i = lid; i < n4 * K4; i = i + WG_SIZE) {
    let g = t * K4 + i;   // row t + i / K4, vec4 i % K4
    var v = r_in[g];
    for (var p = 0u; p < NPART; p = p + 1u) {   // a constant trip count: the loads can all be in flight
      v = v + parts[p * params.pstride + g];
    }
    xs[i] = v;
    if (writer) { r_out[g] = v; }
  }
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
  let wg = wid.y * nwg.x + wid.x;
  let G = WG_SIZE / LANES;                     // subgroups (row pairs at a time) per workgroup
  if (wg * G * PAIRS >= params.n_groups) { return; }   // uniform per workgroup
  let lane = sid;
  let g = (lid - sid) / LANES;                 // this subgroup's index in the workgroup
  let writer = wg == 0u && params.write_r == 1u;

  var lo = 0u;
  if (params.window == 1u) { lo = step.out_lo; }
  let hi = step.n;
  for (var t = lo + wid.z * TILE; t < hi; t = t + TILE * nwg.z) {   // tiles wid.z, wid.z + nwg.z, ... (grid z: engine)
    let n4 = min(TILE, hi - t);   // rows of this tile (TILE = 1, 4 or 8); uniform
    workgroupBarrier();           // the previous tile's dots are done with xs
    stage(t, n4, lid, writer);
    workgroupBarrier();
    for (var k = 0u; k < PAIRS; k = k + 1u) {
      let pair = (wg * PAIRS + k) * G + g;       // row pair within this part
      let have0 = 2u * pair < params.N;
      let r0 = min(2u * pair, params.N - 1u);    // a subgroup past the end computes a valid row, writes nothing
      let have1 = have0 && r0 + 1u < params.N;
      var y: Oct;
      if (TILE == 8u) {
        y = dot8(r0, have1, 0u, n4, lane);
      } else if (TILE == 4u) {
        y = dot4(r0, have1, 0u, n4, lane);
      } else {
        y = dot1(r0, have1, 0u, n4, lane);
      }
      var s0 = subgroupAdd(y.y0);
      var s1 = subgroupAdd(y.y1);
      var s0b = vec4<f32>(0.0);
      var s1b = vec4<f32>(0.0);
      var ss = vec4<f32>(0.0);
      var ssb = vec4<f32>(0.0);
      if (TILE == 8u) {
        s0b = subgroupAdd(y.y0b);
        s1b = subgroupAdd(y.y1b);
      }
      if (NORM) {
        ss = subgroupAdd(y.ss);
        if (TILE == 8u) { ssb = subgroupAdd(y.ssb); }
        let sc = inverseSqrt(ss / f32(params.K) + params.eps);
        s0 = s0 * sc;
        s1 = s1 * sc;
        if (TILE == 8u) {
          let scb = inverseSqrt(ssb / f32(params.K) + params.eps);
          s0b = s0b * scb;
          s1b = s1b * scb;
        }
      }
      for (var i = lane; i < n4 && have0; i = i + LANES) {   // one slot per lane
        epilogue(t + i, pick(s0, s0b, i), pick(s1, s1b, i), params.row0 + r0, have1);
      }
    }
  }
}
