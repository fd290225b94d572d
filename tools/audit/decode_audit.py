#!/usr/bin/python3
"""Audit attnc's decoding steps (full-mode specs with cache=CAP) against a float64 oracle.

usage (from the repository, after `make`):
    /usr/bin/python3 tools/audit/decode_audit.py [--quick] [--families F,F,...]
        [--backends tcc,cc] [--isas default,generic,avx2,avx512] [--every N] [--out FILE]

Every case runs one or more decoding steps through the Python module and
checks, per step, against decode_oracle.reference_step and DESIGN.md's
accuracy table (the looser of dtype's, kv_dtype's and int8 weights' rows):
  - out, and lse / attn when the spec asks for them (NMSE and the worst
    element's error as a ratio of its elementwise bound; NaN and -inf
    where, and only where, the oracle has them);
  - attn columns past the filled positions are exactly 0;
  - the new k / v rows written into the caches (and int8 scales) against
    the oracle's projection (rotated), and every other cache row, scale
    included, unchanged bit for bit;
  - with several thread counts, every output and cache bit for bit equal.
Outputs are allocated filled with NaN so an element the kernel never
writes shows.  Families: core mods edge sweep (the earlier decode audit),
bias empty freqs outputs threads multirow (its extensions).

A step outside its bound is classed ill-conditioned (reported, not counted
as a kernel failure) when the same formula evaluated in numpy float32 is
outside too, when half an f32 ulp of noise on x and the q/k/v weights alone
moves the float64 result by more than a quarter of the bound, or (f32) when
its logits reach 1000: no f32 kernel can be held to the f32 row there.

Each (backend, ISA) pair runs in a child process (ATTNC_ISA is read once per
process), one at a time.  Results: JSON lines in --out (default
build/audit/decode_results.jsonl), a summary at the end; exit status 1 when a
step failed other than ill-conditioned.  --quick runs a subset of every
family (the same seeds as the full run) on tcc and the default ISA, in about
a minute.  A single case reruns with --repro JSON (printed with each failure),
e.g.  ATTNC_ISA=generic /usr/bin/python3 tools/audit/decode_audit.py
--backend tcc --repro '{"batch": [1], "cin": 128, ...}'.
Kernels compiled by cc are cached under build/audit/kernel_cache unless
ATTNC_CACHE_DIR is set.
"""
import argparse, json, os, subprocess, sys, time, traceback
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from decode_oracle import (to_storage, storage_to_f64, quant_rows_int8, rope, project, reference_step,
                           judge, rows_for)

NPDT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16, "int8": np.int8}
NAN_BITS = {"bf16": 0x7FC1}


def import_attnc():
    sys.path.insert(0, os.path.join(REPO, "python"))
    import attnc
    real_empty = attnc._empty

    def nan_empty(t, bf16_dtype=None):  # outputs start as NaN: an unwritten element shows
        a = real_empty(t, bf16_dtype)
        if a.dtype == np.uint16:
            a.fill(0x7FC1)
        elif a.dtype.kind == "f":
            a.fill(np.nan)
        return a
    attnc._empty = nan_empty
    return attnc


# ------------------------------------------------------------------ specs

def batch_names(batch):
    return ["B"] if len(batch) == 1 else ["A", "B", "C"][:len(batch)]


def make_spec(C):
    bn = batch_names(C["batch"])
    preset = C.get("preset", "mha")
    w = [preset, "x=%s,S,%d" % (",".join(bn), C["cin"]), "heads=%d" % C["H"]]
    if preset != "mqa":
        w.append("kv_heads=%d" % C["G"])
    cap = C.get("cap_name") or str(C["CAP"])
    w += ["head_dim=%d" % C["c"], "cache=" + cap, "dtype=" + C["dtype"]]
    if C.get("kv_dtype", C["dtype"]) != C["dtype"]:
        w.append("kv_dtype=" + C["kv_dtype"])
    if C.get("weights"):
        w.append("weights=" + C["weights"])
    if C.get("rope"):
        w.append("rope=" + C["rope"])
        if C.get("rope_dim"):
            w.append("rope_dim=%d" % C["rope_dim"])
        if C.get("rope_theta"):
            w.append("rope_theta=%s" % C["rope_theta"])
    for key in ("alibi", "softcap"):
        if C.get(key):
            w.append("%s=%s" % (key, C[key]))
    if C.get("sinks"):
        w.append("sinks")
    if C.get("window"):
        w.append("window=%d,%d" % tuple(C["window"]))
    if C.get("mask"):
        w.append("mask=key")
    if C.get("bias"):
        w.append("bias=" + bias_spec(C))
    if C.get("empty_rows"):
        w.append("empty_rows=" + C["empty_rows"])
    if C.get("qkv_bias") is False:
        w.append("qkv_bias=false")
    if C.get("lse"):
        w.append("lse")
    if C.get("weights_out"):
        w.append("weights_out")
    return " ".join(w)


def bias_spec(C):
    """bias kinds: full (*batch, H, S, CAP), heads (H, S, CAP), row (1, H, 1, CAP), key (1, 1, 1, CAP)"""
    bn, H = batch_names(C["batch"]), str(C["H"])
    cap = C.get("cap_name") or str(C["CAP"])
    return ",".join({"full": bn + [H, "S", cap], "heads": [H, "S", cap], "row": ["1", H, "1", cap],
                     "key": ["1", "1", "1", cap]}[C["bias"]])


def bias_shape(C, Sn):
    batch, H, CAP = list(C["batch"]), C["H"], C["CAP"]
    return {"full": batch + [H, Sn, CAP], "heads": [H, Sn, CAP], "row": [1, H, 1, CAP],
            "key": [1, 1, 1, CAP]}[C["bias"]]


# ------------------------------------------------------------------ inputs

