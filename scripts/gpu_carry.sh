#!/usr/bin/env bash
# Build what scripts/gpu_check.sh carries to a lent GPU machine that has PyTorch but no Ray and no network:
#   .gpucarry/ray.tar.xz  Ray's unpacked wheel without ray/jars, rllib, serve and llm (about 30 MB), and
#   .gpucarry/wheels/     the pure-Python or cp312 wheels that Ray Tune and this project import and that machine
#                         lacks (about 9 MB): pydantic, jsonschema, optuna and what they need.
# Then, with the device tool: carry [".gpucarry"] and run
#   RAY_TAR=.gpucarry/ray.tar.xz WHEELS=.gpucarry/wheels bash scripts/gpu_check.sh
# PY_VERSION is the GPU machine's Python (3.12 on the lent machines so far).
set -euo pipefail
cd "$(dirname "$0")/.."
py_version=${PY_VERSION:-3.12}
abi="cp${py_version/./}"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
get=(python3 -m pip download -q --only-binary=:all: --python-version "$py_version" --implementation cp
     "${platforms[@]}")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
rm -rf .gpucarry; mkdir -p .gpucarry/wheels
"${get[@]}" --no-deps -d "$work" "ray==2.60.0"
# Unpacked with each file's mode: Ray's gcs_server and raylet must stay executable (`python -m zipfile -e` drops
# the bits, and Ray then fails to start with "Permission denied").
python3 - "$work"/ray-2.60.0-"$abi"-*.whl "$work/ray" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for info in wheel.infolist():
        path = wheel.extract(info, sys.argv[2])
        if info.external_attr >> 16:
            os.chmod(path, (info.external_attr >> 16) & 0o777)
PY
rm -rf "$work"/ray/ray/{jars,rllib,serve,llm}
tar -cf - -C "$work/ray" . | xz -T0 -6 > .gpucarry/ray.tar.xz
# With their own dependencies: pydantic (pydantic_core must match it exactly) and jsonschema.
"${get[@]}" -d .gpucarry/wheels pydantic jsonschema
# The rest without: the machine's image already has numpy, pandas, pyarrow, scipy, torch and the like.
"${get[@]}" --no-deps -d .gpucarry/wheels "optuna<6" alembic sqlalchemy mako colorlog greenlet mnist1d tomli-w \
  tensorboardX
du -sh .gpucarry
