#!/usr/bin/env bash
# Load and fault tests of the HTTPS server, loopback only, every step bounded in time.
#
#   scripts/load.sh [bench|startup|rotation|faults|sigterm|all] [SECONDS]
#
#   bench     reviews vs a trivial route of the same server (examples/bench_server.rs), over
#             HTTP/1.1 and HTTP/2 keep-alive, at 1k/s, 5k/s and saturation (SECONDS each, 15);
#             at saturation the trivial route also gets each review's own body; every row
#             gives the CPU time per request of the server and of oha
#   startup   cold start to /readyz 200 and resident size with --state of 10,000 PVCs,
#             2,000 StatefulSets, 50 StorageClasses (5 runs)
#   rotation  SECONDS (60) of mixed reviews at 3k/s while the certificate is swapped by a
#             Secret-volume symlink swap every 5 s: zero failed requests
#   faults    idle and half-open connections, partial headers, deeply nested and huge JSON,
#             a flood of oversized and chunked bodies (resident size measured)
#   sigterm   SIGTERM under load: every review the server accepted got its response
#
# Installs oha (crates.io) into target/tools (TOOLS_DIR overrides); builds the release
# binary and examples. Results: target/load/*.json and a summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
what=${1:-all}
secs=${2:-}
tools=${TOOLS_DIR:-$repo/target/tools}
target=${CARGO_TARGET_DIR:-$repo/target}
out=$repo/target/load
work=$(mktemp -d)
mkdir -p "$out"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! [ -x "$tools/bin/oha" ]; then
  echo "== installing oha into $tools"
  cargo install oha --locked --root "$tools"
fi
oha=$tools/bin/oha
echo "== building release binary and examples"
cargo build --release --locked --bin stateful-admission --example bench_server --example gen_state
bin=$target/release/stateful-admission
"$target/release/examples/gen_state" > "$work/state.json"

fx=$repo/tests/fixtures
sts_update=$repo/benches/fixtures/statefulset-update-3-templates.mutate.json
pvc_create=$fx/claim/pvc-create-filled-in-class.mutate.json
pvc_update=$fx/apiserver/pvc-update-expand-bound.validate.json

echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo); load: $(cut -d' ' -f1-3 /proc/loadavg)"

# cpu_mark -> srv_cpu, tool_cpu: CPU seconds (user + system) used so far by process $cpu_pid
# and by the children this shell has waited for (a load tool run in the foreground). Called
# in this shell, not in a command substitution, whose subshell has children of its own.
cpu_mark() {
  srv_cpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$cpu_pid/stat")
  times > "$work/times"
  tool_cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { v = $i; sub(/s$/, "", v); split(v, a, "m"); t += a[1] * 60 + a[2] } printf "%.2f", t }' "$work/times")
}

# oha_run NAME URL BODY ARGS... -> one summary line, full JSON in target/load/NAME.json.
# With cpu_pid set (and oha in the foreground), the line also gives the CPU time per request
# of that process (the server) and of oha, from /proc and the shell's children times.
oha_run() {
  local name=$1 url=$2 body=$3
  shift 3
  local srv0=0 srv1=0 tool0=0 tool1=0
  if [ -n "${cpu_pid:-}" ]; then cpu_mark; srv0=$srv_cpu; tool0=$tool_cpu; fi
  "$oha" --no-tui --output-format json --insecure -w -m POST -T application/json -D "$body" "$@" "$url" \
    > "$out/$name.json" 2> "$out/$name.err" || true
  if [ -n "${cpu_pid:-}" ]; then cpu_mark; srv1=$srv_cpu; tool1=$tool_cpu; fi
  python3 - "$out/$name.json" "$name" "$srv0" "$srv1" "$tool0" "$tool1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"{sys.argv[2]:<34} no result ({e})"); sys.exit()
s, p = r["summary"], r["latencyPercentiles"]
codes = r.get("statusCodeDistribution", {})
errors = r.get("errorDistribution", {})
ms = lambda v: f"{(v or 0) * 1e3:7.2f}"
cpu = ""
n = sum(codes.values())
srv, tool = (float(b) - float(a) for a, b in (sys.argv[3:5], sys.argv[5:7]))
if srv > 0 and n:
    cpu = f"  cpu/req server {srv / n * 1e6:6.1f} us, oha {tool / n * 1e6:6.1f} us"
print(f"{sys.argv[2]:<34} {s['requestsPerSec']:9.0f}/s  p50 {ms(p['p50'])} ms  p99 {ms(p['p99'])} ms  "
      f"p99.9 {ms(p['p99.9'])} ms{cpu}  codes {codes}  errors {errors}")
PY
}

# wait_for_line FILE PATTERN -> the line, within 20 s
wait_for_line() {
  for _ in $(seq 200); do
    if grep -q "$2" "$1" 2>/dev/null; then grep -m1 "$2" "$1"; return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2
  cat "$1" >&2
  return 1
}

