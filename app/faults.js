// faults.js — fault injection (issue 12), shipped in the page and off unless armed. The same table as
// py/exactspec/faults.py (tests/test_faults.py checks it): a fault {kind, phase, round} fires once, in the next
// answer, at its phase in round `round` (1-based; the first time that phase is reached at or after that round; load
// and prefill ignore the round).
//   page:   exactspec.faults.arm({kind, phase, round}) | arm('kind@phase:round,...'), exactspec.faults.list(),
//           ?faults=kind@phase:round,... in the URL (app/main.js arms them before boot)
//   worker: core.js / worker.js / store/opfs.js take the load-phase faults (WorkerFaults.take); the decode loop's
//           phases go to Python with each generate (exactspec.faults.FaultPlan), which hands the host's kinds back
//           (core.js: faultHost) — device_lost destroys the GPU device, worker_killed ends the worker as a crash would.

const TABLE = /* TABLE */{"kinds": ["worker_killed", "device_lost", "gpu_alloc", "opfs_write", "opfs_read", "exception", "draft_only"], "phases": ["load", "prefill", "draft", "verify", "commit"], "applies": {"worker_killed": ["load", "prefill", "draft", "verify", "commit"], "device_lost": ["load", "prefill", "draft", "verify", "commit"], "gpu_alloc": ["load"], "opfs_write": ["load"], "opfs_read": ["load"], "exception": ["prefill", "draft", "verify", "commit"], "draft_only": ["load", "prefill", "draft", "commit"]}}/* END TABLE */;

export const KINDS = Object.freeze([...TABLE.kinds]);
export const PHASES = Object.freeze([...TABLE.phases]);
export const APPLIES = Object.freeze(Object.fromEntries(Object.entries(TABLE.applies).map(([k, v]) => [k, Object.freeze([...v])])));
export const DECODE_PHASES = Object.freeze(['prefill', 'draft', 'verify', 'commit']);
// what a fault kind needs to exist at all: the WebGPU engine (device_lost, gpu_alloc)
export const NEEDS_GPU = Object.freeze(['device_lost', 'gpu_alloc']);

export class FaultError extends Error {}

/** {kind, phase, round?} -> {kind, phase, round} (round 1 when left out), or a FaultError saying why not. */
export function checkFault(f) {
  if (!f || typeof f !== 'object') throw new FaultError(`a fault is an object {kind, phase, round}, not ${JSON.stringify(f)}`);
  const { kind, phase } = f;
  const round = f.round === undefined || f.round === null ? 1 : f.round;
  if (!KINDS.includes(kind)) throw new FaultError(`fault kind ${JSON.stringify(kind)} is not one of ${KINDS.join(', ')}`);
  if (!PHASES.includes(phase)) throw new FaultError(`fault phase ${JSON.stringify(phase)} is not one of ${PHASES.join(', ')}`);
  if (!APPLIES[kind].includes(phase)) {
    throw new FaultError(`fault ${kind} does not apply to phase ${phase} (it applies to ${APPLIES[kind].join(', ')})`);
  }
  if (!Number.isInteger(round) || round < 1 || round > 1e6) throw new FaultError(`fault round ${JSON.stringify(round)} must be a whole number from 1`);
  return { kind, phase, round };
}

/** 'kind@phase:round,kind@phase' -> checked faults (the ?faults= syntax; py/exactspec/faults.py parse_faults). */
export function parseFaults(text) {
  const out = [];
  for (let part of String(text || '').split(',')) {
    part = part.trim();
    if (!part) continue;
    const [kind, rest = ''] = part.split('@');
    const [phase, r] = rest.split(':');
    if (r !== undefined && !/^\d+$/.test(r)) throw new FaultError(`fault ${JSON.stringify(part)}: round ${JSON.stringify(r)} is not a whole number`);
    out.push(checkFault({ kind, phase, round: r === undefined ? 1 : Number(r) }));
  }
  return out;
}

/** The page's registry: what is armed and what fired (it outlives any one worker). */
export class FaultRegistry {
  constructor(onChange = () => {}) {
    this.items = [];          // {id, kind, phase, round, state: 'armed' | 'fired', fired?: {...}, recovery?: [...]}
    this.nextId = 1;
    this.onChange = onChange;
  }

