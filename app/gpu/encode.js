// encode.js — a submission's work as command buffers: chunks of passes, their step slots, dispatches, copies, and
// the readback copy; split into several command buffers submitted one after another (a small first one, so the GPU
// starts while the rest is still being translated: Dawn records its Vulkan/Metal/D3D commands at submit time).

/**
 * The chunks of one pass: n tokens at absolute positions startPos.., read from the token list at tokBase.., whose
 * last nOut rows produce logits rows outBase.. . Chunks hold at most maxRows rows. extra: more Step fields of every
 * chunk (a draft head's src_len, app/gpu/head.js).
 * Returns [{rows, outRows, step: the fields of the kernels' struct Step}].
 */
export function passChunks({ n, startPos, nOut, tokBase = 0, outBase = 0, extra = null }, maxRows) {
  const firstOut = n - nOut;
  const chunks = [];
  for (let c0 = 0; c0 < n; c0 += maxRows) {
    const rows = Math.min(maxRows, n - c0);
    const lo = Math.max(0, firstOut - c0);   // first chunk row with logits (>= rows: none)
    chunks.push({ rows, outRows: Math.max(0, rows - lo),
      step: { n: rows, start_pos: startPos + c0, out_lo: Math.min(lo, rows), out_base: outBase + c0 + lo - firstOut,
        tok0: tokBase + c0, ...extra } });
  }
  return chunks;
}

/**
 * Encode a submission. items: in order,
 *   {ops, rows, offset, rowwise?, sparse?}  dispatch each op for `rows` chunk rows with the step slot at dynamic
 *                                  `offset` (an op whose select(rows, sparse) is null has no dispatch for that row
 *                                  count; rowwise: its rowSelect(rows) where it has one; sparse: the GPU decides how
 *                                  many of the rows are live, a chain round's pass)
 *   {copy: [src, srcOffset, dst, dstOffset, size]}   a buffer copy (between compute passes)
 * reads: [[src, srcOffset, size], ...] copied back to back into `staging` after the last dispatch.
 * opts {splits: command buffers (cut by dispatch count), ts: timestamps {set, buf, read} | null}.
 * Returns {cbs, dispatches}.
 */
export function encodeSubmission(device, items, reads, staging, { splits, ts }) {
  // an item marked rowwise dispatches its ops row-parallel where they offer it (op.rowSelect: graph.js tiled)
  // (sparse: a pass whose rows the GPU decides, fewer than `rows` live: graph.js attnO's grid, the qkv's variant)
  const select = (op, it) => (it.rowwise && op.rowSelect ? op.rowSelect(it.rows) : op.select(it.rows, !!it.sparse));
  let total = 0;
  for (const it of items) if (it.ops) for (const op of it.ops) if (select(op, it)) total++;   // the dispatches
  const cuts = cutPoints(total, splits);
  const cbs = [];
  let enc = null;
  let pass = null;
  let last = null;
  let started = false;
  const begin = () => {
    pass = enc.beginComputePass(ts && !started ? { timestampWrites: { querySet: ts.set, beginningOfPassWriteIndex: 0 } } : {});
    started = true;
    last = null;
  };
  const finish = () => {
    if (pass) pass.end();
    pass = null;
    cbs.push(enc.finish());
  };
  enc = device.createCommandEncoder();
  begin();
  let dispatches = 0;
  const offs = [0];
  for (const it of items) {
    if (it.copy) {
      pass.end();
      enc.copyBufferToBuffer(...it.copy);
      begin();
      continue;
    }
    offs[0] = it.offset;
    for (const op of it.ops) {
      if (cuts.has(dispatches)) { finish(); enc = device.createCommandEncoder(); begin(); }
      const sel = select(op, it);
      if (!sel) continue;   // an op that has no dispatch for this row count (graph.js: fuseQkvAttn)
      const { pipeline, grid } = sel;
      if (pipeline !== last) { pass.setPipeline(pipeline); last = pipeline; }
      pass.setBindGroup(0, op.bindGroup, offs);
      pass.dispatchWorkgroups(grid[0], grid[1], grid[2]);
      dispatches++;
    }
  }
  pass.end();
  pass = null;
  // an empty pass carries the end timestamp (after every dispatch of this submission)
  if (ts) enc.beginComputePass({ timestampWrites: { querySet: ts.set, endOfPassWriteIndex: 1 } }).end();
  let at = 0;
  for (const [src, off, size] of reads) {
    enc.copyBufferToBuffer(src, off, staging, at, size);
    at += size;
  }
  if (ts) {
    enc.resolveQuerySet(ts.set, 0, 2, ts.buf, 0);
    enc.copyBufferToBuffer(ts.buf, 0, ts.read, 0, 16);
  }
  finish();
  return { cbs, dispatches };
}

/** Dispatch indices where a new command buffer starts: a small first one (the GPU starts early), then equal parts. */
function cutPoints(total, splits) {
  const S = Math.max(1, Math.min(splits, Math.floor(total / 4)));
  const cuts = new Set();
  if (S > 1) {
    const first = Math.max(1, Math.round(total * 0.06));
    for (let j = 1; j < S; j++) cuts.add(first + Math.round(((total - first) * (j - 1)) / (S - 1)));
  }
  return cuts;
}
