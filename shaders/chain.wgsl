// chain — the n-gram drafter's rounds on the GPU (app/gpu/model.js ngramChain): between two verify passes of a chain,
// where the last round's picks say the answer goes, and the next round's proposals, so that R rounds run in ONE
// submission and the GPU never waits for the host between them. Dispatched R + 1 times per chain; invocation r (the
// round counter state[1]) does:
//   1. r > 0: close round r - 1. With c its proposals tokens[b + 1 .. b + c] (b = (r - 1) * (k + 1)) and the picks
//      ids[b .. b + c] on its rows,
//        a = the first i < c with ids[b + i] != tokens[b + 1 + i], c if none      (the proposals the picks accept)
//      appends tokens[b + 1 .. b + a] and ids[b + a] to the history (hist[L ..], L += a + 1) and records a.
//   2. r < R: open round r. The most recent earlier occurrence of the history's last n tokens, n = max_ngram down
//      to min_ngram (py/exactspec/drafters/ngram.py's lookup, the same rule: the largest i <= L - n - 1 with
//      hist[i .. i + n) == hist[L - n .. L)), gives c = min(k, L - i - n, room) proposals hist[i + n ..] (c = 0 if
//      none). The round's tokens are [hist[L - 1], proposals..., padding] at tokens[r * (k + 1) ..], its Step slot
//      {n 1 + c, start_pos L - 1, out_lo 0, out_base r * (k + 1), tok0 r * (k + 1)} goes to `slot` at word
//      r * params.slot_words (the round's pass reads it: it computes 1 + c rows of a grid sized for k + 1), and its
//      record rec[r] = {c, a (written at 1.), proposals}. `slot` is the step buffer itself, round r's pass reading
//      slot r (engine option chainStepDirect; slot_words = a slot's words), or with slot_words 0 a buffer of one
//      slot that the host copies into the step buffer before the round's pass.
//   3. r == R: only 1., then state = {L, 0} (the next chain, a continuation, starts where this one ends).
// room = seq_len - 1 - L keeps every row inside the cache (the host also keeps start_pos + R (k + 1) <= seq_len).
// Proposals need only be good, never exact: the host confirms every token from the picks (py/exactspec/decode.py).
//
// Variant COPY (kernels.js 'chain_copy'; app/gpu/model.js specChain with a head's copies): dispatched inside a
// specChain round, after the draft's proposals were copied into tokens[r (k + 1) + 1 ..] and before the verify pass,
// round r = state[1] - 1 open at L = state[0] (draft_chain.wgsl's step 2): the same lookup over hist[0 .. L), and its
// c proposals overwrite the draft's first c (py/exactspec/drafters/head.py HeadDrafter.copy_of; room as above). Closes
// nothing, writes no record, Step or state; params.k the round's k, params.rounds unused.
//
// Work split: one workgroup. Invocation 0 closes the round (a <= k comparisons) and writes the appended tokens; the
// search is split over the invocations (candidate i = lid, lid + WG_SIZE, ...), its maximum found with an atomic;
// invocations j < k write proposal j.
// Batch invariance: no arithmetic on values; token ids and positions only.
//
// Bindings:
//   0 params  uniform Params (written before each chain)
//   1 step    uniform Step (dynamic offset; unused: every kernel has the binding; not the step buffer where `slot` is)
//   2 state   array<u32>  read_write (4,) L (history length), r (round counter), 0, 0
//   3 hist    array<u32>  read_write (seq_len + 1) the sequence: prompt and committed tokens, then the chain's
//   4 tokens  array<u32>  read_write (R (k + 1)) the rounds' verify inputs
//   5 ids     array<u32>  (R (k + 1)) the picks on the rounds' rows
//   6 slot    array<u32>  read_write the rounds' Steps: the step buffer (slots, slot_words), or (one slot's words)
//   7 rec     array<u32>  read_write (R, 2 + k) per round: c, a, proposals (k, 0-padded)

override WG_SIZE: u32 = 256;

struct Params {
  k: u32,           // proposals a round verifies at most (its pass: k + 1 rows)
  rounds: u32,      // R
  min_ngram: u32,
  max_ngram: u32,
  seq_len: u32,     // positions the KV cache holds
  slot_words: u32,  // words from one round's Step slot to the next in `slot` (0: one slot for every round)
  _p1: u32, _p2: u32,
};

