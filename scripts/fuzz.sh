#!/usr/bin/env bash
# Bounded fuzzing of the AdmissionReview parser and every rule with libFuzzer (cargo fuzz).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s each, all targets)
#
# Targets (fuzz/fuzz_targets/, properties in fuzz/harness.rs): review (whole AdmissionReview
# bodies), rule_object (one rule, fuzzed object/oldObject), cluster_state (fuzzed --state
# view against the captured reviews), quantity (Quantity::parse round trip). Corpora are
# seeded from tests/fixtures on every run. Installs cargo-fuzz into target/tools (override with
# TOOLS_DIR). Runs on the stable toolchain (see below). Exit status 1 when a target finds a failure;
# the input is in fuzz/artifacts/TARGET/ — copy it to fuzz/regressions/TARGET/ so that
# `cargo test --test it fuzz_replay` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(review rule_object cluster_state quantity)

tools=${TOOLS_DIR:-$repo/target/tools}
if ! [ -x "$tools/bin/cargo-fuzz" ]; then
  echo "== installing cargo-fuzz into $tools"
  cargo install cargo-fuzz --locked --root "$tools"
fi
export PATH="$tools/bin:$PATH"
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$repo/fuzz/target}

# The machine's stable toolchain: libFuzzer's coverage instrumentation is stable, only the
# sanitizers are not, and the code under test has no unsafe. FUZZ_SANITIZER=address with a
# nightly toolchain (FUZZ_TOOLCHAIN=+nightly) adds AddressSanitizer where one is installed.
toolchain=(${FUZZ_TOOLCHAIN:-})
sanitizer=(--sanitizer "${FUZZ_SANITIZER:-none}")

seeds=$repo/fuzz/corpus/seeds
rm -rf "$seeds"
mkdir -p "$seeds"
python3 - "$repo" "$seeds" <<'PY'
import json, pathlib, sys
repo, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for t in ["review", "rule_object", "cluster_state", "quantity"]:
    (out / t).mkdir(parents=True, exist_ok=True)
n = 0
for f in sorted((repo / "tests/fixtures").rglob("*.json")) + sorted((repo / "benches/fixtures").rglob("*.json")):
    doc = json.loads(f.read_text())
    req = doc.get("request") if isinstance(doc, dict) else None
    if not isinstance(req, dict):
        (out / "cluster_state" / f.name).write_bytes(f.read_bytes())
        continue
    (out / "review" / f.name).write_bytes(f.read_bytes())
    kind = 0 if req.get("resource", {}).get("resource") == "statefulsets" else 1
    op = 2 if req.get("operation") == "UPDATE" else 0
    obj, old = req.get("object"), req.get("oldObject")
    (out / "rule_object" / (f.stem + ".object")).write_bytes(bytes([kind | op]) + json.dumps(obj).encode())
    if old is not None:
        (out / "rule_object" / (f.stem + ".pair")).write_bytes(bytes([kind | 2]) + json.dumps([obj, old]).encode())
    n += 1
for f in list((repo / "tests/fixtures").rglob("*.yaml")) + list((repo / "examples").glob("*.yaml")):
    (out / "cluster_state" / f.name).write_bytes(f.read_bytes())
for i, q in enumerate(["1Gi", "500m", "1.5e3", "0.000000001", "-1Ki", "1E", "12345678901234567890Ei", "+.5M", "1e-9", "100n"]):
    (out / "quantity" / f"q{i}").write_text(q)
print(f"seeded from {n} fixture reviews")
PY

status=0
for t in "${targets[@]}"; do
  corpus=$repo/fuzz/corpus/$t
  mkdir -p "$corpus" "$repo/fuzz/regressions/$t"
  echo "== fuzz $t for ${secs}s"
  # rss/malloc limits turn unbounded allocation into a reported failure.
  if ! (cd fuzz && cargo "${toolchain[@]}" fuzz run "${sanitizer[@]}" "$t" \
      "$corpus" "$seeds/$t" "$repo/fuzz/regressions/$t" -- \
      -max_total_time="$secs" -max_len=65536 -timeout=10 \
      -rss_limit_mb=1024 -malloc_limit_mb=256 -print_final_stats=1 \
      2>&1 | tee "$repo/fuzz/last-$t.log" | grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==|SUMMARY|Done|INFO: Running|thread .* panicked|artifact)' ); then
    status=1
  fi
  if grep -qE 'panicked|ERROR: libFuzzer|SUMMARY: ' "$repo/fuzz/last-$t.log"; then
    echo "!! $t failed; the input is in fuzz/artifacts/$t/" >&2
    status=1
  fi
done
exit $status
