"""Tests of the attnc Python module (unittest; Debian's /usr/bin/python3 and numpy).

    make check-python            (make test runs it)
    PYTHONPATH=python ATTNC_CLI=build/attnc /usr/bin/python3 -m unittest discover -s python/tests

ATTNC_CLI names the attnc command the results are compared with (default:
build/attnc of this tree); ATTNC_LIB the library (default: found by the
module itself).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings
import xml.etree.ElementTree as ET

import numpy as np

import attnc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("ATTNC_CLI") or os.path.join(ROOT, "build", "attnc")
PROJ = ("q", "k", "v", "o")


def rand(rng, shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def mha_tensors(rng, B, S, C, H, G=None, dtype=np.float32, mask=False):
    """x, the four Hugging Face projections with biases, and a key mask."""
    G = G or H
    c = C // H
    t = {"x": rand(rng, (B, S, C), 1.0, dtype)}
    outs = {"q": H * c, "k": G * c, "v": G * c, "o": C}
    for p in PROJ:
        t[p + "_proj.weight"] = rand(rng, (outs[p], C if p != "o" else H * c), 0.3, dtype)
        t[p + "_proj.bias"] = rand(rng, (outs[p],), 0.1, dtype)
    if mask:
        m = np.ones((B, S), np.uint8)
        m[:, -2:] = 0
        m[0, 0] = 0
        t["mask"] = m
    return t


def reference(t, H, G=None, causal=False, scale=None, weights=None):
    """float64 multi-head self-attention (Hugging Face names): out, lse, attn."""
    f = {n: np.asarray(a, np.float64) for n, a in t.items() if n != "mask"}
    for n in list(f):
        if n.endswith("_scale"):
            continue
        if n + "_scale" in f:  # int8 weights: w = q * scale
            f[n] = f[n] * f[n + "_scale"][:, None]
    x = f["x"]
    B, S, _ = x.shape
    G = G or H
    q = x @ f["q_proj.weight"].T + f["q_proj.bias"]
    k = x @ f["k_proj.weight"].T + f["k_proj.bias"]
    v = x @ f["v_proj.weight"].T + f["v_proj.bias"]
    c = q.shape[-1] // H
    q = q.reshape(B, S, H, c).transpose(0, 2, 1, 3)
    k = np.repeat(k.reshape(B, S, G, c).transpose(0, 2, 1, 3), H // G, axis=1)
    v = np.repeat(v.reshape(B, S, G, c).transpose(0, 2, 1, 3), H // G, axis=1)
    s = (q @ k.transpose(0, 1, 3, 2)) * (scale if scale is not None else 1 / np.sqrt(c))
    seen = np.ones((B, 1, S, S), bool)
    if causal:
        seen &= np.tril(np.ones((S, S), bool))
    if "mask" in t:
        seen &= (np.asarray(t["mask"]) != 0)[:, None, None, :]
    s = np.where(seen, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.where(seen, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1), 0)
    lse = np.where(den[..., 0] > 0, np.log(np.where(den[..., 0] > 0, den[..., 0], 1)) + m[..., 0], -np.inf)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(B, S, H * c)
    out = o @ f["o_proj.weight"].T + f["o_proj.bias"]
    return {"out": out, "lse": lse, "attn": p}


def assert_close(tc, got, want, rel, rms_rel, nmse, what="", abs_=0.0):
    """DESIGN.md's accuracy rows: NMSE, and every element within abs_ + rms_rel * rms + rel * |r|."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    rms = np.sqrt(np.mean(want ** 2))
    err = np.abs(got - want)
    tc.assertTrue(np.all(err <= abs_ + rms_rel * rms + rel * np.abs(want)),
                  "%s: max error %g (rms %g)" % (what, err.max(), rms))
    tc.assertLessEqual(np.sum((got - want) ** 2) / np.sum(want ** 2), nmse, what)


def same_bits(tc, a, b, what=""):
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    tc.assertEqual(a.shape, b.shape, what)
    tc.assertEqual(a.dtype.itemsize, b.dtype.itemsize, what)
    if a.tobytes() != b.tobytes():
        d = np.nonzero(a.view(np.uint8).ravel() != b.view(np.uint8).ravel())[0]
        tc.fail("%s: %d bytes differ, first at byte %d" % (what, len(d), d[0]))


