#!/usr/bin/env bash
# Create or reuse .venv with the tested torch/torchvision pair and this project (editable, with test extras).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.oracle-search-installed
want=$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setting up .venv (first time: a few minutes)" >&2
  .venv/bin/python -m pip install -q --upgrade pip 2>/dev/null || true
  # The tested pair; a CPU-only torch 2.13 cannot pair with PyPI's torchvision.
  .venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import torch, torchvision, ray, optuna, mnist1d, oracle_search" 
  echo "$want" > "$stamp"
fi
