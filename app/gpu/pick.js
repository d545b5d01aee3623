// pick.js — what shaders/pick.wgsl needs to pick tokens the way py/exactspec/backend.py's Pick says:
// {temperature: 0 (greedy) | T > 0 (coupled: argmax(row / T + Gumbel noise of sampling.Rng(seed))), seed}.

const MASK64 = (1n << 64n) - 1n;
const GOLDEN = 0x9E3779B97F4A7C15n;
const STREAM_GUMBEL = 1n;   // = py/exactspec/sampling.py STREAM_GUMBEL (the picks' parity test with numpy pins it)

/** splitmix64's finaliser (sampling._mix) on a BigInt. */
function mix64(x) {
  x = ((x ^ (x >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK64;
  x = ((x ^ (x >> 27n)) * 0x94D049BB133111EBn) & MASK64;
  return x ^ (x >> 31n);
}

/** The key of sampling.Rng(seed)'s Gumbel stream: row key of position t = mix(key ^ t) (computed in the kernel). */
export function gumbelStreamKey(seed) {
  const key = mix64((BigInt(seed) + GOLDEN) & MASK64);
  return mix64(key ^ STREAM_GUMBEL);
}

/** Validate a pick {temperature, seed}; returns it normalised. */
export function checkPick(pick) {
  const temperature = Number(pick?.temperature ?? 0);
  const seed = Number(pick?.seed ?? 0);
  if (!Number.isFinite(temperature) || temperature < 0) throw new Error(`pick: temperature ${pick?.temperature} must be a number >= 0`);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`pick: seed ${pick?.seed} must be an integer in 0..2^53-1`);
  return { temperature, seed };
}

/** The pick kernel's Params for one batched step (groups: stage 0 workgroups per row). */
export function pickParams(pick, vocab, groups) {
  const key = gumbelStreamKey(pick.seed);
  return { vocab, groups, block: Math.ceil(vocab / groups), greedy: pick.temperature === 0 ? 1 : 0,
    temperature: pick.temperature === 0 ? 1 : pick.temperature, key_lo: Number(key & 0xffffffffn), key_hi: Number(key >> 32n) };
}
