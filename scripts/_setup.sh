# Sourced by run_all.sh, run_main.sh and build_wheels.sh: make sure uv exists, then
# (ensure_workspace) sync the workspace from the frozen lock. Needs only python3 and pip.
ensure_uv() {
  if ! command -v uv >/dev/null 2>&1; then
    echo "== installing uv (not found on PATH)"
    python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv || {
      echo "could not install uv with pip" >&2; return 1; }
    export PATH="$(python3 -m site --user-base)/bin:$PATH"
  fi
}

ensure_workspace() {
  ensure_uv || return 1
  echo "== uv sync --frozen"
  uv sync --frozen --all-packages --quiet
}