def gen_weights(C, rng):
    cin, H, G, c, dt = C["cin"], C["H"], C["G"], C["c"], C["dtype"]
    wdt = C.get("weights") or dt
    T, W = {}, {}
    for n, key, sh in (("q_proj", "q", (H * c, cin)), ("k_proj", "k", (G * c, cin)),
                       ("v_proj", "v", (G * c, cin)), ("o_proj", "o", (cin, H * c))):
        lim = C.get("wmult", 1.0) / np.sqrt(sh[1])
        w = rng.uniform(-lim, lim, sh)
        if wdt == "int8":
            q, sc = quant_rows_int8(w)
            T[n + ".weight"], T[n + ".weight_scale"] = q, sc
            W["w" + key] = q.astype(np.float64) * sc.astype(np.float64)[:, None]
        else:
            T[n + ".weight"], W["w" + key] = to_storage(w, wdt)
        if n == "o_proj" or C.get("qkv_bias", True):
            T[n + ".bias"], W["b" + key] = to_storage(rng.uniform(-lim, lim, sh[0]), dt)
    return T, W


def gen_x(C, rng, B, S):
    x = rng.standard_normal((B, S, C["cin"])) * C.get("xscale", 1.0) + C.get("xmean", 0.0)
    for ch in C.get("outliers", []):
        x[:, :, ch] *= 100.0
    return x


def kv_store(a64, kvdt):
    """rows (..., c) -> (storage, int8 scale or None)"""
    if kvdt == "int8":
        return quant_rows_int8(a64)
    return to_storage(a64, kvdt)[0], None


def cache_f64(kc, ks, kvdt):
    if kvdt == "int8":
        return kc.astype(np.float64) * ks.astype(np.float64)[..., None]
    return storage_to_f64(kc, kvdt)


def build_mask(C, cl, rng, B, CAP):
    m = np.ones((B, CAP), np.uint8)
    for b in range(B):
        m[b, :C.get("pad", [0] * B)[b]] = 0
    if C.get("holes"):
        m[rng.random((B, CAP)) < C["holes"]] = 0
    for (b, lo, hi) in C.get("hide", []):  # explicit hidden ranges [lo, hi) (empty rows)
        m[b, lo:hi] = 0
    return m


# ------------------------------------------------------------------ a case

def flat_len(cl_given, batch):
    return np.broadcast_to(np.asarray(cl_given, np.int64), tuple(batch)).reshape(-1).copy()


def cache_len_input(C, cl_flat):
    form = C.get("len_form", "full")
    batch = tuple(C["batch"])
    if form == "scalar":
        return np.array(cl_flat[0], np.int64)
    if form == "bcast":  # size-1 leading axis (all rows of it equal)
        return cl_flat.reshape(batch)[:1].astype(np.int32).copy()
    return cl_flat.reshape(batch).astype(np.int32 if C.get("len_i32") else np.int64)


