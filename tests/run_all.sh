#!/bin/sh
# Run every test program, print each one's output, and close with one
# line for the whole suite: "N passed, N failed" (cmocka test counts).
# usage: tests/run_all.sh BUILD_DIR TEST...
b=$1; shift
passed=0; failed=0; broken=""
for t in "$@"; do
  echo "== $t"
  log=$(mktemp)
  "$b/tests/$t" 2>&1 | tee "$log"
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\..*/\1/p' "$log" | tail -n 1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:.*/\1/p' "$log" | tail -n 1)
  [ -n "$p" ] || p=0
  [ -n "$f" ] || f=0
  # a program that crashed or printed no summary counts as one failure
  if ! grep -q '^\[==========\] [0-9]* test(s) run\.' "$log"; then f=$((f + 1)); broken="$broken $t"; fi
  passed=$((passed + p)); failed=$((failed + f))
  rm -f "$log"
done
[ -z "$broken" ] || echo "test programs that did not finish:$broken"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
