#!/usr/bin/env bash
# Repacks the Tile IR toolchain bundle in .devtools/ (what the GPU machine's
# pack-toolchain.sh writes there, xz -9: about 60 MB) with xz's x86 branch filter and a
# 256 MiB dictionary, without tileirdisasm: about 55 MB. The GPU machine takes a tree of
# at most 64 MiB (the repository's files, .devtools/ and .whl/ together). tileiras, ptxas
# (tileiras runs it) and libnvvm are stripped binaries that cannot be left out;
# tileirdisasm (3.3 MB, 0.26 MB of the packed bundle) serves only cutile_ir's
# disassembler-oracle tests, which need no GPU (CI runs them with the pip toolchain) and
# skip without it. The new bundle's files are compared byte for byte with the old one's
# (less tileirdisasm) before it replaces it; about 5 minutes.
#   scripts/repack_toolchain.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=$(ls .devtools/tileiras-*.tar.xz 2>/dev/null | head -1 || true)
if [ -z "$bundle" ]; then
  echo "repack_toolchain.sh: no .devtools/tileiras-*.tar.xz to repack" >&2
  exit 2
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir "$work/old" "$work/new"
tar xJf "$bundle" -C "$work/old"
rm -f "$work/old/bin/tileirdisasm"
tar -C "$work/old" -cf - . | xz --x86 --lzma2=preset=9e,dict=256MiB -T1 > "$work/bundle.tar.xz"
tar xJf "$work/bundle.tar.xz" -C "$work/new"
diff -r "$work/old" "$work/new"
old_size=$(stat -c %s "$bundle"); new_size=$(stat -c %s "$work/bundle.tar.xz")
if [ "$new_size" -lt "$old_size" ]; then
  mv "$work/bundle.tar.xz" "$bundle"
  echo "$bundle: $old_size -> $new_size bytes"
else
  echo "$bundle: already $old_size bytes (a repack gives $new_size); left as it is"
fi
bash scripts/gpu_tree_size.sh
