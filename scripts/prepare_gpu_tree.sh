#!/usr/bin/env bash
# Prepares what the GPU machine's device tool carries beside the repository, in one step,
# on a fresh checkout (both folders are ignored by git, so a new checkout has neither):
#   .devtools/  the Tile IR toolchain bundle: packed by the GPU machine's notes'
#               pack-toolchain.sh (../shared/gpu/, outside this repository; about 60 MB),
#               then repacked by scripts/repack_toolchain.sh (about 55 MB, without
#               tileirdisasm). The 64 MiB tree limit leaves about 1 MiB beside a 60 MB
#               bundle and the repository's files (5.3 MiB counted in 4 KiB blocks), about
#               6 MiB beside the repacked one, so the repack is not optional.
#   .whl/       the cuda-tile wheel for the GPU machine's Python (3.12), a benchmark peer.
# Each step is skipped when its result is there; the tree's size is checked last
# (scripts/gpu_tree_size.sh, which fails above the limit).
#   scripts/prepare_gpu_tree.sh [PACK_SCRIPT]     (default ../shared/gpu/pack-toolchain.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${1:-../shared/gpu/pack-toolchain.sh}
repacked_below=$((57 * 1000 * 1000))  # bytes: a bundle under this was repacked already
bundle=$(ls .devtools/tileiras-*.tar.xz 2>/dev/null | head -1 || true)
if [ -z "$bundle" ]; then
  if [ ! -f "$pack" ]; then
    echo "prepare_gpu_tree.sh: no toolchain bundle in .devtools/ and no pack script at $pack" >&2
    exit 2
  fi
  bash "$pack"
  bundle=$(ls .devtools/tileiras-*.tar.xz | head -1)
fi
if [ "$(stat -c %s "$bundle")" -ge "$repacked_below" ] || tar tJf "$bundle" | grep -q 'tileirdisasm$'; then
  bash scripts/repack_toolchain.sh
fi
if ! ls .whl/cuda_tile-*-cp312-*.whl >/dev/null 2>&1; then
  mkdir -p .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl "cuda-tile==1.7.0"
fi
bash scripts/gpu_tree_size.sh
