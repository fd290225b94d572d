#!/bin/bash
# Run every test program, print each one's output, and close with one
# line for the whole suite: "N passed, N failed" (cmocka test counts).
# usage: tests/run_all.sh BUILD_DIR TEST...
#
# The programs run ATTNC_TEST_JOBS at a time (default: one per CPU), in
# the order given, so list the longest first.  Each one's output is kept
# in a file and printed whole, under its name and wall time, when it
# ends: programs never interleave.  The kernel cache they share is safe
# for concurrent processes (runtime/jit_cc.c writes each entry to a
# temporary directory and renames it).
b=$1; shift
jobs=${ATTNC_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in '' | *[!0-9]* | 0) echo "run_all.sh: ATTNC_TEST_JOBS must be a positive integer, not '$jobs'" >&2; exit 2 ;; esac
logs=$(mktemp -d) || exit 2
trap 'rm -rf "$logs"' EXIT
passed=0; failed=0; broken=""
declare -A name_of start_of

# one program's output and counts, once it has ended
report() {
  local t=$1 log="$logs/$1.log" p f
  echo "== $t ($(($(date +%s) - ${start_of[$t]})) s)"
  cat "$log"
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\..*/\1/p' "$log" | tail -n 1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:.*/\1/p' "$log" | tail -n 1)
  [ -n "$p" ] || p=0
  [ -n "$f" ] || f=0
  # a program that crashed or printed no summary counts as one failure
  if ! grep -q '^\[==========\] [0-9]* test(s) run\.' "$log"; then f=$((f + 1)); broken="$broken $t"; fi
  passed=$((passed + p)); failed=$((failed + f))
}

# wait for any one program and report it
reap() {
  local pid
  wait -n -p pid
  report "${name_of[$pid]}"
  unset "name_of[$pid]"
}

for t in "$@"; do
  while [ ${#name_of[@]} -ge "$jobs" ]; do reap; done
  echo "-- $t started"
  start_of[$t]=$(date +%s)
  "$b/tests/$t" > "$logs/$t.log" 2>&1 &
  name_of[$!]=$t
done
while [ ${#name_of[@]} -gt 0 ]; do reap; done

[ -z "$broken" ] || echo "test programs that did not finish:$broken"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
