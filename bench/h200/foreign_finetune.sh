#!/bin/bash
# ONE H200 call (~3 minutes): fine-tune the foreign draft (Llama-2 vocabulary) on the champion's answers. The first
# training (train_all.sh, 2026-12-01) saw the corpora only: its helper that converts the answers could not start a
# pool (fixed since); this continues that draft (--init-from) with the answers joined from the start.
#   carry: .devcarry/vocab/data (bench/h200/foreign_prep.sh, ~20 MB) and .devcarry/ftcarry (gen.npz: the champion's
#          10,072 answers of that run, ~4.7 MB; draft_llama2.gguf: the corpus-trained draft, ~14.8 MB)
#   writes to $OUT: draft_llama2.gguf, run.json, log.txt
#   env: BUDGET_S (default 170: wall clock of foreign_run, export included; the answers take ~40 s to convert)
set -e
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/foreign_ft}
mkdir -p "$O"
export PYTHONPATH=$PWD/py OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=8
python3 -m exactspec_train.foreign_run --budget-s "${BUDGET_S:-170}" --gen .devcarry/ftcarry/gen.npz \
  --data .devcarry/vocab/data --out "$O" --init-from .devcarry/ftcarry/draft_llama2.gguf --gen-wait-s 60 \
  --lr 1e-3 --warmup-s 5 --gen-weight 0.6 --max-epochs 6 --workload tests/data/workload.jsonl
rm -f "$O"/gen_rows.npy "$O"/gen_w.npy "$O"/gen_info.json
ls -la "$O"
