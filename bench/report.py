#!/usr/bin/python3
# report.py: the table of `make bench` from the JSON lines bench/run.sh wrote.
#
#     python3 bench/report.py RESULTS.jsonl [--threads N] [--peak-gflops G]
#
# One row per case of bench/cases.json; when run.sh made several rounds, each
# peer's best round (lowest median) counts, the same rule for all three:
#   case | attnc ms | pytorch ms | ort ms (op) | ratio | rounds | target | met?
# ratio = the fastest peer's median / attnc's median (> 1: attnc is faster);
# rounds = the lowest and highest of the same ratio taken within each round
# (all three timed minutes apart at most), which shows how much of a ratio
# is the machine's noise;
# met? compares it with the target; core B must also reach its share
# of the FMA peak (--peak-gflops: run.sh passes the peak build/fma_peak
# measured in the same run; without it, 250 per thread, the figure
# for this machine kind).  The share of the figure is printed too.
#
# A second table holds the cases with a "base" (issue 26's 16- and 8-bit
# rows, bench/README.md):
#   case | attnc ms | f32 ms | vs f32 | fastest peer | vs peer | pytorch | rounds | target | met?
# f32 ms is attnc's base case in the same run, vs f32 = that / attnc ms;
# the fastest peer is the fastest of the peers the case's "peers" names
# (pytorch_f32 and ort_f32: the base case's; pytorch_int8: this case's);
# core B bf16 also needs its share of the bf16 dot-product peak
# (--bf16-peak-gflops).  Where the CPU lacks a flag the case "needs"
# (the run's "machine" line, else this machine's /proc/cpuinfo) the
# verdict is n/a, as issue 26 says.
#
# A third table holds the decode steps over a KV cache ("kind": "cache",
# issue 28): the f32 rows against their own peers ("target"), the bf16 and
# int8 rows against attnc's f32 row, their base ("own_target"), with the
# base's fastest peer beside them:
#   case | cache_len | attnc ms | pytorch ms | ort ms | f32 ms | vs f32 | fastest peer | vs peer | rounds | target | met?
# A fourth holds issue 27's overhead rows ("kind": "overhead"): attnc with
# one key against attnc on its base, the same spec without it, and no peer:
#   case | attnc ms | without | without ms | overhead | rounds | target | met?
# overhead = attnc ms / without ms - 1, its target "max_overhead" (0: no
# slower).
# A fifth holds the training rows ("kind": "train"): forward plus backward
# (attnc bench --grad) against PyTorch autograd doing the same, float32:
#   case | attnc ms | forward | backward | bwd / fwd | pytorch ms | vs pytorch | rounds | grad scratch | target | met?
# vs pytorch = PyTorch's forward + backward / attnc's (target "target");
# bwd / fwd = attnc's backward_ms / its forward_ms, both from the same
# process (target: at most "max_backward"); grad scratch = the JSON's
# grad_scratch_bytes (what the backward allocates besides the gradients)
# and grad_bytes (the gradient buffers), "absent" when attnc has none.
# Standard library only.

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fmt_ms(x):
    if x is None:
        return "-"
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    if x >= 1:
        return "%.2f" % x
    return "%.3f" % x


def fmt_pct(x):
    """A fraction as a signed percentage, one decimal below 100%."""
    return ("%+.1f%%" if abs(x) < 1 else "%+.0f%%") % (100 * x)


def print_table(head, rows):
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]

    def pr(r):
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |")
    pr(head)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        pr(r)


FLAG_NAMES = {"avx512_bf16": "AVX512-BF16", "avx512_vnni": "AVX512-VNNI"}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("flags"):
                    return l.split(":", 1)[1].split()
    except OSError:
        pass
    return None


def median_of(res, by_round, cid, peer, rnd=None):
    """A peer's median on a case: its best round's, or round rnd's."""
    if rnd is not None:
        return by_round.get(cid, {}).get(rnd, {}).get(peer)
    line = res.get((cid, peer))
    return line.get("median_ms") if line and "median_ms" in line else None


