#!/usr/bin/env bash
# Prints the size of the tree the GPU machine's device tool carries (tracked files,
# untracked files git does not ignore, and the carried .devtools/ and .whl/) against
# its 64 MiB limit; exits 1 above it and warns below 4 MiB of headroom. Run it before a GPU call; the toolchain bundle is
# most of it (scripts/repack_toolchain.sh makes it ~55 MB instead of ~60).
#   scripts/gpu_tree_size.sh
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((64 * 1024 * 1024))
margin=$((4 * 1024 * 1024))  # below this headroom the next sessions' growth reaches the limit
# Each file counted in whole 4 KiB blocks (as du counts them: the repository's ~450 small
# files take about 0.9 MiB more that way than their bytes), so the figure errs high.
blocks='{s += int(($1 + 4095) / 4096) * 4096} END {print s + 0}'
files=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk "$blocks")
carried=$(find .devtools .whl -type f -printf '%s\n' 2>/dev/null | awk "$blocks")
total=$((files + carried))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "GPU tree: $(mib "$total") of 64 MiB (repository files $(mib "$files"), .devtools + .whl $(mib "$carried")); headroom $(mib $((limit - total)))"
if [ "$total" -gt "$limit" ]; then
  echo "gpu_tree_size.sh: over the device tool's 64 MiB: repack the toolchain (scripts/prepare_gpu_tree.sh, or scripts/repack_toolchain.sh) or carry less" >&2
  exit 1
fi
if [ $((limit - total)) -lt "$margin" ]; then
  echo "gpu_tree_size.sh: less than $(mib "$margin") of headroom: repack the toolchain (scripts/repack_toolchain.sh: ~55 MB instead of ~60) before the repository outgrows it" >&2
fi
