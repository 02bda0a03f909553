#!/usr/bin/env bash
# Every number in BENCHMARKS.md, in one run: machine, load, pure rule path (percentiles and
# criterion), the cluster view's memory per object, whole server over HTTPS
# (scripts/load.sh bench), cold start and memory (scripts/load.sh startup). Loopback only;
# bounded (about 10 minutes with the defaults).
#
#   scripts/bench.sh [SECONDS_PER_LOAD_ROW]      (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== machine"
date -u +%Y-%m-%dT%H:%MZ
echo "nproc: $(nproc)"
lscpu | grep -E '^(Model name|Thread|Core|Socket|CPU MHz|L2|L3)' || true
free -h | head -2
rustc --version
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== pure rule path: per-review percentiles (cargo bench --bench rule_latency)"
cargo bench --locked --bench rule_latency -- 20000
echo "== pure rule path: criterion (cargo bench --bench rules)"
cargo bench --locked --bench rules 2>&1 | grep -E '^[a-z_0-9]+/[a-z_]+|time:'
echo "== cluster view memory per object (cargo bench --bench view_memory)"
VIEW_MEMORY_SCALE=10000,2000,5000 cargo bench --locked --bench view_memory
cargo bench --locked --bench view_memory
bash scripts/load.sh startup
bash scripts/load.sh bench "${1:-15}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
