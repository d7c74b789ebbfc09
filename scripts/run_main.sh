#!/usr/bin/env bash
# The project's main job (README): set up the workspace from the frozen lock on a
# fresh machine, then run the example.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_setup.sh
. scripts/_setup.sh
ensure_workspace >/dev/null
exec uv run --frozen --no-sync python examples/add.py
