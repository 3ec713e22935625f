#!/usr/bin/env bash
# The GPU checks behind the README's GPU figures, in one run of under 5 minutes on a lent GPU machine that has
# PyTorch but no Ray. Stages, in order, each writing its result under OUT as soon as it finishes:
#   1. benchmarks/gpu_tune_trial.py: a plain and a fused Ray Tune trial training one cycle on the GPU;
#   2. benchmarks/fused_throughput.py: fused max_lr candidates against separate runs (ResNet-20, VGG-19,
#      K = 1, 4, 8, 16, 32; same precision and memory format for both);
#   3. a full `compare` on the resnet20-cifar10 preset on synthetic CIFAR-shaped data (torchvision's folder
#      format, written here), through Ray with 4 trials sharing the GPU (--gpus-per-trial 0.25);
#   4. GPU utilisation sampled from nvidia-smi every second during stage 3, and its mean and peak.
# --cpu rehearses every stage on a machine without a GPU (tests/test_fused.py runs it): a fake Ray GPU in stage 1,
# a few steps in stage 2, CPU trials on two grid values in stage 3 (--cpus-per-trial 0.5), the load average
# sampled in stage 4.
# Nothing downloads: Ray and the few pure-Python packages a bare machine lacks travel with the checkout, as
# RAY_TAR (an xz tarball of Ray's unpacked wheel) and WHEELS (a folder of wheels). Results go to OUT (default
# ./gpu-out). STAGES (default "1 2 3") picks the stages to run, so a rerun on the lent machine can repeat only the
# ones that failed; stage 4 samples whenever stage 3 runs. Exit status: the number of failed stages.
set -uo pipefail
cd "$(dirname "$0")/.."
cpu=0
[ "${1:-}" = "--cpu" ] && cpu=1
out=${OUT:-gpu-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
site=${SITE:-$work/site}; mkdir -p "$site"
if [ -n "${RAY_TAR:-}" ]; then tar -xJf "$RAY_TAR" -C "$site"; fi
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$WHEELS"/*.whl
fi
py=${PYTHON:-python3}
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stages=" ${STAGES:-1 2 3} "
failed=0
stage() {  # stage NAME SECONDS CMD...: run CMD under a time limit, its output into OUT/NAME.txt with its exit code
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local code=$?
  echo "exit $code after $(( $(date +%s) - start )) s" >> "$out/$name.txt"
  echo "$name: exit $code after $(( $(date +%s) - start )) s"
  [ "$code" = 0 ] || failed=$((failed + 1))
}

{
  if [ "$cpu" = 1 ]; then echo "cpu mode: $(grep -m1 'model name' /proc/cpuinfo)"; else nvidia-smi -L; fi
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  # Everything the stages import, so a package the carry lacks shows here in seconds, not as three failed stages.
  "$py" -c "import ray, ray.tune, optuna, pydantic, oracle_search.cli, trainables.tune_adapter
print('ray', ray.__version__, 'optuna', optuna.__version__, 'pydantic', pydantic.__version__)"
} > "$out/0_device.txt" 2>&1
cat "$out/0_device.txt"

if [ "$cpu" = 1 ]; then
  [[ $stages = *" 1 "* ]] && stage 1_tune_trial 240 "$py" benchmarks/gpu_tune_trial.py --cpu --k 2 --per-file 30
  [[ $stages = *" 2 "* ]] && stage 2_fused_throughput 240 "$py" benchmarks/fused_throughput.py --device cpu \
    --models resnet20,vgg19_bn --ks 1,4 --steps 1 --warmup 1 --repeats 3 --batch-size 4
  # Only the mechanics are rehearsed: a loaded 2-core machine may need minutes to start Ray and train.
  # Two grid values instead of four: the same stages, 20 trainings fewer (each costs a Ray actor on 2 cores).
  per_file=10; grid=0.1,0.4; resources=(--device cpu --cpus-per-trial 0.5 --max-concurrent 4); sample_every=1
  limit=600
else
  # Limits that keep the whole run near 6 minutes: a lent machine has 15 minutes in all, starts included.
  [[ $stages = *" 1 "* ]] && stage 1_tune_trial 75 "$py" benchmarks/gpu_tune_trial.py
  [[ $stages = *" 2 "* ]] && stage 2_fused_throughput 90 "$py" benchmarks/fused_throughput.py --ks 1,4,8,16,32 \
    --steps 20 --warmup 5 --repeats 3
  per_file=400; grid=0.05,0.1,0.2,0.4; resources=(--device cuda --gpus-per-trial 0.25 --cpus-per-trial 1 --max-concurrent 4)
  sample_every=1; limit=180
fi
if [[ $stages != *" 3 "* ]]; then echo "failed stages: $failed" | tee "$out/summary.txt"; exit "$failed"; fi

# Stage 3 and, beside it, stage 4's sampler.
"$py" -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path
from gpu_tune_trial import write_fake_cifar10; write_fake_cifar10(Path(sys.argv[1]), int(sys.argv[2]))" \
  "$work/cifar" "$per_file"
if [ "$cpu" = 1 ]; then
  (echo "time,load_1min"; while :; do echo "$(date +%s),$(cut -d' ' -f1 /proc/loadavg)"; sleep "$sample_every"; done) \
    > "$out/4_utilisation.csv" &
else
  (echo "time,utilization_gpu_percent,memory_used_mib"
   nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
     -l "$sample_every") > "$out/4_utilisation.csv" &
fi
sampler=$!
stage 3_compare "$limit" "$py" -m oracle_search.cli compare --preset resnet20-cifar10 --dataset cifar10 \
  --data-dir "$work/cifar" --epochs 1 --cycles 1 --batch-size 64 --grid "$grid" --seeds 1 \
  --eval-seeds 2 --trials 2 --refine 0 "${resources[@]}" --out "$work/compare"
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
cp "$work/compare/report.md" "$out/3_compare_report.md" 2>/dev/null
tar -czf "$out/3_compare.tgz" -C "$work" compare/results.parquet compare/spec.json 2>/dev/null
# Mean and peak of the sampled column (GPU utilisation %, or the load average in --cpu mode).
awk -F, 'NR > 1 && $2 != "" { n++; s += $2; if ($2 > m) m = $2 }
         END { if (n) printf "samples %d, mean %.1f, peak %.1f\n", n, s / n, m; else print "no samples"; exit !n }' \
  "$out/4_utilisation.csv" > "$out/4_utilisation.txt"
code=$?
echo "4_utilisation: $(cat "$out/4_utilisation.txt")"
[ "$code" = 0 ] || failed=$((failed + 1))
echo "failed stages: $failed" | tee "$out/summary.txt"
exit "$failed"
