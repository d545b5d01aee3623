// lib/step — struct Step, the per-chunk (per-pass) slot every kernel reads, and the two uniform bindings every
// kernel has: 0 params (of the kernel's own struct Params, declared before this include) and 1 step (bound with a
// dynamic offset: one slot per chunk or pass of a submission; app/gpu/encode.js writes the slots).
// #param SRC_LEN = 0
// SRC_LEN=1 (the draft head's kernels, app/gpu/head.js): the sixth word is src_len, which the head's passes set
// (head_in.wgsl reads it); the others leave it as padding. The layout is the same either way.

struct Step {
  n: u32,          // rows in this chunk
  start_pos: u32,  // absolute position of chunk row 0
  out_lo: u32,     // first chunk row that produces logits
  out_base: u32,   // logits row of chunk row out_lo
  tok0: u32,       // index of chunk row 0 in the submission's token list
// #if SRC_LEN
  src_len: u32,    // the champion's length at this pass: positions below it read the champion's features
  _p1: u32, _p2: u32,
// #else
  _p0: u32, _p1: u32, _p2: u32,
// #endif
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<uniform> step: Step;
