// lib/touch — warming the cache with the weights a workgroup is about to read (override TOUCH; engine option
// fuseTouch). A fused kernel's weight loads wait for its prologue (x staged from the partials, a barrier; attention's
// softmax), and with one workgroup per SM nothing else hides the memory round trip: with TOUCH a kernel first loads
// the words its later dots will read (lib/load_unit's RAW loaders: undecoded, no arithmetic) and uses them only in a
// branch that never runs (a chunk never has more than 0xFFFF rows), placed right after the prologue so that they hold
// registers no longer; the loads stay, and the dots' own loads then find the words in the cache (measured on an H100,
// README "2026-12-05 (seventh session)": faster for the qkv matmul and attention + O, slower for the FFN, kept off
// there). No operation of any row changes, or its order: the same bits.
// Defines touch_pair(r0, r1, lane) (the words a tile dot of lib/tiles loads for lane `lane` from rows r0, r1: units
// lane, lane + STRIDE, ..., the first TOUCH_U of them) and kept(v) (what the never-taken branch combines).
// Needs: load_unit_raw (lib/load_unit included with RAW set), overrides KX (= params.K) and STRIDE; PAIR=0 (a kernel
// without tile dots: attention.wgsl O_PROJ) leaves touch_pair out, and its needs.
// #param PAIR = 1

// #if PAIR == 1
const TOUCH_U: u32 = 4u;   // units per lane and row warmed for a tile dot (K <= 4 * 8 * STRIDE: the whole row)

fn touch_pair(r0: u32, r1: u32, lane: u32) -> array<vec4<u32>, 8> {
  var o: array<vec4<u32>, 8>;
  let U = KX / 8u;
  for (var j = 0u; j < TOUCH_U; j = j + 1u) {
    if (j * STRIDE < U) {   // constant per pipeline
      let u = min(lane + j * STRIDE, U - 1u);
      o[2u * j] = load_unit_raw(r0, u);
      o[2u * j + 1u] = load_unit_raw(r1, u);
    }
  }
  return o;
}
// #endif

fn kept(v: vec4<u32>) -> u32 {
  return v.x ^ v.y ^ v.z ^ v.w;
}
