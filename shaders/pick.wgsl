// pick — the batched step's token pick on the GPU (app/gpu/model.js: decodeAhead, specRound): for each logits row a
// pass produced, the id of
//   greedy (params.greedy == 1): argmax_v row[v]                                ties -> the lowest id
//   coupled (temperature T > 0): argmax_v (row[v] / T + g[t, v])                ties -> the lowest id
// with g[t, v] = -log(-log(u)), u = exactly the uniform of py/exactspec/sampling.py's
// Rng(seed).uniforms(STREAM_GUMBEL, t, vocab)[v] (splitmix64 in pairs of u32), evaluated in f32, and t the absolute
// position of the token being picked (chunk row out_lo + j is at start_pos + out_lo + j; its pick is for the next).
// NaN and -inf count as the lowest finite f32 (so every row has a pick). The id goes to `picks`:
//   DEST 0: tokens[tok0 + out_lo + j + 1] (the next pass of the submission embeds it: no CPU round trip)
//   DEST 1: ids[out_base + j] (the champion's picks on its verify rows)
//
// Work split: two dispatches of this kernel (override STAGE):
//   STAGE 0: grid (groups, rows). Workgroup (g, j) scans ids g * block .. min(vocab, (g+1) * block) of picked row j,
//            invocation l every WG_SIZE-th id from g * block + l; then a fixed binary tree over the invocations
//            (WG_SIZE a power of two) -> part[(out_base + j) * groups + g] = (value bits, id).
//   STAGE 1: grid (1, rows). Invocation 0 of workgroup j folds the groups' partials in order and writes the id.
// EXACTNESS: "max value, then lowest id" is a total order, so the result is the exact argmax of the f32 values
// whatever the grouping; greedy values are the logits as stored (what the readback returns), so a greedy pick equals
// numpy's argmax of the returned row bit for bit. Coupled values are f32 approximations of numpy's f64 ones (errors
// ~1e-6): a pick can differ only where the top two are that close, and then Python's confirmation rejects it (a
// wasted pass, never a wrong token).
//
// Bindings:
//   0 params  uniform Params (per model, written before each batched step)
//   1 step    uniform Step (dynamic offset: the pass's chunk slot)
//   2 logits  array<f32>         (rows, vocab) this model's logits
//   3 part    array<vec2<u32>>   read_write (rows, groups) stage 0's partials
//   4 picks   array<u32>         read_write tokens (DEST 0) or ids (DEST 1)

override WG_SIZE: u32 = 64;
override STAGE: u32 = 0u;
override DEST: u32 = 0u;

struct Params {
  vocab: u32,
  groups: u32,        // stage 0 workgroups per row
  block: u32,         // ids per group: ceil(vocab / groups)
  greedy: u32,        // 1: plain argmax; 0: argmax(row / temperature + g)
  temperature: f32,
  key_lo: u32,        // splitmix64 stream key mix(mix(seed + GOLDEN) ^ STREAM_GUMBEL) (app/gpu/pick.js), low word
  key_hi: u32,
  _p0: u32,
};

// #include step
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read_write> part: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> picks: array<u32>;

const LOWEST: f32 = -0x1.fffffep+127f;   // the lowest finite f32
const GOLDEN: vec2<u32> = vec2<u32>(0x7F4A7C15u, 0x9E3779B9u);   // (low, high) words of 0x9E3779B97F4A7C15
const M1: vec2<u32> = vec2<u32>(0x1CE4E5B9u, 0xBF58476Du);
const M2: vec2<u32> = vec2<u32>(0x133111EBu, 0x94D049BBu);

var<workgroup> best_v: array<f32, WG_SIZE>;
var<workgroup> best_i: array<u32, WG_SIZE>;

