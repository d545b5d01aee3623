// stats.mjs — what the GPU benches (bench.mjs, head_bench.mjs, ab_engines.mjs) summarise their timings with.

/** The upper median of a list of numbers (the middle one of an odd count). */
export const median = (a) => { const b = [...a].sort((x, y) => x - y); return b[Math.floor(b.length / 2)]; };