def own_ratios(by_round, cid, base):
    """attnc's base case / this case, within each round both ran in."""
    rr = []
    for rnd, meds in by_round.get(cid, {}).items():
        a_r, f_r = meds.get("attnc"), by_round.get(base, {}).get(rnd, {}).get("attnc")
        if a_r and f_r:
            rr.append(f_r / a_r)
    return rr


def ratio_targets(c, vs_peer, own, peer_r, own_r):
    """A case's ratio targets as (what, text, needed, got), got None when it
    cannot be told, and the spread of each ratio over the rounds."""
    parts, spreads = [], []
    if "target" in c:
        parts.append(("peer", "%gx peer" % c["target"], c["target"], vs_peer))
        if len(peer_r) > 1:
            spreads.append("%.2f-%.2fx" % (min(peer_r), max(peer_r)))
    if "own_target" in c:
        parts.append(("own f32", "%gx own f32" % c["own_target"], c["own_target"], own))
        if len(own_r) > 1:
            spreads.append("%.2f-%.2fx" % (min(own_r), max(own_r)))
    if "max_overhead" in c:
        # with / without - 1 <= m is without / with >= 1 / (1 + m)
        m = c["max_overhead"]
        parts.append(("overhead", "at most %g%%" % (100 * m) if m else "no slower", 1 / (1 + m), own))
        if len(own_r) > 1:
            spreads.append("%s to %s" % (fmt_pct(1 / max(own_r) - 1), fmt_pct(1 / min(own_r) - 1)))
    return parts, spreads


def row_notes(c, res, by_round, peers):
    """A base-case row's remarks: its peers' errors, and a base without an
    attnc result in this run."""
    notes = ["%s %s: %s" % (c["label"], p, res[(c["case"], p)]["error"])
             for p in peers if "error" in res.get((c["case"], p), {})]
    if c.get("base") and median_of(res, by_round, c["base"], "attnc") is None:
        notes.append("%s: its base %s has no attnc result in this run" % (c["label"], c["base"]))
    return notes


def judge(parts):
    """The met? cell of a row's targets (each met when got >= needed), and
    how many of them were rated and met; "?" when a ratio is missing."""
    if any(g is None for _, _, _, g in parts):
        return "?", 0, 0
    missed = [name for name, _, need, g in parts if g < need]
    return ("yes" if not missed else "NO (%s)" % ", ".join(missed)), len(parts), len(parts) - len(missed)


def print_section(title, head, rows, legend, notes):
    print()
    print(title + ":")
    print()
    print_table(head, rows)
    print()
    print(legend)
    for n in notes:
        print("  " + n)


