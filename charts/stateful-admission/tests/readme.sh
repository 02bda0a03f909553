#!/usr/bin/env bash
# The Parameters tables of the chart README are generated from the `## @param` comments of
# values.yaml by Bitnami's readme-generator-for-helm (pinned in package-lock.json, installed
# here into target/). Regenerate them after changing values.yaml:
#
#   bash charts/stateful-admission/tests/readme.sh
#
# `--install` only installs the generator and prints its path (check.sh uses it; the chart
# check then fails when README.md differs from what the generator makes).
#
# Environment:
#   CHART_CHECK_NODE  where the pinned npm tools go (default: <repo>/target/chart-check-node)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
chart="$(cd "$here/.." && pwd)"
nodedir="${CHART_CHECK_NODE:-$repo/target/chart-check-node}"
generator="$nodedir/node_modules/@bitnami/readme-generator-for-helm/bin/index.js"

if ! command -v npm >/dev/null; then
  echo "readme: node and npm are required (the machine's Node.js)" >&2
  exit 1
fi
stamp="$nodedir/.package-lock.sha256"
want="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$generator" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "readme: installing the pinned generator into $nodedir" >&2
  rm -rf "$nodedir"
  mkdir -p "$nodedir"
  cp "$here/package.json" "$here/package-lock.json" "$nodedir/"
  (cd "$nodedir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
  echo "$want" > "$stamp"
fi

case "${1:-}" in
  --install)
    echo "$generator"
    ;;
  "")
    if ! out="$(node "$generator" --values "$chart/values.yaml" --readme "$chart/README.md" 2>&1)"; then
      echo "$out" >&2
      exit 1
    fi
    echo "readme: $chart/README.md regenerated from values.yaml"
    ;;
  *)
    echo "usage: $0 [--install]" >&2
    exit 2
    ;;
esac
