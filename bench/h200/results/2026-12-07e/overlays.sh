#!/bin/bash
# The overlay of call 5 (side S): py/exactspec/schedule.py with CHAIN_SLACK 1.25 instead of 1.1, made from the tree
# at revision 63a5b5b into .devcarry/overlays/S (bench/h200/product_sides.sh OVERLAYS).
set -eu
cd "$(dirname "$0")/../../../.."
rm -rf .devcarry/overlays && mkdir -p .devcarry/overlays/S/py/exactspec
sed 's/^CHAIN_SLACK = 1.1$/CHAIN_SLACK = 1.25/' py/exactspec/schedule.py > .devcarry/overlays/S/py/exactspec/schedule.py
diff py/exactspec/schedule.py .devcarry/overlays/S/py/exactspec/schedule.py || true