start_bench_server() {
  "$target/release/examples/bench_server" "$work/state.json" "$work/bench-certs" \
    > "$work/bench.out" 2> "$work/bench.log" &
  bench_pid=$!
  pids+=("$bench_pid")
  bench_addr=$(wait_for_line "$work/bench.out" '^listening' | cut -d' ' -f2)
}

# serve ARGS... -> serve_pid, serve_addr, probe_addr (JSON log in $work/serve.log)
serve() {
  : > "$work/serve.log"
  "$bin" serve --addr 127.0.0.1:0 --probe-addr 127.0.0.1:0 --log-format json \
    --state "$work/state.json" "$@" 2> "$work/serve.log" > /dev/null &
  serve_pid=$!
  pids+=("$serve_pid")
  local line
  line=$(wait_for_line "$work/serve.log" '"webhook listening"')
  serve_addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fields"]["addr"])' "$line")
  probe_addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fields"]["probe_addr"])' "$line")
  for _ in $(seq 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$probe_addr/readyz")" = 200 ] && return 0
    sleep 0.05
  done
  echo "server not ready" >&2
  return 1
}

stop() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Secret-volume layout: ..data -> ..v<N>/, tls.crt -> ..data/tls.crt
make_cert() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
}

bench() {
  local d=${secs:-15}
  echo "== bench: $d s per row; server: examples/bench_server (same listener, TLS, router, timeout layer)"
  start_bench_server
  local base=https://$bench_addr
  cpu_pid=$bench_pid
  for proto in h1 h2; do
    local conn=(-c 32)
    [ "$proto" = h2 ] && conn=(--http2 -c 4 -p 16)
    for rate in 1000 5000 max; do
      local rate_args=(-q "$rate" --latency-correction)
      [ "$rate" = max ] && rate_args=()
      oha_run "bench-$proto-$rate-trivial" "$base/trivial" "$sts_update" -z "${d}s" "${conn[@]}" "${rate_args[@]}"
      if [ "$rate" = max ]; then
        # The baseline with each review's own body: TLS and HTTP cost grow with the body.
        oha_run "bench-$proto-$rate-trivial-pvc-create" "$base/trivial" "$pvc_create" -z "${d}s" "${conn[@]}"
        oha_run "bench-$proto-$rate-trivial-pvc-expand" "$base/trivial" "$pvc_update" -z "${d}s" "${conn[@]}"
      fi
      oha_run "bench-$proto-$rate-sts-update" "$base/mutate" "$sts_update" -z "${d}s" "${conn[@]}" "${rate_args[@]}"
      oha_run "bench-$proto-$rate-pvc-create" "$base/mutate" "$pvc_create" -z "${d}s" "${conn[@]}" "${rate_args[@]}"
      oha_run "bench-$proto-$rate-pvc-expand" "$base/validate" "$pvc_update" -z "${d}s" "${conn[@]}" "${rate_args[@]}"
    done
  done
  cpu_pid=
  echo "bench_server after the runs: $(python3 scripts/faults.py rss "$bench_pid")"
  stop "$bench_pid"
}

