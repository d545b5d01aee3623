#!/bin/bash
# Here, around a device call: the working tree travels with every call (64 MiB a call in all, carry included), and
# ~50 MB of it is never read there (results of earlier calls, the rendered bench reports, the two draft models and
# the draft head). `--out` deletes those tracked files from the working tree (only after checking none of them has
# uncommitted changes); `--back` restores them from git. The tree then takes ~3 MB of a call instead of ~54, so the
# first call can carry node, Dawn, Pyodide AND a champion part, and the product's A/B takes three calls, not four.
#   bash bench/h200/slim.sh --out ; run(...) ; bash bench/h200/slim.sh --back
# Never commit between the two (the deletions would be recorded). Runs that need the shipped draft model (drafter
# `model`) or the head (`--head`) must not be slimmed: SLIM_KEEP="static/models/draft-smollm2-kd.gguf" keeps paths.
set -eu
cd "$(dirname "$0")/../.."
PATHS="bench/h200/results docs/bench bench/results static/models/draft-llama2.gguf static/models/draft-smollm2-kd.gguf
  static/models/head-smollm2.gguf static/models/head-smollm2.manifest.json"
case "${1:-}" in
  --out)
    if [ -n "$(git status --porcelain -- $PATHS)" ]; then
      echo "slim.sh: uncommitted changes under the paths it would delete; commit them first:" >&2
      git status --short -- $PATHS >&2
      exit 2
    fi
    keep=" ${SLIM_KEEP:-} "
    git ls-files -z -- $PATHS | while IFS= read -r -d '' f; do
      case "$keep" in *" $f "*) ;; *) rm -f -- "$f" ;; esac
    done
    echo "slim.sh: tree now $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes (restore: --back)"
    ;;
  --back)
    git checkout -- $PATHS
    echo "slim.sh: restored; $(git status --porcelain | wc -l) paths differ from HEAD"
    ;;
  *) echo "usage: bash bench/h200/slim.sh --out | --back" >&2; exit 2 ;;
esac
