// cpu_pool_worker.js — one helper thread of app/cpu_pool.js (a browser Worker, or a Node worker thread).
//
// It gets the compiled kernel (app/cpu_pool.wasm) and the shared memory, then loops: wait for the control block's
// `gen` to move, take chunks of the job written there (`claim`, `runChunk`) until none is left, counting each
// `done`. It spins for a moment before sleeping on `gen` (Atomics.wait), since a forward pass
// asks for its products a few tens of microseconds apart.

import { CTRL, CTRL_BYTES, SPIN_MS, claim, runChunk } from './cpu_pool.js';

async function start({ module, memory }, reply) {
  const { exports } = await WebAssembly.instantiate(module, { env: { memory } });
  const fn = exports.exactspec_matvec;
  const c = new Int32Array(memory.buffer, 0, CTRL_BYTES / 4);
  reply({ ready: true });
  let gen = Atomics.load(c, CTRL.gen);
  for (;;) {
    const t0 = performance.now();
    let spins = 0;
    while (Atomics.load(c, CTRL.gen) === gen) {
      if ((++spins & 1023) === 0 && performance.now() - t0 > SPIN_MS) Atomics.wait(c, CTRL.gen, gen);
    }
    gen = Atomics.load(c, CTRL.gen);
    if (Atomics.load(c, CTRL.quit)) return;
    const rows = c[CTRL.rows], d = c[CTRL.d], m = c[CTRL.n], out = c[CTRL.out], C = c[CTRL.chunks];
    const w = c[CTRL.w], x = c[CTRL.x];
    for (let k = claim(c, gen, C); k >= 0; k = claim(c, gen, C)) {
      runChunk(fn, w, rows, d, x, m, out, k, C);
      Atomics.add(c, CTRL.done, 1);
      Atomics.notify(c, CTRL.done);
    }
  }
}

function fail(reply, e) { reply({ error: String((e && e.message) || e) }); }

if (typeof WorkerGlobalScope !== 'undefined') {
  self.onmessage = (e) => { start(e.data, (m) => self.postMessage(m)).catch((err) => fail((m) => self.postMessage(m), err)); };
} else {
  const { parentPort } = await import('worker_threads');
  parentPort.once('message', (msg) => {
    start(msg, (m) => parentPort.postMessage(m)).catch((err) => fail((m) => parentPort.postMessage(m), err));
  });
}
