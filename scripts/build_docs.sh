#!/usr/bin/env bash
# Builds the docs site: the guide pages (README, ARCHITECTURE, LANGUAGE, BENCHMARKS,
# the package READMEs) and an API reference from the public modules' docstrings,
# with Sphinx (pinned in the dev dependency group), warnings as errors.
#
#   scripts/build_docs.sh              into build/docs/html (open index.html there)
#   scripts/build_docs.sh OUT          into OUT
#   scripts/build_docs.sh --system     the current python3 with the packages' src/
#                                      folders on PYTHONPATH (Sphinx must be installed)
#
# The Markdown pages are copied, with their paths, next to docs/ (conf.py, index,
# api/) into a source folder under build/docs, so their links to each other hold.
# A link to a page the site does not hold fails the build (add the page to the index).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=uv
out=build/docs/html
while [ $# -gt 0 ]; do
  case "$1" in
    --system) mode=system ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "build_docs.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done

# The guide pages are the entries of docs/index.md's tables of contents outside api/
# (adding a page to the site is adding its line there).
mapfile -t pages < <(sed -n '/^```{toctree}/,/^```$/p' docs/index.md | grep -v -e '^```' -e '^:' -e '^$' -e '^api/')
src=build/docs/src
rm -rf "$src"
mkdir -p "$src"
cp -R docs/. "$src/"
for page in "${pages[@]}"; do
  if [ ! -f "$page.md" ]; then echo "build_docs.sh: docs/index.md lists $page, but $page.md is not there" >&2; exit 1; fi
  mkdir -p "$src/$(dirname "$page")"
  cp "$page.md" "$src/$page.md"
done
cp LICENSE "$src/LICENSE"  # the README links it: the site offers it as a download

if [ "$mode" = uv ]; then
  # shellcheck source=scripts/_setup.sh
  . scripts/_setup.sh
  ensure_workspace >/dev/null  # uv, and .venv from the frozen lock (quick when up to date)
  run() { uv run --frozen --no-sync "$@"; }
else
  PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
  run() { if [ "$1" = python ]; then shift; fi; python3 "$@"; }
fi
# -E: a fresh environment each time; -W: warnings are errors; --keep-going: report
# them all; -q: only warnings are printed.
run python -m sphinx -b html -E -W --keep-going -q "$src" "$out"
echo "docs: $out/index.html"
