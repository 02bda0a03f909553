#!/usr/bin/env bash
# Shows that tests which assert that something did not happen, or a maximum over time, can
# fail: each patch in scripts/mutations/ breaks one rule of the product (or, where that is the
# point, of a fake the tests run against), and every test it names must fail while it is
# applied.
#
#   scripts/mutation-check.sh [--no-baseline] [--timeout SECONDS] [--list] [PATCH...]
#
#   --no-baseline   do not run the named tests on the unchanged tree first
#   --timeout S     a test run that takes longer is stopped (default 900)
#   --list          print each patch, what it breaks and its tests; run nothing
#   PATCH...        patch files or their numbers (`03`); default: every scripts/mutations/*.patch
#
# A patch is a unified diff as `git diff` prints it, after comment lines (which `git apply`
# skips, as it skips any text before the first `diff --git`):
#
#   # test: restart_pods::some_test                  a test of the integration suite (tests/it)
#   # test: lib:controller::leader::tests::some_test a unit test of the library
#   # breaks: what the change breaks, in a few words
#
# One `# test:` line per test; each runs alone (`--exact`). For each patch: `git apply`, one
# build of what its tests need (a patch that no longer applies or builds is reported so), each
# test run, the files reverted with `git checkout`. A test that fails is `caught` (the first
# line of its panic is kept), one that passes `MISSED`. First the named tests run on the
# unchanged tree: one that fails there proves nothing by failing under a patch.
#
# The tree must have no changes to tracked files (the revert restores the committed files); a
# trap reverts the applied patch whatever ends the script, Ctrl-C included. Logs and the table
# go to target/mutations/<time>/ (or $CARGO_TARGET_DIR/mutations/...). Exit status 1 if a test
# was not caught or failed on the unchanged tree, 2 if the script could not run.
set -euo pipefail

baseline=1
timeout_s=900
list=0
selected=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-baseline) baseline=0; shift ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) selected+=("$1"); shift ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

