// lib/head_params — the interface the draft head's row kernels share (head_in.wgsl, head_out.wgsl: one Params,
// packed by app/gpu/head.js headParams): override WG_SIZE, struct Params, and lib/step with src_len (bindings 0-1).

override WG_SIZE: u32 = 64;

struct Params {
  dim: u32,         // the head's (= the champion's) width
  ring_rows: u32,   // rows of the predicted-feature ring
  eps: f32,         // the rmsnorms' epsilon
  _p0: u32,
};

// #include step SRC_LEN=1
