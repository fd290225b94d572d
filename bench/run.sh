#!/bin/bash
# run.sh: attnc's benchmark suite against PyTorch and ONNX Runtime (issue 3).
#
#     bench/run.sh [THREADS]        (default 2; `make bench` runs it)
#
# For each case of bench/cases.json, the three one after the other so that
# they see the machine in the same state, in BENCH_ROUNDS rounds:
#   attnc    build/attnc bench SPEC --json --backend cc --threads N --runs R
#            (R chosen from a 1-run probe to fill the time budget, 5..200 as
#            the peers choose theirs; the CLI warms up for 100 ms first)
#   pytorch  /usr/bin/python3 bench/torch_bench.py --threads N --cases CASE
#   ort      node bench/ort_bench.js --threads N --cases CASE
#            (f32 cases only: a case with a "base", issue 26's 16- and 8-bit
#            rows, has its base's ORT time as its f32 peer)
# A KV cache case (issue 28) has a cache_len, which attnc gets as
# --cache-len; both peers get --attnc, the binary their tiny cache-step
# checks compare with.
# An overhead row (issue 27, "kind": "overhead") is attnc alone: its
# target is attnc over attnc on its base, the same spec without its key.
# A train row ("kind": "train") times forward plus backward: attnc bench
# --grad (3 runs at least; the 1-run probe alone when it took ten
# budgets), PyTorch autograd; ORT has no peer for it.
# Then the tables (bench/report.py): the f32 suite, and the 16- and 8-bit
# rows against their base cases, the cache rows, the overhead rows, the
# training rows.  Raw JSON lines go to
# bench/results-latest.jsonl.
#
# A missing peer is installed when we are root and may (Debian's
# python3-torch, with OpenBLAS; onnxruntime-node with
# `npm ci --ignore-scripts` from bench/package-lock.json), else it is
# skipped with the reason.  Environment:
#   ATTNC=path             the attnc binary (default build/attnc)
#   BENCH_CASES=a,b        only these cases (ids from bench/cases.json), and
#                          the base case of each that has one
#   BENCH_BUDGET_MS=1500   timed runs per case, peer and round fill about this long
#   BENCH_ROUNDS=2         rounds over the suite (the best round median counts)
#   BENCH_NO_INSTALL=1     never install anything
#   BENCH_PEAK_GFLOPS=G    FMA peak for the core B check (default: measured by
#                          build/fma_peak before and after the suite, the higher
#                          of the two, or THREADS one-thread peaks if that is
#                          more than 1.25x higher; 250/thread, the issue's
#                          figure, if absent)
#   BENCH_BF16_PEAK_GFLOPS=G  the bf16 dot-product peak for core B bf16 (default:
#                          build/fma_peak's bf16_gflops, by the same rule)

set -u
THREADS=${1:-2}
case "$THREADS" in ''|*[!0-9]*|0) echo "usage: bench/run.sh [THREADS]" >&2; exit 2 ;; esac
case "${BENCH_ROUNDS:-2}" in ''|*[!0-9]*|0) echo "bench: BENCH_ROUNDS must be a positive integer" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.." || exit 2
ATTNC=${ATTNC:-build/attnc}
BUDGET_MS=${BENCH_BUDGET_MS:-1500}
ROUNDS=${BENCH_ROUNDS:-2}
OUT=bench/results-latest.jsonl
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -x "$ATTNC" ]; then echo "bench: $ATTNC not found: run make first" >&2; exit 2; fi
if [ ! -x "$PY" ]; then echo "bench: $PY not found (apt-get install -y python3)" >&2; exit 2; fi

can_install() { [ -z "${BENCH_NO_INSTALL:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
apt_install() {
  echo "bench: installing $*" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >/dev/null 2>&1
}

: > "$OUT"
skip() { # peer reason
  echo "bench: $1 skipped: $2" >&2
  printf '{"peer": "%s", "skipped": "%s"}\n' "$1" "$(printf '%s' "$2" | sed 's/\\/\\\\/g; s/"/\\"/g')" >> "$OUT"
}

# ---- the peers ----
TORCH=1
if ! "$PY" -c 'import torch' 2>/dev/null; then
  if can_install && apt_install python3-torch libopenblas0-pthread && "$PY" -c 'import torch' 2>/dev/null; then :
  else TORCH=0; skip pytorch "python3-torch is not installed (apt-get install -y python3-torch libopenblas0-pthread)"; fi
fi
# Debian's torch takes its BLAS from the libblas.so.3 alternative; the
# reference BLAS there is far slower than OpenBLAS at every Linear.
blas_of_torch() {
  "$PY" - <<'EOF' 2>/dev/null
import torch, re
for l in open("/proc/self/maps"):
    m = re.search(r"(/\S*(?:blas|mkl)\S*\.so[.\d]*)", l)
    if m:
        print(m.group(1)); break
EOF
}
if [ $TORCH = 1 ]; then
  BLAS=$(blas_of_torch)
  case "$BLAS" in
    *openblas*|*mkl*) ;;
    *)
      if can_install && apt_install libopenblas0-pthread; then BLAS=$(blas_of_torch)
      else echo "bench: warning: PyTorch uses the reference BLAS ($BLAS); apt-get install -y libopenblas0-pthread for a fair peer" >&2; fi ;;
  esac
