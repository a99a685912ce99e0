#!/usr/bin/env bash
# The demo pair with its target on a local rpc-server against the same pair all local: tok/s
# side by side (local and RPC runs alternate, ROUNDS times), so the ratio is the cost of the RPC
# round trips (on one machine the server shares this machine's cores; over a network it adds
# the link's latency per pass).
#   bash packaging/research/bench_rpc.sh                 N=64 tokens, 2 rounds
#   N=128 ROUNDS=3 bash packaging/research/bench_rpc.sh
#   bash packaging/research/bench_rpc.sh -p "def fibonacci(n):"   more flags go to every draftlens bench
# Needs rpc-server (built here when missing) and a llama-cpp-python with RPC (packaging/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
PY="${DRAFTLENS_VENV:-.venv}/bin/python"
N="${N:-64}"
ROUNDS="${ROUNDS:-2}"
TOOLS="${DRAFTLENS_LLAMA_TOOLS:-packaging/.build/llama-tools}"
[ -x "$TOOLS/bin/rpc-server" ] || bash packaging/build_llama_tools.sh rpc-server
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
GGML_CPU_TILED_MM=0 "$TOOLS/bin/rpc-server" -H 127.0.0.1 -p "$PORT" -t "$(nproc)" \
  >"${TMPDIR:-/tmp}/bench_rpc_server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
sleep 2

bench() {  # label, then draftlens bench flags
  local label="$1"; shift
  "$PY" -m ui.launcher bench -n "$N" --draft-max 4 --json "$@" 2>/dev/null | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
plain, spec, same = (r[key] for key in ("plain_tok_s", "spec_tok_s", "identical"))
print("%-16s plain %6.1f tok/s   speculative (k=4) %6.1f tok/s   greedy identical: %s"
      % (sys.argv[1], plain, spec, same))' "$label"
}
for _ in $(seq "$ROUNDS"); do
  bench "local" "$@"
  bench "target over RPC" "$@" --rpc "127.0.0.1:$PORT"
done