def narrow_table(cases, res, by_round, machine, bf16_peak, threads):
    """Issue 26's 16- and 8-bit rows: each case with a base, against its
    base (attnc's own f32 kernel) and the peers its "peers" names."""
    narrow = [c for c in cases if "base" in c and c.get("kind") not in ("cache", "overhead")
              and any((c["case"], p) in res for p in ("attnc", "pytorch"))]
    if not narrow:
        return
    notes = []
    if machine and "flags" in machine:
        flags = set(machine["flags"])
    else:
        flags = cpu_flags()
        flags = set(flags) if flags is not None else None
        notes.append("CPU flags read from this machine's /proc/cpuinfo (the results have no machine line)"
                     if flags is not None else "CPU flags unknown: no verdicts")

    def ms(cid, peer):
        return median_of(res, by_round, cid, peer)

    def peer_ms(c, name, rnd=None):
        """A peer's median: the best round's, or round rnd's."""
        cid, peer = {"pytorch_f32": (c["base"], "pytorch"), "ort_f32": (c["base"], "ort"),
                     "pytorch_int8": (c["case"], "pytorch"), "pytorch_bf16": (c["case"], "pytorch")}[name]
        return median_of(res, by_round, cid, peer, rnd)

    head = ["case", "attnc ms", "f32 ms", "vs f32", "fastest peer", "vs peer", "pytorch", "rounds", "target", "met?"]
    rows = []
    n_met = n_rated = 0
    for c in narrow:
        cid, base = c["case"], c["base"]
        a_ms, f_ms = ms(cid, "attnc"), ms(base, "attnc")
        notes += row_notes(c, res, by_round, ("attnc", "pytorch"))
        own = f_ms / a_ms if a_ms and f_ms else None
        peers = {p: peer_ms(c, p) for p in c.get("peers", [])}
        got = {p: v for p, v in peers.items() if v is not None}
        fastest = min(got, key=got.get) if got else None
        vs_peer = got[fastest] / a_ms if fastest and a_ms else None

        # the ratios within each round, for the ratios the targets name
        own_r, peer_r = own_ratios(by_round, cid, base), []
        for rnd, meds in by_round.get(cid, {}).items():
            a_r = meds.get("attnc")
            if not a_r:
                continue
            pr_ = [v for v in (peer_ms(c, p, rnd) for p in c.get("peers", [])) if v is not None]
            if pr_:
                peer_r.append(min(pr_) / a_r)

        # targets: (what, needed, got) with got None when it cannot be told
        parts, spreads = ratio_targets(c, vs_peer, own, peer_r, own_r)
        if "bf16_peak_fraction" in c:
            at = res.get((cid, "attnc"))
            share = at["gflops"] / bf16_peak if at and "gflops" in at and bf16_peak else None
            parts.append(("bf16 peak", "%d%% bf16 peak" % round(100 * c["bf16_peak_fraction"]),
                          c["bf16_peak_fraction"], share))
            if share is not None:
                notes.append("%s: attnc %.1f GFLOP/s = %.1f%% of the %.0f GFLOP/s bf16 dot-product peak "
                             "(vdpbf16ps, %d thread%s, measured), target %d%%"
                             % (c["label"], at["gflops"], 100 * share, bf16_peak, threads, "s" if threads > 1 else "",
                                round(100 * c["bf16_peak_fraction"])))
            elif not bf16_peak:
                notes.append("%s: no bf16 dot-product peak measured (build/fma_peak's bf16_gflops), so its "
                             "share of it is unknown" % c["label"])

        missing = [f for f in c.get("needs", []) if flags is not None and f not in flags]
        if flags is None:
            verdict = "?"
        elif missing:
            verdict = "n/a (no %s)" % ", ".join(FLAG_NAMES.get(f, f) for f in missing)
        else:
            verdict, rated, met = judge(parts)
            n_rated += rated
            n_met += met
            if rated and "target" in c and len(got) < len(peers):
                verdict += "*"
                notes.append("%s*: against %s only (%s skipped or failed)"
                             % (c["label"], ", ".join(got) or "no peer",
                                ", ".join(p for p in peers if p not in got)))

        pt = res.get((cid, "pytorch"))
        if pt and "median_ms" in pt:
            what = pt.get("dtype", "?") + (" " + pt["engine"] if pt.get("engine") else "")
            py_cell = "%s (%s%s)" % (fmt_ms(pt["median_ms"]), what,
                                     ", %.2fx" % (pt["median_ms"] / a_ms) if a_ms else "")
        elif pt and "skipped" in pt:
            py_cell = "none"
        elif pt and "error" in pt:
            py_cell = "error"
        else:
            py_cell = "skipped" if c.get("pytorch", "none") != "none" else "none"
        rows.append([c["label"], fmt_ms(a_ms), fmt_ms(f_ms),
                     "%.2fx" % own if own is not None else "-",
                     "%s %s" % (fmt_ms(got[fastest]), fastest.replace("_", " ")) if fastest else "-",
                     "%.2fx" % vs_peer if vs_peer is not None else "-",
                     py_cell, " / ".join(spreads) if spreads else "-",
                     ", ".join(t for _, t, _, _ in parts), verdict])

    print_section("16- and 8-bit kernels (issue 26)", head, rows,
                  "vs f32 = attnc's f32 kernel (f32 ms: the base case, same run) / this kernel; vs peer = the fastest "
                  "peer / attnc (bf16 and f16 rows: the f32 peers of the base case; int8 rows: ONNX Runtime f32 of the "
                  "base case and PyTorch dynamic int8); pytorch = PyTorch in bf16 or dynamic int8 (engine), "
                  "its ratio to attnc (bf16: beside the targets, which name the f32 peers); rounds = the lowest and "
                  "highest of each target's ratio within one round; %d of %d targets met" % (n_met, n_rated), notes)