fi

ORT=1
if ! command -v node >/dev/null; then
  ORT=0; skip ort "node is not installed"
elif [ ! -f bench/node_modules/onnxruntime-node/package.json ] || [ ! -f bench/node_modules/onnx-proto/package.json ]; then
  if [ -n "${BENCH_NO_INSTALL:-}" ]; then ORT=0; skip ort "bench/node_modules is missing (cd bench && npm ci --ignore-scripts)"
  else
    echo "bench: installing onnxruntime-node (npm ci --ignore-scripts in bench/)" >&2
    if ! (cd bench && npm ci --ignore-scripts --no-audit --no-fund >"$TMP/npm.log" 2>&1); then
      ORT=0; skip ort "npm ci --ignore-scripts failed: $(tail -n 1 "$TMP/npm.log")"
    fi
  fi
fi

ATTNC_SUM=$(cksum <"$ATTNC")
PEAK_BIN=$(dirname "$ATTNC")/fma_peak
peak_json() { [ -x "$PEAK_BIN" ] && "$PEAK_BIN" "$THREADS" </dev/null 2>/dev/null; }

# ---- the machine ----
MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
CORES=$(nproc)
echo "attnc benchmark suite: $THREADS thread(s), attnc cc backend"
echo "machine: $MODEL, $CORES cores ($(uname -m)), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# the flags the 16- and 8-bit rows' targets need (cases.json "needs")
NARROW=$(for f in avx512_bf16 avx512_vnni; do grep -qw "$f" /proc/cpuinfo && printf '%s ' "$f"; done)
has_flag() { case " $NARROW" in *" $1 "*) echo yes ;; *) echo no ;; esac; }
echo "16- and 8-bit rows: avx512_bf16 $(has_flag avx512_bf16), avx512_vnni $(has_flag avx512_vnni) (without them their targets do not apply)"
printf '{"machine": {"model": "%s", "flags": [%s]}}\n' "$(printf '%s' "$MODEL" | sed 's/\\/\\\\/g; s/"/\\"/g')" \
  "$(for f in $NARROW; do printf '"%s", ' "$f"; done | sed 's/, $//')" >> "$OUT"
[ $TORCH = 1 ] && echo "pytorch: $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) via $PY, BLAS ${BLAS:-?}${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"
[ $ORT = 1 ] && echo "ort: onnxruntime-node $(node -p 'require("./bench/node_modules/onnxruntime-node/package.json").version' 2>/dev/null) via node $(node --version)"
echo

# ---- the cases ----
CASES=$("$PY" - "${BENCH_CASES:-}" <<'EOF'
import json, sys
want = [w for w in sys.argv[1].split(",") if w]
cases = json.load(open("bench/cases.json"))
known = {c["case"] for c in cases}
bad = [w for w in want if w not in known]
if bad:
    sys.exit("bench: unknown case(s) %s; known: %s" % (",".join(bad), ",".join(sorted(known))))
# a row with a base (16/8-bit, cache, overhead) is judged against it in the same run
for c in cases:
    if c["case"] in want and "base" in c and c["base"] not in want:
        print("bench: adding %s, the base of %s" % (c["base"], c["case"]), file=sys.stderr)
        want.append(c["base"])
for c in cases:
    if not want or c["case"] in want:
        print("%s\t%s\t%s\t%s\t%s\t%s" % (c["case"], c["label"], c.get("base", "-"), c.get("cache_len", "-"),
                                       c.get("kind", "-"), c["spec"]))
EOF
) || exit 2

json_num() { sed -n "s/.*\"$1\": *\([-0-9.e+]*\).*/\1/p" | head -n 1; }
PEAK_JSON=$(peak_json)
PEAK_BEFORE=$(echo "$PEAK_JSON" | json_num gflops)

