#!/usr/bin/env bash
# Set up (or reuse) the environment, then run the whole test suite, slow cluster tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -ra "$@"
