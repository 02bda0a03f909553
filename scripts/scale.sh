#!/usr/bin/env bash
# The scale benchmark: `serve` (release build, controller on) against the in-process fake API
# server seeded with 10,000 claims / 2,000 StatefulSets ("small") and 50,000 / 10,000
# ("large"), pods of those sets included, or against the cluster of KUBECONFIG when it is set
# (a real apiserver, e.g. a test cluster's, with its kube-controller-manager
# stopped; SCALE_SEED=1 seeds it once with the same objects, which takes minutes). Prints one
# table row per size: seeding time, time to /readyz, when the controller takes the Lease, RSS
# at ready, 90 s after start, at the end and peak (VmHWM), RSS every 15 s, CPU seconds of the
# serve process, and writes in the first 90 s and per minute afterwards: by target, verb and
# field manager from the fake server, or by resource from the real apiserver's own
# apiserver_request_total (the table's write columns then read n/a).
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