  /** Arm one fault, a list, or the URL syntax; returns the armed entries. Throws FaultError on a bad spec. */
  arm(spec) {
    const list = typeof spec === 'string' ? parseFaults(spec) : (Array.isArray(spec) ? spec : [spec]).map(checkFault);
    const added = list.map((f) => ({ id: this.nextId++, ...f, state: 'armed' }));
    this.items.push(...added);
    this.onChange();
    return added.map((x) => ({ ...x }));
  }

  /** Disarm every armed fault (fired ones stay listed). */
  clear() {
    this.items = this.items.filter((x) => x.state !== 'armed');
    this.onChange();
  }

  /** {armed: [...], fired: [...]}: what is armed, what fired (where, and the recovery taken). */
  list() {
    const copy = (x) => JSON.parse(JSON.stringify(x));
    return { armed: this.items.filter((x) => x.state === 'armed').map(copy), fired: this.items.filter((x) => x.state === 'fired').map(copy) };
  }

  armed() { return this.items.filter((x) => x.state === 'armed').map(({ id, kind, phase, round }) => ({ id, kind, phase, round })); }

  /** A worker said fault `rec.id` fired (event.fault): {id, kind, phase, round, at_round?, at_token?}. */
  fired(rec) {
    const it = this.items.find((x) => x.id === rec.id);
    if (!it || it.state === 'fired') return;
    it.state = 'fired';
    it.fired = { at_round: rec.at_round ?? null, at_token: rec.at_token ?? null, detail: rec.detail ?? null };
    this.onChange();
  }

  /** The recovery taken for faults that fired during an answer (from its result). */
  recovered(ids, recovery) {
    for (const it of this.items) if (ids.includes(it.id)) it.recovery = recovery;
  }

  /** A worker died: worker_killed faults it held count as fired (its last message may not have arrived). */
  workerDied(sentIds) {
    for (const it of this.items) {
      if (it.state === 'armed' && it.kind === 'worker_killed' && sentIds.includes(it.id)) this.fired({ id: it.id, detail: 'worker ended' });
    }
  }
}

/** The worker's copy of the armed faults; take() fires one (reporting it first), decodeFaults() go to Python. */
export class WorkerFaults {
  constructor(onFire = () => {}) {
    this.armed = [];
    this.onFire = onFire;
  }

  set(list) { this.armed = (list || []).map((f) => ({ id: f.id, ...checkFault(f) })); }

  /** The armed fault of `kind` (one of kinds) at `phase`, removed and reported; null when none is armed. */
  take(kinds, phase, detail = null) {
    const ks = Array.isArray(kinds) ? kinds : [kinds];
    const i = this.armed.findIndex((f) => ks.includes(f.kind) && f.phase === phase);
    if (i < 0) return null;
    const [f] = this.armed.splice(i, 1);
    this.onFire({ ...f, at_round: 0, at_token: 0, detail });
    return f;
  }

  /** The faults of the decode loop's phases, for one generate (Python fires them; the worker forgets them). */
  decodeFaults() {
    const out = this.armed.filter((f) => DECODE_PHASES.includes(f.phase));
    this.armed = this.armed.filter((f) => !DECODE_PHASES.includes(f.phase));
    return out;
  }

  has(kind, phase) { return this.armed.some((f) => f.kind === kind && f.phase === phase); }
}

/** The next createBuffer of `device` fails as out-of-memory (what WebGPU throws for mappedAtCreation buffers). */
export function failNextAllocation(device) {
  const orig = device.createBuffer;
  device.createBuffer = function (desc) {
    device.createBuffer = orig;
    throw new RangeError(`out of memory: injected allocation failure (${desc && desc.label ? desc.label : 'buffer'}, ${desc && desc.size} bytes)`);
  };
}

/** A Blob that reads back like `file` with one byte changed (a damaged stored file). */
export async function damaged(file) {
  const at = Math.floor(file.size / 2);
  const byte = new Uint8Array(await file.slice(at, at + 1).arrayBuffer());
  byte[0] ^= 0xff;
  return new Blob([file.slice(0, at), byte, file.slice(at + 1)], { type: file.type });
}