// ---- u64 as vec2<u32>(low, high), wrapping like numpy's uint64
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn shr64(a: vec2<u32>, s: u32) -> vec2<u32> {   // 0 < s < 32
  return vec2<u32>((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}
fn mul32(a: u32, b: u32) -> vec2<u32> {         // full 64-bit product of two u32
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((mid << 16u) | (p00 & 0xffffu), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let p = mul32(a.x, b.x);
  return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
fn mix64(x0: vec2<u32>) -> vec2<u32> {          // splitmix64 finaliser (sampling._mix)
  var x = mul64(x0 ^ shr64(x0, 30u), M1);
  x = mul64(x ^ shr64(x, 27u), M2);
  return x ^ shr64(x, 31u);
}

// -log(u) for u = ((h >> 11) + 0.5) * 2^-53 (sampling.Rng.uniforms), accurate in f32 on the whole of (0, 1)
fn neg_log_u(h: vec2<u32>) -> f32 {
  let m_hi = h.y >> 11u;                              // bits 52..32 of the 53-bit integer m
  let m_lo = (h.y << 21u) | (h.x >> 11u);              // bits 31..0
  if (m_hi < 0x100000u) {                              // u < 1/2: log is accurate there
    let u = f32(m_hi) * 4.76837158e-7 + (f32(m_lo) + 0.5) * 1.11022302e-16;   // 2^-21, 2^-53
    return -log(u);
  }
  // u >= 1/2: w = 1 - u from the complement bits (exact enough), -log(1 - w) = 2 atanh(s), s = w / (2 - w) <= 1/3
  let w = f32(~m_hi & 0x1fffffu) * 4.76837158e-7 + (f32(~m_lo) + 0.5) * 1.11022302e-16;
  let s = w / (2.0 - w);
  let s2 = s * s;
  let poly = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0 + s2 * (1.0 / 11.0
    + s2 * (1.0 / 13.0 + s2 * (1.0 / 15.0)))))));
  return 2.0 * s * poly;
}

fn value(row: u32, v: u32, row_key: vec2<u32>) -> f32 {
  let z = logits[row * params.vocab + v];
  let bits = bitcast<u32>(z);
  var x = z;
  if ((bits & 0x7fffffffu) > 0x7f800000u || z < LOWEST) { x = LOWEST; }   // NaN, -inf
  if (params.greedy == 1u) { return x; }
  let h = mix64(add64(row_key, mul64(vec2<u32>(v + 1u, 0u), GOLDEN)));
  return max(x / params.temperature - log(neg_log_u(h)), LOWEST);
}

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
  return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let j = wid.y;
  if (j >= step.n - step.out_lo) { return; }   // uniform per workgroup
  let row = step.out_base + j;
  let G = params.groups;
  if (STAGE == 1u) {
    if (lid == 0u) {
      var bv = LOWEST;
      var bi = 0xffffffffu;
      for (var g = 0u; g < G; g = g + 1u) {
        let p = part[row * G + g];
        if (better(bitcast<f32>(p.x), p.y, bv, bi)) { bv = bitcast<f32>(p.x); bi = p.y; }
      }
      if (DEST == 0u) { picks[step.tok0 + step.out_lo + j + 1u] = bi; } else { picks[row] = bi; }
    }
    return;
  }
  let t = step.start_pos + step.out_lo + j + 1u;
  let row_key = mix64(vec2<u32>(params.key_lo, params.key_hi) ^ vec2<u32>(t, 0u));
  let v0 = wid.x * params.block;
  let v1 = min(params.vocab, v0 + params.block);
  var bv = LOWEST;
  var bi = 0xffffffffu;
  for (var v = v0 + lid; v < v1; v = v + WG_SIZE) {
    let x = value(row, v, row_key);
    if (better(x, v, bv, bi)) { bv = x; bi = v; }
  }
  best_v[lid] = bv;
  best_i[lid] = bi;
  for (var s = WG_SIZE / 2u; s > 0u; s = s / 2u) {
    workgroupBarrier();
    if (lid < s && better(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid])) {
      best_v[lid] = best_v[lid + s];
      best_i[lid] = best_i[lid + s];
    }
  }
  if (lid == 0u) { part[row * G + wid.x] = vec2<u32>(bitcast<u32>(best_v[0]), best_i[0]); }
}
