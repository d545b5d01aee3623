#!/bin/bash
# Writes the decode-loop variants measured in this folder's calls as product_sides.sh overlays, into the git-ignored
# .devcarry/overlays/NAME/ (carry it: run(..., carry=[".devcarry/overlays", ...]) with OVERLAYS=.devcarry/overlays):
# each variants/NAME.patch applied to the files at the commit it was made against (BASES below).
#   bash bench/h200/results/2026-12-06e/overlays.sh [NAME ...]   (default: all)
set -eu
cd "$(dirname "$0")/../../../.."
declare -A BASES=([nohint]=c9c58e3 [gate]=c9c58e3 [both]=c9c58e3 [chainfirst]=c9c58e3 [probe2]=d9cbd9a)
V=bench/h200/results/2026-12-06e/variants
for name in ${@:-${!BASES[@]}}; do
  base=${BASES[$name]:?unknown variant $name}
  t=$(mktemp -d)
  for f in $(sed -n 's|^+++ b/||p' $V/$name.patch); do
    mkdir -p "$t/$(dirname "$f")" && git show "$base:$f" > "$t/$f"
  done
  (cd "$t" && git apply -p1 "$OLDPWD/$V/$name.patch")
  rm -rf .devcarry/overlays/$name && mkdir -p .devcarry/overlays && mv "$t" .devcarry/overlays/$name
  echo "overlay $name (from $base): $(cd .devcarry/overlays/$name && find . -type f | tr '\n' ' ')"
done
