#!/bin/bash
# Third call of the H200 speculation run (see bench/h200/h200_spec_prep.sh): join the champion from /tmp/champ/p0, p1
# and the carried p2, check its sha256, then `py/bench/gpu_spec.py --backend vulkan` with the shipped draft:
# champion tok/s alone and with greedy speculation for k = 1..4 (and that the tokens are identical) -> $OUT/spec_h200.txt
set -e
O=${OUT:-/tmp}
source bench/h200/h200_setup.sh
C=static/models/smollm2-135m-instruct-q4_1.gguf
cat /tmp/champ/p0 /tmp/champ/p1 .devcarry/spec2/p2 > $C
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $C" | sha256sum -c
for prompt in "Hi! What are three fun things to do on a rainy afternoon?" \
              "Repeat this list exactly, then add one more item: apples, pears, plums, cherries, apples, pears."; do
  timeout 100 python3 py/bench/gpu_spec.py --backend vulkan --node /tmp/nb/node --prompt "$prompt" \
    --max-new-tokens 64 --ks 1,2,3,4 2>&1 | tee -a $O/spec_h200.txt
done
