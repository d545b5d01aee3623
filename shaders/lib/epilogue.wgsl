// lib/epilogue — what a matmul does with a finished pair (y0, y1) of weight rows r, r + 1 at chunk row t
// (override MODE; r is the global row, even; have1: row r + 1 exists):
//   0 store:  out[orow * out_stride + r + {0,1}] = y        (logits: with params.window, only chunk rows from
//             step.out_lo, written to output rows step.out_base + (t - step.out_lo))
//   1 add:    out[t * out_stride + r + {0,1}] += y          (residual add)
//   2 swiglu: rows are interleaved (gate_i, up_i): out[t * out_stride + r / 2] = silu(y0) * y1
//   3 qkv:    rows are [q | k | v] in GGUF's interleaved-pair order; q, k pairs get RoPE at pos = start_pos + t
//             (cos/sin table `rope`); q -> out[t * q_dim + r], k -> kv[pos * kv_dim + r - q_dim],
//             v -> kv[seq_len * kv_dim + pos * kv_dim + r - q_dim - kv_dim]
// Needs the matmul family's Params fields and bindings out, rope, kv (lib/matmul_io).

// #include rope

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
    let v = rope_pair(y0, y1, r, pos);
    let v0 = v.x;
    let v1 = v.y;
    let qk = params.q_dim + params.kv_dim;
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
