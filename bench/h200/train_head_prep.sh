#!/bin/bash
# Prepare .devcarry/head/data (git-ignored, ~17 MB) for bench/h200/train_head.sh: the pinned training packages
# (PyPI chitchat-dataset 0.9.0, Debian fortunes, fortunes-min, python3.11-doc; sha256 checked by prep against
# exactspec_train.data.SOURCES) unpacked under .devcarry/head/src, then exactspec_train.prep: the corpus rows and the
# teacher prompts (12,288 + 256 long), each checked against the 136-prompt workload.
# Run here (it needs pip download and apt-get download); takes a few minutes on the 2-core machine. COPY_SHARE (default
# 0, the prompts of every head trained so far): the share of teacher prompts whose answers copy or repeat. SEED
# (default: prep's, exactspec_train.data.PREP_SEED_DEFAULT, 20261129, the prompts of every head trained before
# 2026-12-06): another seed draws other teacher prompts from the same templates and corpora (new answers for a head
# trained on from a shipped one: the head shipped 2026-12-06 used SEED=20261206). STRUCTURED_SHARE (default 0): the
# share of the other teacher prompts of workload-like kinds (exactspec_train.data.structured_task: disagreeing
# sources, memory stores, strict JSON, long ledgers, vague requests, string transforms).
set -e
cd "$(dirname "$0")/../.."
R=.devcarry/head
mkdir -p $R/pkgs $R/src
(cd $R/pkgs && { [ -f chitchat_dataset-0.9.0-py3-none-any.whl ] || pip download --no-deps chitchat-dataset==0.9.0; }
 for p in fortunes fortunes-min python3.11-doc; do ls ${p}_*.deb >/dev/null 2>&1 || apt-get download $p; done)
(cd $R/src && unzip -q -o ../pkgs/chitchat_dataset-0.9.0-py3-none-any.whl && for d in ../pkgs/*.deb; do dpkg-deb -x "$d" deb; done)
PYTHONPATH=py OPENBLAS_NUM_THREADS=1 python -m exactspec_train.prep --src $R/src --pkgdir $R/pkgs \
  --champion static/models/smollm2-135m-instruct-q4_1.gguf --workload tests/data/workload.jsonl \
  --out $R/data --n-prompts 12288 --copy-share ${COPY_SHARE:-0} \
  --structured-share ${STRUCTURED_SHARE:-0} ${SEED:+--seed $SEED}
rm -rf $R/src                      # (the packages stay in $R/pkgs for a rerun; only $R/data is carried)
du -sh $R/data
