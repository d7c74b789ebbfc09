#!/usr/bin/env bash
# Builds the wheel and the source distribution of every package (the six under
# packages/) into dist/, for installing cutile into another environment (README,
# Install):   pip install --find-links dist "cutile[tileiras]"
#
#   scripts/build_wheels.sh              builds into dist/
#   scripts/build_wheels.sh --out DIR    builds into DIR
#
# Needs python3 and pip (uv is installed with pip when missing, as run_all.sh does).
# Earlier builds of these packages in the folder are removed first, so that it holds
# one version of each. Exits non-zero unless every wheel and sdist was built.
set -euo pipefail
cd "$(dirname "$0")/.."

out=dist
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "build_wheels.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build_wheels.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=scripts/_setup.sh
. scripts/_setup.sh
ensure_uv
mkdir -p "$out"
rm -f "$out"/cutile-[0-9]*.whl "$out"/cutile-[0-9]*.tar.gz "$out"/cutile_*.whl "$out"/cutile_*.tar.gz
uv build --all-packages --quiet --out-dir "$out"

count=0
for package in packages/*/pyproject.toml; do
  name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$package" | head -1 | tr - _)
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$package" | head -1)
  for file in "$out/$name-$version-py3-none-any.whl" "$out/$name-$version.tar.gz"; do
    [ -f "$file" ] || { echo "build_wheels.sh: $file was not built" >&2; exit 1; }
    echo "$file"
    count=$((count + 1))
  done
done
echo "built $count distributions into $out/"