class TestCLI(unittest.TestCase):
    """k.run equals `attnc run` bit for bit on the same safetensors file."""

    @classmethod
    def setUpClass(cls):
        if not os.access(CLI, os.X_OK):
            raise unittest.SkipTest("no attnc command at %s (run make, or set ATTNC_CLI)" % CLI)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cli_run(self, spec, tensors, *args):
        inp = os.path.join(self.tmp.name, "in.safetensors")
        out = os.path.join(self.tmp.name, "out.safetensors")
        attnc.save_safetensors(inp, tensors)
        r = subprocess.run([CLI, "run", spec, "--tensors", inp, "--out", out] + list(args),
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, "attnc run %s: %s" % (spec, r.stderr))
        return attnc.load_safetensors(out)

    def check(self, spec, tensors, want_outputs=("out",), prefix="", dims=None, threads=None, **kw):
        args = (["--prefix", prefix] if prefix else []) + (["--threads", str(threads)] if threads else [])
        for n, v in (dims or {}).items():
            args += ["--dim", "%s=%d" % (n, v)]
        cli = self.cli_run(spec, tensors, *args)
        k = attnc.compile(spec, threads=threads, **kw)
        py = k.run(tensors, prefix=prefix, dims=dims)
        self.assertEqual(sorted(py), sorted(want_outputs), spec)
        self.assertEqual(sorted(cli), sorted(want_outputs), spec)
        for n in want_outputs:
            same_bits(self, py[n], cli[n], "%s: %s" % (spec, n))
        return py

    def test_f32_causal_mask_lse_attn(self):
        rng = np.random.default_rng(1)
        t = mha_tensors(rng, 2, 7, 32, 4, mask=True)
        self.check("mha x=B,S,32 heads=4 causal mask=key lse weights_out", t, ("out", "lse", "attn"))

    def test_gqa_bf16_uint16(self):
        rng = np.random.default_rng(2)
        t = {n: attnc.float32_to_bf16(a) if n != "mask" else a
             for n, a in mha_tensors(rng, 2, 9, 32, 4, G=2).items()}
        py = self.check("gqa x=B,S,32 heads=4 kv_heads=2 causal dtype=bf16", t)
        self.assertEqual(py["out"].dtype, np.uint16)

    def test_f16(self):
        rng = np.random.default_rng(3)
        t = mha_tensors(rng, 1, 11, 32, 2, dtype=np.float16)
        self.assertEqual(self.check("mha x=B,S,32 heads=2 dtype=f16 lse", t, ("out", "lse"))["out"].dtype,
                         np.float16)

    def test_f64(self):
        rng = np.random.default_rng(4)
        t = mha_tensors(rng, 2, 5, 16, 2, dtype=np.float64, mask=True)
        self.check("mha x=B,S,16 heads=2 mask=key dtype=f64", t)

    def test_int8_weights(self):
        rng = np.random.default_rng(5)
        t = mha_tensors(rng, 2, 6, 32, 4)
        for p in PROJ:
            t[p + "_proj.weight"], t[p + "_proj.weight_scale"] = attnc.quantize_int8(t[p + "_proj.weight"])
        self.check("mha x=B,S,32 heads=4 causal weights=int8", t)

    def test_quantize_int8_equals_cli(self):
        rng = np.random.default_rng(6)
        w = rand(rng, (24, 40))
        inp = os.path.join(self.tmp.name, "w.safetensors")
        out = os.path.join(self.tmp.name, "wq.safetensors")
        attnc.save_safetensors(inp, {"linear_q.weight": w})
        r = subprocess.run([CLI, "quantize", "--tensors", inp, "--out", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        cli = attnc.load_safetensors(out)
        q, s = attnc.quantize_int8(w)
        same_bits(self, q, cli["linear_q.weight"], "q")
        same_bits(self, s, cli["linear_q.weight_scale"], "scale")

    def test_alphafold_gated_bias(self):
        rng = np.random.default_rng(7)
        t = {"x": rand(rng, (3, 5, 16)), "bias": rand(rng, (2, 5, 5)),
             "mask": (rng.random((3, 5)) > 0.3).astype(np.bool_)}
        for p, o in (("q", 8), ("k", 8), ("v", 8), ("g", 8)):
            t["linear_%s.weight" % p] = rand(rng, (o, 16), 0.3)
        t["linear_g.bias"] = rand(rng, (8,), 0.1)
        t["linear_o.weight"] = rand(rng, (16, 8), 0.3)
        t["linear_o.bias"] = rand(rng, (16,), 0.1)
        self.check("alphafold x=3,5,16 heads=2 head_dim=4 gated bias=2,5,5 mask=key", t)

    def test_core_rope_positions(self):
        rng = np.random.default_rng(8)
        t = {"q": rand(rng, (2, 2, 6, 8)), "k": rand(rng, (2, 2, 6, 8)), "v": rand(rng, (2, 2, 6, 8)),
             "q_pos": np.array([[3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5]], np.int32),
             "k_pos": np.arange(6, dtype=np.int64) * 2}
        self.check("mha mode=core q=B,2,S,8 rope=neox lse", t, ("out", "lse"))

    def test_cross_attention_in_proj(self):
        rng = np.random.default_rng(9)
        t = {"x": rand(rng, (2, 3, 16)), "kv": rand(rng, (2, 7, 16)),
             "in_proj_weight": rand(rng, (48, 16), 0.3), "in_proj_bias": rand(rng, (48,), 0.1),
             "out_proj.weight": rand(rng, (16, 16), 0.3), "out_proj.bias": rand(rng, (16,), 0.1),
             "mask": np.array([[1, 1, 1, 0, 1, 1, 0], [1] * 7], np.uint8)}
        self.check("mha x=B,T,16 kv=B,S,16 heads=4 mask=key weights_out", t, ("out", "attn"))

    def test_prefix_selects_a_layer(self):
        rng = np.random.default_rng(10)
        t = {"x": rand(rng, (1, 5, 16))}
        for layer in (0, 1):
            for p in PROJ:
                t["model.layers.%d.self_attn.%s_proj.weight" % (layer, p)] = rand(rng, (16, 16), 0.3)
                t["model.layers.%d.self_attn.%s_proj.bias" % (layer, p)] = rand(rng, (16,), 0.1)
        t["model.norm.weight"] = rand(rng, (16,))
        a = self.check("mha x=B,S,16 heads=2", t, prefix="model.layers.1.self_attn.")["out"]
        b = self.check("mha x=B,S,16 heads=2", t, prefix="model.layers.0.self_attn.")["out"]
        self.assertFalse(np.array_equal(a, b))

    def test_dims_and_threads(self):
        rng = np.random.default_rng(11)
        t = mha_tensors(rng, 3, 33, 32, 4, mask=True)
        self.check("mha x=B,S,32 heads=4 causal mask=key", t, dims={"S": 33}, threads=2)


class TestErrors(unittest.TestCase):
    def test_spec_error_has_position(self):
        with self.assertRaises(attnc.Error) as cm:
            attnc.compile("mha x=B,S,8 haeds=2")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.where, e.line, e.col), ("ATTNC_ESPEC", 1, "spec:1:13", 1, 13))
        self.assertEqual(e.message, "unknown key 'haeds' (did you mean 'heads'?)")
        self.assertEqual(str(e), "spec:1:13: error: unknown key 'haeds' (did you mean 'heads'?)")

    def test_spec_name_and_second_line(self):
        with self.assertRaises(attnc.Error) as cm:
            attnc.compile("mha x=B,S,8\n  heads=3", spec_name="layer.attn")
        e = cm.exception
        self.assertEqual((e.where, e.line), ("layer.attn:2:%d" % e.col, 2))
        self.assertGreaterEqual(e.col, 3)
        self.assertIn("heads", cm.exception.message)

    def test_missing_tensor(self):
        k = attnc.compile("mha x=B,S,16 heads=2")
        t = mha_tensors(np.random.default_rng(0), 1, 4, 16, 2)
        del t["k_proj.weight"]
        with self.assertRaises(attnc.Error) as cm:
            k.run(t)
        self.assertEqual(cm.exception.status, "ATTNC_EMISSING")
        self.assertIn("missing tensor 'wk'", str(cm.exception))
        self.assertIn("k_proj.weight", str(cm.exception))

    def test_wrong_shape(self):
        k = attnc.compile("mha x=B,S,16 heads=2")
        t = mha_tensors(np.random.default_rng(0), 1, 4, 16, 2)
        t["x"] = t["x"][..., :8].copy()
        with self.assertRaises(attnc.Error) as cm:
            k.run(t)
        self.assertEqual(cm.exception.status, "ATTNC_EBIND")
        self.assertEqual(str(cm.exception), "tensor 'x' (1, 4, 8): axis 2 is 8 but the spec says 16")

    def test_named_dim_disagrees(self):
        k = attnc.compile("mha x=B,S,16 heads=2")
        t = mha_tensors(np.random.default_rng(0), 1, 4, 16, 2)
        with self.assertRaises(attnc.Error) as cm:
            k.run(t, dims={"S": 5})
        self.assertEqual(cm.exception.status, "ATTNC_EBIND")
        with self.assertRaises(attnc.Error) as cm:
            k.run(t, dims={"T": 5})
        self.assertIn("no named dim 'T'", str(cm.exception))

    def test_unused_and_unknown_names(self):
        # DESIGN.md: tensors the spec does not use are ignored; an input it
        # does not read and an unknown name are ignored with a warning
        k = attnc.compile("mha x=B,S,16 heads=2")
        t = mha_tensors(np.random.default_rng(0), 1, 4, 16, 2)
        want = k.run(t)["out"]
        with self.assertWarns(UserWarning) as cm:
            got = k.run(dict(t, mask=np.zeros((1, 4), np.uint8)))["out"]
        self.assertIn("ignored the input 'mask': this spec does not read it (mask=key would)", str(cm.warning))
        np.testing.assert_array_equal(got, want)
        with self.assertWarns(UserWarning) as cm:
            got = k.run(dict(t, wat=np.ones(3, np.float32)))["out"]
        self.assertIn("ignored 'wat'", str(cm.warning))
        np.testing.assert_array_equal(got, want)
        with warnings.catch_warnings():  # a weight the spec does not use: quietly
            warnings.simplefilter("error")
            got = k.run(dict(t, **{"linear_g.weight": np.ones((16, 16), np.float32)}))["out"]
        np.testing.assert_array_equal(got, want)

    def test_dtypes_refused(self):
        k = attnc.compile("mha x=B,S,16 heads=2")
        t = mha_tensors(np.random.default_rng(0), 1, 4, 16, 2)
        with self.assertRaises(attnc.Error) as cm:
            k.run(dict(t, x=t["x"].astype(np.complex64)))
        self.assertIn("numpy dtype complex64", str(cm.exception))
        with self.assertRaises(attnc.Error) as cm:  # int8 needs weights=int8
            k.run(dict(t, **{"q_proj.weight": t["q_proj.weight"].astype(np.int8)}))
        self.assertIn("weights=int8", str(cm.exception))
        k8 = attnc.compile("mha x=B,S,16 heads=2 weights=int8")
        with self.assertRaises(attnc.Error) as cm:  # a float weight on an int8 spec
            k8.run(t)
        self.assertIn("attnc quantize", str(cm.exception))

    def test_rank_above_8(self):
        k = attnc.compile("mha x=B,S,16 heads=2")
        with self.assertRaises(attnc.Error) as cm:
            k.run({"x": np.zeros((1,) * 9, np.float32)})
        self.assertIn("rank 9", str(cm.exception))

    def test_bad_arguments(self):
        for kw in ({"backend": "gcc"}, {"form": "slow"}, {"threads": -1}, {"threads": 1.5}):
            with self.assertRaises(attnc.Error, msg=str(kw)):
                attnc.compile("mha x=B,S,16 heads=2", **kw)
        k = attnc.compile("mha x=B,S,16 heads=2")
        with self.assertRaises(attnc.Error):
            k.run([1, 2])
        with self.assertRaises(attnc.Error):
            k.run({}, seed=-1)

    def test_grad_needs_train(self):
        k = attnc.compile("mha x=B,S,16 heads=2")
        with self.assertRaises(attnc.Error) as cm:
            k.grad({}, None)
        self.assertEqual(cm.exception.status, "ATTNC_EARG")
        self.assertIn("this kernel has no backward pass: its spec lacks the key train", str(cm.exception))
        self.assertIn("compile the spec with train added", str(cm.exception))

    def test_grad_needs_dout(self):
        # dout None is a missing tensor, not a request for the forward alone
        k = _train_kernel("mha x=1,3,16 heads=2 train")
        if k is None:
            self.skipTest("the generator emits no NAME_backward yet")
        t = mha_tensors(np.random.default_rng(0), 1, 3, 16, 2)
        with self.assertRaises(attnc.Error) as cm:
            k.grad(t, None)
        self.assertEqual(cm.exception.status, "ATTNC_EMISSING")
        self.assertIn("grad needs dout", str(cm.exception))

    def test_seed_range(self):
        k = attnc.compile("mha x=1,3,16 heads=2")
        t = mha_tensors(np.random.default_rng(0), 1, 3, 16, 2)
        # any 64-bit seed; a spec without dropout gives the same result for each
        a = k.run(t, seed=0)["out"]
        b = k.run(t, seed=(1 << 64) - 1)["out"]
        self.assertTrue(np.array_equal(a, b))
        for bad in (1 << 64, True, 1.0, "1"):
            with self.assertRaises(attnc.Error, msg=repr(bad)):
                k.run(t, seed=bad)

    def test_load_errors(self):
        with self.assertRaises(attnc.Error) as cm:
            attnc.load_safetensors("/nonexistent/file.safetensors")
        self.assertEqual(cm.exception.status, "ATTNC_EIO")
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
            f.flush()
            with self.assertRaises(attnc.Error) as cm:
                attnc.load_safetensors(f.name)
            self.assertEqual(cm.exception.status, "ATTNC_EFORMAT")


