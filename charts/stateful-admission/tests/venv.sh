#!/usr/bin/env bash
# Installs the chart tools' Python environment (requirements.txt, pinned) once and prints the
# path of its python. Used by check.sh and render.sh.
#
# Environment:
#   CHART_CHECK_VENV  venv location (default: <repo>/target/chart-check-venv)
#   PYTHON            the interpreter that creates it (default: python3)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="${CHART_CHECK_VENV:-$repo/target/chart-check-venv}"
python="${PYTHON:-python3}"

stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "chart tools: installing into $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$here/requirements.txt" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
