// lib/tile_call — y = the tile routine for a tile of N rows (uniform: the tile's row count) under override TILE:
// dot8 for 5..8 rows of a TILE 8 pipeline, dot4 for 2..4 rows of a TILE 4 or 8 one, else dot1 (lib/tiles), on ARGS
// ("r0, have1, t, n, lane"), for the kernel's main. A tile with fewer rows than TILE so does the work of its rows,
// not of TILE (an n-gram chain's pass on the GPU runs the pipelines of its k + 1 rows and computes the rows it chose:
// often one). Every slot of every routine runs the same code (lib/tiles): a row's bits do not depend on the choice.
// #param ARGS
// #param N

if (TILE == 8u && ${N} > 4u) {
  y = dot8(${ARGS});
} else if (TILE >= 4u && ${N} > 1u) {
  y = dot4(${ARGS});
} else {
  y = dot1(${ARGS});
}
