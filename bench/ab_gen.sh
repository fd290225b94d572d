#!/bin/sh
# A/B of the generated code: this tree's generator against revision REV's,
# both run by this tree's library (ATTNC_SRC_DIR points it at REV's gen/
# and templates/), old and new alternating per case, on the suite's specs.
# usage: bench/ab_gen.sh REV [ROUNDS] [THREADS]   (run `make` first)
# Prints one line per case: both sides' medians of the rounds' median_ms,
# and new / old (below 1: this tree is faster).
set -eu
rev=${1:?usage: bench/ab_gen.sh REV [ROUNDS] [THREADS]}
rounds=${2:-3}
threads=${3:-2}
top=$(cd "$(dirname "$0")/.." && pwd)
attnc=${ATTNC:-$top/build/attnc}
[ -x "$attnc" ] || { echo "ab_gen: $attnc not found: run make first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/old" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git -C "$top" worktree add --detach "$tmp/old" "$rev" >/dev/null 2>&1 || { echo "ab_gen: no revision $rev" >&2; exit 2; }
export ATTNC_CACHE_DIR="$tmp/cache"
/usr/bin/python3 -c "import json,sys; [print(c['case'] + '\t' + c['spec']) for c in json.load(open(sys.argv[1]))]" \
  "$top/bench/cases.json" > "$tmp/cases.tsv"
median() { "$attnc" bench "$1" --backend cc --threads "$threads" --runs 30 --json |
  /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['median_ms'])"; }
r=1
while [ "$r" -le "$rounds" ]; do
  while IFS='	' read -r name spec; do
    old=$(ATTNC_SRC_DIR="$tmp/old" median "$spec")
    new=$(median "$spec")
    printf '%s\t%s\t%s\n' "$name" "$old" "$new" >> "$tmp/times.tsv"
  done < "$tmp/cases.tsv"
  r=$((r + 1))
done
/usr/bin/python3 - "$tmp/times.tsv" <<'PY'
import sys, statistics, collections
t = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, old, new = line.split("\t")
    t.setdefault(name, ([], []))
    t[name][0].append(float(old)); t[name][1].append(float(new))
for name, (old, new) in t.items():
    mo, mn = statistics.median(old), statistics.median(new)
    rounds = " ".join("%.3f" % (b / a) for a, b in zip(old, new))
    print("%-12s old %9.3f ms  new %9.3f ms  new/old %.3f  (rounds: %s)" % (name, mo, mn, mn / mo, rounds))
PY
