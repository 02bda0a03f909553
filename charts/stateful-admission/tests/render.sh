#!/usr/bin/env bash
# Renders the chart with the real Helm v4 engine (no cluster contacted) and prints every
# document as one JSON array. The real-cluster suite (tests/e2e) installs what this prints.
#
#   bash charts/stateful-admission/tests/render.sh [--release NAME] [--namespace NS]
#        [--kube-version vX.Y.Z] [--values JSON]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$(bash "$here/venv.sh")"
cd "$here"
PYTHONDONTWRITEBYTECODE=1 exec "$python" render_cli.py "$@"
