#!/usr/bin/python3
"""Fits the degree-5 polynomial for 2^r on [0, 1] that runtime/prims.h
keeps as ATTNC_EXP2F_P0..P5 (prims_avx512.c's exp2_512_neg), and prints
its relative error evaluated as the kernel evaluates it: float
coefficients, Horner's rule in float with fused multiply-adds.

    /usr/bin/python3 tools/fit_exp2.py

The fit is a weighted least-squares fit to relative error, reweighted
towards the largest errors (Lawson's method) until it levels out, which
approaches the minimax polynomial.  Needs numpy (Debian's python3-numpy).
"""
import numpy as np

DEG = 5


def fit(r):
    f = 2.0 ** r
    w = np.ones_like(r)
    v = np.vander(r, DEG + 1, increasing=True)
    for _ in range(200):
        c = np.linalg.lstsq(v * (w / f)[:, None], w, rcond=None)[0]
        e = np.abs(v @ c - f) / f
        w = w * (e / e.max()) ** 0.3 + 1e-12
        w /= w.max()
    return c


def horner_f32(c, r):
    """Horner in float, each step a fused multiply-add: the product of two
    floats is exact in double, so one rounding to float after the sum
    models the FMA (up to a double rounding, far below these errors)."""
    r = r.astype(np.float32).astype(np.float64)
    p = np.full_like(r, np.float64(c[-1]))
    for k in c[-2::-1]:
        p = (p * r + np.float64(k)).astype(np.float32).astype(np.float64)
    return p


def main():
    r = np.linspace(0.0, 1.0, 200001)[:-1].astype(np.float32).astype(np.float64)
    c = fit(r).astype(np.float32)
    # r = 1 too: x - floor(x) rounds to 1 for a tiny negative x
    r = np.append(r, 1.0)
    err = np.abs(horner_f32(c, r) - 2.0 ** r) / 2.0 ** r
    for k, x in enumerate(c):
        print("#define ATTNC_EXP2F_P%d %.10ef" % (k, x))
    print("max relative error, evaluated in float: %.2e" % err.max())


if __name__ == "__main__":
    main()
