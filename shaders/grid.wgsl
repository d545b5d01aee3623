// grid — the dispatch sizes of an n-gram chain round's verify pass for the rows the GPU chose (app/gpu/model.js
// chainSub with engine option chainIndirect). shaders/chain.wgsl opens the round with c proposals and leaves its Step
// (n = 1 + c rows) in `slot`; the pass is encoded for a grid of k + 1 rows. This kernel, dispatched between the
// two, copies the pass's grids for n rows from `table` (made by the host for n = 1 .. k + 1: model.js chainGrids)
// into `args`, which the pass's dispatches read (dispatchWorkgroupsIndirect), so that the workgroups of rows n ..
// k have no launch at all:
//   args[3 d + i] = table[3 (count (n - 1) + d) + i]       d = 0 .. count - 1 (the pass's dispatches), i = 0 .. 2
// n outside 1 .. rows (never: chain.wgsl keeps c <= k) reads the table's last row, the grid of k + 1 rows.
//
// Work split: one workgroup; invocation l copies the words l, l + WG_SIZE, ... of args.
// Batch invariance: no arithmetic on values (grid sizes only). Only the row dimension of a grid shrinks (graph.js
// gridAt: the grid the pass's pipeline needs for n rows), and every kernel walks its rows by workgroup id and stops at
// step.n, so each computed row runs in the same workgroups with the same code as with the grid of k + 1 rows.
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset; unused: every kernel has the binding)
//   2 slot    array<u32>  (slot words) the round's Step, n first (chain.wgsl writes it)
//   3 table   array<u32>  (rows, count, 3) the pass's grids for n = 1 .. rows
//   4 args    array<u32>  read_write (count, 3) the grids the pass's dispatches read

override WG_SIZE: u32 = 64;

struct Params {
  count: u32,   // dispatches of the pass
  rows: u32,    // k + 1: the table's rows
  _p0: u32, _p1: u32,
};

// #include step
@group(0) @binding(2) var<storage, read> slot: array<u32>;
@group(0) @binding(3) var<storage, read> table: array<u32>;
@group(0) @binding(4) var<storage, read_write> args: array<u32>;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(local_invocation_index) lid: u32) {
  let n = slot[0];
  let row = select(params.rows - 1u, n - 1u, n >= 1u && n <= params.rows);
  let base = row * params.count * 3u;
  for (var i = lid; i < params.count * 3u; i = i + WG_SIZE) {
    args[i] = table[base + i];
  }
}