patches=()
if [ ${#selected[@]} -eq 0 ]; then
  for p in scripts/mutations/*.patch; do patches+=("$p"); done
else
  for s in "${selected[@]}"; do
    if [ -f "$s" ]; then
      patches+=("$s")
    else
      matches=(scripts/mutations/"$s"*.patch)
      [ -f "${matches[0]}" ] || { echo "no patch $s" >&2; exit 2; }
      patches+=("${matches[@]}")
    fi
  done
fi

tests_of() { sed -n 's/^# test: *//p' "$1"; }
breaks_of() { sed -n 's/^# breaks: *//p' "$1" | head -1; }

if [ "$list" -eq 1 ]; then
  for p in "${patches[@]}"; do
    echo "$(basename "$p"): $(breaks_of "$p")"
    tests_of "$p" | sed 's/^/    /'
  done
  exit 0
fi

if ! git diff --quiet || ! git diff --cached --quiet; then
  echo "the work tree has changes to tracked files; commit or stash them first:" >&2
  git status --short --untracked-files=no >&2
  exit 2
fi

target=${CARGO_TARGET_DIR:-$root/target}
out="$target/mutations/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
export RUST_BACKTRACE=0

# The files of the patch applied now, reverted whatever ends the script.
applied_files=()
revert() {
  if [ ${#applied_files[@]} -gt 0 ]; then
    git checkout -- "${applied_files[@]}"
    applied_files=()
  fi
}
# A test runs in the background so that an interrupt is handled at once (a shell waiting for
# a foreground command handles it only once that command ends): its `timeout` passes the
# signal on to cargo and the test binary.
child=""
interrupted() {
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  revert
  echo "interrupted; the tree is as committed" >&2
  exit 130
}
trap revert EXIT
trap interrupted INT TERM

# cargo's arguments for a test: `lib:PATH` a unit test, otherwise a test of tests/it.
cargo_target() { case "$1" in lib:*) echo "--lib" ;; *) echo "--test it" ;; esac; }
test_name() { echo "${1#lib:}"; }

# Runs one test (`$1`) into log `$2`; sets `result` to ok, failed, timeout or none (no such
# test).
run_test() {
  local spec=$1 log=$2 rc
  # shellcheck disable=SC2046
  timeout "$timeout_s" cargo test --locked $(cargo_target "$spec") -- --exact "$(test_name "$spec")" \
    < /dev/null > "$log" 2>&1 &
  child=$!
  set +e
  wait "$child"
  rc=$?
  set -e
  child=""
  if [ "$rc" -eq 124 ]; then
    result=timeout
  elif grep -qE '^test result: .* 1 passed; 0 failed' "$log"; then
    result=ok
  elif grep -qE '^test result: .* 0 passed; 1 failed' "$log"; then
    result=failed
  else
    result=none
  fi
}

# The first line of the first panic's message in log `$1`, clipped.
first_line() {
  awk '/panicked at/ { getline m; print m; exit }' "$1" | cut -c1-160
}

started=$(date +%s)
all_tests=$(for p in "${patches[@]}"; do tests_of "$p"; done | sort -u)
declare -A clean=()
if [ "$baseline" -eq 1 ]; then
  echo "the named tests on the unchanged tree..."
  n=0
  while read -r spec; do
    n=$((n + 1))
    run_test "$spec" "$out/clean-$n.log"
    clean[$spec]=$result
    echo "  ${clean[$spec]}  $spec"
  done <<< "$all_tests"
fi

table="$out/table.md"
{
  echo "| patch | test | result | first line of the failure |"
  echo "| --- | --- | --- | --- |"
} > "$table"
row() { echo "| $1 | $2 | $3 | $4 |" >> "$table"; }

bad=0
for patch in "${patches[@]}"; do
  name=$(basename "$patch" .patch)
  echo "$name: $(breaks_of "$patch")"
  specs=$(tests_of "$patch")
  if [ -z "$specs" ]; then
    row "$name" "(none named)" "NO TEST" ""
    bad=1
    continue
  fi
  mapfile -t files < <(git apply --numstat "$patch" 2>/dev/null | cut -f3)
  applied_files=("${files[@]}")
  if [ ${#files[@]} -eq 0 ] || ! git apply "$patch" 2> "$out/$name.apply.log"; then
    applied_files=()
    while read -r spec; do row "$name" "$spec" "DOES NOT APPLY" "see $name.apply.log"; done <<< "$specs"
    echo "  does not apply"
    bad=1
    continue
  fi
  targets=$(while read -r spec; do cargo_target "$spec"; done <<< "$specs" | sort -u | tr '\n' ' ')
  # shellcheck disable=SC2086
  if ! cargo test --locked $targets --no-run > "$out/$name.build.log" 2>&1; then
    revert
    while read -r spec; do row "$name" "$spec" "DOES NOT BUILD" "see $name.build.log"; done <<< "$specs"
    echo "  does not build"
    bad=1
    continue
  fi
  n=0
  while read -r spec; do
    n=$((n + 1))
    log="$out/$name.$n.log"
    took=$(date +%s)
    run_test "$spec" "$log"
    took=$(( $(date +%s) - took ))
    line=""
    case "$result" in
      failed) verdict=caught; line=$(first_line "$log") ;;
      ok) verdict=MISSED; bad=1 ;;
      timeout) verdict="TIMEOUT (${timeout_s}s)"; bad=1 ;;
      *) verdict="NO SUCH TEST"; bad=1 ;;
    esac
    if [ "$baseline" -eq 1 ] && [ "${clean[$spec]}" != ok ]; then
      verdict="$verdict, but ${clean[$spec]} unchanged"
      bad=1
    fi
    row "$name" "$spec" "$verdict" "${line//|/\\|}"
    echo "  $verdict in ${took}s: $spec"
    [ -n "$line" ] && echo "    $line"
  done <<< "$specs"
  revert
  if ! git diff --quiet; then
    echo "the tree still differs after reverting $name; stopping" >&2
    exit 2
  fi
done

total=$(( $(date +%s) - started ))
echo
cat "$table"
echo
echo "${#patches[@]} patch(es) in ${total}s; logs and the table in $out"
echo "total ${total}s" >> "$table"
exit "$bad"
