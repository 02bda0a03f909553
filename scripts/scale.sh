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
#   scripts/scale.sh writes [small|large]               (default: large)
#
# `writes` runs the write budget benchmark instead (scale::write_budget_benchmark): serve at
# the default write limit against a platform's cluster (half the sets InPlace, 1 % with an
# unready pod, 1 % with a claim that cannot follow its template), the writes to sets at first
# contact per set and by kind, then ours per built-in status write while the sets with
# minReadySeconds churn under the simulated built-in controller. It counts writes, which do
# not depend on the build profile: it runs the dev build unless SCALE_PROFILE=release.
# WRITE_BUDGET_BIN runs another build of serve (e.g. a copy of an earlier commit's) against
# the same cluster; SCALE_SERVE_ARGS adds flags to it, WRITE_BUDGET_SERVE_LOG=FILE keeps its log.
#
# Environment: SCALE_FIRST_SECS (90) and SCALE_STEADY_SECS (60) set the windows;
# SCALE_SERVE_ARGS adds flags to serve (e.g. "--controller=false" to measure the webhook's
# view alone). Runs niced, one size at a time; the results go to stdout and target/scale/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == writes ]]; then
  size=${2:-large}
  profile=()
  [[ "${SCALE_PROFILE:-dev}" == release ]] && profile=(--release)
  out=target/scale
  mkdir -p "$out"
  echo "== machine"
  date -u +%Y-%m-%dT%H:%MZ
  echo "nproc: $(nproc); $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo); $(rustc --version)"
  echo "commit: $(git rev-parse --short HEAD); profile: ${SCALE_PROFILE:-dev}"
  nice -n 10 cargo test "${profile[@]}" --locked --test it --no-run
  echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  SCALE_SIZES=$size nice -n 10 cargo test "${profile[@]}" --locked --test it scale::write_budget_benchmark \
    -- --ignored --nocapture --test-threads 1 2>&1 | tee "$out/writes.txt" \
    | grep -E '^\||^    |^seeded|^==|^every set|^writes to sets'
  exit 0
fi
case "${1:-both}" in
  small) sizes=small ;;
  large) sizes=large ;;
  both) sizes=small,large ;;
  *) echo "usage: $0 [small|large|both] [REPEATS] | $0 writes [small|large]" >&2; exit 2 ;;
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
