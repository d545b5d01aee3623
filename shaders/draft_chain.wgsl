// draft_chain — a draft model's or draft head's greedy rounds on the GPU (app/gpu/model.js specChain): between two
// verify passes of a chain, where the last round's picks say the answer goes, and the next round's draft input and
// Steps, so that R speculative rounds (the draft's k passes and the champion's verify pass each) run in ONE submission
// and the GPU never waits for the host between them. Dispatched R + 1 times per chain; invocation r (the round
// counter state[1]) does:
//   1. r > 0: close round r - 1 (its verify rows at b = (r - 1)(k + 1); L its history length when it opened):
//        a = the first i < k with ids[b + i] != tokens[b + 1 + i], k if none          (the proposals the picks accept)
//      records the proposals and a (rec), appends tokens[b + 1 .. b + a] and ids[b + a] to the history
//      (hist[L ..], L' = L + a + 1), and keeps of the draft's cache D = min(D, L' - 1), with `restart` (a draft head:
//      its positions from the round's first on were drafted from its own predicted features) min(D, L) — exactly
//      what py/exactspec/drafters (model.py / head.py) update() keeps after a round.
//   2. r < R: open round r at L: the draft is fed hist[D .. L) (f = L - D tokens, 1 <= f <= k + 1) in one pass, then
//      k - 1 one-row passes, each fed the proposal the pass before it picked. Its input goes to `feed` right-aligned
//      (feed[k + 1 - f ..]), which the host copies to the draft's tokens at bd = r (2k + 1), so the picks land at
//      fixed places, bd + k + 1 .. bd + 2k, which the host copies to the champion's tokens[r (k + 1) + 1 ..]. The Steps:
//        slot 0       {n f, start_pos D, out_lo f - 1, out_base 0, tok0 bd + k + 1 - f, src_len L - 1}
//        slot i < k   {n 1, start_pos L - 1 + i, out_lo 0, out_base 0, tok0 bd + k + i, src_len L - 1}
//        slot k       {n k + 1, start_pos L - 1, out_lo 0, out_base r (k + 1), tok0 r (k + 1)}   (the verify pass)
//      (src_len: a draft head reads the champion's features below it, which hold the accepted positions; a draft
//      model leaves the word as padding.) tokens[r (k + 1)] = hist[L - 1]; the draft's cache then holds L + k - 1.
//   3. r == R: only 1., then state = {L, 0, D} (where the chain ends).
// The host keeps start_pos + R (k + 1) <= seq_len (every row inside the cache) and f <= k + 1 for the first round.
// Proposals need only be good, never exact: the host confirms every token from the champion's picks
// (py/exactspec/decode.py), as for the n-gram drafter's chains (chain.wgsl).
//
// Work split: one invocation does it all (at most 2k + 2 words read and a few dozen written a round); the others
// return at once.
// Batch invariance: no arithmetic on values; token ids and positions only.
//
// Bindings:
//   0 params  uniform Params (written before each chain)
//   1 step    uniform Step (dynamic offset; unused: every kernel has the binding)
//   2 state   array<u32>  read_write (4,) L (history length), r (round counter), D (the draft's cache length), 0
//   3 hist    array<u32>  read_write (seq_len + 1) the sequence: prompt and committed tokens, then the chain's
//   4 tokens  array<u32>  read_write (R (k + 1)) the champion's verify inputs (the proposals copied in by the host)
//   5 ids     array<u32>  (R (k + 1)) the champion's picks on the rounds' rows
//   6 slots   array<u32>  read_write (k + 1, slot_words) the next round's Steps: the draft's k passes, the verify pass
//   7 feed    array<u32>  read_write (k + 1) the next round's draft input, right-aligned
//   8 rec     array<u32>  read_write (R, 2 + k) per round: k, a, proposals

override WG_SIZE: u32 = 64;

struct Params {
  k: u32,           // proposals a round makes (the draft's passes; its verify pass: k + 1 rows)
  rounds: u32,      // R
  slot_words: u32,  // u32 words between two Step slots (the dynamic offset alignment)
  restart: u32,     // 1: a draft head (each round's draft input starts at the round before it's first position)
  _p0: u32, _p1: u32, _p2: u32, _p3: u32,
};

// #include step
@group(0) @binding(2) var<storage, read_write> state: array<u32>;
@group(0) @binding(3) var<storage, read_write> hist: array<u32>;
@group(0) @binding(4) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(5) var<storage, read> ids: array<u32>;
@group(0) @binding(6) var<storage, read_write> slots: array<u32>;
@group(0) @binding(7) var<storage, read_write> feed: array<u32>;
@group(0) @binding(8) var<storage, read_write> rec: array<u32>;

fn put_step(s: u32, n: u32, start_pos: u32, out_lo: u32, out_base: u32, tok0: u32, src_len: u32) {
  let o = s * params.slot_words;
  slots[o] = n;
  slots[o + 1u] = start_pos;
  slots[o + 2u] = out_lo;
  slots[o + 3u] = out_base;
  slots[o + 4u] = tok0;
  slots[o + 5u] = src_len;
  slots[o + 6u] = 0u;
  slots[o + 7u] = 0u;
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(local_invocation_index) lid: u32) {
  if (lid != 0u) { return; }
  let K = params.k;
  let W = K + 1u;          // rows (and champion token slots) per round
  let RW = K + 2u;         // words per round record
  let r = state[1];
  var L = state[0];
  var D = state[2];
  if (r > 0u) {            // 1. close round r - 1
    let b = (r - 1u) * W;
    var a = K;
    for (var i = 0u; i < K; i = i + 1u) {
      if (ids[b + i] != tokens[b + 1u + i]) { a = i; break; }
    }
    for (var i = 0u; i < K; i = i + 1u) { rec[(r - 1u) * RW + 2u + i] = tokens[b + 1u + i]; }
    rec[(r - 1u) * RW] = K;
    rec[(r - 1u) * RW + 1u] = a;
    for (var i = 0u; i < a; i = i + 1u) { hist[L + i] = tokens[b + 1u + i]; }
    hist[L + a] = ids[b + a];
    if (params.restart != 0u) { D = min(D, L); }
    L = L + a + 1u;
    D = min(D, L - 1u);
  }
  if (r >= params.rounds) {          // 3. the chain's end
    state[0] = L;
    state[1] = 0u;
    state[2] = D;
    return;
  }
  // 2. open round r
  let f = L - D;
  let bd = r * (2u * K + 1u);
  for (var j = 0u; j < f; j = j + 1u) { feed[K + 1u - f + j] = hist[D + j]; }
  put_step(0u, f, D, f - 1u, 0u, bd + K + 1u - f, L - 1u);
  for (var i = 1u; i < K; i = i + 1u) { put_step(i, 1u, L - 1u + i, 0u, 0u, bd + K + i, L - 1u); }
  put_step(K, W, L - 1u, 0u, r * W, r * W, 0u);
  tokens[r * W] = hist[L - 1u];
  state[0] = L;
  state[1] = r + 1u;
  state[2] = L + K - 1u;
}
