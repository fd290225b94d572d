#!/bin/sh
# Run each fuzz harness for SECONDS with its corpus and dictionary.
#
#   sh tests/fuzz/run.sh SECONDS [HARNESS...]   # default: spec gen safetensors
#
# Builds the harnesses first (tests/fuzz/build.sh) unless FUZZ_NO_BUILD=1.
# The committed seeds in tests/fuzz/corpus/NAME are copied into a scratch
# corpus, build/fuzz/work/NAME/corpus, which keeps growing across runs; the
# repository is never written to.  Crashing inputs land in
# build/fuzz/work/NAME/artifacts/ and logs in build/fuzz/work/NAME/log.
# First, every input in tests/fuzz/regressions/NAME/ is replayed once
# (SECONDS=0 only replays).  FUZZ_PARALLEL=1 runs the harnesses at once
# instead of one after another.
# FUZZ_ARGS adds libFuzzer flags.  Prints one line per harness: executions,
# time and whether it crashed; exits 1 if any did.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

if [ $# -lt 1 ]; then
  echo "usage: $0 SECONDS [spec|gen|safetensors ...]" >&2
  exit 2
fi
SECS=$1
shift
case $SECS in ''|*[!0-9]*) echo "fuzz: SECONDS must be a whole number, got '$SECS'" >&2; exit 2 ;; esac
HARNESSES=${*:-spec gen safetensors}

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  sh tests/fuzz/build.sh
fi

# Replay tests/fuzz/regressions/NAME/* (inputs that once failed) through
# harness NAME; prints one line and returns 1 if any still fails.
replay() {
  h=$1
  bin=build/fuzz/fuzz_$h
  work=build/fuzz/work/$h
  set -- tests/fuzz/regressions/"$h"/*
  [ -e "$1" ] || return 0
  mkdir -p "$work"
  bad=""
  for f in "$@"; do
    log=$work/replay-$(basename "$f").log
    if ! "$bin" -timeout=10 "$f" >"$log" 2>&1; then
      why=$(grep -m 1 -e '^==[0-9]*==ERROR' -e 'ALARM' -e 'attnc fuzz check failed' -e 'runtime error' "$log" |
        cut -c 1-100)
      bad="$bad
    $(basename "$f"): ${why:-failed} (log: $log)"
    fi
  done
  if [ -n "$bad" ]; then
    printf '%-18s %d regression input(s), still failing:%s\n' "fuzz_$h" "$#" "$bad"
    return 1
  fi
  printf '%-18s %d regression input(s), all pass\n' "fuzz_$h" "$#"
}

run_one() {
  h=$1
  bin=build/fuzz/fuzz_$h
  work=build/fuzz/work/$h
  mkdir -p "$work/corpus" "$work/artifacts"
  cp tests/fuzz/corpus/"$h"/* "$work/corpus/" 2>/dev/null || true
  case $h in
    spec|gen) extra="-dict=tests/fuzz/spec.dict" ;;
    safetensors) extra="-dict=tests/fuzz/safetensors.dict -use_value_profile=1" ;;
    *) echo "fuzz: unknown harness '$h'" >&2; return 2 ;;
  esac
  start=$(date +%s)
  # shellcheck disable=SC2086
  if "$bin" -max_total_time="$SECS" -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/" $extra ${FUZZ_ARGS:-} "$work/corpus" >"$work/log" 2>&1; then
    rc=0
  else
    rc=$?
  fi
  end=$(date +%s)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  if [ -z "$execs" ]; then
    execs=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$work/log" | tail -n 1)
  fi
  crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/log" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    verdict="no crash"
  else
    verdict="CRASHED (exit $rc): ${crash:-see $work/log}"
  fi
  printf '%-18s %12s execs in %5s s, corpus %5s files: %s\n' "fuzz_$h" "${execs:-?}" \
    "$((end - start))" "$(ls "$work/corpus" | wc -l | tr -d ' ')" "$verdict"
  [ "$rc" -eq 0 ]
}

status=0
for h in $HARNESSES; do replay "$h" || status=1; done
[ "$SECS" -gt 0 ] || exit $status
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
  pids=""
  for h in $HARNESSES; do
    run_one "$h" > "build/fuzz/run_$h.out" &
    pids="$pids $!"
  done
  for p in $pids; do wait "$p" || status=1; done
  for h in $HARNESSES; do cat "build/fuzz/run_$h.out"; done
else
  for h in $HARNESSES; do run_one "$h" || status=1; done
fi
exit $status
