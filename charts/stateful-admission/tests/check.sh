#!/usr/bin/env bash
# Chart checks: render with the real Helm v4 engine for the default values, each certificate
# mode and the monitoring parts, helm lint --strict, validate every manifest against the
# Kubernetes schemas, and assert the webhook scoping and RBAC properties (test_chart.py);
# validate the ServiceMonitor and PrometheusRule against the Prometheus Operator's CRDs, parse
# every alert and dashboard query and check the metrics they name, and compare the README's
# Parameters tables with values.yaml (test_monitoring.py).
#
# Installs its own tools (pinned: requirements.txt into a venv, package-lock.json through
# readme.sh) under target/, then runs offline. Exits non-zero on any failure.
#
# Environment:
#   CHART_CHECK_VENV        venv location (default: <repo>/target/chart-check-venv)
#   CHART_CHECK_NODE        npm tools location (default: <repo>/target/chart-check-node)
#   STATEFUL_ADMISSION_BIN  the built binary, for the flag cross-check (default: built with
#                           cargo into $CARGO_TARGET_DIR or <repo>/target)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
# The pinned Python tools (requirements.txt), installed once into a venv.
python="$(bash "$here/venv.sh")"

README_GENERATOR="$(bash "$here/readme.sh" --install)"
export README_GENERATOR

if [[ -z "${STATEFUL_ADMISSION_BIN:-}" ]]; then
  target="${CARGO_TARGET_DIR:-$repo/target}"
  (cd "$repo" && cargo build --quiet --bin stateful-admission)
  export STATEFUL_ADMISSION_BIN="$target/debug/stateful-admission"
fi

cd "$here"
export PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -q -p no:cacheprovider test_chart.py test_monitoring.py "$@"