err_line() { # peer message-file
  printf '{"case": "%s", "peer": "%s", "error": "%s"}\n' "$ID" "$1" "$(tr -d '"\\' <"$2" | tr '\n' ' ')"
}

run_case() { # writes the case's JSON lines, all three peers, to stdout
  # a KV cache case (issue 28) times one step with CACHE_LEN positions filled
  CL=(); [ "$CACHE_LEN" = - ] || CL=(--cache-len "$CACHE_LEN")
  # a train row times forward plus backward (attnc bench --grad); its
  # backward can take seconds, so 3 runs are enough there, and when the
  # probe alone took ten budgets it is the row's timing (1 run)
  MIN_RUNS=5
  [ "$KIND" = train ] && { CL+=(--grad); MIN_RUNS=3; }
  # attnc: a 1-run probe (also fills the kernel cache), then enough runs
  if "$ATTNC" bench "$SPEC" "${CL[@]}" --json --backend cc --threads "$THREADS" --runs 1 </dev/null >"$TMP/probe" 2>"$TMP/err"; then
    EST=$(json_num median_ms <"$TMP/probe")
    RUNS=$(awk -v b="$BUDGET_MS" -v e="${EST:-1}" -v m="$MIN_RUNS" 'BEGIN { r = int(b / (e > 0.001 ? e : 0.001)); if (r < m) r = m; if (r > 200) r = 200; print r }')
    ONE=no
    [ "$KIND" = train ] && ONE=$(awk -v b="$BUDGET_MS" -v e="${EST:-0}" 'BEGIN { print (e >= 10 * b ? "yes" : "no") }')
    if [ "$ONE" = yes ]; then cp "$TMP/probe" "$TMP/a"; fi
    if [ "$ONE" = yes ] || "$ATTNC" bench "$SPEC" "${CL[@]}" --json --backend cc --threads "$THREADS" --runs "$RUNS" </dev/null >"$TMP/a" 2>"$TMP/err"; then
      sed "s/^{/{\"case\": \"$ID\", \"peer\": \"attnc\", \"requested_threads\": $THREADS, /" "$TMP/a"
    else err_line attnc "$TMP/err"; fi
  else err_line attnc "$TMP/err"; fi
  grep -v '^attnc: note:' "$TMP/err" >&2
  [ "$KIND" = overhead ] && return  # attnc against attnc: no peer
  if [ $TORCH = 1 ]; then
    timeout 900 "$PY" bench/torch_bench.py --threads "$THREADS" --cases "$ID" --budget-ms "$BUDGET_MS" --attnc "$ATTNC" </dev/null \
      || { echo "torch_bench.py failed or timed out" >"$TMP/err"; err_line pytorch "$TMP/err"; }
  fi
  if [ $ORT = 1 ] && [ "$BASE" = - ] && [ "$KIND" != train ]; then  # ORT: inference only
    timeout 900 node bench/ort_bench.js --threads "$THREADS" --cases "$ID" --budget-ms "$BUDGET_MS" --attnc "$ATTNC" </dev/null \
      || { echo "ort_bench.js failed or timed out" >"$TMP/err"; err_line ort "$TMP/err"; }
  fi
}

# Rounds: the suite runs ROUNDS times, every other round in reverse order;
# the report takes each peer's best round median (the same rule for all
# three) and shows how far the rounds were apart.
for ROUND in $(seq 1 "$ROUNDS"); do
  if [ $((ROUND % 2)) = 1 ]; then ORDER=$CASES; else ORDER=$(printf '%s\n' "$CASES" | tac); fi
  while IFS=$'\t' read -r ID LABEL BASE CACHE_LEN KIND SPEC; do
    echo "== round $ROUND/$ROUNDS, $LABEL: $SPEC$([ "$CACHE_LEN" = - ] || echo " --cache-len $CACHE_LEN")" >&2
    run_case | sed "s/^{/{\"round\": $ROUND, /" >> "$OUT"
  done <<<"$ORDER"
