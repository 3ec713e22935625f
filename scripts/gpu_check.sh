#!/usr/bin/env bash
# The GPU checks behind the README's GPU figures, as run on a lent GPU machine that has PyTorch but no Ray:
#   1. benchmarks/gpu_tune_trial.py: a real Ray Tune trial (and a fused one) training one cycle on the GPU;
#   2. benchmarks/fused_throughput.py: fused max_lr candidates against separate runs (ResNet-20, VGG-19);
#   3. optional (REGIMES=1): the Oracle on mnist1d-mlp with 3 seeds in both weight regimes, on the machine's CPUs.
# Ray and the few pure-Python packages it lacks travel with the checkout: RAY_TAR (an xz tarball of Ray's unpacked
# wheel) and WHEELS (a folder of wheels). Results go to OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}; mkdir -p "$out"
site=${SITE:-/tmp/oracle-site}; mkdir -p "$site"
if [ -n "${RAY_TAR:-}" ]; then tar -xJf "$RAY_TAR" -C "$site"; fi
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$WHEELS"/*.whl
fi
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/device.txt"
# The Tune trial first: it has never completed on a GPU, while the throughput figures exist already.
timeout 150 python3 benchmarks/gpu_tune_trial.py 2>&1 | tail -40 | tee "$out/gpu_tune_trial.txt"
timeout 300 python3 benchmarks/fused_throughput.py 2>&1 | tee "$out/fused_throughput.txt"
if [ "${REGIMES:-0}" = 1 ]; then
  for w in rewind continue; do
    start=$(date +%s)
    timeout 200 python3 -m oracle_search.cli oracle --out "/tmp/regime-$w" --weights "$w" --seeds 3 --max-concurrent 15 \
      > "$out/regime-$w.log" 2>&1
    echo "exit $? after $(( $(date +%s) - start )) s" >> "$out/regime-$w.log"
    tar -czf "$out/regime-$w.tgz" -C /tmp "regime-$w/results.parquet" "regime-$w/spec.json" 2>/dev/null
  done
fi
