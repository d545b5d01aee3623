#!/bin/bash
# The foreign draft (Llama-2 vocabulary, SentencePiece 32,000) trained on the H200 within a budget, in the SAME
# device call as bench/h200/train_head.sh (which writes the champion's answers to /tmp/gen/gen.npz after its
# generation stage): start both, e.g.
#     OUT=$OUT/head bash bench/h200/train_head.sh & OUT=$OUT/foreign BUDGET_S=540 bash bench/h200/foreign_train.sh; wait
# (or as train_head.sh's AFTER_GEN with a smaller BUDGET_S: it then starts with gen.npz already there).
# Training starts at once on the corpora; gen.npz joins when it appears (waited for up to 60% of the budget).
#   carry: .devcarry/vocab/data   (made here by bench/h200/foreign_prep.sh, ~20 MB)
#   needs: python3 with torch and numpy; /tmp/champ/champ.gguf (optional: the embedding init; without it random)
#   env:   BUDGET_S (wall clock for everything, default 540), GEN (default /tmp/gen/gen.npz), TINY=1 (CPU smoke test)
#   writes to $OUT: draft_llama2.gguf (Q8_0, ~13.3 MB, its tokenizer inside), run.json, log.txt (gen_info.json)
set -e
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/foreign/out}
mkdir -p "$O"
PY=$(command -v python3)
export PYTHONPATH=$PWD/py OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
EXTRA=()
[ -n "$TINY" ] && EXTRA+=(--tiny)
C=/tmp/champ/champ.gguf
[ -f "$C" ] && EXTRA+=(--champion "$C")
$PY -m exactspec_train.foreign_run --budget-s "${BUDGET_S:-540}" --gen "${GEN:-/tmp/gen/gen.npz}" \
  --data .devcarry/vocab/data --workload tests/data/workload.jsonl --out "$O" "${EXTRA[@]}"
ls -la "$O"
