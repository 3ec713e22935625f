#!/usr/bin/env bash
# The GPU checks of issue 41 (paper scale on GPUs), in one run of about 6 minutes on a lent GPU machine that has
# PyTorch but no Ray. Stages, in order, each writing its result under OUT as soon as it finishes:
#   1. the tests that need a GPU: a graphed fused cycle equals the eager one (tests/test_fused.py), and an epoch's
#      batches issue no blocking copy under CUDA's sync-debug mode (tests/test_data.py);
#   2. benchmarks/fused_throughput.py --graphs: fused steps eager and replayed from a CUDA graph against separate
#      runs (ResNet-20, VGG-19; K = 1, 4, 8, 16, 32; median of 3 repeats), cuDNN's algorithm search on;
#   3. the same at K = 1 and 8 (eager) with cuDNN's algorithm search on, then off, back to back, to weigh
#      --cudnn-benchmark;
#   4. a paper-shaped ResNet-20 cycle at 1/10 length (the resnet20-cifar10 preset's dense cycle, 18 of its 179
#      epochs, 45,000 synthetic CIFAR-shaped training images), racing on 2 seeds through Ray with 2 fused trials
#      sharing the GPU: first the dry run's estimate (its timing probe on this GPU), then the run, with GPU
#      utilisation sampled every second. --cuda-graphs is on when stage 1 passed, and --cudnn-benchmark is on.
# --cpu rehearses every stage on a machine without a GPU (tests/test_fused.py runs it): the GPU tests skip, a few
# steps of the benchmark without graphs, and a tiny CPU cycle with the load average sampled instead.
# Nothing downloads: Ray and the few pure-Python packages a bare machine lacks travel with the checkout, as
# RAY_TAR (an xz tarball of Ray's unpacked wheel, scripts/gpu_carry.sh) and WHEELS (a folder of wheels). Results go
# to OUT (default ./gpu-out). STAGES (default "1 2 3 4") picks the stages, so a rerun on the lent machine can repeat
# only the ones that failed. Exit status: the number of failed stages.
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
stages=" ${STAGES:-1 2 3 4} "
failed=0
stage() {  # stage NAME SECONDS CMD...: run CMD under a time limit, its output into OUT/NAME.txt with its exit code
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local code=$?
  echo "exit $code after $(( $(date +%s) - start )) s" >> "$out/$name.txt"
  echo "$name: exit $code after $(( $(date +%s) - start )) s"
  [ "$code" = 0 ] || failed=$((failed + 1))
  return "$code"
}

{
  if [ "$cpu" = 1 ]; then echo "cpu mode: $(grep -m1 'model name' /proc/cpuinfo)"; else nvidia-smi -L; fi
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  # Everything the stages import, so a package the carry lacks shows here in seconds, not as failed stages.
  "$py" -c "import ray, ray.tune, optuna, pydantic, pytest, oracle_search.cli, trainables.tune_adapter
print('ray', ray.__version__, 'optuna', optuna.__version__, 'pydantic', pydantic.__version__)"
} > "$out/0_device.txt" 2>&1
cat "$out/0_device.txt"

if [ "$cpu" = 1 ]; then
  bench=(--device cpu --models resnet20,vgg19_bn --steps 1 --warmup 1 --repeats 3 --batch-size 4)
  ks=(--ks 1,4); ks_off=(--ks 1); graphs=()
  per_file=10; cycle=(--device cpu --epochs 1 --grid 0.1,0.4 --tuning-seeds 1 --cpus-per-trial 0.5 --max-concurrent 2)
  limits=(240 240 120 600)
else
  bench=(--steps 20 --warmup 5 --repeats 3)
  ks=(--ks 1,4,8,16,32); ks_off=(--ks 1,8); graphs=(--graphs)
  # 45,000 training and 5,000 validation images (the preset's 10 % split of 50,000) and 10,000 test images.
  per_file=10000; cycle=(--device cuda --epochs 18 --tuning-seeds 2 --gpus-per-trial 0.5 --cpus-per-trial 4
                         --cudnn-benchmark)
  limits=(90 150 45 200)  # about 6 minutes in all, the estimate's 90 s included: a lent machine has 15
fi
graphs_ok=0
if [[ $stages = *" 1 "* ]]; then
  stage 1_gpu_tests "${limits[0]}" "$py" -m pytest -q -p no:cacheprovider -rs tests/test_fused.py tests/test_data.py \
    -k "graphed or synchronising" && graphs_ok=1
fi
[[ $stages = *" 2 "* ]] && stage 2_fused_throughput "${limits[1]}" "$py" benchmarks/fused_throughput.py "${bench[@]}" \
  "${ks[@]}" "${graphs[@]}"
if [[ $stages = *" 3 "* ]]; then
  stage 3_cudnn_on "${limits[2]}" "$py" benchmarks/fused_throughput.py "${bench[@]}" "${ks_off[@]}" --cudnn-benchmark
  stage 3_cudnn_off "${limits[2]}" "$py" benchmarks/fused_throughput.py "${bench[@]}" "${ks_off[@]}" \
    --no-cudnn-benchmark
fi
if [[ $stages != *" 4 "* ]]; then echo "failed stages: $failed" | tee "$out/summary.txt"; exit "$failed"; fi

# Stage 4: the estimate, then the cycle with the sampler beside it.
[ "$cpu" = 0 ] && [ "$graphs_ok" = 1 ] && cycle+=(--cuda-graphs)
"$py" -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path
from gpu_tune_trial import write_fake_cifar10; write_fake_cifar10(Path(sys.argv[1]), int(sys.argv[2]))" \
  "$work/cifar" "$per_file"
oracle=("$py" -m oracle_search.cli oracle --preset resnet20-cifar10 --dataset cifar10 --data-dir "$work/cifar"
        --cycles 0 "${cycle[@]}" --out "$work/oracle")
echo "cycle options: ${cycle[*]}" > "$out/4_estimate.txt"
timeout 90 "${oracle[@]}" --dry-run >> "$out/4_estimate.txt" 2>&1
echo "estimate: exit $? ($(grep -m1 '^estimate' "$out/4_estimate.txt"))"
if [ "$cpu" = 1 ]; then
  (echo "time,load_1min"; while :; do echo "$(date +%s),$(cut -d' ' -f1 /proc/loadavg)"; sleep 1; done) \
    > "$out/4_utilisation.csv" &
else
  (echo "time,utilization_gpu_percent,memory_used_mib"
   nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1) \
    > "$out/4_utilisation.csv" &
fi
sampler=$!
stage 4_cycle "${limits[3]}" "${oracle[@]}"
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
tar -czf "$out/4_cycle.tgz" -C "$work" oracle/results.parquet oracle/spec.json oracle/options.json 2>/dev/null
# Mean and peak of the sampled column (GPU utilisation %, or the load average in --cpu mode).
awk -F, 'NR > 1 && $2 != "" { n++; s += $2; if ($2 > m) m = $2 }
         END { if (n) printf "samples %d, mean %.1f, peak %.1f\n", n, s / n, m; else print "no samples"; exit !n }' \
  "$out/4_utilisation.csv" > "$out/4_utilisation.txt"
echo "4_utilisation: $(cat "$out/4_utilisation.txt")"
echo "failed stages: $failed" | tee "$out/summary.txt"
exit "$failed"
