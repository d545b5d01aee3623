// lib/step — struct Step, the per-chunk (per-pass) slot every kernel reads, and the two uniform bindings every
// kernel has: 0 params (of the kernel's own struct Params, declared before this include) and 1 step (bound with a
// dynamic offset: one slot per chunk or pass of a submission; app/gpu/encode.js writes the slots).

struct Step {
  n: u32,          // rows in this chunk
  start_pos: u32,  // absolute position of chunk row 0
  out_lo: u32,     // first chunk row that produces logits
  out_base: u32,   // logits row of chunk row out_lo
  tok0: u32,       // index of chunk row 0 in the submission's token list
  _p0: u32, _p1: u32, _p2: u32,
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<uniform> step: Step;