def run_case(C, attnc, backend, isa, rng, log, seed=None):
    spec = make_spec(C)
    repro = json.dumps(dict(case_repr(C), seed=seed))
    batch = tuple(C["batch"])
    B = int(np.prod(batch))
    CAP, H, G, c = C["CAP"], C["H"], C["G"], C["c"]
    dt, kvdt = C["dtype"], C.get("kv_dtype", C["dtype"])
    rows = rows_for(dt, kvdt, C.get("weights"))
    P = dict(H=H, G=G, c=c, scale=1.0 / np.sqrt(c), rope=C.get("rope"), rope_dim=C.get("rope_dim"),
             rope_theta=float(C.get("rope_theta", 10000.0)), alibi=C.get("alibi"), softcap=C.get("softcap"),
             sinks=C.get("sinks"), window=C.get("window"), empty_rows=C.get("empty_rows", "zero"))
    threads = C.get("threads", [1])
    t0 = time.time()
    kernels = [attnc.compile(spec, backend=backend, threads=t) for t in threads]
    ctime = time.time() - t0
    T, W = gen_weights(C, rng)
    cl = flat_len(C["cache_len"], batch)
    extra = {}
    if C.get("rope_freqs") is not None:
        r = C.get("rope_dim") or c
        f = np.asarray(C["rope_freqs"](r // 2, rng) if callable(C["rope_freqs"]) else C["rope_freqs"], np.float32)
        T["rope_freqs"] = f
        P["rope_freqs"] = f.astype(np.float64)
    if C.get("mask"):
        m = build_mask(C, cl, rng, B, CAP)
        extra["mask"] = m
        T["mask"] = m.reshape(batch + (CAP,))
    if C.get("k_pos_off") is not None:
        kp = np.broadcast_to(np.arange(CAP, dtype=np.int64) + C["k_pos_off"], (B, CAP)).copy()
        if C.get("mask"):  # left padding: positions counted from the first real token
            for b in range(B):
                kp[b] = np.maximum(np.arange(CAP) - C.get("pad", [0] * B)[b], 0) + C["k_pos_off"]
        extra["k_pos"] = kp
    if C.get("sinks"):
        sv = to_storage(rng.uniform(*C.get("sink_range", (-1.0, 4.0)), H), "bf16")[1]
        extra["sinks"] = sv
        T["sinks"] = sv.astype(np.float32)
    # caches: NaN (int8: NaN scales) past what is filled; the kernel must not read there
    shp = batch + (G, CAP, c)
    if kvdt == "int8":
        kc = rng.integers(-128, 128, shp).astype(np.int8)
        vc = rng.integers(-128, 128, shp).astype(np.int8)
        ks = np.full(batch + (G, CAP), np.nan, np.float32)
        vs = np.full(batch + (G, CAP), np.nan, np.float32)
    else:
        fill = NAN_BITS.get(kvdt, np.nan)
        kc = np.full(shp, fill, NPDT[kvdt])
        vc = np.full(shp, fill, NPDT[kvdt])
        ks = vs = None
    kcf, vcf = kc.reshape((B, G, CAP, c)), vc.reshape((B, G, CAP, c))
    ksf = ks.reshape((B, G, CAP)) if ks is not None else None
    vsf = vs.reshape((B, G, CAP)) if vs is not None else None
    for b in range(B):  # the already filled rows: projections of random x, rotated, stored
        n = int(cl[b])
        if n == 0:
            continue
        xv = to_storage(gen_x(C, rng, 1, n), dt)[1][0]
        kk = project(xv, W["wk"], W.get("bk")).reshape(n, G, c).transpose(1, 0, 2)
        vv = project(xv, W["wv"], W.get("bv")).reshape(n, G, c).transpose(1, 0, 2)
        if P["rope"]:
            pos = extra["k_pos"][b, :n] if "k_pos" in extra else np.arange(n)
            kk = rope(kk, pos[None, :], P["rope"], P["rope_dim"] or c, P["rope_theta"], P.get("rope_freqs"))
        s, sc = kv_store(kk, kvdt)
        kcf[b, :, :n] = s
        if sc is not None:
            ksf[b, :, :n] = sc
        s, sc = kv_store(vv, kvdt)
        vcf[b, :, :n] = s
        if sc is not None:
            vsf[b, :, :n] = sc
    worst = 0.0
    for step, Sn in enumerate(C["steps"]):
        x64 = gen_x(C, rng, B, Sn)
        xs, xv = to_storage(x64, dt)
        t = dict(T)
        t["x"] = xs.reshape(batch + (Sn, C["cin"]))
        t["cache_len"] = cache_len_input(C, cl)
        ex = dict(extra)
        if "k_pos" in extra:
            qp = np.stack([extra["k_pos"][b, cl[b]:cl[b] + Sn] for b in range(B)])
            ex["q_pos"] = qp
            t["k_pos"] = extra["k_pos"].reshape(batch + (CAP,))
            t["q_pos"] = qp.reshape(batch + (Sn,))
        if C.get("bias"):
            bsh = bias_shape(C, Sn)
            bv = to_storage(rng.uniform(-C.get("bias_amp", 3.0), C.get("bias_amp", 3.0), bsh), dt)
            t["bias"] = bv[0]
            b64 = bv[1]
            if C["bias"] == "full":
                b64 = b64.reshape((B, H, Sn, CAP))
            elif C["bias"] == "heads":
                b64 = b64[None]
            ex["bias"] = b64
        before = [a.copy() for a in (kc, vc) + ((ks, vs) if ks is not None else ())]
        results = []
        try:
            for kern in kernels:
                arrs = [a.copy() for a in before]
                tt = dict(t)
                tt["k_cache"], tt["v_cache"] = arrs[0], arrs[1]
                if ks is not None:
                    tt["k_cache_scale"], tt["v_cache_scale"] = arrs[2], arrs[3]
                o = kern.run(tt)
                results.append((o, arrs))
        except attnc.Error as e:
            log(dict(spec=spec, backend=backend, isa=isa, step=step, Sn=Sn, cache_len=cl.tolist(),
                     error=str(e), fail=True, case=C.get("family"), repro=repro))
            return worst
        # thread counts: everything bit for bit
        thread_diff = []
        o0, a0 = results[0]
        for (o1, a1), th in zip(results[1:], threads[1:]):
            for name in sorted(o0):
                if name in o1 and np.asarray(o0[name]).tobytes() != np.asarray(o1[name]).tobytes():
                    thread_diff.append("%s@threads=%d" % (name, th))
        outs, arrs = o0, a0
        kc[...], vc[...] = arrs[0], arrs[1]
        if ks is not None:
            ks[...], vs[...] = arrs[2], arrs[3]
        rec = check_step(C, P, rows, outs, before, (kc, vc, ks, vs), kvdt, dt, B, G, CAP, c, H, Sn, cl, xv, W, ex)
        rec.update(spec=spec, backend=backend, isa=isa, prims_isa=attnc.isa(), step=step, Sn=Sn,
                   cache_len=cl.tolist(), rows="/".join(rows), threads=threads, thread_diff=thread_diff,
                   case=C.get("family"), desc=C.get("desc", ""), compile_s=round(ctime, 2))
        rec["fail"] = bool(rec["problems"] or thread_diff)
        # outside the bound where a plain float32 evaluation of the same formula is outside too:
        # the inputs are too ill-conditioned for the f32 row (logits of 1e4 and more)
        c_ = rec["ctrl_f32"]
        rec["ill_conditioned"] = bool(c_["worst"] > 1 or c_["nmse_ratio"] > 1 or rec["k_rows"]["ctrl_worst"] > 1
                                      or rec["v_rows"]["ctrl_worst"] > 1 or (dt == "f32" and rec["max_logit"] > 1000)
                                      or rec.get("perturb_worst", 0) > 0.25)
        if rec["fail"]:
            rec["repro"] = repro
        log(rec)
        worst = max(worst, rec["out"]["worst"])
        cl = cl + Sn
    return worst


def check_step(C, P, rows, outs, before, after, kvdt, dt, B, G, CAP, c, H, Sn, cl, xv, W, ex):
    kc, vc, ks, vs = after
    problems = []
    rec = {}
    # rows not written: unchanged bit for bit
    written = np.zeros((B, CAP), bool)
    for b in range(B):
        written[b, cl[b]:cl[b] + Sn] = True
    for name, a0, a1 in zip(("k_cache", "v_cache", "k_cache_scale", "v_cache_scale"), before, after):
        a0f = a0.reshape((B, G, CAP, -1))
        a1f = a1.reshape((B, G, CAP, -1))
        wm = np.broadcast_to(written[:, None, :, None], a0f.shape)
        if a0f[~wm].tobytes() != a1f[~wm].tobytes():
            problems.append(name + " rows not written changed")
    K = cache_f64(kc, ks, kvdt).reshape((B, G, CAP, c))
    V = cache_f64(vc, vs, kvdt).reshape((B, G, CAP, c))
    valid = np.arange(CAP)[None, :] < (cl + Sn)[:, None]
    v4 = valid[:, None, :, None]
    if not (np.all(np.isfinite(K[np.broadcast_to(v4, K.shape)])) and np.all(np.isfinite(V[np.broadcast_to(v4, V.shape)]))):
        problems.append("cache holds a non-finite value in a filled row")
    Kr = np.where(v4, np.nan_to_num(K), 0.0)
    Vr = np.where(v4, np.nan_to_num(V), 0.0)
    ref = reference_step(P, xv, W, Kr, Vr, cl, ex)
    ctl = reference_step(P, xv, W, Kr, Vr, cl, ex, ft=np.float32)
    # the new rows against the oracle's projection
    for nm, st, new, cnew in (("k_rows", K, ref["k_new"], ctl["k_new"]), ("v_rows", V, ref["v_new"], ctl["v_new"])):
        got = np.stack([st[b, :, cl[b]:cl[b] + Sn] for b in range(B)])
        j = judge(got, new, rows)
        j["ctrl_worst"] = judge(cnew, new, rows)["worst"]
        rec[nm] = j
        if j["worst"] > 1 or j["nmse_ratio"] > 1 or j["nonfinite_mismatch"]:
            problems.append(nm)
    if kvdt == "int8":  # the scale a row gets: max|row| / 127 of what the kernel computed
        sc_err = 0.0
        for nm, sc, new in (("k", ks, ref["k_new"]), ("v", vs, ref["v_new"])):
            scf = sc.reshape((B, G, CAP)).astype(np.float64)
            got = np.stack([scf[b, :, cl[b]:cl[b] + Sn] for b in range(B)])
            want = np.max(np.abs(new), axis=-1) / 127.0
            want = np.where(want == 0, 1.0, want)
            sc_err = max(sc_err, float(np.max(np.abs(got - want) / want)))
        rec["scale_rel_err"] = sc_err
        # the scale follows the row the kernel computed: within the rows' own tolerance
        if sc_err > ROW_REL[dt]:
            problems.append("int8 scale")
    # out
    shape_out = tuple(C["batch"]) + (Sn, C["cin"])
    if outs["out"].shape != shape_out:
        problems.append("out shape %s" % (outs["out"].shape,))
    a = storage_to_f64(np.asarray(outs["out"]), dt).reshape(B, Sn, -1)
    j = judge(a, ref["out"], rows)
    rec["out"] = j
    if j["worst"] > 1 or j["nmse_ratio"] > 1 or j["nonfinite_mismatch"]:
        problems.append("out")
    jc = judge(ctl["out"], ref["out"], rows)
    rec["ctrl_f32"] = dict(worst=jc["worst"], nmse_ratio=jc["nmse_ratio"])
    if j["worst"] > 1 or j["nmse_ratio"] > 1:
        # conditioning: how far half an f32 ulp of noise on x and the q/k/v weights alone moves
        # the float64 result (4 draws); where that is a sizeable part of the bound, a kernel that
        # rounds each of its sums a few times cannot be held to it
        pw = 0.0
        for t in range(4):
            r2 = np.random.default_rng(t)
            W2 = dict(W)
            for n in ("wq", "wk", "wv"):
                W2[n] = W[n] * (1 + r2.uniform(-1, 1, W[n].shape) * 2.0 ** -24)
            x2 = xv * (1 + r2.uniform(-1, 1, xv.shape) * 2.0 ** -24)
            pw = max(pw, judge(reference_step(P, x2, W2, Kr, Vr, cl, ex)["out"], ref["out"], rows)["worst"])
        rec["perturb_worst"] = pw
    if C.get("lse"):
        got = np.asarray(outs["lse"], np.float64)
        want_shape = tuple(C["batch"]) + (H, Sn)
        if got.shape != want_shape:
            problems.append("lse shape %s" % (got.shape,))
        j = judge(got.reshape(B, H, Sn), ref["lse"], rows)
        rec["lse"] = j
        if j["worst"] > 1 or j["nmse_ratio"] > 1 or j["nonfinite_mismatch"]:
            problems.append("lse")
    if C.get("weights_out"):
        got = np.asarray(outs["attn"], np.float64)
        want_shape = tuple(C["batch"]) + (H, Sn, CAP)
        if got.shape != want_shape:
            problems.append("attn shape %s" % (got.shape,))
        got = got.reshape(B, H, Sn, CAP)
        filled = np.broadcast_to((np.arange(CAP)[None, :] < (cl + Sn)[:, None])[:, None, None, :], got.shape)
        beyond = got[~filled]
        rec["attn_beyond_nonzero"] = int(np.sum(beyond != 0))  # NaN counts too
        if rec["attn_beyond_nonzero"]:
            problems.append("attn past filled positions not 0")
        j = judge(np.where(filled, got, 0.0), ref["attn"], rows)
        rec["attn"] = j
        if j["worst"] > 1 or j["nmse_ratio"] > 1 or j["nonfinite_mismatch"]:
            problems.append("attn")
        # rows that see a key must sum to 1 (less the sink's share)
        if not C.get("sinks"):
            ok = ~ref["empty"]
            sums = got.sum(-1).transpose(0, 2, 1)[ok]
            rec["attn_rowsum_dev"] = float(np.max(np.abs(sums - 1))) if sums.size else 0.0
    rec["empty_rows_count"] = int(ref["empty"].sum())
    s = ref["logits"]
    rec["max_logit"] = float(np.max(np.abs(s))) if s.size else 0.0
    rec["problems"] = problems
    return rec


ROW_REL = {"f64": 1e-9, "f32": 1e-5, "bf16": 0.03, "f16": 0.006}


# ------------------------------------------------------------------ cases

SHARP = dict(wmult=8.0, outliers=[3])  # weights 8x nn.Linear's init, x channel 3 x100
MILD = dict(wmult=4.0)                 # weights 4x the init
SHARP2 = dict(wmult=1.0, outliers=[3])  # an outlier channel at the init: logits up to about 100
PLAIN = dict()
PAIRS = [("f32", "f32"), ("f32", "bf16"), ("f32", "f16"), ("f32", "int8"), ("bf16", "bf16"),
         ("bf16", "int8"), ("bf16", "f32"), ("f16", "f16"), ("f16", "int8"), ("bf16", "f16"), ("f16", "bf16")]
PAIRS6 = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("bf16", "int8"), ("f32", "bf16"), ("f16", "int8")]
PAIRS4 = [("f32", "f32"), ("bf16", "bf16"), ("f16", "int8"), ("f32", "int8")]


def case(**kw):
    kw.setdefault("batch", (kw.pop("B", 1),))
    kw["batch"] = tuple(kw["batch"])
    return kw


def fam_core():
    L = []
    for dt, kvdt in PAIRS:
        for (H, G, c) in [(8, 8, 64), (8, 2, 64), (32, 8, 128), (4, 1, 32)]:
            L.append(case(B=2, cin=256, H=H, G=G, c=c, CAP=64, dtype=dt, kv_dtype=kvdt, cache_len=[0, 5],
                          steps=[7, 1, 2], **PLAIN))
            L.append(case(B=1, cin=256, H=H, G=G, c=c, CAP=300, dtype=dt, kv_dtype=kvdt, cache_len=[290],
                          steps=[1, 3], **SHARP))
        L.append(case(B=1, cin=512, H=32, G=8, c=128, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[4000],
                      steps=[1, 3], **SHARP))
        L.append(case(B=1, cin=256, H=8, G=2, c=64, CAP=512, dtype=dt, kv_dtype=kvdt, weights="int8",
                      cache_len=[400], steps=[1, 3], **SHARP))
    return L


MODS = [dict(rope="neox"), dict(rope="gptj"), dict(rope="neox", rope_dim=32, rope_theta=500000),
        dict(rope="gptj", rope_dim=16), dict(alibi=8), dict(alibi=4.0), dict(softcap=50.0), dict(softcap=5.0),
        dict(sinks=True), dict(sinks=True, sink_range=(20.0, 60.0)), dict(window=(16, 0)), dict(window=(5, 3)),
        dict(mask=True, pad=[3, 40]), dict(mask=True, pad=[0, 7], holes=0.2),
        dict(rope="neox", k_pos_off=30000), dict(alibi=8, k_pos_off=100, mask=True, pad=[2, 9]),
        dict(rope="neox", alibi=8, softcap=30.0, sinks=True, window=(40, 0), mask=True, pad=[1, 4])]


def fam_mods():
    L = []
    for dt, kvdt in PAIRS6:
        for m in MODS:
            for (H, G, c, CAP, cl, steps) in [(8, 2, 64, 128, [0, 60], [5, 1, 2]), (16, 4, 128, 2048, [1000, 2030], [1, 3])]:
                C = case(B=2, cin=256, H=H, G=G, c=c, CAP=CAP, dtype=dt, kv_dtype=kvdt, cache_len=cl, steps=steps,
                         **SHARP)
                C.update(m)
                if C.get("pad"):
                    C["pad"] = [min(p, cl[i]) for i, p in enumerate(C["pad"])]
                L.append(C)
    return L


def fam_edge():
    L = []
    for dt, kvdt in [("f32", "f32"), ("bf16", "bf16"), ("f16", "f16"), ("bf16", "int8"), ("f32", "int8")]:
        L.append(case(B=1, cin=128, H=8, G=1, c=64, CAP=8192, dtype=dt, kv_dtype=kvdt, cache_len=[0], steps=[1, 1, 3],
                      wmult=4.0, desc="cache_len 0, CAP 8192"))
        L.append(case(B=2, cin=128, H=4, G=2, c=32, CAP=40, dtype=dt, kv_dtype=kvdt, cache_len=[37, 39], steps=[1],
                      wmult=8.0, outliers=[0], desc="fill to CAP"))
        L.append(case(preset="mqa", B=1, cin=256, H=8, G=1, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt,
                      cache_len=[4093], len_form="scalar", steps=[3], wmult=8.0, outliers=[7], desc="mqa near CAP"))
        L.append(case(preset="gqa", B=2, cin=256, H=12, G=4, c=64, CAP=1536, cap_name="CAP", dtype=dt, kv_dtype=kvdt,
                      cache_len=[700, 1535], steps=[1], wmult=6.0, xmean=10.0, desc="gqa named CAP"))
        L.append(case(B=1, cin=256, H=32, G=4, c=32, CAP=1024, dtype=dt, kv_dtype=kvdt, qkv_bias=False,
                      cache_len=[1000], steps=[2, 3], wmult=8.0, outliers=[1, 2], desc="no qkv bias"))
        L.append(case(B=1, cin=128, H=8, G=2, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[3000], steps=[1, 2],
                      window=(64, 0), sinks=True, wmult=4.0, desc="window+sinks long"))
        L.append(case(B=2, cin=128, H=8, G=2, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[3000, 10],
                      steps=[1, 2], mask=True, pad=[2990, 3], wmult=4.0, desc="mask hides most"))
    return L


def fam_sweep(n=60, seed=7):
    rng = np.random.default_rng(seed)
    L = []
    for _ in range(n):
        dt = str(rng.choice(["f32", "bf16", "f16"]))
        kvdt = str(rng.choice(["f32", "bf16", "f16", "int8", dt]))
        c = int(rng.choice([32, 64, 128]))
        G = int(rng.choice([1, 2, 4, 8]))
        H = G * int(rng.choice([1, 2, 4]))
        CAP = int(rng.choice([16, 100, 512, 1024, 3000, 4096]))
        B = int(rng.choice([1, 2]))
        cl = [int(rng.integers(0, CAP - 3)) for _ in range(B)]
        C = case(B=B, cin=int(rng.choice([64, 128, 256])), H=H, G=G, c=c, CAP=CAP, dtype=dt, kv_dtype=kvdt,
                 cache_len=cl, steps=[int(rng.integers(1, 4))], wmult=float(rng.choice([1, 4, 8])),
                 xmean=float(rng.choice([0, 0, 10])), desc="sweep")
        if rng.random() < 0.2:
            C["weights"] = "int8"
        if rng.random() < 0.3:
            C["rope"] = str(rng.choice(["neox", "gptj"]))
            if rng.random() < 0.5:
                C["rope_dim"] = int(rng.choice([c // 2, c // 4, 8]))
            if rng.random() < 0.4:
                C["rope_freqs"] = llama3_freqs
        for key, p, val in (("alibi", 0.2, 8), ("softcap", 0.2, 30.0), ("sinks", 0.2, True), ("lse", 0.3, True),
                            ("weights_out", 0.2, True)):
            if rng.random() < p:
                C[key] = val
        if rng.random() < 0.2:
            C["window"] = (int(rng.integers(1, 200)), 0)
        if rng.random() < 0.2:
            C["mask"] = True
            C["pad"] = [int(rng.integers(0, max(l, 1))) for l in cl]
        if rng.random() < 0.2:
            C["bias"] = str(rng.choice(["full", "heads", "row", "key"]))
        L.append(C)
    return L


def llama3_freqs(n, rng):
    """Llama 3.1's scaling as frequency factors: 1 for high frequencies, 8 for low, smooth between."""
    t = np.linspace(0, 1, n)
    return np.where(t < 0.4, 1.0, np.where(t > 0.7, 8.0, 1.0 + 7.0 * (t - 0.4) / 0.3)).astype(np.float32)


def random_freqs(n, rng):
    return rng.uniform(0.5, 40.0, n).astype(np.float32)


def fam_bias():
    L = []
    for dt, kvdt in PAIRS6:
        for kind in ("full", "heads", "row", "key"):
            L.append(case(B=2, cin=256, H=8, G=2, c=64, CAP=128, dtype=dt, kv_dtype=kvdt, cache_len=[0, 60],
                          steps=[5, 1, 3], bias=kind, **MILD))
        L.append(case(B=2, cin=256, H=8, G=2, c=64, CAP=2048, cap_name="CAP", dtype=dt, kv_dtype=kvdt,
                      cache_len=[1000, 2040], steps=[1, 3], bias="full", bias_amp=10.0, **SHARP2))
        L.append(case(B=1, cin=128, H=8, G=1, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[4000], steps=[1],
                      bias="heads", alibi=8, softcap=30.0, sinks=True, mask=True, pad=[7], lse=True, weights_out=True,
                      **MILD))
        L.append(case(batch=(2, 2), cin=128, H=4, G=2, c=32, CAP=64, dtype=dt, kv_dtype=kvdt,
                      cache_len=[[3, 0], [10, 33]], steps=[4, 1], bias="full", window=(6, 0), lse=True, **MILD))
    return L


def fam_empty():
    L = []
    for dt, kvdt in PAIRS4:
        for er in ("uniform", "nan", "zero"):
            # batch 1 hides every filled key up to cl + 2: rows 0..2 empty, rows 3.. see the new keys
            L.append(case(B=2, cin=128, H=8, G=2, c=64, CAP=96, dtype=dt, kv_dtype=kvdt, cache_len=[20, 30],
                          steps=[6], mask=True, hide=[(1, 0, 33)], empty_rows=er, lse=True, weights_out=True,
                          desc="mask hides 0..cl+2", **MILD))
            # window 2,0 and a masked hole of 3 keys ending at the query: one empty decoding row
            L.append(case(B=2, cin=128, H=8, G=2, c=64, CAP=64, dtype=dt, kv_dtype=kvdt, cache_len=[40, 12],
                          steps=[1], mask=True, hide=[(0, 38, 41)], window=(2, 0), empty_rows=er, lse=True,
                          weights_out=True, desc="window+mask empty decode row", **MILD))
            # long cache, all masked (left padding over the whole cache): key splits that are all empty
            L.append(case(B=1, cin=128, H=8, G=1, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[3000],
                          steps=[1], mask=True, hide=[(0, 0, 3001)], empty_rows=er, lse=True,
                          desc="long cache all masked", **MILD))
            L.append(case(B=1, cin=128, H=8, G=1, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[3000],
                          steps=[2], mask=True, hide=[(0, 0, 3001)], window=(100, 0), empty_rows=er, weights_out=True,
                          threads=[1, 2, 3], desc="long cache masked, 2nd row sees its own key", **MILD))
        # sinks with empty rows (empty_rows=zero only): all mass on the sink, lse = sink
        L.append(case(B=2, cin=128, H=8, G=2, c=64, CAP=96, dtype=dt, kv_dtype=kvdt, cache_len=[20, 30], steps=[4],
                      mask=True, hide=[(1, 0, 32)], sinks=True, lse=True, weights_out=True, desc="sinks + empty", **MILD))
    return L


def fam_freqs():
    L = []
    for dt, kvdt in PAIRS6:
        for kind, rd in (("neox", None), ("gptj", None), ("neox", 32), ("gptj", 16), ("neox", 8)):
            for fr in (llama3_freqs, random_freqs):
                L.append(case(B=2, cin=256, H=8, G=2, c=64, CAP=128, dtype=dt, kv_dtype=kvdt, cache_len=[0, 70],
                              steps=[5, 1, 2], rope=kind, rope_dim=rd, rope_theta=500000, rope_freqs=fr, **SHARP2))
        L.append(case(B=1, cin=256, H=16, G=4, c=128, CAP=8192, dtype=dt, kv_dtype=kvdt, cache_len=[8000], steps=[1, 2],
                      rope="neox", rope_theta=500000, rope_freqs=llama3_freqs, k_pos_off=24000, **MILD))
        L.append(case(B=1, cin=256, H=8, G=2, c=64, CAP=256, dtype=dt, kv_dtype=kvdt, cache_len=[100], steps=[1],
                      rope="neox", rope_freqs=np.ones(32, np.float32), desc="freqs all 1 (= no input)", **MILD))
    return L


def fam_outputs():
    L = []
    for dt, kvdt in PAIRS6:
        for m in (dict(), dict(sinks=True), dict(softcap=20.0), dict(alibi=8), dict(window=(10, 0)),
                  dict(mask=True, pad=[3, 9], holes=0.3), dict(rope="neox", alibi=4.0, softcap=30.0, sinks=True)):
            C = case(B=2, cin=256, H=8, G=2, c=64, CAP=100, dtype=dt, kv_dtype=kvdt, cache_len=[0, 50], steps=[6, 1, 3],
                     lse=True, weights_out=True, **SHARP2)
            C.update(m)
            L.append(C)
        L.append(case(B=1, cin=128, H=4, G=1, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[4090], steps=[1, 2],
                      lse=True, weights_out=True, sinks=True, **MILD))
        L.append(case(B=2, cin=128, H=4, G=2, c=32, CAP=2048, dtype=dt, kv_dtype=kvdt, cache_len=[5, 1500], steps=[1],
                      lse=True, **MILD))
    return L


def fam_threads():
    L = []
    th = [1, 2, 3]
    for dt, kvdt in PAIRS6:
        for (CAP, cl, G, H) in ((4096, [4000], 1, 8), (8192, [8000], 2, 8), (16384, [16370], 1, 4), (4096, [700], 1, 8)):
            L.append(case(B=1, cin=128, H=H, G=G, c=64, CAP=CAP, dtype=dt, kv_dtype=kvdt, cache_len=cl, steps=[1, 1, 3],
                          threads=th, desc="key split", **MILD))
        L.append(case(B=1, cin=128, H=8, G=1, c=128, CAP=8192, dtype=dt, kv_dtype=kvdt, cache_len=[6000], steps=[1, 2],
                      threads=th, sinks=True, lse=True, weights_out=True, alibi=8, softcap=30.0, **MILD))
        L.append(case(B=1, cin=128, H=8, G=2, c=64, CAP=8192, dtype=dt, kv_dtype=kvdt, cache_len=[7000], steps=[1],
                      threads=th, window=(3000, 0), mask=True, pad=[100], holes=0.1, lse=True, **MILD))
        L.append(case(B=2, cin=128, H=8, G=2, c=64, CAP=4096, dtype=dt, kv_dtype=kvdt, cache_len=[4000, 3], steps=[1, 5],
                      threads=th, rope="gptj", bias="heads", lse=True, **SHARP2))
        L.append(case(B=3, cin=256, H=8, G=8, c=64, CAP=256, dtype=dt, kv_dtype=kvdt, cache_len=[0, 100, 250],
                      steps=[5, 1], threads=th, weights="int8", **SHARP2))
        # few work items: batch x kv heads of 2 and 4 (the by-head plan depends on the thread count),
        # and fewer items than threads
        L.append(case(B=1, cin=128, H=4, G=2, c=32, CAP=512, dtype=dt, kv_dtype=kvdt, cache_len=[300], steps=[1, 2, 7],
                      threads=th, lse=True, desc="by-head plan switch", **MILD))
        L.append(case(B=2, cin=128, H=8, G=2, c=32, CAP=256, dtype=dt, kv_dtype=kvdt, cache_len=[3, 200], steps=[1, 9],
                      threads=th, rope="neox", weights_out=True, desc="by-head plan switch", **MILD))
        L.append(case(B=1, cin=64, H=2, G=1, c=32, CAP=16, dtype=dt, kv_dtype=kvdt, cache_len=[5], steps=[1, 1],
                      threads=th, desc="fewer items than threads", **MILD))
    return L


def fam_multirow():
    L = []
    for dt, kvdt in PAIRS6:
        L.append(case(B=3, cin=256, H=8, G=2, c=64, CAP=256, dtype=dt, kv_dtype=kvdt, cache_len=[0, 17, 40],
                      steps=[2, 5, 16, 33], rope="neox", **SHARP2))
        L.append(case(B=4, cin=128, H=4, G=1, c=32, CAP=128, dtype=dt, kv_dtype=kvdt, cache_len=[3, 0, 64, 100],
                      steps=[9, 1, 17], len_i32=True, mask=True, pad=[2, 0, 30, 5], **MILD))
        L.append(case(batch=(2, 3), cin=128, H=8, G=4, c=32, CAP=80, dtype=dt, kv_dtype=kvdt,
                      cache_len=[[0, 5, 9], [31, 2, 40]], steps=[7, 3], window=(8, 0), lse=True, weights_out=True, **MILD))
        L.append(case(batch=(2, 3), cin=128, H=8, G=4, c=32, CAP=80, dtype=dt, kv_dtype=kvdt,
                      cache_len=[[4, 5, 9]], len_form="bcast", steps=[6, 2], rope="gptj", sinks=True, **MILD))
        L.append(case(B=2, cin=256, H=16, G=4, c=64, CAP=1024, dtype=dt, kv_dtype=kvdt, cache_len=[1, 900],
                      steps=[64, 40], alibi=8, threads=[1, 3], **SHARP2))
    return L


FAMILIES = dict(core=fam_core, mods=fam_mods, edge=fam_edge, sweep=fam_sweep, bias=fam_bias, empty=fam_empty,
                freqs=fam_freqs, outputs=fam_outputs, threads=fam_threads, multirow=fam_multirow)
QUICK = dict(core=2, mods=3, edge=1, sweep=1, bias=1, empty=1, freqs=1, outputs=1, threads=1, multirow=1)


def select(families, every, quick):
    """The cases to run; each gets a seed fixed by its family and its index there, so a
    subset (--quick, --every) draws the same data as the full run."""
    out = []
    for f in families:
        cs = FAMILIES[f]()
        fid = list(FAMILIES).index(f)
        for i, C in enumerate(cs):
            C["family"] = f
            C.setdefault("seed", 1000 * (fid + 1) + i)
        step = QUICK[f] if quick else every
        out += cs[::step]
    return out


def case_repr(C):
    d = {k: v for k, v in C.items() if k != "rope_freqs"}
    if C.get("rope_freqs") is not None:
        d["rope_freqs"] = getattr(C["rope_freqs"], "__name__", "ones")
    return d


def case_from_repr(d):
    d = dict(d)
    if "rope_freqs" in d:
        d["rope_freqs"] = {"llama3_freqs": llama3_freqs, "random_freqs": random_freqs}.get(d["rope_freqs"], None) \
            or np.ones(((d.get("rope_dim") or d["c"]) // 2,), np.float32)
    for k in ("batch", "window"):
        if k in d and d[k] is not None:
            d[k] = tuple(d[k])
    return d


# ------------------------------------------------------------------ driver

def child(a):
    attnc = import_attnc()
    isa = os.environ.get("ATTNC_ISA", "default")
    f = open(a.out, "a")
    nfail = 0

    def log(d):
        nonlocal nfail
        line = json.dumps(d, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
        f.write(line + "\n")
        f.flush()
        if d.get("fail"):
            nfail += 1
            print("FAIL", d["spec"], d.get("isa"), d.get("backend"), d.get("threads"), "step", d.get("step"),
                  d.get("problems") or d.get("error"), d.get("thread_diff", ""), flush=True)

    if a.repro:
        cases = [case_from_repr(json.loads(a.repro))]
    else:
        cases = select(a.families.split(","), a.every, a.quick)
    for i, C in enumerate(cases):
        seed = C.pop("seed")
        try:
            run_case(C, attnc, a.backend, isa, np.random.default_rng(seed), log, seed)
        except Exception as e:
            log(dict(spec=make_spec(C), backend=a.backend, isa=isa, error="exception: " + repr(e),
                     tb=traceback.format_exc()[-1200:], fail=True, case=C.get("family"),
                     repro=json.dumps(dict(case_repr(C), seed=seed))))
            continue
    print("%s %s: %d cases, %d failing steps" % (a.backend, isa, len(cases), nfail), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--backends", default="tcc,cc")
    ap.add_argument("--isas", default="default,generic,avx2,avx512")
    ap.add_argument("--every", type=int, default=1, help="run every Nth case of each family")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "audit", "decode_results.jsonl"))
    ap.add_argument("--repro", default=None, help="a case as JSON (one backend, the ISA in ATTNC_ISA)")
    ap.add_argument("--backend", default=None, help=argparse.SUPPRESS)  # child
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    os.environ.setdefault("ATTNC_CACHE_DIR", os.path.join(REPO, "build", "audit", "kernel_cache"))
    if a.backend or a.repro:
        a.backend = a.backend or a.backends.split(",")[0]
        child(a)
        return
    if a.quick:
        a.backends, a.isas = "tcc", "default"
    start = sum(1 for _ in open(a.out)) if os.path.exists(a.out) else 0
    for backend in a.backends.split(","):
        for isa in a.isas.split(","):
            env = dict(os.environ)
            env.pop("ATTNC_ISA", None)
            if isa != "default":
                env["ATTNC_ISA"] = isa
            cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--families", a.families,
                   "--every", str(a.every), "--out", a.out] + (["--quick"] if a.quick else [])
            t0 = time.time()
            subprocess.call(cmd, env=env)
            print("  (%s %s: %.0f s)" % (backend, isa, time.time() - t0), file=sys.stderr)
    rows = [json.loads(l) for l in list(open(a.out))[start:]]
    report(rows)
    sys.exit(1 if any(r.get("fail") and not (r.get("ill_conditioned") and not r.get("thread_diff"))
                      for r in rows) else 0)


def report(rows):
    """Counts per family / backend / ISA; failures, split into kernel failures and ill-conditioned
    ones (where a plain f32 evaluation is outside the bound too)."""
    from collections import defaultdict
    g = defaultdict(lambda: [0, 0, 0, 0.0, 0.0, 0])
    for r in rows:
        k = (r.get("case"), r.get("backend"), r.get("isa"))
        g[k][0] += 1
        if r.get("fail"):
            g[k][2 if r.get("ill_conditioned") and not r.get("thread_diff") else 1] += 1
        if "out" in r:
            g[k][3] = max(g[k][3], r["out"]["worst"])
            g[k][4] = max(g[k][4], r["out"]["nmse_ratio"])
        g[k][5] += len(r.get("threads") or [1]) > 1
    print("%-10s %-4s %-8s %6s %6s %6s %9s %9s %8s" % ("family", "be", "isa", "steps", "fail", "illc", "worst", "nmse_r",
                                                      "mthread"))
    for k in sorted(g, key=str):
        print("%-10s %-4s %-8s %6d %6d %6d %9.3g %9.3g %8d" % (k + tuple(g[k])))
    for r in rows:
        if r.get("fail") and not (r.get("ill_conditioned") and not r.get("thread_diff")):
            print("FAIL", r.get("case"), r.get("backend"), r.get("isa"), r.get("threads"), r["spec"], "step", r.get("step"),
                  r.get("problems") or r.get("error"), r.get("thread_diff", ""))
            print("     repro: ATTNC_ISA=%s %s %s --backend %s --repro '%s'" % (
                r.get("isa"), sys.executable, os.path.relpath(os.path.abspath(__file__), REPO), r.get("backend"),
                r.get("repro")))


if __name__ == "__main__":
    main()
