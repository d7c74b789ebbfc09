#!/usr/bin/env bash
# The project's test command (README, CI's .ci/run): set up the workspace from the
# frozen lock, type-check every package, the examples and the scripts with mypy --strict, build the
# docs site (scripts/build_docs.sh, warnings as errors), run every test.
#
#   scripts/run_all.sh            fresh machine: installs uv if missing, syncs .venv
#   scripts/run_all.sh --system   no installs (e.g. the GPU machine, which has no
#                                 registry): the current python3 with the packages'
#                                 src/ folders on PYTHONPATH; mypy and the docs only if present
#   extra arguments after "--" go to pytest, e.g. scripts/run_all.sh -- -m gpu
#
# Exits non-zero if any step fails, including pytest collecting no test.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=uv
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --system) mode=system ;;
    --) shift; pytest_args=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

packages=(cuda_core cuda_async cutile_ir cutile_compiler cutile cutile_kernels)
declare -a summary=()
failed=0
record() {  # record NAME STATUS DETAIL
  summary+=("$(printf '%-8s %-6s %s' "$1" "$2" "$3")")
  [ "$2" = ok ] || [ "$2" = skip ] || failed=1
}

export PYTHONUNBUFFERED=1
if [ "$mode" = uv ]; then
  # shellcheck source=scripts/_setup.sh
  . scripts/_setup.sh
  if ensure_workspace; then record setup ok "uv $(uv --version | cut -d' ' -f2), $(uv run --frozen python -V)"
  else record setup FAIL "uv sync --frozen"; printf '%s\n' "${summary[@]}"; exit 1; fi
  run() { uv run --frozen --no-sync "$@"; }
else
  PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
  record setup ok "system $(python3 -V)"
  run() { if [ "$1" = python ]; then shift; fi; python3 "$@"; }
fi

echo "== mypy --strict"
if run python -c 'import mypy' >/dev/null 2>&1; then
  typecheck() {  # typecheck NAME PREFIX ARGS...: mypy --strict over ARGS, recorded as NAME
    local name=$1 prefix=$2 out; shift 2
    if out=$(run python -m mypy --strict "$@" 2>&1); then
      record "$name" ok "$prefix$(tail -1 <<<"$out")"
    else
      echo "$out"; record "$name" FAIL "$prefix$(tail -1 <<<"$out")"
    fi
  }
  mypy_args=(); for p in "${packages[@]}"; do mypy_args+=(-p "$p"); done
  typecheck mypy "" "${mypy_args[@]}"
  # The examples as a user's code: kernels through cutile's mypy plugin (pyproject.toml).
  typecheck examples "mypy: " examples
  # The scripts (benchmarks, tools): they reach into internals, which would otherwise
  # break them unnoticed. Not yet clean under --strict, so left out: the two below.
  script_files=()
  for f in scripts/*.py; do
    case "$f" in scripts/bench_pointwise.py|scripts/bench_reads.py) ;; *) script_files+=("$f") ;; esac
  done
  typecheck scripts "mypy: " "${script_files[@]}"
else
  record mypy skip "mypy not installed (--system mode)"
fi

echo "== docs"
if run python -c 'import sphinx, myst_parser' >/dev/null 2>&1; then
  docs_args=(); [ "$mode" = system ] && docs_args=(--system)
  if out=$(bash scripts/build_docs.sh "${docs_args[@]}" 2>&1); then
    record docs ok "sphinx -W: $(tail -1 <<<"$out")"
  else
    echo "$out"; record docs FAIL "sphinx -W: $(grep -c 'WARNING\|ERROR' <<<"$out") warnings or errors"
  fi
else
  record docs skip "sphinx not installed (--system mode)"
fi

echo "== pytest"
log=$(mktemp); trap 'rm -f "$log"' EXIT
run python -m pytest -q "${pytest_args[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
line=$(grep -E '(passed|failed|error|no tests ran)' "$log" | tail -1)
case $rc in
  0) record pytest ok "$line" ;;
  5) record pytest FAIL "no tests collected" ;;
  *) record pytest FAIL "exit $rc: $line" ;;
esac

echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ]; then echo "RESULT: FAILED"; exit 1; fi
echo "RESULT: all checks passed"
