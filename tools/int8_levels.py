#!/usr/bin/python3
"""How many levels must x's rows be quantised in for weights=int8 to stay
within DESIGN.md's int8 row (NMSE <= 1e-3, every element within
0.1 * rms + 0.05 * |r|)?  A float64 model of an MHA layer (numpy only):
the weights are int8 per output row, as `attnc quantize` writes them, and
the reference is computed from the same dequantised weights, as DESIGN.md
asks.  The activations entering each projection (x for q, k and v; the
attention output for the out projection) are rounded per row the way
runtime/prims_vnni.c does it: one level, s1 = max|x| / 127; two, the
remainder again at s2 = s1 / 254; three, the remainder of that at s3 =
s2 / 254 (what the kernel does); or "a", three for a row whose max|x| is
over 8 times its rms and two otherwise (tried and dropped: a row of 64
values cannot read over 8, however large its outliers); or "b", each
value rounded to bf16 (what AMX's tiles would take; not used).  It prints the
worst NMSE and worst element of a few seeds, each as a fraction of its
bound (above 1: out of bounds), for levels (q, k, v, out) of 1
everywhere, 2 for q and k only, 2 everywhere, "a" everywhere, 3 for q
and k with 2 for v and out, 3 everywhere, and bf16 everywhere.

    /usr/bin/python3 tools/int8_levels.py [SEEDS]

A model, not the kernel: tests/test_runtime.c
(test_runtime_int8_outlier_channel) holds the kernel itself to the bound."""
import sys

import numpy as np


def int8_weight(w):
    s = np.abs(w).max(1, keepdims=True) / 127
    s[s == 0] = 1
    return np.round(w / s) * s


def bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def rows_rounded(x, levels):
    if levels == "b":
        return bf16(x)
    amax = np.abs(x).max(-1, keepdims=True)
    s1 = np.where(amax > 0, amax / 127, 1)
    q = np.round(x / s1) * s1
    if levels != 1:
        s2 = s1 / 254
        q = q + np.clip(np.round((x - q) / s2), -127, 127) * s2
    if levels == "a" or levels == 3:
        s3 = s2 / 254
        three = amax > 8 * np.sqrt((x * x).mean(-1, keepdims=True)) if levels == "a" else True
        q = q + np.where(three, np.clip(np.round((x - q) / s3), -127, 127) * s3, 0)
    return q


def mha(x, w, b, heads, causal, levels=None):
    n, s, e = x.shape
    c = e // heads

    def proj(a, i):
        return (rows_rounded(a, levels[i]) if levels else a) @ w[i].T + b[i]

    def split(t):
        return t.reshape(n, s, heads, c).transpose(0, 2, 1, 3)

    q, k, v = split(proj(x, 0)), split(proj(x, 1)), split(proj(x, 2))
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(c)
    if causal:
        logits = logits + np.triu(np.full((s, s), -np.inf), 1)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return proj((p @ v).transpose(0, 2, 1, 3).reshape(n, s, e), 3)


def case(seed, kind, wmul, causal, levels, n=2, s=256, e=512, heads=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, s, e))
    if kind == "outlier x100":
        x[:, :, 3] *= 100
    elif kind == "2 ch x1000":
        x[:, :, [3, 7]] *= 1000
    elif kind == "8 ch x100, 64 wide":
        x[:, :, 3:11] *= 100
    elif kind == "uniform":
        x = rng.uniform(-1, 1, (n, s, e))
    elif kind == "student t3":
        x = rng.standard_t(3, (n, s, e))
    # nn.Linear's init, U(-1/sqrt(e), 1/sqrt(e)), times wmul
    w = [int8_weight(rng.uniform(-1, 1, (e, e)) * wmul / np.sqrt(e)) for _ in range(4)]
    b = [rng.uniform(-1, 1, e) / np.sqrt(e) for _ in range(4)]
    r = mha(x, w, b, heads, causal)
    a = mha(x, w, b, heads, causal, levels)
    d = np.abs(a - r)
    rms = np.sqrt((r * r).mean())
    return (d * d).sum() / (r * r).sum() / 1e-3, (d / (0.1 * rms + 0.05 * np.abs(r))).max()


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print("worst of %d seeds, as fractions of DESIGN.md's int8 bound (above 1: out of bounds)" % seeds)
    print("%-13s %-5s %-7s %-13s %9s %9s" % ("x", "w", "mask", "levels qkvo", "NMSE", "element"))
    for kind in ["gaussian", "uniform", "student t3", "outlier x100", "2 ch x1000", "8 ch x100, 64 wide"]:
        for wmul in [1, 4]:
            for causal in [False, True]:
                for levels in [(1, 1, 1, 1), (2, 2, 1, 1), (2, 2, 2, 2), ("a",) * 4, (3, 3, 2, 2), (3, 3, 3, 3), ("b",) * 4]:
                    e = 64 if "64 wide" in kind else 512
                    got = [case(sd, kind, wmul, causal, levels, e=e) for sd in range(seeds)]
                    print("%-13s %-5s %-7s %-13s %9.3g %9.3g" % (kind, "%dx" % wmul, causal and "causal" or "none",
                                                               "".join(map(str, levels)), max(g[0] for g in got),
                                                               max(g[1] for g in got)), flush=True)


if __name__ == "__main__":
    main()
