"""Float64 oracle for attnc decoding steps (full-mode specs with `cache=CAP`).

Written from /work/shared/DESIGN.md ("Spec language v2": Precision,
Positions and score modifiers, Decoding with a KV cache) and the choices
docs/spec.md records where DESIGN.md is silent (Sk = CAP, `empty_rows=uniform`
over the filled keys, `attn` zero past a row's last key).  Pure numpy; every
input is the value the kernel holds (bf16/f16 rounded, int8 dequantised, cache
rows as stored), so the oracle judges the kernel's arithmetic, not rounding of
the inputs.

Used by decode_audit.py; importable on its own:

    from decode_oracle import reference_step, judge, ROWS
"""
import numpy as np

# ------------------------------------------------------------------ storage

def f32_to_bf16_bits(a):
    """float values -> bfloat16 bits (uint16), nearest, ties to even."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    b = f.view(np.uint32)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return r.astype(np.uint16).reshape(f.shape)


def bf16_bits_to_f64(b):
    return (np.asarray(b).astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def to_storage(a64, dt):
    """float64 values -> (array as attnc stores dt, the float64 values it holds)."""
    if dt == "f64":
        s = np.asarray(a64, np.float64)
    elif dt == "f32":
        s = np.asarray(a64).astype(np.float32)
    elif dt == "f16":
        s = np.asarray(a64).astype(np.float32).astype(np.float16)
    elif dt == "bf16":
        s = f32_to_bf16_bits(a64)
        return s, bf16_bits_to_f64(s)
    else:
        raise ValueError(dt)
    return s, s.astype(np.float64)


def storage_to_f64(s, dt):
    return bf16_bits_to_f64(s) if dt == "bf16" else np.asarray(s).astype(np.float64)


def quant_rows_int8(w):
    """`attnc quantize`'s rounding of each row (last axis): f32 arithmetic,
    scale = max|row| / 127 (1 for an all-zero row), q = rint(w / scale)."""
    w32 = np.asarray(w, dtype=np.float32)
    m = np.max(np.abs(w32), axis=-1)
    scale = np.where(m == 0, np.float32(1), m / np.float32(127)).astype(np.float32)
    q = np.clip(np.rint(w32 / scale[..., None]), -127, 127).astype(np.int8)
    return q, scale


# ------------------------------------------------------------- modifiers

def rope(xh, pos, kind, r, theta, freqs=None):
    """Rotate xh (..., S, c) at positions pos (..., S).  neox pairs (d, d + r/2),
    gptj pairs (2d, 2d + 1); angle pos * theta^(-2d/r) / f[d]; features >= r untouched."""
    if kind in (None, "none"):
        return xh
    out = np.array(xh, np.float64, copy=True)
    half = r // 2
    inv = float(theta) ** (-2.0 * np.arange(half) / r)
    if freqs is not None:
        inv = inv / np.asarray(freqs, np.float64)
    ang = np.asarray(pos, np.float64)[..., None] * inv
    cos, sin = np.cos(ang), np.sin(ang)
    if kind == "neox":
        iu, iw = np.arange(half), np.arange(half, r)
    elif kind == "gptj":
        iu, iw = np.arange(0, r, 2), np.arange(1, r, 2)
    else:
        raise ValueError(kind)
    u, w = xh[..., iu], xh[..., iw]
    out[..., iu] = u * cos - w * sin
    out[..., iw] = w * cos + u * sin
    return out


def alibi_slopes(H, max_bias):
    n = 1
    while n * 2 <= H:
        n *= 2
    m0 = 2.0 ** (-max_bias / n)
    m1 = 2.0 ** (-max_bias / (2 * n))
    return np.array([m0 ** (h + 1) if h < n else m1 ** (2 * (h - n) + 1) for h in range(H)])


def project(x, W, b):
    y = x @ W.T
    return y if b is None else y + b


# ------------------------------------------------------------- one step

def new_kv_rows(P, x, W, cl, kpos):
    """The k (rotated) and v rows one run writes: (B, G, Sn, c) each, float64."""
    B, Sn, _ = x.shape
    G, c = P["G"], P["c"]
    k = project(x, W["wk"], W.get("bk")).reshape(B, Sn, G, c).transpose(0, 2, 1, 3)
    v = project(x, W["wv"], W.get("bv")).reshape(B, Sn, G, c).transpose(0, 2, 1, 3)
    if P.get("rope") not in (None, "none"):
        pos = np.stack([kpos[b, cl[b]:cl[b] + Sn] for b in range(B)])
        k = rope(k, pos[:, None, :], P["rope"], P.get("rope_dim") or c, P.get("rope_theta", 10000.0),
                 P.get("rope_freqs"))
    return k, v


def reference_step(P, x, W, K, V, cache_len, extra, ft=np.float64):
    """One run of a cache spec in float64, batch axes flattened to B.

    ft=np.float32 evaluates the same formula in float32 arithmetic (rope angles
    in float64): a control that shows how far a plain f32 evaluation lands,
    i.e. how ill-conditioned the inputs are.

    P: H, G, c, scale, and optional rope, rope_dim, rope_theta, rope_freqs (r/2),
       alibi (max_bias), softcap, sinks (bool), window (L, R), empty_rows.
    x: (B, Sn, c_in); W: wq bq wk bk wv bv wo bo (biases may be absent).
    K, V: (B, G, CAP, c): the caches as the kernel left them after the run
       (the new rows the kernel wrote are what the attention reads).
    cache_len: (B,) before the run.
    extra: optional mask (B, CAP), q_pos (B, Sn), k_pos (B, CAP), sinks (H),
       bias broadcastable to (B, H, Sn, CAP).
    Returns dict: out (B, Sn, c_in), lse (B, H, Sn), attn (B, H, Sn, CAP),
       k_new, v_new (B, G, Sn, c): the projected rows, empty (B, Sn) bool.
    """
    B, Sn, _ = x.shape
    H, G, c = P["H"], P["G"], P["c"]
    CAP = K.shape[2]
    if ft is not np.float64:
        x, K, V = x.astype(ft), K.astype(ft), V.astype(ft)
        W = {n: (w.astype(ft) if w is not None else None) for n, w in W.items()}
        extra = dict(extra)
        if extra.get("bias") is not None:
            extra["bias"] = np.asarray(extra["bias"]).astype(ft)
    cl = np.asarray(cache_len, np.int64).reshape(B)
    qidx = cl[:, None] + np.arange(Sn)[None, :]
    qpos = extra["q_pos"].astype(np.int64) if extra.get("q_pos") is not None else qidx
    kpos = (extra["k_pos"].astype(np.int64) if extra.get("k_pos") is not None
            else np.broadcast_to(np.arange(CAP), (B, CAP)))
    q = project(x, W["wq"], W.get("bq")).reshape(B, Sn, H, c).transpose(0, 2, 1, 3)
    if P.get("rope") not in (None, "none"):
        q = rope(q, qpos[:, None, :], P["rope"], P.get("rope_dim") or c, P.get("rope_theta", 10000.0),
                 P.get("rope_freqs")).astype(ft)
    k_new, v_new = new_kv_rows(P, x, W, cl, kpos)
    rep = H // G
    Kh = np.repeat(K, rep, axis=1)
    Vh = np.repeat(V, rep, axis=1)
    s = np.einsum("bhic,bhjc->bhij", q, Kh) * ft(P["scale"])
    if P.get("softcap"):
        s = ft(P["softcap"]) * np.tanh(s / ft(P["softcap"]))
    if extra.get("bias") is not None:
        s = s + extra["bias"]
    if P.get("alibi"):
        sl = alibi_slopes(H, P["alibi"])
        s = s + (sl[None, :, None, None] * (kpos[:, None, None, :] - qpos[:, None, :, None])).astype(ft)
    j = np.arange(CAP)
    vis = j[None, None, :] <= qidx[:, :, None]
    if P.get("window"):
        L, R = P["window"]
        p = qidx[:, :, None]
        vis &= (j >= p - L) & (j <= p + R)
    if extra.get("mask") is not None:
        vis &= extra["mask"][:, None, :] != 0
    empty = ~vis.any(-1)  # (B, Sn)
    vis4 = np.broadcast_to(vis[:, None], s.shape)
    sm = np.where(vis4, s, -np.inf)
    m = sm.max(-1, keepdims=True)
    if P.get("sinks"):
        sk = np.asarray(extra["sinks"], ft)[None, :, None, None]
        m = np.maximum(m, sk)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(vis4, np.exp(sm - m), 0.0)
    den = e.sum(-1, keepdims=True)
    if P.get("sinks"):
        den = den + np.exp(sk - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        pr = np.where(den > 0, e / np.where(den > 0, den, 1.0), 0.0)
        lse = np.where(den[..., 0] > 0, np.log(den[..., 0]) + m[..., 0], -np.inf)
    mode = P.get("empty_rows", "zero")
    if mode != "zero" and empty.any():
        filled = j[None, :] < (cl + Sn)[:, None]  # (B, CAP)
        fill_val = 1.0 / (cl + Sn) if mode == "uniform" else np.full(B, np.nan)
        for b, i in zip(*np.nonzero(empty)):
            pr[b, :, i, :] = np.where(filled[b], fill_val[b], 0.0)
    o = np.einsum("bhij,bhjc->bhic", pr, Vh).transpose(0, 2, 1, 3).reshape(B, Sn, H * c)
    out = project(o, W["wo"], W.get("bo"))
    return dict(out=out, lse=lse, attn=pr, k_new=k_new, v_new=v_new, empty=empty, logits=s)


# ------------------------------------------------------------- judging

# DESIGN.md's accuracy table: (NMSE bound, A (times rms), R (times |r|), absolute)
ROWS = {
    "f64": (1e-18, 1e-9, 1e-9, 0.0),   # no NMSE bound given; 1e-18 follows from the elementwise one
    "f32": (1e-10, 0.0, 1e-4, 1e-5),
    "bf16": (1e-4, 0.03, 0.03, 0.0),
    "f16": (1e-5, 0.006, 0.006, 0.0),
    "int8": (1e-3, 0.1, 0.05, 0.0),
}


def rows_for(dtype, kv_dtype, weights=None):
    """The rows a spec is held to: the looser of dtype's, kv_dtype's and int8 weights'."""
    rows = [dtype]
    if kv_dtype and kv_dtype != dtype:
        rows.append(kv_dtype)
    if weights == "int8" and "int8" not in rows:
        rows.append("int8")
    return rows


