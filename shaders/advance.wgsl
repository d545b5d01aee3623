// advance — the hinge of verify's continuation (app/gpu/model.js verifyNow with `then`): after the champion's verify
// pass, where its picks say the answer goes on. With k proposals tokens[1..k] and the picks ids[0..k] on the verify rows,
//   a = the first i < k with ids[i] != tokens[i + 1], k if none        (how many proposals the picks accept)
// and the continuation's m one-token passes start at absolute position step.start_pos + a + 1, fed ids[a]:
//   tokens[params.tok_dst] = ids[a]
//   slots[j] = the Step of continuation pass j: {n (1 if a < k, else 0: no rows), start_pos step.start_pos + a + 1 + j,
//              out_lo 0, out_base params.out_base + j, tok0 params.tok_dst + j}, j < m
// The continuation's submission copies the slots into the step buffer (uniform, bound with dynamic offsets) before its
// passes run, so their positions come from the GPU, not from the host. Every kernel reads a position only through
// its Step, so a continuation pass is the same pass as a decodeAhead pass at that position (the same bits:
// tests/gpu), and every kernel does nothing for rows >= step.n: where the picks accept every proposal, the
// continuation only launches (the drafter will likely find the next copy itself). The host computes a again from the
// ids it reads back (the same rule).
//
// Work split: one workgroup; every invocation finds a (k <= 64 comparisons), invocation j < m writes slot j's words
// (the Step's field order of lib/step: n, start_pos, out_lo, out_base, tok0, then padding), invocation 0 the token.
// Batch invariance: no arithmetic on values; the positions are integers.
//
// Bindings:
//   0 params  uniform Params (written before each verifyAhead)
//   1 step    uniform Step (dynamic offset: the verify pass's slot)
//   2 tokens  array<u32>  read_write (seq_len + 1) the submission's token list
//   3 ids     array<u32>  (seq_len + 1) the picks on the verify rows
//   4 slots   array<u32>  read_write (max passes, slot_words) the continuation's Step slots, slot_words apart

override WG_SIZE: u32 = 64;

struct Params {
  k: u32,           // proposals verified
  m: u32,           // continuation passes (<= WG_SIZE)
  slot_words: u32,  // u32 words from one step slot to the next (the dynamic offset alignment / 4)
  tok_dst: u32,     // tokens index of the continuation's first input (k + 1)
  out_base: u32,    // logits row of the continuation's first pass (k + 1)
  _p0: u32, _p1: u32, _p2: u32,
};

// #include step
@group(0) @binding(2) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(3) var<storage, read> ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> slots: array<u32>;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(local_invocation_index) j: u32) {
  var a = params.k;
  for (var i = 0u; i < params.k; i++) {
    if (ids[i] != tokens[i + 1u]) { a = i; break; }
  }
  if (j == 0u) { tokens[params.tok_dst] = ids[a]; }
  if (j < params.m) {
    let b = j * params.slot_words;
    slots[b] = select(0u, 1u, a < params.k);           // n
    slots[b + 1u] = step.start_pos + a + 1u + j;       // start_pos
    slots[b + 2u] = 0u;                                // out_lo
    slots[b + 3u] = params.out_base + j;               // out_base
    slots[b + 4u] = params.tok_dst + j;                // tok0
    slots[b + 5u] = 0u;
    slots[b + 6u] = 0u;
    slots[b + 7u] = 0u;
  }
}