startup() {
  echo "== startup: --state $(du -h "$work/state.json" | cut -f1) JSON, 10,000 PVCs, 2,000 StatefulSets, 50 StorageClasses"
  for run in 1 2 3 4 5; do
    python3 - "$bin" "$work/state.json" "$work/startup-$run" <<'PY'
import json, os, subprocess, sys, time, urllib.request
bin, state, certs = sys.argv[1:]
start = time.monotonic()
p = subprocess.Popen([bin, "serve", "--addr", "127.0.0.1:0", "--probe-addr", "127.0.0.1:0",
                      "--log-format", "json", "--state", state, "--self-signed", "--self-signed-dir", certs],
                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
probe = None
for line in p.stderr:
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if ev.get("fields", {}).get("message") == "webhook listening":
        probe = ev["fields"]["probe_addr"]
        break
ready = None
deadline = start + 20
while time.monotonic() < deadline:
    try:
        if urllib.request.urlopen(f"http://{probe}/readyz", timeout=1).status == 200:
            ready = time.monotonic() - start
            break
    except Exception:
        time.sleep(0.002)
def status():
    return {k: v.strip() for k, v in (l.split(":", 1) for l in open(f"/proc/{p.pid}/status")) if k in ("VmRSS", "VmHWM")}
time.sleep(1)
early = status()
time.sleep(4)
settled = status()
p.terminate(); p.wait(10)
print(f"start to /readyz 200: {ready * 1e3:7.1f} ms   RSS 1 s after: {early['VmRSS']}   5 s after: {settled['VmRSS']}   peak {settled['VmHWM']}")
PY
  done
}

rotation() {
  local d=${secs:-60}
  echo "== rotation: $d s of mixed reviews at 3k/s, certificate swapped every 5 s"
  local vol=$work/secret
  make_cert "$vol/..v0"
  ln -s ..v0 "$vol/..data"
  ln -s ..data/tls.crt "$vol/tls.crt"
  ln -s ..data/tls.key "$vol/tls.key"
  serve --tls-cert "$vol/tls.crt" --tls-key "$vol/tls.key" --cert-poll-interval 2s
  (
    for v in $(seq 1 $((d / 5))); do
      sleep 5
      make_cert "$vol/..v$v"
      ln -s "..v$v" "$vol/..data_tmp" && mv -T "$vol/..data_tmp" "$vol/..data"
    done
  ) &
  local swapper=$!
  pids+=("$swapper")
  local base=https://$serve_addr
  # Three streams, 1k/s each: HTTP/2 keep-alive, HTTP/1.1 keep-alive, and HTTP/1.1 with a new
  # connection (so a new handshake, seeing the current certificate) per request.
  oha_run rotation-sts-update-h2 "$base/mutate" "$sts_update" -z "${d}s" -q 1000 --http2 -c 2 -p 8 &
  local a=$!
  oha_run rotation-pvc-create-h1 "$base/mutate" "$pvc_create" -z "${d}s" -q 1000 -c 16 &
  local b=$!
  oha_run rotation-pvc-expand-h1-new-conn "$base/validate" "$pvc_update" -z "${d}s" -q 1000 -c 16 --disable-keepalive &
  local c=$!
  wait $a $b $c
  wait $swapper || true
  echo "certificate reloads logged: $(grep -c 'serving certificate reloaded' "$work/serve.log")"
  stop "$serve_pid"
}

faults() {
  echo "== faults: --max-connections 256 --handshake-timeout 2s --request-timeout 5s"
  serve --self-signed --self-signed-dir "$work/faults-certs" --max-connections 256 \
    --handshake-timeout 2s --request-timeout 5s
  echo "idle at start: $(python3 scripts/faults.py rss "$serve_pid")"
  echo "-- 1000 idle TCP connections + 250 TLS connections with unfinished headers, 10 s; a client keeps asking"
  python3 scripts/faults.py slowloris "$serve_addr" "$pvc_update" "$serve_pid" 1000 10 || echo "FAIL: faults.py slowloris"
  echo "-- deeply nested and huge JSON (fresh connection each; best and worst of 5)"
  python3 scripts/faults.py nested "$serve_addr" || echo "FAIL: faults.py nested"
  echo "-- flood of oversized bodies (4 MiB, Content-Length declared), 64 connections, 10 s"
  head -c $((4 * 1024 * 1024)) /dev/zero | tr '\0' ' ' > "$work/4m.json"
  oha_run faults-oversized-declared "https://$serve_addr/mutate" "$work/4m.json" -z 10s -c 64
  echo "after: $(python3 scripts/faults.py rss "$serve_pid")"
  echo "-- flood of chunked 4 MiB uploads (no Content-Length), 64 clients, 10 s"
  python3 scripts/faults.py chunked "$serve_addr" "$serve_pid" 64 4 10 || echo "FAIL: faults.py chunked"
  echo "-- flood of chunked 2 MiB uploads (under the cap, not JSON: read whole, then 400), 128 clients, 10 s"
  python3 scripts/faults.py chunked "$serve_addr" "$serve_pid" 128 2 10 || echo "FAIL: faults.py chunked"
  echo "-- still serving: "
  oha_run faults-after "https://$serve_addr/validate" "$pvc_update" -n 2000 -c 8
  stop "$serve_pid"
}

sigterm() {
  echo "== sigterm: reviews at 2k/s over HTTP/1.1 and HTTP/2; SIGTERM after 3 s (--shutdown-delay 1s)"
  serve --self-signed --self-signed-dir "$work/sigterm-certs" --shutdown-delay 1s
  local base=https://$serve_addr
  oha_run sigterm-h1 "$base/mutate" "$sts_update" -z 8s -q 1000 -c 16 &
  local a=$!
  oha_run sigterm-h2 "$base/mutate" "$sts_update" -z 8s -q 1000 --http2 -c 2 -p 8 &
  local b=$!
  sleep 3
  kill -TERM "$serve_pid"
  local code=0
  wait "$serve_pid" || code=$?
  wait $a $b
  # Every StatefulSet UPDATE review is logged (it is mutated); each one logged must have
  # reached the client as a 200.
  python3 - "$work/serve.log" "$out/sigterm-h1.json" "$out/sigterm-h2.json" "$code" <<'PY'
import json, sys
log, h1, h2, code = sys.argv[1:]
reviewed = sum(1 for l in open(log) if '"reviewed"' in l)
ok = sum(json.load(open(f)).get("statusCodeDistribution", {}).get("200", 0) for f in (h1, h2))
errors = {}
for f in (h1, h2):
    for k, v in json.load(open(f)).get("errorDistribution", {}).items():
        errors[k] = errors.get(k, 0) + v
print(f"server exit code {code}; reviews answered by the server {reviewed}; 200s received {ok}; "
      f"client errors {errors}")
print("PASS: every accepted review got its response" if reviewed == ok else "FAIL: accepted reviews without a response")
PY
}

case $what in
  bench) bench ;;
  startup) startup ;;
  rotation) rotation ;;
  faults) faults ;;
  sigterm) sigterm ;;
  all) startup; bench; rotation; faults; sigterm ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