def cache_table(cases, res, by_round):
    """Issue 28's decode steps over a KV cache: the f32 rows against their
    peers, the bf16 and int8 rows against attnc's f32 row (their base)."""
    rows_c = [c for c in cases if c.get("kind") == "cache" and any((c["case"], p) in res for p in ("attnc", "pytorch", "ort"))]
    if not rows_c:
        return
    labels = {c["case"]: c["label"] for c in cases}

    def med(cid, peer, rnd=None):
        return median_of(res, by_round, cid, peer, rnd)

    def cell(cid, peer):
        line = res.get((cid, peer))
        if line is None:
            return "-"
        if "error" in line:
            notes.append("%s %s: %s" % (labels[cid], peer, line["error"]))
            return "error"
        if "skipped" in line:
            return "-"
        return fmt_ms(line["median_ms"])

    head = ["case", "cache_len", "attnc ms", "pytorch ms", "ort ms", "f32 ms", "vs f32", "fastest peer", "vs peer",
            "rounds", "target", "met?"]
    rows, notes = [], []
    n_met = n_rated = 0
    for c in rows_c:
        cid = c["case"]
        base = c.get("base")
        pcid = base or cid  # whose peers: the f32 step's
        a_ms = med(cid, "attnc")
        f_ms = med(base, "attnc") if base else None
        own = f_ms / a_ms if a_ms and f_ms else None
        got = {p: med(pcid, p) for p in ("pytorch", "ort") if med(pcid, p) is not None}
        fastest = min(got, key=got.get) if got else None
        vs_peer = got[fastest] / a_ms if fastest and a_ms else None
        notes += row_notes(c, res, by_round, ("attnc",))

        own_r, peer_r = own_ratios(by_round, cid, base) if base else [], []
        for rnd, meds in by_round.get(cid, {}).items():
            a_r = meds.get("attnc")
            if not a_r:
                continue
            pr_ = [v for v in (med(pcid, p, rnd) for p in ("pytorch", "ort")) if v is not None]
            if pr_:
                peer_r.append(min(pr_) / a_r)

        parts, spreads = ratio_targets(c, vs_peer, own, peer_r, own_r)
        verdict, rated, met = judge(parts)
        n_rated += rated
        n_met += met
        if rated and "target" in c and len(got) < 2:
            verdict += "*"
            notes.append("%s*: against %s only (the other peer skipped or failed)" % (c["label"], ", ".join(got) or "no peer"))
        for p in ("pytorch", "ort"):
            line = res.get((cid, p))
            if not base and line and "op" in line:
                notes.append("%s %s: %s" % (c["label"], p, line["op"]))
        cap = next((w.split("=", 1)[1] for w in c["spec"].split() if w.startswith("cache=")), "?")
        rows.append([c["label"], "%s of %s" % (c.get("cache_len", "?"), cap), fmt_ms(a_ms),
                     cell(cid, "pytorch") if not base else "-", cell(cid, "ort") if not base else "-",
                     fmt_ms(f_ms) if base else "-", "%.2fx" % own if own is not None else "-",
                     "%s %s" % (fmt_ms(got[fastest]), fastest) if fastest else "-",
                     "%.2fx" % vs_peer if vs_peer is not None else "-",
                     " / ".join(spreads) if spreads else "-",
                     ", ".join(t for _, t, _, _ in parts), verdict])

    print_section("decode steps over a KV cache (issue 28)", head, rows,
                  "one step with cache_len of CAP positions already filled, projections included; vs f32 = attnc's f32-cache "
                  "step (f32 ms: the base row, same run) / this step; vs peer = the fastest peer / attnc (the bf16, int8 "
                  "rows: the f32 step's peers, shown beside their own targets); rounds = the lowest and highest of each "
                  "target's ratio within one round; %d of %d targets met" % (n_met, n_rated), notes)


