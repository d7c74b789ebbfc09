#!/usr/bin/env bash
# Prints the size of the tree the GPU machine's device tool carries (tracked files,
# untracked files git does not ignore, and the carried .devtools/ and .whl/) against
# its 64 MiB limit; exits 1 above it. Run it before a GPU call; the toolchain bundle is
# most of it (scripts/repack_toolchain.sh makes it ~55 MB instead of ~60).
#   scripts/gpu_tree_size.sh
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((64 * 1024 * 1024))
files=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
carried=$(find .devtools .whl -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((files + carried))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "GPU tree: $(mib "$total") of 64 MiB (repository files $(mib "$files"), .devtools + .whl $(mib "$carried")); headroom $(mib $((limit - total)))"
if [ "$total" -gt "$limit" ]; then
  echo "gpu_tree_size.sh: over the device tool's 64 MiB: repack the toolchain (scripts/prepare_gpu_tree.sh, or scripts/repack_toolchain.sh) or carry less" >&2
  exit 1
fi