// #include step
@group(0) @binding(2) var<storage, read_write> state: array<u32>;
@group(0) @binding(3) var<storage, read_write> hist: array<u32>;
@group(0) @binding(4) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(5) var<storage, read> ids: array<u32>;
@group(0) @binding(6) var<storage, read_write> slot: array<u32>;
@group(0) @binding(7) var<storage, read_write> rec: array<u32>;

var<workgroup> w_len: u32;      // L after closing the previous round
var<workgroup> w_round: u32;
var<workgroup> w_best: atomic<i32>;
var<workgroup> w_found: i32;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(local_invocation_index) lid: u32) {
  let K = params.k;
  let W = K + 1u;          // rows (and token slots) per round
  let RW = K + 2u;         // words per round record
  if (lid == 0u) {
// #if COPY
    w_len = state[0];
    w_round = state[1] - 1u;
// #else
    let r = state[1];
    var L = state[0];
    if (r > 0u) {          // 1. close round r - 1
      let b = (r - 1u) * W;
      let c = rec[(r - 1u) * RW];
      var a = c;
      for (var i = 0u; i < c; i = i + 1u) {
        if (ids[b + i] != tokens[b + 1u + i]) { a = i; break; }
      }
      for (var i = 0u; i < a; i = i + 1u) { hist[L + i] = tokens[b + 1u + i]; }
      hist[L + a] = ids[b + a];
      rec[(r - 1u) * RW + 1u] = a;
      L = L + a + 1u;
    }
    w_len = L;
    w_round = r;
// #endif
    atomicStore(&w_best, -1);
  }
  let L = workgroupUniformLoad(&w_len);
  let r = workgroupUniformLoad(&w_round);
// #if !COPY
  if (r >= params.rounds) {          // 3. the chain's end
    if (lid == 0u) { state[0] = L; state[1] = 0u; }
    return;
  }
// #endif
  // 2. open round r: the n-gram lookup
  storageBarrier();                  // (hist as invocation 0 left it)
  var at = -1;                       // the match's start
  var nm = 0u;                       // its length
  var n = min(params.max_ngram, L - 1u);
  loop {
    if (n < params.min_ngram || n == 0u) { break; }
    for (var i = lid; i + n + 1u <= L; i = i + WG_SIZE) {
      var ok = true;
      for (var j = 0u; j < n; j = j + 1u) {
        if (hist[i + j] != hist[L - n + j]) { ok = false; break; }
      }
      if (ok) { atomicMax(&w_best, i32(i)); }
    }
    workgroupBarrier();
    if (lid == 0u) { w_found = atomicLoad(&w_best); }
    let best = workgroupUniformLoad(&w_found);
    if (best >= 0) { at = best; nm = n; break; }
    n = n - 1u;
  }
  var c = 0u;
  if (at >= 0) {
    let room = select(0u, params.seq_len - 1u - L, params.seq_len > L + 1u);
    c = min(min(K, L - u32(at) - nm), room);
  }
  let base = r * W;
// #if COPY
  for (var j = lid; j < c; j = j + WG_SIZE) { tokens[base + 1u + j] = hist[u32(at) + nm + j]; }
// #else
  let last = hist[L - 1u];
  for (var j = lid; j < K; j = j + WG_SIZE) {
    var p = last;                    // padding: the rows past 1 + c are not computed (the Step's n)
    var rp = 0u;
    if (j < c) { p = hist[u32(at) + nm + j]; rp = p; }
    tokens[base + 1u + j] = p;
    rec[r * RW + 2u + j] = rp;
  }
  if (lid == 0u) {
    tokens[base] = last;
    rec[r * RW] = c;
    rec[r * RW + 1u] = 0u;
    let s = r * params.slot_words;
    slot[s] = 1u + c;                // n
    slot[s + 1u] = L - 1u;           // start_pos
    slot[s + 2u] = 0u;               // out_lo
    slot[s + 3u] = base;             // out_base
    slot[s + 4u] = base;             // tok0
    slot[s + 5u] = 0u;
    slot[s + 6u] = 0u;
    slot[s + 7u] = 0u;
    state[0] = L;
    state[1] = r + 1u;
  }
// #endif
}
