#!/usr/bin/env bash
# Runs the integration suite (tests/it) several times on a loaded machine and reports which
# tests failed in how many runs: the flakes a quiet laptop never shows.
#
#   scripts/stress-tests.sh [--iterations N] [--hogs N] [--watch-lag MS] [--threads N]
#                           [--timeout SECONDS] [FILTER...]
#
#   --iterations N   runs of the suite (default 3)
#   --hogs N         busy loops (`yes > /dev/null`) beside it (default: one per core)
#   --watch-lag MS   every watch stream of every fake API server delivers each event this late
#                    (STATEFUL_ADMISSION_TEST_WATCH_LAG_MS; default 0: off); the fake's own
#                    tests (fake_apiserver_tests::, which time its streams) are skipped then
#   --threads N      test threads (default: libtest's, one per core)
#   --timeout S      a run that takes longer is stopped and counted as failed (default 3600)
#   FILTER...        test name filters, as `cargo test` takes them (default: every test)
#
# The test binary is built once (`cargo test --no-run`) and copied, so that a build started
# meanwhile in the same target directory does not change what runs. Logs and the summary go
# to target/stress/<time>/ (or $CARGO_TARGET_DIR/stress/...). Exit status 1 if any run failed.
set -euo pipefail

iterations=3
hogs=$(nproc)
lag_ms=0
threads=""
timeout_s=3600
filters=()
while [ $# -gt 0 ]; do
  case "$1" in
    --iterations) iterations=$2; shift 2 ;;
    --hogs) hogs=$2; shift 2 ;;
    --watch-lag) lag_ms=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; filters+=("$@"); break ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) filters+=("$1"); shift ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
out="$target/stress/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

echo "building the integration tests..."
built=$(cargo test --locked --test it --no-run 2>&1 | tee "$out/build.log" |
  sed -n 's/.*Executable tests\/it\/main.rs (\(.*\))$/\1/p' | tail -1)
if [ -z "$built" ] || [ ! -x "$built" ]; then
  echo "no test binary; see $out/build.log" >&2
  exit 2
fi
binary="$out/it"
cp "$built" "$binary"

# The load beside the suite, ended with the script whatever happens.
hog_pids=()
stop_hogs() {
  for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
  yes > /dev/null &
  hog_pids+=("$!")
done

args=()
[ -n "$threads" ] && args+=(--test-threads "$threads")
[ "$lag_ms" -gt 0 ] && args+=(--skip fake_apiserver_tests::)
echo "stress: $iterations run(s), $hogs busy loop(s), watch lag ${lag_ms} ms, filters: ${filters[*]:-(all)}; logs in $out"
{
  echo "iterations=$iterations hogs=$hogs watch_lag_ms=$lag_ms threads=${threads:-default} cores=$(nproc)"
  echo "filters: ${filters[*]:-(all)}"
} > "$out/summary.txt"

failed_runs=0
for i in $(seq 1 "$iterations"); do
  log="$out/run-$i.log"
  started=$(date +%s)
  set +e
  STATEFUL_ADMISSION_TEST_WATCH_LAG_MS=$lag_ms RUST_BACKTRACE=0 \
    timeout "$timeout_s" "$binary" "${args[@]}" "${filters[@]}" > "$log" 2>&1
  rc=$?
  set -e
  took=$(( $(date +%s) - started ))
  result=$(grep -E '^test result:' "$log" | tail -1 || true)
  [ "$rc" -ne 0 ] && failed_runs=$((failed_runs + 1))
  [ "$rc" -eq 124 ] && result="stopped after ${timeout_s}s"
  line="run $i: ${took}s, exit $rc: ${result:-no result line}"
  echo "$line" | tee -a "$out/summary.txt"
  grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' |
    sed "s/^/$i /" >> "$out/failures.txt" || true
done

echo >> "$out/summary.txt"
if [ -s "$out/failures.txt" ]; then
  echo "failures per test (runs failed / $iterations):" | tee -a "$out/summary.txt"
  cut -d' ' -f2- "$out/failures.txt" | sort | uniq -c | sort -rn |
    awk -v n="$iterations" '{ printf "  %s/%s  %s\n", $1, n, $2 }' | tee -a "$out/summary.txt"
  echo "first panic of each failure (run: test: message):" | tee -a "$out/summary.txt"
  while read -r run name; do
    message=$(awk -v t="---- $name stdout ----" \
      '$0 == t { grab = 1; next } grab && /panicked at/ { getline m; print m; exit }' "$out/run-$run.log")
    echo "  $run: $name: ${message:-see run-$run.log}" | tee -a "$out/summary.txt"
  done < "$out/failures.txt"
else
  echo "no test failed" | tee -a "$out/summary.txt"
fi
echo "summary: $out/summary.txt"
[ "$failed_runs" -eq 0 ]
