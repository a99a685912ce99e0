#!/usr/bin/env bash
# The benchmark on the real demo pair: each line runs plain and speculative decoding side by
# side in one process (alternating), so every ratio is measured under the same conditions.
# Results go to bench-results/*.json; the README's table is copied from them.
#   bash packaging/research/benchmark.sh            everything (about 15-25 minutes on 2 CPU cores)
#   bash packaging/research/benchmark.sh llamacpp   only the llama.cpp rows
#   bash packaging/research/benchmark.sh vs-llamacpp   DraftLens against llama.cpp's own programs
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
DL=".venv/bin/draftlens"
OUT=bench-results
mkdir -p "$OUT"
WHICH="${1:-all}"
N="${BENCH_N:-128}"
ROUNDS="${BENCH_ROUNDS:-1}"

"$DL" models fetch-demo >/dev/null

bench() {  # name, then draftlens bench flags
  local name="$1"; shift
  echo "== $name: draftlens bench $*" >&2
  "$DL" bench --rounds "$ROUNDS" "$@" --json | tee "$OUT/$name.json"
}

if [ "$WHICH" = all ] || [ "$WHICH" = llamacpp ]; then
  .venv/bin/python -m pytest -q -m real_models tests/test_real_pair.py -p no:cacheprovider
  bench llamacpp-draft-k4 -n "$N" --draft-max 4
  bench llamacpp-draft-k2 -n "$N" --draft-max 2
  bench llamacpp-draft-adaptive -n "$N" --draft-max 8 --adaptive
  bench llamacpp-hybrid-adaptive -n "$N" --draft-max 8 --adaptive --ngram
  bench llamacpp-ngram-edit --ngram --suite edit --chat -n 400 --draft-max 64 --adaptive
  bench llamacpp-ngram-edit-k16 --ngram --suite edit --chat -n 400 --draft-max 16
  # batch-invariant CPU kernels: greedy output bit-identical to plain decoding, slower
  bench llamacpp-exact-draft-k4 -n "$N" --draft-max 4 --exact-kernels
  bench llamacpp-exact-draft-adaptive -n "$N" --draft-max 8 --adaptive --exact-kernels
  bench llamacpp-exact-ngram-edit --ngram --suite edit --chat -n 400 --draft-max 64 \
    --adaptive --exact-kernels
fi
if [ "$WHICH" = all ] || [ "$WHICH" = vs-llamacpp ]; then
  # DraftLens beside llama.cpp's own llama-bench and llama-speculative-simple
  .venv/bin/python packaging/research/bench_vs_llamacpp.py --json "$OUT/vs-llamacpp.json"
fi
if [ "$WHICH" = all ] || [ "$WHICH" = torch ]; then
  bench torch-draft-k4 --backend torch -n 48 --draft-max 4 --compare-hf
  bench torch-draft-adaptive --backend torch -n 48 --draft-max 8 --adaptive --compare-hf
fi
.venv/bin/python packaging/research/bench_table.py "$OUT"
