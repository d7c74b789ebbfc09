#!/usr/bin/env bash
# Runs a command on the GPU test machine (no package registry there): unpacks the
# Tile IR toolchain packed by ../shared/gpu/pack-toolchain.sh (the GPU machine's notes,
# outside this repository) from .devtools/,
# installs any benchmark-peer wheels carried in .whl/ (e.g. cuda-tile), puts the
# packages' sources on PYTHONPATH, then runs the command.
#   scripts/on_gpu_machine.sh bash scripts/run_all.sh --system
#   scripts/on_gpu_machine.sh python3 scripts/bench_elementwise.py
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=$(ls .devtools/tileiras-*.tar.xz 2>/dev/null | head -1 || true)
if [ -n "$bundle" ] && [ ! -x /tmp/tc/bin/tileiras ]; then
  mkdir -p /tmp/tc && tar xJf "$bundle" -C /tmp/tc
fi
if [ -x /tmp/tc/bin/tileiras ]; then
  export CUTILE_TILEIRAS=/tmp/tc/bin/tileiras
  export PATH="/tmp/tc/bin:$PATH"   # for peers that look up tileiras on PATH
  export CUDA_HOME=/tmp/tc          # peers need it; cutile sets its own for tileiras
fi
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 CUTILE_CACHE_DIR=${CUTILE_CACHE_DIR:-/tmp/cutile-cache}
exec "$@"