done

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
PEAK_AFTER_JSON=$(peak_json)
PEAK_AFTER=$(echo "$PEAK_AFTER_JSON" | json_num gflops)
PEAK=${BENCH_PEAK_GFLOPS:-$(awk -v a="${PEAK_BEFORE:-0}" -v b="${PEAK_AFTER:-0}" 'BEGIN { m = a > b ? a : b; if (m > 0) print m }')}
BF16_BEFORE=$(echo "$PEAK_JSON" | json_num bf16_gflops)
BF16_AFTER=$(echo "$PEAK_AFTER_JSON" | json_num bf16_gflops)
BF16_PEAK=${BENCH_BF16_PEAK_GFLOPS:-$(awk -v a="${BF16_BEFORE:-0}" -v b="${BF16_AFTER:-0}" 'BEGIN { m = a > b ? a : b; if (m > 0) print m }')}
PEAK1_JSON=
if [ "$THREADS" -gt 1 ] && [ -x "$PEAK_BIN" ] && { [ -z "${BENCH_PEAK_GFLOPS:-}" ] || { [ -z "${BENCH_BF16_PEAK_GFLOPS:-}" ] && [ -n "$BF16_PEAK" ]; }; }; then
  PEAK1_JSON=$("$PEAK_BIN" 1 </dev/null 2>/dev/null)
fi
if [ -z "${BENCH_PEAK_GFLOPS:-}" ]; then
  if [ -n "$PEAK" ]; then echo "FMA peak, $THREADS thread(s), measured by $PEAK_BIN: ${PEAK_BEFORE:-?} GFLOP/s before the suite, ${PEAK_AFTER:-?} after (the higher counts)"
  else echo "bench: warning: $PEAK_BIN did not run (make $PEAK_BIN); the peak is the issue's 250 GFLOP/s per thread" >&2; fi
  VNNI=$(echo "$PEAK_JSON" | json_num vnni_gops)
  AMX=$(echo "$PEAK_JSON" | json_num amx_bf16_gflops)
  [ -n "$PEAK_JSON" ] && echo "16- and 8-bit dot-product peaks, $THREADS thread(s), before the suite: bf16 (vdpbf16ps) ${BF16_BEFORE:-none: no AVX512-BF16} GFLOP/s, int8 (vpdpbusd) ${VNNI:-none: no AVX512-VNNI} GOP/s, AMX bf16 (tdpbf16ps, which the bf16 kernels use where present) ${AMX:-none: no AMX-BF16 tiles} GFLOP/s"
  # A reading at N threads below 0.8 x N one-thread peaks means the
  # threads did not get N cores while it ran: then N one-thread peaks
  # count instead, so that core B's share is not flattered.
  if [ -n "$PEAK" ] && [ "$THREADS" -gt 1 ]; then
    PEAK1=$(echo "$PEAK1_JSON" | json_num gflops)
    LOW=$(awk -v p="$PEAK" -v one="${PEAK1:-0}" -v n="$THREADS" 'BEGIN { if (one > 0 && p < 0.8 * n * one) print n * one }')
    if [ -n "$LOW" ]; then
      echo "FMA peak: one thread reads $PEAK1 GFLOP/s, so $THREADS threads should read about $LOW; counting $LOW (the $THREADS-thread readings did not get $THREADS cores)"
      PEAK=$LOW
    fi
  fi
fi
# the bf16 peak for core B bf16's share: the same rule as the FMA peak's
if [ -z "${BENCH_BF16_PEAK_GFLOPS:-}" ] && [ -n "$BF16_PEAK" ]; then
  echo "bf16 dot-product peak, $THREADS thread(s): ${BF16_BEFORE:-?} GFLOP/s before the suite, ${BF16_AFTER:-?} after (the higher counts)"
  if [ "$THREADS" -gt 1 ]; then
    BF16_1=$(echo "$PEAK1_JSON" | json_num bf16_gflops)
    LOW=$(awk -v p="$BF16_PEAK" -v one="${BF16_1:-0}" -v n="$THREADS" 'BEGIN { if (one > 0 && p < 0.8 * n * one) print n * one }')
    if [ -n "$LOW" ]; then
      echo "bf16 peak: one thread reads $BF16_1 GFLOP/s, so $THREADS threads should read about $LOW; counting $LOW"
      BF16_PEAK=$LOW
    fi
  fi
fi
if [ "$(cksum <"$ATTNC")" != "$ATTNC_SUM" ]; then
  echo "bench: warning: $ATTNC was rebuilt during the run; its rounds may differ" >&2
  echo "warning: $ATTNC was rebuilt during the run"
fi
echo
"$PY" bench/report.py "$OUT" --threads "$THREADS" ${PEAK:+--peak-gflops "$PEAK"} ${BF16_PEAK:+--bf16-peak-gflops "$BF16_PEAK"}
echo
echo "raw results: $OUT"
# the other targets: compile and load times, tcc against cc (bench/compile.sh)
if [ -z "${BENCH_CASES:-}" ]; then
  ATTNC="$ATTNC" bash bench/compile.sh "$THREADS"
fi