def overhead_table(cases, res, by_round):
    """Issue 27's overhead rows: attnc with one spec key against attnc on
    the same spec without it (the row's base), same run; no peers."""
    rows_o = [c for c in cases if c.get("kind") == "overhead" and (c["case"], "attnc") in res]
    if not rows_o:
        return
    labels = {c["case"]: c["label"] for c in cases}
    head = ["case", "attnc ms", "without", "without ms", "overhead", "rounds", "target", "met?"]
    rows, notes = [], []
    n_met = n_rated = 0
    for c in rows_o:
        cid, base = c["case"], c["base"]
        a_ms, f_ms = median_of(res, by_round, cid, "attnc"), median_of(res, by_round, base, "attnc")
        own = f_ms / a_ms if a_ms and f_ms else None
        notes += row_notes(c, res, by_round, ("attnc",))
        parts, spreads = ratio_targets(c, None, own, [], own_ratios(by_round, cid, base))
        verdict, rated, met = judge(parts)
        n_rated += rated
        n_met += met
        rows.append([c["label"], fmt_ms(a_ms), labels.get(base, base), fmt_ms(f_ms),
                     fmt_pct(1 / own - 1) if own else "-",
                     " / ".join(spreads) if spreads else "-",
                     ", ".join(t for _, t, _, _ in parts), verdict])
    print_section("overheads of issue 27's keys (attnc alone)", head, rows,
                  "overhead = attnc with the key / attnc on the same spec without it (without ms: that row, same "
                  "run) - 1; rounds = the lowest and highest overhead within one round; %d of %d targets met"
                  % (n_met, n_rated), notes)


def fmt_bytes(n):
    if n is None:
        return "absent"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % n


