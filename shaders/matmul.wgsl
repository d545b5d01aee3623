// matmul — thin GEMM over weights read as stored: y[t, r] = sum_k W[r, k] * xin[t, k] for every row t of a chunk.
// On GPUs each weight unit is read and decoded once per tile of 1, 4 or 8 chunk rows (dot1/dot4/dot8; override
// TILE, the engine picks the pipeline by the dispatch's row count), so a verify block of k+1 <= 8 rows costs about
// one single-token pass; on CPU adapters each row is a separate pass over cached weights.
//
// Weight formats (override WTYPE, ggml ids): 0 F32, 1 F16, 30 BF16, 3 Q4_1 (blocks as stored: f16 d, f16 m, 16 B),
// 2 Q4_0 and 8 Q8_0 (blocks as stored, with the f16 scale padded to 4 bytes so the block is word aligned:
// Q4_0 20 B = d, pad, qs[16]; Q8_0 36 B = d, pad, qs[32]). Values are never dequantised in the buffer.
// Optional fused input RMSNorm (override NORM): xin = x * rsqrt(mean(x^2) + eps) * gamma. CPU path: the scale
// multiplies x before the dot; GPU paths: y = (W . (x * gamma)) * scale (the same function, rounded differently).
//
// Work split: rows are processed in PAIRS (2i, 2i+1). One group of LANES invocations owns one pair; a workgroup
// holds WG_SIZE/LANES groups.
//  - GPUs (LANES = 32): per tile of TB rows, the fused-RMSNorm scales come from a fixed tree over the workgroup;
//    then TILE rows at a time, lane l accumulates the 8-value units l, l+LANES, ... (ascending) for the TILE
//    rows, and the LANES partials are summed by a fixed binary tree in workgroup memory. (matmul_sg.wgsl is the
//    same with subgroupAdd instead of the trees, and the RMSNorm statistic taken in the same pass.)
//  - CPU adapters (LANES = 1: SwiftShader, llvmpipe), where barriers cost far more than redundant work: one
//    invocation computes a whole pair, row after row, and each row's RMSNorm scale itself; no barrier at all.
// BATCH INVARIANCE: the arithmetic for row t never depends on how many rows the chunk has or where it starts
// (every slot of every tile variant runs the same code, with the same reduction order).
//
// Epilogue (override MODE) for a pair (y0, y1) at chunk row t:
//   0 store:  out[orow * out_stride + row0 + 2i + {0,1}] = y        (logits use a row window from Step)
//   1 add:    out[t * out_stride + row0 + 2i + {0,1}] += y          (residual add)
//   2 swiglu: rows are interleaved (gate_i, up_i): out[t * out_stride + (row0/2) + i] = silu(y0) * y1
//   3 qkv:    rows are [q | k | v] in GGUF's interleaved-pair order; q, k pairs get RoPE at pos = start_pos + t
//             (cos/sin table); q -> out[t * q_dim + r], k -> kv[pos * kv_dim + r - q_dim],
//             v -> kv[seq_len * kv_dim + pos * kv_dim + r - q_dim - kv_dim]
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: one slot per chunk)
//   2 w       array<u32>        (N rows of this part, layout per WTYPE)   K must be a multiple of 32
//   3 x       array<vec4<f32>>  (max_rows, K) chunk activations
//   4 gamma   array<vec4<f32>>  (K) RMSNorm weight (dummy unless NORM)
//   5 rope    array<vec2<f32>>  (seq_len, rope_dim/2) (cos, sin) (dummy unless MODE 3)
//   6 out     array<f32>        read_write, see MODE
//   7 kv      array<f32>        read_write (2, seq_len, kv_dim) this layer's K then V cache (dummy unless MODE 3)
//
// Includes (shared with matmul_sg.wgsl, the same text): lib/matmul_io (overrides, Params, the bindings above),
// lib/quant + lib/term (weight units and their dot terms), lib/epilogue (MODE), lib/tiles + lib/tile_call (the GPU
// paths' dot1/dot4/dot8). Its own: the CPU path (xin, row_scale, row_dot) and the workgroup trees of main.

// #include matmul_io

var<workgroup> red: array<f32, WG_SIZE * TB * 2u>;   // (TB, 2, WG_SIZE) lane partials
var<workgroup> rs: array<f32, TB>;                   // (TB) rmsnorm scales of the tile

// #include quant

fn xin(t: u32, i: u32, sc: f32) -> vec4<f32> {
  var v = x[t * (params.K / 4u) + i];
  if (NORM) {
    v = v * sc * gamma[i];
  }
  return v;
}

fn row_scale(t: u32) -> f32 {   // RMSNorm scale of chunk row t, one invocation (LANES == 1 path)
  var ss = 0.0;
  for (var i = 0u; i < params.K / 4u; i = i + 1u) {
    let v = x[t * (params.K / 4u) + i];
    ss = ss + dot(v, v);
  }
  return inverseSqrt(ss / f32(params.K) + params.eps);
}

