#!/usr/bin/env bash
# Builds .venv-real: real SGLang 0.5.23 (CPU engine) plus the kit, editable, so that
# `.venv-real/bin/launcher serve` starts the real `python -m sglang.launch_server`.
# Re-running it on a finished venv only re-checks the pins.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${REAL_VENV:-$ROOT/.venv-real}"
PY="${PYTHON:-python3.11}"
REQ="$ROOT/tools/real/requirements.txt"
PINS="$ROOT/tools/real/constraints.txt"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -q -r "$REQ" -c "$PINS"
# Without --no-deps these two pull GPU-only kernels or re-resolve torch.
"${PIP[@]}" install --no-deps torchvision==0.29.1 sglang==0.5.23
# The kit itself, editable, with its test dependencies (pytest, httpx, ...).
"${PIP[@]}" install -q -e "$ROOT[dev]" -c "$PINS"
"$VENV/bin/python" -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)"
touch "$VENV/.real-installed"