class TestDtypes(unittest.TestCase):
    """Every dtype the library takes, against a float64 reference (DESIGN.md's bounds)."""

    SPEC = "mha x=B,S,32 heads=4 causal mask=key lse weights_out"

    def setUp(self):
        self.t = mha_tensors(np.random.default_rng(20), 2, 9, 32, 4, mask=True)

    def run_spec(self, spec, t):
        return attnc.compile(spec).run(t)

    def test_f32(self):
        got = self.run_spec(self.SPEC, self.t)
        ref = reference(self.t, 4, causal=True)
        self.assertEqual(got["out"].dtype, np.float32)
        for n in ("out", "attn"):  # f32: every element within 1e-5 + 1e-4 |r|
            assert_close(self, got[n], ref[n], 1e-4, 0, 1e-10, n, abs_=1e-5)
        fin = np.isfinite(ref["lse"])
        self.assertTrue(np.array_equal(fin, np.isfinite(got["lse"])))
        assert_close(self, got["lse"][fin], ref["lse"][fin], 1e-4, 0, 1e-10, "lse", abs_=1e-5)

    def test_f64(self):
        t = {n: a.astype(np.float64) if a.dtype == np.float32 else a for n, a in self.t.items()}
        got = self.run_spec(self.SPEC.replace("weights_out", "dtype=f64"), t)
        self.assertEqual(got["out"].dtype, np.float64)
        assert_close(self, got["out"], reference(t, 4, causal=True)["out"], 1e-9, 1e-9, 1e-18, "f64")

    def test_bf16_uint16(self):
        t = {n: attnc.float32_to_bf16(a) if a.dtype == np.float32 else a for n, a in self.t.items()}
        got = self.run_spec("mha x=B,S,32 heads=4 causal mask=key dtype=bf16", t)["out"]
        self.assertEqual(got.dtype, np.uint16)
        ref = reference({n: attnc.bf16_to_float32(a) if a.dtype == np.uint16 else a for n, a in t.items()},
                        4, causal=True)["out"]
        assert_close(self, attnc.bf16_to_float32(got), ref, 0.03, 0.03, 1e-4, "bf16")

    def test_f32_bound_to_bf16_kernel_rounds_like_the_helper(self):
        k = attnc.compile("mha x=B,S,32 heads=4 causal mask=key dtype=bf16")
        a = k.run(self.t)["out"]
        b = k.run({n: attnc.float32_to_bf16(v) if v.dtype == np.float32 else v for n, v in self.t.items()})["out"]
        same_bits(self, a, b, "f32 rounded by the library vs by float32_to_bf16")

    def test_ml_dtypes_bfloat16(self):
        try:
            import ml_dtypes
        except ImportError:
            self.skipTest("ml_dtypes is not installed (Debian 12 has no package): bf16 travels as uint16")
        k = attnc.compile("mha x=B,S,32 heads=4 causal mask=key dtype=bf16")
        u = {n: attnc.float32_to_bf16(v) if v.dtype == np.float32 else v for n, v in self.t.items()}
        m = {n: v.view(ml_dtypes.bfloat16) if v.dtype == np.uint16 and n != "mask" else v for n, v in u.items()}
        a, b = k.run(u)["out"], k.run(m)["out"]
        self.assertEqual(b.dtype, ml_dtypes.bfloat16)
        same_bits(self, a, b.view(np.uint16), "ml_dtypes")

    def test_f16(self):
        t = {n: a.astype(np.float16) if a.dtype == np.float32 else a for n, a in self.t.items()}
        got = self.run_spec("mha x=B,S,32 heads=4 causal mask=key dtype=f16", t)["out"]
        self.assertEqual(got.dtype, np.float16)
        assert_close(self, got, reference(t, 4, causal=True)["out"], 0.006, 0.006, 1e-5, "f16")

    def test_int8_weights(self):
        t = dict(self.t)
        for p in PROJ:
            t[p + "_proj.weight"], t[p + "_proj.weight_scale"] = attnc.quantize_int8(t[p + "_proj.weight"])
        got = self.run_spec("mha x=B,S,32 heads=4 causal mask=key weights=int8", t)["out"]
        assert_close(self, got, reference(t, 4, causal=True)["out"], 0.05, 0.1, 1e-3, "int8")
        self.assertEqual(t["q_proj.weight"].dtype, np.int8)

    def test_mixed_input_dtypes_convert(self):
        # an f32 kernel takes F64, F16 and BF16 tensors and converts them itself
        k = attnc.compile("mha x=B,S,32 heads=4 causal mask=key")
        t16 = {n: attnc.float32_to_bf16(v) if n.endswith("weight") else v for n, v in self.t.items()}
        t32 = {n: attnc.bf16_to_float32(v) if n.endswith("weight") else v for n, v in t16.items()}
        same_bits(self, k.run(t16)["out"], k.run(t32)["out"], "bf16 weights widened by the library")
        t64 = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in t32.items()}
        assert_close(self, k.run(t64)["out"], k.run(t32)["out"], 1e-6, 0, 1e-12, "f64 inputs", abs_=1e-6)

    def test_mask_dtypes(self):
        k = attnc.compile("mha x=B,S,32 heads=4 causal mask=key")
        want = k.run(self.t)["out"]
        for dt in (np.bool_, np.int8, np.int32, np.int64, np.uint16, np.float32, np.float64):
            got = k.run(dict(self.t, mask=self.t["mask"].astype(dt)))["out"]
            same_bits(self, got, want, "mask as %s" % np.dtype(dt))

    def test_bf16_helpers(self):
        f = np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 3.4e38, -np.inf, np.nan, 1e-40], np.float32)
        b = attnc.float32_to_bf16(f)
        self.assertEqual(b.dtype, np.uint16)
        # 1 + 2^-8 is a tie, to even (1.0); 1 + 3*2^-8 ties up to 1 + 2^-6; 3.4e38 rounds to infinity
        self.assertEqual(list(b[:7]), [0x0000, 0x8000, 0x3F80, 0x3F80, 0x3F82, 0x7F80, 0xFF80])
        self.assertTrue(np.isnan(attnc.bf16_to_float32(b[7])))
        back = attnc.bf16_to_float32(b)
        self.assertEqual(back.dtype, np.float32)
        self.assertTrue(np.array_equal(attnc.float32_to_bf16(back), b))
        with self.assertRaises(attnc.Error):
            attnc.bf16_to_float32(np.zeros(2, np.float32))