// #include epilogue
// #include term
// #include tiles


// The pair's partial dot products with chunk row t over this lane's 32-value blocks lane, lane + LANES, ...
// (4 units each, in ascending order). Scalar accumulators only: no per-row arrays (they spill on GPUs).
fn row_dot(r0: u32, have1: bool, t: u32, sc: f32, lane: u32) -> vec2<f32> {
  var a0 = 0.0;
  var a1 = 0.0;
  for (var blk = lane; blk < params.K / 32u; blk = blk + LANES) {
    for (var sub = 0u; sub < 4u; sub = sub + 1u) {
      let u = 4u * blk + sub;
      let p = load_unit(r0, u);
      var q: Unit;
      if (have1) { q = load_unit(r0 + 1u, u); } else { q = p; }
      let x0 = xin(t, p.i0, sc);
      let x1 = xin(t, p.i1, sc);
      a0 = a0 + term(p, x0, x1);
      a1 = a1 + term(q, x0, x1);
    }
  }
  return vec2<f32>(a0, a1);
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let wg = wid.y * nwg.x + wid.x;
  let groups_per_wg = WG_SIZE / LANES;
  if (wg * groups_per_wg >= params.n_groups) { return; }   // uniform per workgroup
  let g = lid / LANES;
  let lane = lid % LANES;
  let pair = wg * groups_per_wg + g;           // row pair within this part
  let r0 = 2u * pair;
  let have0 = r0 < params.N;
  let have1 = r0 + 1u < params.N;
  let K = params.K;

  var lo = 0u;
  if (params.window == 1u) { lo = step.out_lo; }
  let hi = step.n;

  if (LANES == 1u) {
    // ---- CPU adapters: no barriers; this invocation owns the pair and walks the rows one by one (the pair's
    // weights stay in the CPU cache between rows)
    for (var t = lo; t < hi && have0; t = t + 1u) {
      var sc = 1.0;
      if (NORM) { sc = row_scale(t); }
      let y = row_dot(r0, have1, t, sc, 0u);
      epilogue(t, y.x, y.y, params.row0 + r0, have1);
    }
  } else {
    // ---- GPUs: tiles of TB rows, taken four rows at a time by quad_dot; lane partials go to workgroup memory,
    // then one fixed tree per tile
    for (var t0 = lo; t0 < hi; t0 = t0 + TB) {
      let nt = min(TB, hi - t0);
      if (NORM) {
        // RMSNorm scales of the tile's rows: fixed-order reduction over the whole workgroup
        for (var t = 0u; t < nt; t = t + 1u) {
          var ss = 0.0;
          for (var i = lid; i < K / 4u; i = i + WG_SIZE) {
            let v = x[(t0 + t) * (K / 4u) + i];
            ss = ss + dot(v, v);
          }
          red[t * WG_SIZE + lid] = ss;
        }
        workgroupBarrier();
        for (var s = WG_SIZE / 2u; s > 0u; s = s / 2u) {
          if (lid < s) {
            for (var t = 0u; t < nt; t = t + 1u) {
              red[t * WG_SIZE + lid] = red[t * WG_SIZE + lid] + red[t * WG_SIZE + lid + s];
            }
          }
          workgroupBarrier();
        }
        if (lid < nt) { rs[lid] = inverseSqrt(red[lid * WG_SIZE] / f32(K) + params.eps); }
        workgroupBarrier();
      }
      for (var t = 0u; t < nt; t = t + TILE) {
        let n4 = min(TILE, nt - t);   // rows of this tile (TILE = 1, 4 or 8)
        var y = Oct(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
        if (have0) {
// #include tile_call ARGS="r0, have1, t0 + t, n4, lane"
        }
        for (var i = 0u; i < n4; i = i + 1u) {
          red[(2u * (t + i)) * WG_SIZE + lid] = pick(y.y0, y.y0b, i);
          red[(2u * (t + i) + 1u) * WG_SIZE + lid] = pick(y.y1, y.y1b, i);
        }
      }
      workgroupBarrier();
      for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
          for (var j = 0u; j < 2u * nt; j = j + 1u) {
            red[j * WG_SIZE + lid] = red[j * WG_SIZE + lid] + red[j * WG_SIZE + lid + s];
          }
        }
        workgroupBarrier();
      }
      if (have0) {
        for (var t = lane; t < nt; t = t + LANES) {
          var y0 = red[(2u * t) * WG_SIZE + g * LANES];
          var y1 = red[(2u * t + 1u) * WG_SIZE + g * LANES];
          if (NORM) {   // the row's RMSNorm scale, applied to the finished sums
            y0 = y0 * rs[t];
            y1 = y1 * rs[t];
          }
          epilogue(t0 + t, y0, y1, params.row0 + r0, have1);
        }
      }
      workgroupBarrier();
    }
  }
}