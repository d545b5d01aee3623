// profile.js — bench only (engine option timestamps): GPU time per kind of dispatch of one forward.

/** GPU microseconds per kind of dispatch ('qkv', 'attention', ..., 'logits') for one forward of n rows at the model's
 * current length, each dispatch in its own timed compute pass (so each includes a pass's overhead). The length does
 * not change. */
export async function profileOps(model, n) {
  if (!model.ts) throw new Error('profile needs createEngine(gpu, {timestamps: true}) and timestamp-query');
  model.usable();
  if (!Number.isInteger(n) || n < 1 || n > model.plan.maxRows || model.length + n > model.config.seq_len) throw new Error(`profile: bad n ${n}`);
  const { device } = model;
  device.queue.writeBuffer(model.bufs.tokens, 0, new Uint32Array(n));
  device.queue.writeBuffer(model.stepBuf, 0, model.stepKernel.pack('step', { n, start_pos: model.length, out_lo: n - 1,
    out_base: 0, tok0: 0, ...model.stepExtra?.() }));
  const layers = model.usesBlocks(model.length + n) ? model.opsFar : model.ops;   // (as Submission.pass picks)
  const list = [...layers, ...model.headOps].filter((op) => op.select(op.label === 'logits' ? 1 : n));
  const qset = device.createQuerySet({ type: 'timestamp', count: 2 * list.length });
  const qb = device.createBuffer({ size: 16 * list.length, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const rb = device.createBuffer({ size: 16 * list.length, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  list.forEach((op, i) => {
    const pass = enc.beginComputePass({ timestampWrites: { querySet: qset, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } });
    const { pipeline, grid } = op.select(op.label === 'logits' ? 1 : n);
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, op.bindGroup, [0]);
    pass.dispatchWorkgroups(...grid);
    pass.end();
  });
  enc.resolveQuerySet(qset, 0, 2 * list.length, qb, 0);
  enc.copyBufferToBuffer(qb, 0, rb, 0, 16 * list.length);
  device.queue.submit([enc.finish()]);
  await rb.mapAsync(GPUMapMode.READ);
  const q = new BigUint64Array(rb.getMappedRange().slice(0));
  rb.unmap();
  qset.destroy(); qb.destroy(); rb.destroy();
  const byKind = {};
  list.forEach((op, i) => { byKind[op.kind] = (byKind[op.kind] ?? 0) + Number(q[2 * i + 1] - q[2 * i]) / 1e3; });
  return byKind;
}
