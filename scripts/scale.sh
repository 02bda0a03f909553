#!/usr/bin/env bash
# The scale benchmark: `serve` (release build, controller on) against the in-process fake API
# server seeded with 10,000 claims / 2,000 StatefulSets ("small") and 50,000 / 10,000
# ("large"), or against the cluster of KUBECONFIG when it is set (nothing is seeded; write
# counts need the fake server and read n/a). Prints one table row per size: seeding time,
# time to /readyz, RSS at ready, 90 s after start and peak (VmHWM), CPU seconds of the serve
# process, writes in the first 90 s (to StatefulSets) and per minute over the next 60 s,
# then the writes by target, verb and field manager.
#
#   scripts/scale.sh [small|large|both] [REPEATS]      (default: both, 1)
#
# Environment: SCALE_FIRST_SECS (90) and SCALE_STEADY_SECS (60) set the windows;
# SCALE_SERVE_ARGS adds flags to serve (e.g. "--controller=false" to measure the webhook's
# view alone). Runs niced, one size at a time; the results go to stdout and target/scale/.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-both}" in
  small) sizes=small ;;
  large) sizes=large ;;
  both) sizes=small,large ;;
  *) echo "usage: $0 [small|large|both] [REPEATS]" >&2; exit 2 ;;
esac
repeats=${2:-1}
out=target/scale
mkdir -p "$out"
echo "== machine"
date -u +%Y-%m-%dT%H:%MZ
echo "nproc: $(nproc); $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo); $(rustc --version)"
echo "commit: $(git rev-parse --short HEAD)"
echo "== building (release)"
nice -n 10 cargo test --release --locked --test it --no-run
for run in $(seq 1 "$repeats"); do
  echo "== run $run of $repeats, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  SCALE_SIZES=$sizes nice -n 10 cargo test --release --locked --test it scale::scale_benchmark \
    -- --ignored --nocapture --test-threads 1 2>&1 | tee "$out/run-$run.txt" \
    | grep -E '^\||^    |^seeded|^requests by'
done