class TestZeroCopy(unittest.TestCase):
    def test_rules(self):
        a = np.zeros((2, 3), np.float32)
        self.assertIs(attnc._prepare("x", a)[0], a)
        self.assertEqual(attnc._prepare("x", a)[2], False)
        for b in (a.T, a[:, ::2], a.astype(">f4"), np.asfortranarray(np.zeros((2, 3), np.float32))):
            arr, code, copied = attnc._prepare("x", b)
            self.assertTrue(copied)
            self.assertTrue(arr.flags.c_contiguous and arr.dtype.isnative)
            self.assertTrue(np.array_equal(arr, b))
        raw = np.zeros(4 * 6 + 1, np.uint8)[1:].view(np.float32)  # misaligned
        self.assertFalse(raw.flags.aligned)
        self.assertTrue(attnc._prepare("x", raw)[2])
        self.assertEqual(attnc._prepare("mask", np.zeros(3, np.uint16))[1], attnc._U16)
        self.assertEqual(attnc._prepare("x", np.zeros(3, np.uint16))[1], attnc._BF16)
        self.assertEqual(attnc._prepare("x", [[1.0, 2.0]])[1], attnc._F64)

    def test_copied_inputs_give_the_same_result(self):
        rng = np.random.default_rng(30)
        t = mha_tensors(rng, 2, 6, 16, 2)
        k = attnc.compile("mha x=B,S,16 heads=2")
        want = k.run(t)["out"]
        u = dict(t)
        u["x"] = np.asfortranarray(t["x"])
        u["q_proj.weight"] = t["q_proj.weight"].astype(">f4")
        u["k_proj.weight"] = np.ascontiguousarray(t["k_proj.weight"].T).T
        big = np.zeros((2, 12, 16), np.float32)
        big[:, ::2] = t["x"]
        u["x"] = big[:, ::2]
        same_bits(self, k.run(u)["out"], want, "copies")

    def test_inputs_not_written_outputs_aligned(self):
        t = mha_tensors(np.random.default_rng(31), 2, 6, 16, 2, mask=True)
        before = {n: a.copy() for n, a in t.items()}
        for a in t.values():
            a.flags.writeable = False  # read-only arrays bind too
        outs = attnc.compile("mha x=B,S,16 heads=2 mask=key lse weights_out").run(t)
        for n in t:
            self.assertTrue(np.array_equal(t[n], before[n]), n)
        for n, a in outs.items():
            self.assertEqual(a.ctypes.data % 64, 0, n)
            self.assertTrue(a.flags.c_contiguous and a.flags.writeable, n)


