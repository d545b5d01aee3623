#!/bin/bash
# Prepare the H200 run of `bench gpu_spec` (champion tok/s with and without speculation, both models on the engine).
# The 98 MB champion does not fit one call's 64 MiB carry beside the tree and .devcarry/gpu, so it travels in three
# parts over three back-to-back calls (a warm machine keeps /tmp for 30 s):
#   call 1: run(command="mkdir -p /tmp/champ && cp .devcarry/spec0/p0 /tmp/champ/", carry=[".devcarry/spec0"])
#   call 2: run(command="cp .devcarry/spec1/p1 /tmp/champ/", carry=[".devcarry/spec1"])
#   call 3: run(command="bash bench/h200/h200_spec_run.sh", carry=[".devcarry/gpu", ".devcarry/spec2"], timeout_s=240)
# Needs bench/h200/h200_prep.sh's .devcarry/gpu too. Run here after `python build.py setup`.
set -e
cd "$(dirname "$0")/../.."
C=static/models/smollm2-135m-instruct-q4_1.gguf
for i in 0 1 2; do mkdir -p .devcarry/spec$i; done
head -c 40000000 $C > .devcarry/spec0/p0
tail -c +40000001 $C | head -c 40000000 > .devcarry/spec1/p1
tail -c +80000001 $C > .devcarry/spec2/p2
cat .devcarry/spec0/p0 .devcarry/spec1/p1 .devcarry/spec2/p2 | sha256sum
ls -la .devcarry/spec*/
