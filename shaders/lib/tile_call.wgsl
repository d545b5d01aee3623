// lib/tile_call — y = the tile routine of override TILE (dot8, dot4 or dot1 of lib/tiles) on ARGS
// ("r0, have1, t, n, lane"), for the kernel's main.
// #param ARGS

if (TILE == 8u) {
  y = dot8(${ARGS});
} else if (TILE == 4u) {
  y = dot4(${ARGS});
} else {
  y = dot1(${ARGS});
}