class TestThreads(unittest.TestCase):
    def test_thread_counts_give_identical_bits(self):
        rng = np.random.default_rng(40)
        t = mha_tensors(rng, 4, 70, 64, 4, mask=True)
        spec = "mha x=B,S,64 heads=4 causal mask=key lse weights_out"
        ref = attnc.compile(spec, threads=1).run(t)
        for n in (2, 3):
            got = attnc.compile(spec, threads=n).run(t)
            for o in ref:
                same_bits(self, got[o], ref[o], "threads=%d %s" % (n, o))

    def test_plain_form_agrees(self):
        t = mha_tensors(np.random.default_rng(41), 2, 9, 32, 4, mask=True)
        spec = "mha x=B,S,32 heads=4 causal mask=key"
        kp = attnc.compile(spec, form="plain")
        self.assertIn("plain form", kp.source)
        assert_close(self, kp.run(t)["out"], attnc.compile(spec).run(t)["out"], 1e-4, 0, 1e-10, "plain", abs_=1e-5)

    def test_python_threads_share_a_kernel(self):
        k = attnc.compile("mha x=B,S,32 heads=4 causal", threads=1)
        ts = [mha_tensors(np.random.default_rng(50 + i), 2, 17, 32, 4) for i in range(4)]
        want = [k.run(t)["out"] for t in ts]
        got = [None] * 4

        def work(i):
            for _ in range(5):
                got[i] = k.run(ts[i])["out"]
        th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        for i in range(4):
            same_bits(self, got[i], want[i], "thread %d" % i)

    def test_gil_released_while_running(self):
        # ctypes.CDLL releases the GIL around each foreign call: while a long
        # run goes on in another thread, this thread keeps running Python.
        # Held, it would stall this loop for the whole run, every time; a
        # busy machine may stall it once, so three tries are allowed.
        k = attnc.compile("mha x=B,S,128 heads=4", threads=1, form="plain")
        t = mha_tensors(np.random.default_rng(60), 1, 64, 128, 4)
        for S in (64, 128, 256, 512, 1024):
            t["x"] = rand(np.random.default_rng(61), (1, S, 128))
            t0 = time.perf_counter()
            k.run(t)
            if time.perf_counter() - t0 > 0.15:
                break

        def attempt():
            done = []

            def work():
                t0 = time.perf_counter()
                k.run(t)
                done.append(time.perf_counter() - t0)
            th = threading.Thread(target=work)
            worst, last, n = 0.0, time.perf_counter(), 0
            th.start()
            while not done:
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now
                n += 1
            th.join()
            return done[0], worst, n

        for _ in range(3):
            run, worst, n = attempt()
            self.assertGreater(run, 0.05, "the run was too short to tell")
            if worst < run / 2 and n > 100:
                break
        self.assertLess(worst, run / 2, "this thread stalled %.3f s during a %.3f s run: the GIL was held" % (worst, run))
        self.assertGreater(n, 100)