def train_table(cases, res, by_round):
    """The training rows: attnc's forward + backward against PyTorch
    autograd's, and attnc's backward against its own forward."""
    rows_t = [c for c in cases if c.get("kind") == "train" and any((c["case"], p) in res for p in ("attnc", "pytorch"))]
    if not rows_t:
        return
    head = ["case", "attnc ms", "forward", "backward", "bwd / fwd", "pytorch ms (fwd + bwd)", "vs pytorch", "rounds",
            "grad scratch", "target", "met?"]
    rows, notes = [], []
    n_met = n_rated = 0
    no_scratch = []
    for c in rows_t:
        cid = c["case"]
        at, pt = res.get((cid, "attnc")), res.get((cid, "pytorch"))
        for line, peer in ((at, "attnc"), (pt, "pytorch")):
            if line and "error" in line:
                notes.append("%s %s: %s" % (c["label"], peer, line["error"]))
        a_ms = at.get("median_ms") if at else None
        fwd, bwd = (at.get("forward_ms"), at.get("backward_ms")) if at else (None, None)
        p_ms = pt.get("median_ms") if pt else None
        vs = p_ms / a_ms if a_ms and p_ms else None
        peer_r = []
        for rnd, meds in by_round.get(cid, {}).items():
            if meds.get("attnc") and meds.get("pytorch"):
                peer_r.append(meds["pytorch"] / meds["attnc"])
        parts = [("vs pytorch", "%gx pytorch" % c["target"], c["target"], vs)]
        if "max_backward" in c:
            # bwd / fwd <= m is fwd / bwd >= 1 / m, in judge's form
            parts.append(("backward", "backward <= %gx forward" % c["max_backward"], 1 / c["max_backward"],
                          fwd / bwd if fwd and bwd else None))
        verdict, rated, met = judge(parts)
        n_rated += rated
        n_met += met
        scratch = at.get("grad_scratch_bytes") if at else None
        if at and "median_ms" in at and scratch is None:
            no_scratch.append(c["label"])
        scratch_cell = fmt_bytes(scratch) if a_ms else "-"
        if a_ms and at.get("grad_bytes") is not None:
            scratch_cell += " (+ %s grads)" % fmt_bytes(at["grad_bytes"])
        py_cell = "-"
        if pt and p_ms is not None:
            py_cell = fmt_ms(p_ms)
            if pt.get("forward_ms") is not None and pt.get("backward_ms") is not None:
                py_cell += " (%s + %s)" % (fmt_ms(pt["forward_ms"]), fmt_ms(pt["backward_ms"]))
            if pt.get("op"):
                notes.append("%s pytorch: %s; %s" % (c["label"], pt["op"], pt.get("checked", "not checked")))
        elif pt and "error" in pt:
            py_cell = "error"
        elif pt and "skipped" in pt:
            py_cell = "skipped"
        rows.append([c["label"], fmt_ms(a_ms), fmt_ms(fwd), fmt_ms(bwd),
                     "%.2fx" % (bwd / fwd) if fwd and bwd else "-", py_cell,
                     "%.2fx" % vs if vs is not None else "-",
                     "%.2f-%.2fx" % (min(peer_r), max(peer_r)) if len(peer_r) > 1 else "-",
                     scratch_cell, ", ".join(t for _, t, _, _ in parts), verdict])
    if no_scratch:
        notes.append("grad scratch absent: attnc bench --grad --json printed no grad_scratch_bytes for %s"
                     % ", ".join(no_scratch))
    print_section("training: forward + backward (attnc bench --grad) against PyTorch autograd", head, rows,
                  "attnc ms = one attnc_grad (the forward run again, then the backward); forward = attnc_run on the same "
                  "train kernel, backward = the pair minus it (same process); vs pytorch = PyTorch autograd's forward + "
                  "backward / attnc's (above 1: attnc is faster); rounds = the lowest and highest vs pytorch within one "
                  "round; grad scratch = what the backward allocates besides the gradient buffers; %d of %d targets met"
                  % (n_met, n_rated), notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--peak-gflops", type=float, default=None)
    ap.add_argument("--bf16-peak-gflops", type=float, default=None,
                    help="the bf16 dot-product peak (build/fma_peak's bf16_gflops) for core B bf16")
    a = ap.parse_args()

    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    res = {}     # (case, peer) -> line
    notes = []   # skipped peers and other whole-run remarks
    machine = None  # run.sh's {"machine": {...}} line
    with open(a.results) as f:
        for raw in f:
            raw = raw.strip()
            if not raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                notes.append("unparsable result line: " + raw[:120])
                continue
            if "case" in line:
                res.setdefault((line["case"], line.get("peer")), []).append(line)
            elif "machine" in line:
                machine = line["machine"]
            elif "skipped" in line:
                msg = "%s skipped: %s" % (line.get("peer"), line["skipped"])
                if msg not in notes:
                    notes.append(msg)
    # the ratio within each round: the fastest peer's median that round /
    # attnc's median that round
    by_round = {}  # case -> round -> peer -> median
    for (cid, peer), lines in res.items():
        for l in lines:
            if "median_ms" in l and "round" in l:
                by_round.setdefault(cid, {}).setdefault(l["round"], {})[peer] = l["median_ms"]
    round_ratios = {}
    for cid, rounds_ in by_round.items():
        rr = []
        for meds in rounds_.values():
            peer_ms = [meds[p] for p in ("pytorch", "ort") if p in meds]
            if meds.get("attnc") and peer_ms:
                rr.append(min(peer_ms) / meds["attnc"])
        if len(rr) > 1:
            round_ratios[cid] = (min(rr), max(rr))
    # several rounds: each peer's best round counts (lowest median), and the
    # spread max/min of its round medians says how noisy the machine was
    spread = {}
    # attnc's busy_cpus (CPU time / wall time of its timed runs) well under
    # its thread count: its threads took turns on fewer CPUs than asked
    shared = []
    for l in [l for (_, peer), ls in res.items() if peer == "attnc" for l in ls]:
        if "busy_cpus" in l and l.get("threads", 1) > 1 and l["busy_cpus"] < 0.75 * l["threads"]:
            shared.append("%s round %s (%.2f)" % (l["case"], l.get("round", "?"), l["busy_cpus"]))
    for key, lines in list(res.items()):
        ok = [l for l in lines if "median_ms" in l]
        if ok:
            best = min(ok, key=lambda l: l["median_ms"])
            spread[key] = max(l["median_ms"] for l in ok) / best["median_ms"] if len(ok) > 1 else None
            res[key] = best
        else:
            res[key] = lines[-1]
    threads = a.threads
    if threads is None:
        threads = next((l.get("threads") for (c, p), l in res.items() if p == "attnc" and l.get("threads")), 1)
    peak = a.peak_gflops if a.peak_gflops else 250.0 * threads

    head = ["case", "attnc ms", "pytorch ms", "ort ms (op)", "ratio", "rounds", "target", "met?",
            "attnc peak", "target needs"]
    rows = []
    footnotes = []
    n_met = n_rated = 0
    short_threads = []  # cases where attnc ran fewer threads than asked
    partial = False     # some ratio is against one peer only
    near_peak = []      # cases whose target asks for over 95% of the FMA peak
    dense_only = False  # a causal case's results carry only the dense FLOP count
    for c in cases:
        if "base" in c or c.get("kind") in ("cache", "train"):  # the other tables'
            continue
        cid = c["case"]
        at, pt, ot = res.get((cid, "attnc")), res.get((cid, "pytorch")), res.get((cid, "ort"))
        if at is None and pt is None and ot is None:
            continue

        def val(line):
            return line.get("median_ms") if line and "median_ms" in line else None

        def cell(line):
            if line is None:
                return "skipped"
            if "error" in line:
                footnotes.append("%s %s: %s" % (c["label"], line.get("peer"), line["error"]))
                return "error"
            return fmt_ms(line["median_ms"])

        a_ms, p_ms, o_ms = val(at), val(pt), val(ot)
        ort_cell = cell(ot)
        if o_ms is not None:
            ort_cell += " (%s)" % ot.get("op", "?")
        peers = [x for x in (p_ms, o_ms) if x is not None]
        ratio = met = None
        if a_ms and peers:
            ratio = min(peers) / a_ms
            met = ratio >= c["target"]
        target = "%gx" % c["target"]
        if "peak_fraction" in c:
            target += ", %d%% peak" % round(100 * c["peak_fraction"])
            if at and "gflops" in at:
                frac = at["gflops"] / peak
                footnotes.append("%s: attnc %.1f GFLOP/s = %.1f%% of %.0f GFLOP/s FMA peak (%d thread%s, %s), target %d%%"
                                 "; %.1f%% of the issue's %.0f GFLOP/s (250 per thread)"
                                 % (c["label"], at["gflops"], 100 * frac, peak, threads, "s" if threads > 1 else "",
                                    "measured" if a.peak_gflops else "the issue's figure",
                                    round(100 * c["peak_fraction"]), 100 * at["gflops"] / (250.0 * threads),
                                    250.0 * threads))
                if met is not None:
                    met = met and frac >= c["peak_fraction"]
        if at and "threads" in at and at.get("requested_threads", at["threads"]) != at["threads"]:
            short_threads.append("%s (%s)" % (c["label"], at["threads"]))
        if ratio is not None:
            n_rated += 1
            n_met += bool(met)
        met_cell = ("yes" if met else "NO") if met is not None else "?"
        if met is not None and len(peers) < 2:
            met_cell += "*"
            partial = True
        rr = round_ratios.get(cid)
        # How close to the FMA peak attnc runs, and how close the target asks
        # it to run: useful FLOPs (attnc's GFLOP/s x its ms) done in the
        # fastest peer's ms / target.  Above 100%, no FP32 kernel meets it.
        # Causal and window cases count the FLOPs of the pairs their masks
        # leave (gflops_unmasked); without that field (results of an older
        # attnc) only the dense count, whose share of the peak means nothing.
        own = needs = "-"
        masked = any(w == "causal" or (w.split("=")[0] in ("causal", "window") and not w.endswith("=none"))
                     for w in c["spec"].split())
        gf = at.get("gflops_unmasked") if at and masked else at.get("gflops") if at else None
        if masked and not gf and at and at.get("gflops"):
            own = needs = "(dense)"
            dense_only = True
        elif gf and a_ms:
            own = "%.0f%%" % (100 * gf / peak)
            if peers:
                needs_frac = gf * a_ms * c["target"] / min(peers) / peak
                needs = "%.0f%%" % (100 * needs_frac)
                if needs_frac > 0.95:
                    near_peak.append(c["label"])
        rows.append([c["label"], cell(at), cell(pt), ort_cell,
                     "%.2fx" % ratio if ratio is not None else "-",
                     "%.2f-%.2fx" % rr if rr else "-", target, met_cell, own, needs])

    if rows:  # BENCH_CASES may pick cache rows alone
        print_table(head, rows)
        print()
        print("ratio = fastest peer's median / attnc's median (above 1: attnc is faster); %d of %d targets met"
              % (n_met, n_rated))
        if round_ratios:
            print("rounds = the lowest and highest ratio within one round (the three timed back to back)")
        print("attnc peak = attnc's useful GFLOP/s / the FMA peak (%.0f GFLOP/s, %s); target needs = the share of that "
              "peak attnc must reach for ratio = target (causal cases: the FLOPs of the unmasked pairs)" % (peak, "measured" if a.peak_gflops else "the issue's figure"))
    if dense_only:
        notes.append("(dense): these results have no gflops_unmasked (an attnc before explain counted the unmasked "
                     "pairs), and a share of the peak from the dense count would mean nothing")
    if near_peak:
        notes.append("targets asking for over 95%% of the FMA peak in this run: %s" % ", ".join(near_peak))
    rounds = {k: v for k, v in spread.items() if v is not None}
    if rounds:
        worst = {}
        for (cid, peer), v in rounds.items():
            if peer not in worst or v > worst[peer][0]:
                worst[peer] = (v, cid)
        labels = {c["case"]: c["label"] for c in cases}
        notes.append("best of the rounds counts; widest round-to-round spread (max/min of the medians): " +
                     ", ".join("%s %.2fx (%s)" % (p, worst[p][0], labels.get(worst[p][1], worst[p][1]))
                               for p in ("attnc", "pytorch", "ort") if p in worst))
    if shared:
        notes.append("attnc's threads had fewer CPUs than threads (busy_cpus, CPU time / wall time, below 0.75 x "
                     "threads) in: " + ", ".join(shared))
    if partial:
        notes.append("* against one peer only: the other was skipped or failed, so the target is not really checked")
    if short_threads:
        notes.append("attnc ran fewer threads than the %d asked for (the peers had %d): %s"
                     % (threads, threads, ", ".join(short_threads)))
    for n in notes + footnotes:
        print("  " + n)
    narrow_table(cases, res, by_round, machine, a.bf16_peak_gflops, threads)
    cache_table(cases, res, by_round)
    overhead_table(cases, res, by_round)
    train_table(cases, res, by_round)


if __name__ == "__main__":
    sys.exit(main())