def judge(a, r, rows):
    """Compare a kernel's output a with the reference r (float64 arrays of one shape).

    Non-finite reference entries (NaN rows, -inf lse) must be matched exactly
    (same NaN-ness, same infinity); the rest is judged with the looser of
    `rows`: elementwise |a - r| <= A rms + R |r| + abs, and NMSE.
    Returns dict(nmse, nmse_bound, nmse_ratio, worst (ratio to the elementwise bound),
    at (index), rms (of the finite reference), ref_at, got_at, nonfinite_mismatch (count))."""
    a = np.asarray(a, np.float64)
    r = np.asarray(r, np.float64)
    fin = np.isfinite(r)
    same_nonfinite = (np.isnan(a) & np.isnan(r)) | (np.isinf(r) & (a == r))
    mism = int(np.sum(~fin & ~same_nonfinite) + np.sum(fin & ~np.isfinite(a)))
    rf = np.where(fin, r, 0.0)
    af = np.where(fin & np.isfinite(a), a, 0.0)
    n = max(int(fin.sum()), 1)
    rms = float(np.sqrt(np.sum(rf * rf) / n))
    nb = max(ROWS[x][0] for x in rows)
    bound = np.zeros_like(rf)
    for x in rows:
        _, A, R, ab = ROWS[x]
        bound = np.maximum(bound, A * rms + R * np.abs(rf) + ab)
    err = np.where(fin, np.abs(af - rf), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / np.where(bound > 0, bound, 1.0), np.where(err > 0, np.inf, 0.0))
        ss = float(np.sum(rf * rf))
        nmse = float(np.sum(err * err) / ss) if ss > 0 else float(np.sum(err * err))
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    worst = float(ratio[idx]) if ratio.size else 0.0
    return dict(nmse=nmse, nmse_bound=nb, nmse_ratio=nmse / nb, worst=worst, at=[int(i) for i in idx], rms=rms,
                ref_at=float(r[idx]) if ratio.size else None, got_at=float(a[idx]) if ratio.size else None,
                nonfinite_mismatch=mism)
