#!/usr/bin/env bash
# Set up (or reuse) the environment, then run the main job on the embedded default (MNIST-1D MLP).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/oracle-search compare --out runs/mnist1d-mlp "$@"