class TestOutputs(unittest.TestCase):
    def test_outputs_follow_the_spec(self):
        t = mha_tensors(np.random.default_rng(70), 2, 5, 16, 2)
        self.assertEqual(sorted(attnc.compile("mha x=B,S,16 heads=2").run(t)), ["out"])
        self.assertEqual(sorted(attnc.compile("mha x=B,S,16 heads=2 lse").run(t)), ["lse", "out"])
        self.assertEqual(sorted(attnc.compile("mha x=B,S,16 heads=2 weights_out").run(t)), ["attn", "out"])

    def test_lse_and_attn(self):
        t = mha_tensors(np.random.default_rng(71), 2, 9, 32, 4, mask=True)
        t["mask"][1, :] = 0  # batch 1 sees no key: lse -inf, attention 0 (empty_rows=zero)
        got = attnc.compile("mha x=B,S,32 heads=4 causal mask=key lse weights_out").run(t)
        ref = reference(t, 4, causal=True)
        self.assertEqual(got["lse"].shape, (2, 4, 9))
        self.assertEqual(got["attn"].shape, (2, 4, 9, 9))
        self.assertEqual((got["lse"].dtype, got["attn"].dtype), (np.float32, np.float32))
        self.assertTrue(np.all(np.isneginf(got["lse"][1])))
        self.assertTrue(np.all(got["attn"][1] == 0))
        fin = np.isfinite(ref["lse"])
        self.assertTrue(np.array_equal(fin, np.isfinite(got["lse"])))
        self.assertLess(np.max(np.abs(got["lse"][fin] - ref["lse"][fin])), 1e-4)
        self.assertLess(np.max(np.abs(got["attn"] - ref["attn"])), 1e-5)
        rows = got["attn"][0].sum(-1)
        self.assertTrue(np.allclose(rows[:, 1:], 1, atol=1e-5))  # query 0 sees only key 0, which is masked

    def test_kernel_attributes(self):
        k = attnc.compile("heads=4 mha x=B,S,32 causal")
        self.assertEqual(k.canonical, attnc.canonical("mha x=B,S,32 heads=4 causal"))
        self.assertEqual(k.dims, ("B", "S"))
        self.assertEqual(k.backend, "tcc")
        self.assertIn("do not edit", k.source)
        self.assertIn(k.name + "_run", k.header)
        self.assertIn("FLOPs", attnc.explain("mha x=B,S,32 heads=4", {"B": 2, "S": 7}))
        self.assertIn(attnc.isa(), ("avx512", "avx2", "generic"))

    def test_safetensors_round_trip_and_stdlib_reader(self):
        t = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b16": attnc.float32_to_bf16([1.5, -2.0]),
             "mask": np.array([1, 0, 7], np.uint16), "i": np.array([[-1, 2]], np.int64),
             "flag": np.array([True, False]), "h": np.array([0.5], np.float16)}
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.safetensors")
            attnc.save_safetensors(p, t)
            back = attnc.load_safetensors(p)
            with open(p, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
        self.assertEqual(header["b16"]["dtype"], "BF16")
        self.assertEqual(header["mask"]["dtype"], "U16")
        self.assertEqual(header["flag"]["dtype"], "BOOL")
        for n in t:
            self.assertTrue(np.array_equal(back[n], t[n]), n)
            self.assertEqual(back[n].dtype, np.asarray(t[n]).dtype, n)


class TestPackage(unittest.TestCase):
    def test_version_matches_header(self):
        with open(os.path.join(ROOT, "runtime", "attnc.h")) as f:
            line = [x for x in f if x.startswith("#define ATTNC_VERSION ")][0]
        self.assertEqual(line.split('"')[1], attnc.__version__)

    def test_finds_the_tree_library_without_ATTNC_LIB(self):
        lib = os.path.join(ROOT, "build", "libattnc.so")
        if not os.path.exists(lib):
            self.skipTest("no build/libattnc.so in this tree")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        env.pop("ATTNC_LIB", None)
        r = subprocess.run([sys.executable, "-c", "import attnc; print(attnc.library_path())"],
                           capture_output=True, text=True, env=env, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.path.realpath(r.stdout.strip()), os.path.realpath(lib))

    def test_bad_ATTNC_LIB_says_what_it_tried(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), ATTNC_LIB="/nonexistent/libattnc.so")
        r = subprocess.run([sys.executable, "-c", "import attnc"], capture_output=True, text=True, env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/nonexistent/libattnc.so (no such file)", r.stderr)

    def test_example_heatmap(self):
        ex = os.path.join(ROOT, "examples", "python")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        with tempfile.TemporaryDirectory() as d:
            svg = os.path.join(d, "h.svg")
            r = subprocess.run([sys.executable, os.path.join(ex, "attn_heatmap.py"), svg],
                               capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            root = ET.parse(svg).getroot()
        self.assertEqual(len(root.findall("{http://www.w3.org/2000/svg}rect")), 2 * 12 * 12)
        with open(os.path.join(ex, "attn_heatmap.txt")) as f:
            want = f.read()
        # the committed output is what docs/tutorial.md shows (tools/tutorial.sh)
        self.assertEqual(r.stdout.replace(svg, "heatmap.svg"), want)


CACHE_SPEC = "mha x=B,S,16 heads=4 kv_heads=2 cache=CAP"


def cache_tensors(rng, B=2, S=3, cap=8, dtype=np.float32, cache_len=(0, 5)):
    """Weights, x and random caches (B, 2, CAP, 4) for CACHE_SPEC."""
    t = mha_tensors(rng, B, S, 16, 4, G=2)
    t["k_cache"] = rand(rng, (B, 2, cap, 4), 1.0, dtype)
    t["v_cache"] = rand(rng, (B, 2, cap, 4), 1.0, dtype)
    t["cache_len"] = np.array(cache_len, np.int64)
    return t


class TestCache(unittest.TestCase):
    """KV caches: what binds in place, what is copied, and the run-time errors."""

    def test_caches_are_returned_and_updated_in_place(self):
        t = cache_tensors(np.random.default_rng(40))
        k = attnc.compile(CACHE_SPEC)
        self.assertEqual(k.inplace, {"k_cache": attnc._F32, "v_cache": attnc._F32})
        outs = k.run(t)
        self.assertEqual(sorted(outs), ["k_cache", "out", "v_cache"])
        self.assertIs(outs["k_cache"], t["k_cache"])  # C-contiguous float32: the caller's own array
        self.assertIs(outs["v_cache"], t["v_cache"])

    def test_other_arrays_are_copied_and_the_copy_returned(self):
        rng = np.random.default_rng(41)
        t = cache_tensors(rng)
        big = np.zeros((2, 2, 16, 4), np.float32)
        ro = t["v_cache"].copy()
        ro.flags.writeable = False
        kinds = {"float64": t["k_cache"].astype(np.float64), "strided": big[:, :, ::2], "read-only": ro}
        for what, kc in kinds.items():
            before = kc.copy()
            u = dict(t, k_cache=kc)
            outs = attnc.compile(CACHE_SPEC).run(u)
            self.assertIsNot(outs["k_cache"], kc, what)
            self.assertEqual(outs["k_cache"].dtype, np.float32, what)
            self.assertTrue(outs["k_cache"].flags.c_contiguous, what)
            self.assertTrue(np.array_equal(kc, before), what + ": the caller's array is not written")

    def test_bf16_and_int8_caches(self):
        rng = np.random.default_rng(42)
        t = cache_tensors(rng)
        kb = attnc.compile(CACHE_SPEC + " kv_dtype=bf16")
        self.assertEqual(kb.inplace, {"k_cache": attnc._BF16, "v_cache": attnc._BF16})
        u = dict(t, k_cache=attnc.float32_to_bf16(t["k_cache"]))
        outs = kb.run(u)
        self.assertIs(outs["k_cache"], u["k_cache"])
        self.assertEqual(outs["v_cache"].dtype, np.uint16)  # float32 given: a bf16 copy, rounded as attnc rounds
        # the rows the run did not write (outside cache_len .. cache_len + S) are the input rounded as attnc rounds
        kept = np.ones(outs["v_cache"].shape[:3], bool)
        for b, cl in enumerate(t["cache_len"]):
            kept[b, :, cl:cl + t["x"].shape[1]] = False
        same_bits(self, outs["v_cache"][kept], attnc.float32_to_bf16(t["v_cache"])[kept], "bf16 copy")
        self.assertFalse(np.array_equal(outs["v_cache"][~kept], attnc.float32_to_bf16(t["v_cache"])[~kept]),
                         "the new rows are written into the copy")
        k8 = attnc.compile(CACHE_SPEC + " kv_dtype=int8")
        self.assertEqual(sorted(k8.inplace), ["k_cache", "k_cache_scale", "v_cache", "v_cache_scale"])
        with self.assertRaises(attnc.Error) as cm:
            k8.run(t)  # float caches for an int8 cache: not quantised behind the caller's back
        self.assertIn("kv_dtype=int8", str(cm.exception))

    def test_errors_leave_the_caches_unchanged(self):
        k = attnc.compile(CACHE_SPEC)
        cases = {
            "cache_len[1] = 6 leaves no room for the 3 new rows of x: 6 + 3 > CAP = 8": {"cache_len": np.array([0, 6])},
            "cache_len[0] = -1 is negative": {"cache_len": np.array([-1, 0], np.int32)},
            "pass I32 or I64": {"cache_len": np.array([0.0, 1.0])},
            "tensors 'k_cache' and 'v_cache' share memory": "alias",
            "missing tensor 'cache_len'": {"cache_len": None},
        }
        for want, change in cases.items():
            t = cache_tensors(np.random.default_rng(43))
            if change == "alias":
                t["v_cache"] = t["k_cache"]
            else:
                t.update(change)
            t = {n: a for n, a in t.items() if a is not None}
            before = {n: t[n].copy() for n in ("k_cache", "v_cache")}
            with self.assertRaises(attnc.Error) as cm:
                k.run(t)
            self.assertIn(want, str(cm.exception))
            for n in before:
                same_bits(self, t[n], before[n], "%s after: %s" % (n, want))
        with self.assertWarns(UserWarning) as cm:  # ignored, as DESIGN.md says, but said
            attnc.compile("mha x=B,S,16 heads=4 kv_heads=2").run(cache_tensors(np.random.default_rng(44)))
        self.assertIn("this spec does not read it (cache=CAP would)", str(cm.warning))


class TestCacheKernel(unittest.TestCase):
    """Decoding through the cache equals attention over the whole sequence.

    These need the generated kernel to read and write the caches (issue 28).
    """

    def test_prefill_then_decode_equals_causal_attention(self):
        rng = np.random.default_rng(45)
        B, S, cap = 2, 6, 8
        t = mha_tensors(rng, B, S, 16, 4, G=2)
        want = attnc.compile("mha x=B,S,16 heads=4 kv_heads=2 causal").run(t)["out"]
        k = attnc.compile(CACHE_SPEC)
        kc = np.zeros((B, 2, cap, 4), np.float32)
        vc = np.zeros_like(kc)
        pre = 4  # prefill 4 rows, then decode the last 2 one at a time
        got = [k.run(dict(t, x=t["x"][:, :pre], k_cache=kc, v_cache=vc, cache_len=0))["out"]]
        self.assertFalse(np.any(kc[:, :, :pre] == 0), "the prefill wrote its rows")
        self.assertFalse(np.any(kc[:, :, pre:] != 0), "and only those")
        for i in range(pre, S):
            got.append(k.run(dict(t, x=t["x"][:, i:i + 1].copy(), k_cache=kc, v_cache=vc, cache_len=i))["out"])
        assert_close(self, np.concatenate(got, axis=1), want, 1e-4, 1e-5, 1e-9, "decode vs causal")


if __name__ == "__main__":
    unittest.main()


def _train_kernel(spec):
    """The kernel of a train spec, or None while the generator emits no NAME_backward."""
    try:
        return attnc.compile(spec)
    except attnc.Error as e:
        if "kernel symbols not found" in str(e):
            return None
        raise


class TestTraining(unittest.TestCase):
    """k.grad against finite differences of k.run, names as given, seeds."""

    def kernel(self, spec):
        k = _train_kernel(spec)
        if k is None:
            self.skipTest("the generator emits no NAME_backward yet")
        return k

    def test_grad_finite_differences(self):
        spec = "mha x=1,3,8 heads=2 causal dtype=f64"
        k = self.kernel(spec + " train")
        fwd = attnc.compile(spec)
        rng = np.random.default_rng(5)
        p = "layers.0."
        t = {"x": rand(rng, (1, 3, 8), 1.0, np.float64),
             p + "in_proj_weight": rand(rng, (24, 8), 0.4, np.float64),
             p + "in_proj_bias": rand(rng, (24,), 0.2, np.float64),
             p + "out_proj.weight": rand(rng, (8, 8), 0.4, np.float64),
             p + "out_proj.bias": rand(rng, (8,), 0.2, np.float64),
             "layers.1.out_proj.bias": rand(rng, (8,), 0.2, np.float64)}  # another layer: no gradient
        dout = rand(rng, (1, 3, 8), 1.0, np.float64)
        g = k.grad(t, dout, prefix=p)
        self.assertEqual(sorted(g), sorted(["out"] + ["grad." + n for n in t if not n.startswith("layers.1.")]))
        self.assertTrue(np.allclose(g["out"], fwd.run(t, prefix=p)["out"], rtol=1e-12, atol=1e-12))
        h = 1e-6
        for name, a in t.items():
            if name.startswith("layers.1."):
                continue
            gr = g["grad." + name]
            self.assertEqual(gr.shape, a.shape, name)
            self.assertEqual(gr.dtype, np.float64, name)
            for idx in list(np.ndindex(a.shape))[::5]:
                up = dict(t)
                down = dict(t)
                up[name] = a.copy()
                up[name][idx] += h
                down[name] = a.copy()
                down[name][idx] -= h
                fd = (np.sum(fwd.run(up, prefix=p)["out"] * dout) - np.sum(fwd.run(down, prefix=p)["out"] * dout)) / (2 * h)
                self.assertLessEqual(abs(gr[idx] - fd), 1e-6 + 1e-5 * abs(fd), "%s%s: %r vs %r" % (name, idx, gr[idx], fd))

    def test_grad_dtypes_and_cli(self):
        """f32 gradients whatever the tensors' dtype; the CLI writes the same bits."""
        k = self.kernel("mha x=1,4,8 heads=2 train")
        rng = np.random.default_rng(6)
        t = mha_tensors(rng, 1, 4, 8, 2)
        t["x"] = t["x"].astype(np.float64)  # converted to f32: its gradient is f32
        dout = rand(rng, (1, 4, 8), 1.0, np.float16)
        g = k.grad(t, dout)
        self.assertEqual(g["grad.x"].dtype, np.float32)
        self.assertEqual(g["grad.q_proj.weight"].shape, (8, 8))
        with tempfile.TemporaryDirectory() as d:
            attnc.save_safetensors(os.path.join(d, "w.safetensors"), t)
            attnc.save_safetensors(os.path.join(d, "d.safetensors"), {"dout": dout})
            subprocess.run([CLI, "grad", "mha x=1,4,8 heads=2", "--tensors", os.path.join(d, "w.safetensors"),
                            "--dout", os.path.join(d, "d.safetensors"), "--out", os.path.join(d, "g.safetensors"),
                            "--quiet"], check=True)
            c = attnc.load_safetensors(os.path.join(d, "g.safetensors"))
        self.assertEqual(sorted(c), sorted(g))
        for n in g:
            self.assertTrue(np.array_equal(c[n], g[n]), n)

    def test_grad_bf16(self):
        """A bf16 train kernel: out and every gradient bf16 (uint16 here), the
        f32 kernel's on the same rounded tensors to within a bf16 rounding."""
        spec = "mha x=1,5,16 heads=2 causal"
        k16 = self.kernel(spec + " train dtype=bf16")
        k32 = self.kernel(spec + " train")
        rng = np.random.default_rng(8)
        t = {n: attnc.float32_to_bf16(a) for n, a in mha_tensors(rng, 1, 5, 16, 2).items()}
        dout = attnc.float32_to_bf16(rand(rng, (1, 5, 16), 1.0, np.float32))
        g16 = k16.grad(t, dout)
        g32 = k32.grad({n: attnc.bf16_to_float32(a) for n, a in t.items()}, attnc.bf16_to_float32(dout))
        self.assertEqual(sorted(g16), sorted(g32))
        for n in g16:
            self.assertEqual(g16[n].dtype, np.uint16, n)
            got, want = attnc.bf16_to_float32(g16[n]), g32[n]
            # one rounding to bf16 (half a unit in the 8th bit), and the f32 kernels' own differences
            self.assertTrue(np.all(np.abs(got - want) <= 2.0 ** -8 * np.abs(want) + 1e-6), n)

    def test_dropout_seed(self):
        k = self.kernel("mha x=1,16,8 heads=2 train dropout=0.5")
        rng = np.random.default_rng(7)
        t = mha_tensors(rng, 1, 16, 8, 2)
        a = k.run(t, seed=3)["out"]
        self.assertTrue(np.array_equal(a, k.run(t, seed=3)["out"]))
        self.assertFalse(np.array_equal(a, k.run(t, seed=4)["out"]))
        g = k.grad(t, np.ones((1, 16, 8), np.float32), seed=3)
        # the forward it differentiated: another code path, so equal to rounding
        self.assertTrue(np.allclose(g["out"], a, rtol=1e-5, atol=1e-6))

