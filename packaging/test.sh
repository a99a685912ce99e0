#!/usr/bin/env bash
# Installs DraftLens with its test tools into ./.venv (if needed) and runs the test suite.
# Tests build their own tiny models and never touch a model hub.
set -euo pipefail
cd "$(dirname "$0")/.."
bash packaging/setup.sh --dev
export HF_HUB_OFFLINE=1 QT_QPA_PLATFORM=offscreen
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
