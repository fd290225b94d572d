#!/usr/bin/python3
# make_golden.py: golden test data for attnc, computed with PyTorch.
#
# Regenerate everything (fixed seeds: the same inputs, outputs equal to
# within a float64 unit in the last place) with
#
#     /usr/bin/python3 tools/make_golden.py
#
# (Debian's python3-torch; only the standard library, torch and numpy are
# used.)  It rewrites tests/golden/: one NAME.safetensors per case, the
# index tests/golden/cases.txt (NAME <TAB> PREFIX or - <TAB> SPEC) and
# tests/golden/README.md.
#
# Each case is a spec string in the language of ../shared/DESIGN.md.  The
# script parses it, draws weights and inputs, and computes the expected
# output in float64 with a torch implementation that follows the AlphaFold
# worksheet's MultiHeadAttention (prepare_qkv, prepare_qkv_global, forward)
# step by step: movedim of attn_dim to -2, view into heads, transpose,
# einsum, the seed's bias broadcast rule, mask[..., None, None, :], moveaxis
# back, gate, linear_o.  Extended per DESIGN.md: kv_heads (GQA/MQA,
# repeat_interleave), head_dim != c_in/H, qkv_bias / out_bias, gated,
# global (plain and masked mean, gated and ungated), cross-attention,
# causal top_left / bottom_right, window L,R, scale, empty_rows
# zero/uniform/nan, mode=core, dtype f32/f64/bf16/f16.  Masking is an exact -inf
# fill with explicit handling of rows that see no key (no -1e8 trick).
#
# The v2 cases (rope, alibi, softcap, sinks, lse, pe; positions, rope_freqs,
# a KV cache (f32 and int8), layout=bshc, weights_out, int8 weights) follow the model
# families' own code (Hugging Face's rotate_half, GPT-J's rotate_every_two,
# HF's position_ids and static cache, Llama 3's rotary scaling as frequency
# factors, the ALiBi paper's slopes as BLOOM builds them (llama.cpp's for
# another max_bias), Gemma 2's tanh cap,
# gpt-oss's sink column, the tutorial's SinusoidalPositionalEncoding); the
# loop implementation does not cover them, and attnc's own float64
# reference (check/reference.c) is their second implementation.
#
# Every case is checked against a second, loop-by-loop numpy implementation
# written independently of the torch one (it indexes the original layout
# instead of moving axes); a few plain cases are also checked against
# torch.nn.MultiheadAttention.  The script asserts all of these.
#
# Covered: presets alphafold/mha/mqa/gqa; x, kv (cross 5x30 and 30x5, other
# width); attn_dim -2/-3/-4/0/1 on 2-D..5-D inputs; heads, kv_heads (8/2,
# 6/3, MQA); head_dim != c_in/H; qkv_bias on/off; out_bias=false; gated;
# global (plain/masked mean, gated/ungated); bias with fewer leading dims
# than the batch; key masks with fewer dims than the batch (stored U8, BOOL
# and F32); causal flag/top_left/bottom_right; window 16,0 / 3,3 / 2,5 with
# rows emptied by padding; empty_rows zero/uniform/nan; scale=0.37;
# mode=core incl. decode (Sq=1) over grouped KV heads; dtype f32/f64/bf16/f16
# (bf16 cases also hold PyTorch's own bf16 result as out_torch);
# logits near 330; name=; named dims; the three weight naming schemes and
# a layer prefix.
#
# Training cases (TRAIN_CASES, indexed in tests/golden/train.txt): the same
# torch forward with dropout (after the softmax and the sink, before the
# weighted sum; rows that see no key untouched) by a keep mask from this
# script's own numpy Philox4x32-10, asserted against DESIGN.md's known
# answers; dout drawn at random; every gradient of L = sum(out * dout) by
# autograd in float64, checked along a random direction by a fourth-order
# finite difference, and for one MHA case against nn.MultiheadAttention's
# own autograd.
#
# Conventions of the data (also in tests/golden/README.md):
#  * weights and inputs are in the case's dtype (f32, bf16, f16 cases:
#    drawn in float64, rounded to that dtype, and the truth computed in
#    float64 from the rounded values); masks are U8, BOOL or F32 with values 0/1;
#  * `out` is always F64 (the float64 truth), NaN where empty_rows=nan;
#  * a prefix applies to weight names only; inputs and `out` have none.

import json
import math
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden")

torch.set_default_dtype(torch.float64)

# --------------------------------------------------------------------------
# Spec parsing (the subset of DESIGN.md's language the cases use; all of it)
# --------------------------------------------------------------------------

PRESETS = ("alphafold", "mha", "mqa", "gqa")
FLAGS = ("gated", "global", "causal", "qkv_bias", "out_bias", "alibi", "sinks", "lse", "train", "weights_out")


def parse_shape(text, dims):
    out = []
    for d in text.split(","):
        if d.lstrip("-").isdigit():
            out.append(int(d))
        else:
            assert d in dims, "unbound dim name %s" % d
            out.append(dims[d])
    return tuple(out)


def parse_bool(v):
    assert v in ("true", "false"), v
    return v == "true"


def parse_spec(spec, dims):
    words = spec.split()
    raw = {}
    preset = None
    if words and words[0] in PRESETS:
        preset = words[0]
        words = words[1:]
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
        else:
            assert w in FLAGS, "unknown flag " + w
            k, v = w, "true"
        assert k not in raw, "duplicate key " + k
        raw[k] = v
    p = {}
    p["preset"] = preset
    p["mode"] = raw.pop("mode", "full")
    p["dtype"] = raw.pop("dtype", "f32")
    assert p["dtype"] in ("f32", "f64", "bf16", "f16")
    p["name"] = raw.pop("name", None)
    p["qkv_bias"] = parse_bool(raw.pop("qkv_bias", "false" if preset == "alphafold" else "true"))
    p["out_bias"] = parse_bool(raw.pop("out_bias", "true"))
    p["gated"] = parse_bool(raw.pop("gated", "false"))
    p["global"] = parse_bool(raw.pop("global", "false"))
    p["global_mean"] = raw.pop("global_mean", "plain")
    assert p["global_mean"] in ("plain", "masked")
    c = raw.pop("causal", None)
    p["causal"] = {None: None, "true": "top_left", "top_left": "top_left",
                   "bottom_right": "bottom_right", "false": None}[c]
    w = raw.pop("window", None)
    p["window"] = tuple(int(t) for t in w.split(",")) if w else None
    s = raw.pop("scale", None)
    p["scale_given"] = float(s) if s is not None else None
    p["empty_rows"] = raw.pop("empty_rows", "zero")
    assert p["empty_rows"] in ("zero", "uniform", "nan")
    m = raw.pop("mask", "none")
    assert m in ("key", "none")
    p["mask"] = m == "key"
    b = raw.pop("bias", None)
    p["bias"] = parse_shape(b, dims) if b else None
    # v2: positions and score modifiers, written the way the model families write them
    p["rope"] = raw.pop("rope", "none")
    p["rope_dim"] = int(raw["rope_dim"]) if "rope_dim" in raw else None
    raw.pop("rope_dim", None)
    p["rope_theta"] = float(raw.pop("rope_theta", "10000"))
    p["softcap"] = float(raw.pop("softcap")) if "softcap" in raw else None
    a = raw.pop("alibi", None)
    p["alibi"] = None if a is None else (8.0 if a == "true" else float(a))
    p["sinks"] = parse_bool(raw.pop("sinks", "false"))
    p["lse"] = parse_bool(raw.pop("lse", "false"))
    p["pe"] = raw.pop("pe", "none")
    # training: a backward pass, dropout after the softmax (the weights out are before it)
    p["train"] = parse_bool(raw.pop("train", "false"))
    p["dropout"] = float(raw.pop("dropout", "0"))
    assert 0 <= p["dropout"] < 1 and (p["train"] or not p["dropout"])
    p["weights_out"] = parse_bool(raw.pop("weights_out", "false"))
    # decoding, layouts, int8 weights
    cap = raw.pop("cache", None)
    p["cache"] = int(cap) if cap is not None else None
    if p["cache"] is not None:  # a cache is causal whether or not the spec says so (bottom right: query i at cache_len + i)
        assert p["causal"] in (None, "top_left") and c in (None, "true", "bottom_right"), c
        p["causal"] = "bottom_right"
    p["kv_dtype"] = raw.pop("kv_dtype", p["dtype"])  # (Sk is CAP below: the keys a query may see, and the mask's length)
    assert p["kv_dtype"] in ("f32", "f64", "bf16", "f16", "int8")
    p["weights"] = raw.pop("weights", p["dtype"])
    assert p["weights"] in (p["dtype"], "int8")
    p["layout"] = raw.pop("layout", "bhsc")
    assert p["layout"] in ("bhsc", "bshc")
    p["v2"] = (p["rope"] != "none" or p["softcap"] is not None or p["alibi"] is not None or p["sinks"]
               or p["lse"] or p["pe"] != "none" or p["cache"] is not None or p["weights"] == "int8"
               or p["layout"] != "bhsc" or p["weights_out"])

    if p["mode"] == "core":
        q = parse_shape(raw.pop("q"), dims)
        kv = parse_shape(raw.pop("kv"), dims) if "kv" in raw else q
        raw.pop("kv", None)
        if p["layout"] == "bshc":  # written (B, S, H, c); held here as (B, H, S, c), transposed when stored
            q, kv = q[:-3] + (q[-2], q[-3], q[-1]), kv[:-3] + (kv[-2], kv[-3], kv[-1])
        assert len(q) >= 3 and len(kv) == len(q) and kv[:-3] == q[:-3] and kv[-1] == q[-1]
        p["q"], p["kvshape"] = q, kv
        p["H"], p["Sq"], p["c"] = q[-3], q[-2], q[-1]
        p["G"], p["Sk"] = kv[-3], kv[-2]
        if "heads" in raw:
            assert int(raw.pop("heads")) == p["H"]
        if "kv_heads" in raw:
            assert int(raw.pop("kv_heads")) == p["G"]
        if preset == "mqa":
            assert p["G"] == 1
        assert not p["gated"] and not p["global"]
        p["batch"] = q[:-3]
    else:
        x = parse_shape(raw.pop("x"), dims)
        kv = parse_shape(raw.pop("kv"), dims) if "kv" in raw else None
        p["x"] = x
        p["cross"] = kv is not None
        p["kvshape"] = kv if kv is not None else x
        r = len(x)
        ad = int(raw.pop("attn_dim", "-2"))
        a = ad + r if ad < 0 else ad
        assert 0 <= a < r - 1, "attn_dim on the feature axis"
        p["attn_dim"], p["axis"] = ad, a
        kvs = p["kvshape"]
        assert len(kvs) == r
        assert all(kvs[i] == x[i] for i in range(r - 1) if i != a), "kv batch dims differ"
        p["c_in"], p["c_kv"] = x[-1], kvs[-1]
        p["Sq"], p["Sk"] = x[a], kvs[a]
        H = int(raw.pop("heads"))
        p["H"] = H
        p["G"] = int(raw.pop("kv_heads", "1" if preset == "mqa" else str(H)))
        assert H % p["G"] == 0
        p["c"] = int(raw.pop("head_dim", str(x[-1] // H)))
        p["batch"] = tuple(x[i] for i in range(r - 1) if i != a)
        if p["cache"] is not None:
            p["Sk"] = p["cache"]
        if p["global"]:
            assert p["G"] == H and not p["cross"]
            assert p["causal"] is None and p["window"] is None and p["bias"] is None
    assert not raw, "unknown keys %s" % raw
    p["scale"] = p["scale_given"] if p["scale_given"] is not None else 1.0 / math.sqrt(p["c"])
    if p["bias"] is not None:
        bb = p["bias"]
        Sq_l = p["Sq"]
        assert bb[-3:] == (p["H"], Sq_l, p["Sk"]), "bias shape"
        lead = bb[:-3]
        assert len(lead) <= len(p["batch"]) and all(
            d == e or d == 1 for d, e in zip(lead, p["batch"]))
    return p


# --------------------------------------------------------------------------
# Implementation 1: torch, following the seed's forward() step by step
# --------------------------------------------------------------------------

def visibility(p, Sq, Sk):
    """(Sq, Sk) bool: which keys the causal/window structure lets query i see."""
    i = torch.arange(Sq)[:, None]
    j = torch.arange(Sk)[None, :]
    allowed = torch.ones(Sq, Sk, dtype=torch.bool)
    pos = i + (Sk - Sq) if p["causal"] == "bottom_right" else i
    if p["causal"] is not None:
        allowed &= j <= pos
    if p["window"] is not None:
        L, R = p["window"]
        allowed &= (j >= pos - L) & (j <= pos + R)
    return allowed


# ---- v2 keys, each in the form its model family's code has ----------------

def sinusoidal_pe(length, d):
    """The MHA tutorial seed's SinusoidalPositionalEncoding table (length, d)."""
    pe = torch.zeros(length, d)
    position = torch.arange(0, length, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def rotate_half(x):
    """Hugging Face's Llama/NeoX rotate_half."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """GPT-J's interleaved rotation."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(p, x, pos):
    """x (*, heads, S, c) at positions pos, (S) or Hugging Face's position_ids
    (batch..., S): the first rope_dim features rotated.  Frequency factors
    (rope_freqs, as Llama 3's scaled rotary stores them) divide inv_freq."""
    r = p["rope_dim"] or x.shape[-1]
    inv_freq = 1.0 / (p["rope_theta"] ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    if p.get("_rope_freqs") is not None:
        inv_freq = inv_freq / p["_rope_freqs"]
    freqs = pos.double()[..., None] * inv_freq
    if pos.ndim > 1:  # (batch..., S, r/2) -> (batch..., 1, S, r/2): every head of a batch element alike
        freqs = freqs.unsqueeze(-3)
    rot, rest = x[..., :r], x[..., r:]
    if p["rope"] == "neox":
        emb = torch.cat((freqs, freqs), dim=-1)
        rot = rot * emb.cos().to(x.dtype) + rotate_half(rot) * emb.sin().to(x.dtype)
    else:
        cos, sin = freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)
        rot = rot * cos.to(x.dtype) + rotate_every_two(rot) * sin.to(x.dtype)
    return torch.cat((rot, rest), dim=-1)


def alibi_slopes(n):
    """The ALiBi paper's slopes (max_bias 8), as BLOOM builds them."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def alibi_slopes_max_bias(n, max_bias):
    """ALiBi slopes for any max_bias, as llama.cpp's ggml builds them:
    m0 = 2^(-max_bias / n_log2), m1 = 2^(-max_bias / 2 / n_log2), n_log2 the
    largest power of two <= n; head h < n_log2 takes m0^(h+1), the rest
    m1^(2 (h - n_log2) + 1)."""
    n_log2 = 2 ** int(math.floor(math.log2(n)))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-max_bias / 2.0 / n_log2)
    return [m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n)]


def apply_dropout(p, w, empty):
    """Dropout of the probabilities w (*, H, Sl, Sk) by the keep mask p["_keep"]
    of the same shape: kept ones times 1/(1-p), dropped ones 0; rows that
    see no key stay as empty_rows (or the sink) left them."""
    if not p["dropout"]:
        return w
    keep = p["_keep"].to(w.dtype)
    return torch.where(empty, w, w * keep * (1.0 / (1.0 - p["dropout"])))


def attend(p, q, k, v, bias, mask, sinks=None):
    """q (*, H, Sq', c), k and v (*, G or 1, Sk, c) -> o (*, H, Sq', c), empty count.
    v2: rope on q and k, softcap, ALiBi, a sink column (gpt-oss); the lse in p["_lse"]."""
    H, G = q.shape[-3], k.shape[-3]
    Sq_, Sk_ = q.shape[-2], k.shape[-2]
    qpos = torch.arange(Sq_) + (Sk_ - Sq_ if (p["mode"] == "core" or not p.get("cross")) else 0)
    kpos = torch.arange(Sk_)
    if p.get("_qpos") is not None:  # the inputs q_pos, k_pos: (S) or (batch..., S)
        qpos = p["_qpos"]
    if p.get("_kpos") is not None:
        kpos = p["_kpos"]
    if p["rope"] != "none":
        q, k = apply_rope(p, q, qpos), apply_rope(p, k, kpos)
    if G != H:  # GQA / MQA: query head h uses kv head h // (H/G)
        k = k.repeat_interleave(H // G, dim=-3)
        v = v.repeat_interleave(H // G, dim=-3)
    q = q * p["scale"]
    a = torch.einsum('...qc,...kc->...qk', q, k)
    if p["softcap"] is not None:  # Gemma 2: tanh(logits / cap) * cap, after the scale
        a = torch.tanh(a / p["softcap"]) * p["softcap"]
    if bias is not None:
        bias_batch_shape = bias.shape[:-3]
        bias_bc_shape = bias_batch_shape + (1,) * (a.ndim - len(bias_batch_shape) - 3) + bias.shape[-3:]
        bias = bias.view(bias_bc_shape)
        a = a + bias
    if p["alibi"] is not None:  # BLOOM: slope[h] * (key position - query position)
        if p["alibi"] == 8.0:
            slopes = torch.tensor(alibi_slopes(H), dtype=a.dtype)
        else:  # another max_bias: llama.cpp's form
            slopes = torch.tensor(alibi_slopes_max_bias(H, p["alibi"]), dtype=a.dtype)
        dist = kpos[..., None, None, :] - qpos[..., None, :, None]  # (batch..., 1, Sq, Sk)
        a = a + slopes.view(H, 1, 1) * dist.to(a.dtype)
    allowed = visibility(p, a.shape[-2], a.shape[-1])
    if mask is not None:
        allowed = allowed & (mask != 0)[..., None, None, :]
    allowed = allowed.expand(a.shape)
    a = a.masked_fill(~allowed, float("-inf"))
    empty = ~allowed.any(dim=-1, keepdim=True)
    if sinks is not None:  # gpt-oss: a sink column joins the softmax and is dropped after it
        col = sinks.view(H, 1, 1).to(a.dtype).expand(a.shape[:-1] + (1,))
        ext = torch.cat((a, col), dim=-1)
        p["_lse"] = torch.logsumexp(ext, dim=-1)
        w = torch.softmax(ext, dim=-1)[..., :-1]
        p["_attn"] = w  # weights_out: the probabilities before dropout (DESIGN.md)
        w = apply_dropout(p, w, empty)
        o = torch.einsum('...qk,...kc->...qc', w, v)
        return o, int(empty.sum())
    p["_lse"] = torch.logsumexp(a, dim=-1)
    # a row that sees no key takes the softmax of zeros before empty_rows
    # replaces it: the same values, and no NaN of an all -inf row in autograd
    w = torch.softmax(torch.where(empty, torch.zeros_like(a), a), dim=-1)
    Sk = a.shape[-1]
    fill = {"zero": 0.0, "uniform": 1.0 / Sk, "nan": float("nan")}[p["empty_rows"]]
    w = torch.where(empty, torch.full_like(w, fill), w)
    p["_attn"] = w  # weights_out: the probabilities before dropout (DESIGN.md)
    w = apply_dropout(p, w, empty)
    o = torch.einsum('...qk,...kc->...qc', w, v)
    return o, int(empty.sum())


def forward_torch(p, t):
    """t: dict of float64 tensors (weights by role, inputs). Returns out, #empty rows."""
    mask = t.get("mask")
    if p["mode"] == "core":
        return attend(p, t["q"], t["k"], t["v"], t.get("bias"), mask, t.get("sinks"))
    x = t["x"]
    kvin = t["kv"] if p["cross"] else x
    if p["pe"] != "none":  # the tutorial's encoding, added along the attention axis before the projections
        ad = p["attn_dim"]

        def pe_at(inp, pos):  # at the rows' positions: 0.. along the axis, or q_pos / k_pos (S) or (batch..., S)
            if pos is None:
                return sinusoidal_pe(inp.shape[ad], inp.shape[-1]).to(inp.dtype)
            return sinusoidal_pe(int(pos.max()) + 1, inp.shape[-1]).to(inp.dtype)[pos]
        x = (x.movedim(ad, -2) + pe_at(x, p.get("_qpos"))).movedim(-2, ad)
        kvin = (kvin.movedim(ad, -2) + pe_at(kvin, p.get("_kpos"))).movedim(-2, ad) if p["cross"] else x
    ad, H, c = p["attn_dim"], p["H"], p["c"]

    def lin(inp, role):
        y = inp @ t["w" + role].T
        if ("b" + role) in t:
            y = y + t["b" + role]
        return y

    q, k, v = lin(x, "q"), lin(kvin, "k"), lin(kvin, "v")
    if p["cache"] is not None:
        o, nempty = attend_cache(p, t, q, k, v, mask)
    elif p["global"]:
        # prepare_qkv_global
        q = q.movedim(ad, -2)
        k = k.movedim(ad, -2)
        v = v.movedim(ad, -2)
        q = q.view(q.shape[:-1] + (H, c)).transpose(-2, -3)
        k = k.unsqueeze(-3)
        v = v.unsqueeze(-3)
        if p["global_mean"] == "masked" and mask is not None:
            m = (mask != 0).to(q.dtype)[..., None, :, None]
            num = (q * m).sum(dim=-2, keepdim=True)
            cnt = m.sum(dim=-2, keepdim=True).expand(num.shape)
            q = torch.where(cnt > 0, num / cnt.clamp(min=1.0), torch.zeros_like(num))
        else:
            q = torch.mean(q, dim=-2, keepdim=True)
    else:
        # prepare_qkv, with G kv heads
        q = q.movedim(ad, -2)
        k = k.movedim(ad, -2)
        v = v.movedim(ad, -2)
        q = q.view(q.shape[:-1] + (H, -1)).transpose(-2, -3)
        k = k.view(k.shape[:-1] + (p["G"], -1)).transpose(-2, -3)
        v = v.view(v.shape[:-1] + (p["G"], -1)).transpose(-2, -3)
    if p["cache"] is None:
        o, nempty = attend(p, q, k, v, t.get("bias"), mask, t.get("sinks"))
    o = o.transpose(-3, -2)
    o = torch.flatten(o, start_dim=-2)
    o = o.moveaxis(-2, ad)
    if p["gated"]:
        g = torch.sigmoid(lin(x, "g"))
        o = g * o
    out = lin(o, "o")
    return out, nempty


def quantise_rows(w):
    """Symmetric int8 rows as attnc quantize (and an int8 cache) rounds them,
    in f32 arithmetic: s = max|row| / 127 (1 for a row of zeros), q =
    round-half-to-even(w / s).  w: float64 (..., n), exact in f32.
    Returns q (int8 values, as int64) and s (f32 values, as float64)."""
    w32 = w.to(torch.float32)
    s = (w32.abs().amax(dim=-1) / 127.0).to(torch.float32)
    s = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.round(w32 / s[..., None]).clamp(-127, 127)  # torch.round: ties to even
    return q.to(torch.int64), s.double()


def attend_cache(p, t, q, k, v, mask):
    """A decoding step with a KV cache, as Hugging Face's Llama writes one
    (a static cache): q, k, v (B, Sn, H*c or G*c) projected from the new rows;
    query i of batch element b sits at cache_len[b] + i; q and k rotated there;
    the new k and v rows written into the caches (b, :, cache_len[b] + i);
    each query attends the cache's keys 0 .. cache_len[b] + i (and the window,
    and the mask over CAP).  The caches hold rotated keys, as HF's does.
    An int8 cache (kv_dtype=int8) stores each new row quantised
    (quantise_rows), and attention reads the rows as stored.  Records the
    expected caches in p["_write"] as expect.NAME."""
    B, Sn, H, G, c = q.shape[0], q.shape[1], p["H"], p["G"], p["c"]
    cl = p["_cache_len"]
    q = q.view(B, Sn, H, c).transpose(1, 2)
    k = k.view(B, Sn, G, c).transpose(1, 2)
    v = v.view(B, Sn, G, c).transpose(1, 2)
    pos = cl[:, None] + torch.arange(Sn)[None, :]  # position_ids
    if p["rope"] != "none":
        q, k = apply_rope(p, q, pos), apply_rope(p, k, pos)
    kc, vc = p["_k_cache"].clone(), p["_v_cache"].clone()  # as stored (int8: dequantised)
    stored = {}
    for name, cache, new in (("k_cache", kc, k), ("v_cache", vc, v)):
        if p["kv_dtype"] == "int8":
            q8, s = quantise_rows(new)
            new = q8.double() * s[..., None]
            q8_all, s_all = p["_q8_cache"][name]
            q8_all, s_all = q8_all.clone(), s_all.clone()
            for b in range(B):
                q8_all[b, :, cl[b]:cl[b] + Sn] = q8[b]
                s_all[b, :, cl[b]:cl[b] + Sn] = s[b]
            stored[name] = (q8_all, s_all)
        for b in range(B):
            cache[b, :, cl[b]:cl[b] + Sn] = new[b]
    os_, nempty = [], 0
    for b in range(B):
        n = int(cl[b]) + Sn
        pb = dict(p, rope="none", _qpos=pos[b], _kpos=torch.arange(n))
        mb = mask[b:b + 1, :n] if mask is not None else None
        ob, e = attend(pb, q[b:b + 1], kc[b:b + 1, :, :n], vc[b:b + 1, :, :n], None, mb, t.get("sinks"))
        os_.append(ob)
        nempty += e
    w = p.setdefault("_write", [])
    if p["kv_dtype"] == "int8":
        for name in ("k_cache", "v_cache"):
            w.append(("expect." + name, "I8", stored[name][0].numpy()))
            w.append(("expect." + name + "_scale", "F32", stored[name][1].numpy()))
    else:
        w.append(("expect.k_cache", "F64", kc.numpy()))
        w.append(("expect.v_cache", "F64", vc.numpy()))
    return torch.cat(os_, 0), nempty


# --------------------------------------------------------------------------
# Implementation 2: numpy loops over the original layout (independent check)
# --------------------------------------------------------------------------

def bcast_index(shape, idx):
    return tuple(0 if s == 1 else i for s, i in zip(shape, idx))


def forward_loops(p, t):
    T = {k: v.numpy() for k, v in t.items()}
    scale, H, G, c = p["scale"], p["H"], p["G"], p["c"]
    Sk = p["Sk"]
    mask, bias = T.get("mask"), T.get("bias")

    def rows(batch_idx, Sq, Q, K, V, out_row):
        """Q: (Sq', H*c); K, V: (Sk, G*c) or (Sk, c) (global); writes out_row(i, h, vec)."""
        bl = None
        if bias is not None:
            nb = bias.ndim - 3
            bl = bias[bcast_index(bias.shape[:nb], batch_idx[:nb])]
        keymask = np.ones(Sk, dtype=bool)
        if mask is not None:
            nm = mask.ndim - 1
            mrow = mask[bcast_index(mask.shape[:nm], batch_idx[len(batch_idx) - nm:])] if nm else mask
            keymask = mrow != 0
        for h in range(H):
            if p.get("global"):
                gidx = 0
                kh, vh = K, V
            else:
                gidx = h // (H // G)
                kh, vh = K[:, gidx * c:(gidx + 1) * c], V[:, gidx * c:(gidx + 1) * c]
            qh = Q[:, h * c:(h + 1) * c]
            for i in range(qh.shape[0]):
                vis = []
                for j in range(Sk):
                    ok = bool(keymask[j])
                    pos = i + Sk - Sq if p["causal"] == "bottom_right" else i
                    if p["causal"] is not None and not j <= pos:
                        ok = False
                    if p["window"] is not None and not (pos - p["window"][0] <= j <= pos + p["window"][1]):
                        ok = False
                    vis.append(ok)
                if not any(vis):
                    if p["empty_rows"] == "zero":
                        o = np.zeros(c)
                    elif p["empty_rows"] == "nan":
                        o = np.full(c, np.nan)
                    else:
                        o = vh.sum(axis=0) / Sk
                    out_row(i, h, o)
                    continue
                logit = np.array([float(np.dot(qh[i], kh[j])) * scale for j in range(Sk)])
                if bl is not None:
                    logit = logit + bl[h, i, :]
                mx = max(logit[j] for j in range(Sk) if vis[j])
                e = np.array([math.exp(logit[j] - mx) if vis[j] else 0.0 for j in range(Sk)])
                wts = e / e.sum()
                out_row(i, h, wts @ vh)

    if p["mode"] == "core":
        q, k, v = T["q"], T["k"], T["v"]
        out = np.zeros(q.shape)
        for bi in np.ndindex(*p["batch"]):
            def put(i, h, o, bi=bi):
                out[bi + (h, i)] = o
            rows(bi, p["Sq"], q[bi].transpose(1, 0, 2).reshape(p["Sq"], H * c),
                 k[bi].transpose(1, 0, 2).reshape(Sk, G * c),
                 v[bi].transpose(1, 0, 2).reshape(Sk, G * c), put)
        return out

    x = T["x"]
    kvin = T["kv"] if p["cross"] else x
    a = p["axis"]
    r = x.ndim
    baxes = [d for d in range(r - 1) if d != a]
    Sq = p["Sq"]
    Sout = 1 if (p["global"] and not p["gated"]) else Sq
    oshape = list(x.shape)
    oshape[a] = Sout
    out = np.zeros(oshape)

    def lin(inp, role):
        y = inp @ T["w" + role].T
        if ("b" + role) in T:
            y = y + T["b" + role]
        return y

    for bi in np.ndindex(*p["batch"]):
        def sel(arr, pos=None):
            idx = [slice(None)] * r
            for d, i in zip(baxes, bi):
                idx[d] = i
            if pos is not None:
                idx[a] = pos
            return arr[tuple(idx)]
        xs, kvs = sel(x), sel(kvin)          # (Sq, c_in), (Sk, c_kv)
        Q, K, V = lin(xs, "q"), lin(kvs, "k"), lin(kvs, "v")
        if p["global"]:
            if p["global_mean"] == "masked" and mask is not None:
                nm = mask.ndim - 1
                mrow = mask[bcast_index(mask.shape[:nm], bi[len(bi) - nm:])] if nm else mask
                keep = [s for s in range(Sq) if mrow[s] != 0]
                Q = (Q[keep].sum(axis=0) / len(keep) if keep else np.zeros(Q.shape[1]))[None, :]
            else:
                Q = Q.mean(axis=0)[None, :]
        O = np.zeros((Q.shape[0], H * c))

        def put(i, h, o):
            O[i, h * c:(h + 1) * c] = o
        rows(bi, Sq, Q, K, V, put)
        if p["gated"]:
            O = (1.0 / (1.0 + np.exp(-lin(xs, "g")))) * O   # broadcasts the global row
        res = lin(O, "o")
        for s in range(Sout):
            idx = [slice(None)] * r
            for d, i in zip(baxes, bi):
                idx[d] = i
            idx[a] = s
            out[tuple(idx)] = res[s]
    return out


# --------------------------------------------------------------------------
# safetensors writer / reader
# --------------------------------------------------------------------------

ST_DTYPES = {"F64": ("<f8", 8), "I64": ("<i8", 8), "F32": ("<f4", 4), "I32": ("<i4", 4), "U8": ("u1", 1),
             "I8": ("i1", 1), "BOOL": ("?", 1), "F16": ("<f2", 2), "BF16": ("<u2", 2)}
# the safetensors dtype of a spec's dtype
ST_OF = {"f32": "F32", "f64": "F64", "bf16": "BF16", "f16": "F16"}
TORCH_OF = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def bf16_bits(arr):
    """float64 values that are exact in bfloat16 -> their 16 bits (numpy has no bfloat16)."""
    u = np.ascontiguousarray(np.asarray(arr, dtype=np.float64).astype("<f4")).view("<u4")
    assert not (u & 0xFFFF).any(), "a value is not exact in bfloat16"
    return (u >> 16).astype("<u2")


def bf16_values(bits):
    return (np.asarray(bits, dtype="<u4") << 16).view("<f4").astype(np.float64)


def write_safetensors(path, tensors, metadata, by_name=True):
    """tensors: list of (name, st_dtype, array).  Wider dtypes first so every
    tensor's data is aligned to its element size (then by name, or in the
    given order with by_name=False); the header is padded with spaces to a
    multiple of 8 bytes.  Returns the file's size.  tools/make_examples.py
    writes its files with this too."""
    key = (lambda e: (-ST_DTYPES[e[1]][1], e[0])) if by_name else (lambda e: -ST_DTYPES[e[1]][1])
    order = sorted(tensors, key=key)
    header = {"__metadata__": metadata}
    blobs = []
    off = 0
    for name, dt, arr in order:
        assert name not in header, name
        arr = np.asarray(arr)
        if dt == "BF16":
            arr = bf16_bits(arr)
        b = np.ascontiguousarray(arr.astype(ST_DTYPES[dt][0])).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return 8 + len(h) + off


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b0, b1 = e["data_offsets"]
        arr = np.frombuffer(data[base + b0:base + b1], dtype=ST_DTYPES[e["dtype"]][0])
        if e["dtype"] == "BF16":
            arr = bf16_values(arr)
        out[name] = (e["dtype"], arr.reshape(e["shape"]))
    return out, header.get("__metadata__", {})


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

def padding_mask(lengths, S, left=False):
    m = torch.zeros(len(lengths), S, dtype=torch.int64)
    for b, n in enumerate(lengths):
        if left:
            m[b, S - n:] = 1
        else:
            m[b, :n] = 1
    return m


CASES = []


def case(name, spec, **kw):
    kw["name"], kw["spec"] = name, spec
    CASES.append(kw)


# ---- AlphaFold-style -----------------------------------------------------
case("af_row_gated_bias",
     "alphafold x=3,5,16 attn_dim=-2 heads=2 head_dim=4 gated bias=3,2,5,5 mask=key",
     names="af", note="MSA row attention: gate, pair bias over the full batch, key mask")
case("af_row_named_dims",
     "alphafold x=S,R,16 attn_dim=-2 heads=2 head_dim=8 gated bias=2,R,R mask=key",
     dims={"S": 3, "R": 7}, names="af",
     note="named dims S,R bound from x; bias (H,R,R) with no leading dims broadcast over S")
case("af_col_global_masked_gated",
     "alphafold x=6,4,16 attn_dim=-3 heads=2 head_dim=4 gated global global_mean=masked mask=key",
     names="af", mask_fn="global_col", expect_empty=True,
     note="extra-MSA global column attention, masked mean; one column fully masked (count 0 -> q 0, empty row -> o 0, out = g*0 -> linear_o bias)")
case("af_global_plain_ungated",
     "alphafold mode=full x=4,7,12 heads=3 head_dim=4 global",
     names="af", note="global, plain mean (default), explicit mode=full, ungated: output has length 1 on the attention axis")
case("af_global_masked_ungated_attn1",
     "alphafold x=3,6,2,8 attn_dim=1 heads=2 head_dim=3 global global_mean=masked mask=key",
     names="af", note="global masked mean, ungated, 4-D with positive attn_dim=1; out (3,1,2,8)")
case("af_global_plain_gated_mask",
     "alphafold x=2,6,8 heads=4 head_dim=2 gated global global_mean=plain mask=key",
     names="af", note="global plain mean (masked queries included) with a key mask, gated: the one row broadcast by the gate")
case("af_attn_m3_4d_short_mask",
     "alphafold x=2,3,6,8 attn_dim=-3 heads=2 head_dim=4 bias=2,2,3,3 mask=key",
     names="af", mask_lead=0,
     note="4-D, attn_dim=-3; bias (2,H,3,3) left-aligned with batch (2,6); mask of shape (Sk,) only")
case("af_5d_attn_m4",
     "alphafold x=2,5,3,4,8 attn_dim=-4 heads=2 head_dim=3 qkv_bias=true gated bias=2,3,2,5,5 mask=key",
     names="af", mask_lead=1,
     note="5-D, attn_dim=-4, batch (2,3,4): bias leading (2,3), mask (4,Sk) right-aligned, qkv_bias=true")
case("af_align_trap",
     "alphafold x=3,3,4,8 attn_dim=-2 heads=2 head_dim=4 bias=3,2,4,4 mask=key",
     names="af", mask_lead=1,
     note="batch (3,3): bias (3,H,4,4) must align LEFT (axis 0), mask (3,4) RIGHT (axis 1)")
case("af_attn0_no_out_bias",
     "alphafold x=6,3,10 attn_dim=0 heads=2 head_dim=5 out_bias=false",
     names="af", note="attn_dim=0 (positive form), out_bias=false (no linear_o.bias)")
case("af_2d_qkv_bias",
     "alphafold x=7,12 heads=3 qkv_bias=true bias=3,7,7 mask=key",
     names="af", note="2-D input (no batch), default head_dim=4, qkv_bias=true, bias and mask without batch dims")
case("af_logits330_f64",
     "alphafold x=2,6,16 heads=2 head_dim=8 gated mask=key dtype=f64",
     names="af", big_logits=330.0,
     note="dtype=f64, q/k weights scaled so the largest visible logit is 330")

# ---- Transformer MHA ----------------------------------------------------
case("mha_plain_inproj",
     "mha x=2,7,16 heads=4",
     names="torch", torch_check=True,
     note="plain self-attention, torch in_proj_weight/in_proj_bias names, checked against nn.MultiheadAttention")
case("mha_causal_pad_inproj",
     "mha x=B,S,16 heads=2 causal mask=key",
     dims={"B": 2, "S": 9}, names="torch", mask_dtype="BOOL", mask_fn=("pad", [9, 6]), torch_check=True,
     note="causal flag + padding (BOOL mask), named dims B,S, torch names, checked against nn.MultiheadAttention")
case("mha_cross_5x30",
     "mha x=2,5,24 kv=2,30,16 heads=4 mask=key",
     names="hf", mask_fn=("pad", [30, 17]), torch_check=True,
     note="cross-attention Sq=5, Sk=30, kv width 16 != 24, padded keys; checked against nn.MultiheadAttention(kdim, vdim)")
case("mha_cross_30x5_bottom_right",
     "mha x=1,30,16 kv=1,5,12 heads=2 causal=bottom_right",
     names="hf", expect_empty=True,
     note="cross Sq=30, Sk=5, bottom_right: queries 0..24 see no key -> zero")
case("mha_cross_5x30_br_window",
     "mha x=2,5,16 kv=2,30,16 heads=2 head_dim=6 causal=bottom_right window=3,3 mask=key",
     names="hf", mask_fn=("pad", [30, 25]), expect_empty=True,
     note="cross 5x30, bottom_right + window 3,3 (keys p-3..p, p=i+25), head_dim 6 != 16/2; batch 1 padded to 25 keys so its last queries see nothing")
case("mha_window_16_0",
     "mha x=1,24,16 heads=2 window=16,0",
     names="hf", note="sliding window 16,0 without causal flag (keys i-16..i)")
case("mha_window_3_3_pad",
     "mha x=2,12,16 heads=2 window=3,3 mask=key",
     names="hf", mask_fn=("pad", [12, 8]), expect_empty=True,
     note="window 3,3 + right padding: batch 1 query 11 sees only padding -> zero")
case("mha_empty_nan",
     "mha x=3,6,8 heads=2 mask=key empty_rows=nan",
     names="af", mask_fn="one_batch_empty", expect_empty=True,
     note="empty_rows=nan: batch 1 fully masked -> its out rows are NaN (AlphaFold names on an mha preset)")
case("af_empty_zero_gated",
     "alphafold x=3,6,8 heads=2 head_dim=4 gated mask=key empty_rows=zero",
     names="af", mask_fn="one_batch_empty", expect_empty=True,
     note="empty_rows=zero explicit, gated: o=0 for batch 1, so out = linear_o.bias there")
case("mha_empty_uniform_leftpad",
     "mha x=2,6,8 heads=2 causal mask=key empty_rows=uniform",
     names="hf", mask_fn=("leftpad", [6, 4]), expect_empty=True,
     note="empty_rows=uniform: left padding + causal, batch 1 queries 0,1 see no key -> weights 1/6 over ALL 6 keys")
case("mha_scale_cross_bias_f64",
     "mha x=2,5,12 kv=2,8,12 heads=3 scale=0.37 bias=2,3,5,8 dtype=f64",
     names="hf", note="scale=0.37, dtype=f64, cross 5x8 with bias (2,H,5,8)")
case("mha_named_symbol",
     "mha x=2,6,16 heads=2 qkv_bias=false name=golden_named_kernel",
     names="hf", note="name=golden_named_kernel, qkv_bias=false on an mha preset")
case("mha_prefix_layer3",
     "mha x=2,5,16 heads=4 causal dtype=f32",
     names="hf", prefix="layers.3.attn.", decoy="layers.2.attn.",
     note="weights under prefix layers.3.attn. next to a decoy layer layers.2.attn.; explicit dtype=f32")

# ---- GQA / MQA -----------------------------------------------------------
case("gqa_8_2_top_left",
     "gqa x=2,6,32 heads=8 kv_heads=2 causal=top_left mask=key",
     names="hf", mask_fn=("pad", [6, 4]),
     note="GQA 8/2 (head h uses kv head h//4), causal=top_left, padding mask")
case("gqa_6_3_head_dim",
     "gqa x=2,5,18 heads=6 kv_heads=3 head_dim=4 qkv_bias=false out_bias=false",
     names="hf", note="GQA 6/3, head_dim 4 != 18/6, no projection biases")
case("gqa_window_2_5_uniform",
     "gqa x=2,10,24 heads=6 kv_heads=3 window=2,5 mask=key empty_rows=uniform",
     names="hf", mask_fn="hole_start", expect_empty=True,
     note="window 2,5; batch 0 keys 0..6 masked so queries 0,1 see nothing -> uniform")
case("mqa_f32_mask",
     "mqa x=2,7,16 heads=4 mask=key",
     names="hf", mask_dtype="F32",
     note="MQA (kv_heads=1 from the preset), mask stored as F32 0/1")

# ---- core -----------------------------------------------------------------
case("core_decode_gqa",
     "mha mode=core q=2,8,1,8 kv=2,2,S,8 causal=bottom_right mask=key",
     dims={"S": 9}, mask_fn=("pad", [9, 5]),
     note="decode step: Sq=1, 8 query heads over 2 KV heads, KV cache of S=9 with padding")
case("core_mqa_decode_f64",
     "mqa mode=core q=2,4,1,8 kv=2,1,11,8 causal=bottom_right dtype=f64",
     note="MQA decode (G=1) in f64")
case("core_br_window_2_5",
     "mha mode=core q=1,4,6,8 kv=1,2,9,8 causal=bottom_right window=2,5",
     note="core GQA 4/2, Sq=6 < Sk=9, bottom_right with window 2,5 (keys p-2..p, p=i+3)")
case("core_4d_bias_top_left",
     "mha mode=core q=2,3,4,5,8 kv=2,3,4,7,8 causal=top_left bias=2,4,5,7 scale=0.37",
     note="core with two batch dims, bias (2,H,5,7) left-aligned, causal top_left with Sq=5 < Sk=7, scale=0.37")
case("core_logits330_f32",
     "mha mode=core q=1,2,4,16 kv=1,2,6,16 dtype=f32",
     dyadic330=True,
     note="f32 logits up to ~330 (exp overflows without max subtraction); q,k integers so logits are exact in f32")

# ---- v2: positions and score modifiers, as the model families write them ----
case("v2_llama_rope",
     "gqa x=2,9,32 heads=4 kv_heads=2 causal rope=neox qkv_bias=false out_bias=false",
     names="hf", note="Llama: Hugging Face's rotate_half RoPE on q and k, GQA, causal")
case("v2_gptj_partial_rope",
     "mha x=2,7,32 heads=2 rope=gptj rope_dim=8 rope_theta=500000 causal",
     names="hf", note="GPT-J: interleaved rotary on the first 8 of 16 features, theta 500000")
case("v2_bloom_alibi6",
     "mha x=2,8,24 heads=6 alibi causal",
     names="hf", note="BLOOM: the ALiBi paper's slopes for 6 heads (not a power of two)")
case("v2_gemma_softcap",
     "gqa x=2,7,32 heads=4 kv_heads=2 softcap=2.0 causal",
     names="hf", note="Gemma 2: tanh(logits / 2) * 2 after the scale")
case("v2_gptoss_sinks_lse",
     "gqa x=2,8,32 heads=4 kv_heads=2 sinks lse causal window=3,0 mask=key",
     names="hf", mask_fn=("pad", [8, 5]), note="gpt-oss: a sink column per head, sliding window, padding; lse beside out")
case("v2_tutorial_pe",
     "mha x=2,9,16 heads=2 pe=sinusoidal mask=key",
     names="hf", mask_fn=("pad", [9, 6]), note="the MHA tutorial seed's SinusoidalPositionalEncoding added to x")
case("v2_core_rope_lse",
     "mha mode=core q=1,4,5,16 kv=1,4,9,16 rope=neox rope_theta=500000 lse causal=bottom_right",
     note="core mode: rotary at positions i + Sk - Sq for the queries, lse")

# ---- v2: explicit positions, a KV cache, layouts, int8 weights --------------
case("v2_llama3_position_ids",
     "gqa x=2,6,32 heads=4 kv_heads=2 rope=neox rope_theta=500000 causal mask=key",
     names="hf", mask_fn=("leftpad", [6, 4]), rope_freqs=True, expect_empty=True,
     q_pos=[[0, 1, 2, 3, 4, 5], [1, 1, 0, 1, 2, 3]], k_pos=[[0, 1, 2, 3, 4, 5], [1, 1, 0, 1, 2, 3]], k_pos_dtype="I32",
     note="Llama 3: rope_freqs (its scaled rotary), Hugging Face's position_ids for left padding (batch-shaped q_pos, k_pos I32)")
case("v2_gptj_far_positions",
     "mha x=1,5,32 heads=2 rope=gptj rope_dim=16 rope_theta=10000",
     names="hf", rope_freqs=True, q_pos=[32763, 32764, 32765, 32766, 32767], k_pos=[32763, 32764, 32765, 32766, 32767],
     note="interleaved rotary at positions 32763..32767 (angles in double precision), with frequency factors")
case("v2_core_bshc_alibi_sinks",
     "mha mode=core layout=bshc q=2,5,10,8 kv=2,7,10,8 alibi=4 sinks lse weights_out causal=bottom_right mask=key",
     mask_fn="one_batch_empty", expect_empty=True,
     q_pos=[3, 5, 7, 9, 11], k_pos=[0, 2, 4, 6, 8, 10, 12],
     note="layout=bshc; ALiBi max_bias 4 over 10 heads (llama.cpp's slopes); sinks, lse and the weights; batch 1 sees no key (all on the sink)")
case("v2_pe_cross_k_pos",
     "mha x=2,5,16 kv=2,7,12 heads=2 pe=sinusoidal",
     names="hf", k_pos=[[0, 1, 2, 3, 4, 5, 6], [4, 5, 6, 7, 8, 9, 10]],
     note="sinusoidal PE in cross-attention: x rows at 0.., kv rows at k_pos (batch-shaped)")
case("v2_cache_rope_window",
     "gqa x=2,3,32 heads=4 kv_heads=2 rope=neox cache=12 window=4,0",
     names="hf", cache_len=[2, 7],
     note="decoding 3 rows into a cache of 12 (HF's static cache, rotated keys), cache_len 2 and 7, window 4,0")
case("v2_cache_int8_alibi_mask",
     "mha x=2,2,24 heads=6 alibi cache=10 kv_dtype=int8 mask=key causal",
     names="hf", cache_len=[0, 5], mask_fn=("pad", [10, 6]),
     note="int8 cache (rows quantised as attnc quantize rounds), ALiBi, an empty cache and a padded one; mask over CAP")
case("v2_int8_weights_causal",
     "mha x=2,9,32 heads=4 weights=int8 causal",
     names="hf", note="weights=int8: I8 projections with per-row F32 scales (NAME_scale); the truth from the dequantised weights")
case("v2_int8_weights_af_gated",
     "alphafold x=3,5,16 heads=2 head_dim=4 gated bias=3,2,5,5 mask=key weights=int8",
     names="af", note="weights=int8 on AlphaFold's gated attention (the gate's weight quantised too)")

# ---- 16-bit storage ----------------------------------------------------------
case("bf16_mha_causal_mask",
     "mha x=2,9,32 heads=4 causal mask=key dtype=bf16",
     names="hf", mask_fn=("pad", [9, 6]),
     note="bf16 tensors (out too), causal with padding")
case("bf16_af_row_gated_bias",
     "alphafold x=3,6,16 attn_dim=-2 heads=2 head_dim=8 gated bias=3,2,6,6 mask=key dtype=bf16",
     names="af", note="bf16 MSA row attention: gate, pair bias, key mask")
case("bf16_gqa",
     "gqa x=2,7,24 heads=6 kv_heads=2 dtype=bf16",
     names="hf", note="bf16 GQA")
case("bf16_core_decode",
     "mha mode=core q=1,8,1,16 kv=1,2,S,16 causal=bottom_right dtype=bf16",
     dims={"S": 13}, note="bf16 decode step over grouped KV heads")
case("f16_mha_window",
     "mha x=2,8,16 heads=2 window=2,1 dtype=f16",
     names="hf", note="f16 tensors, window 2,1")
case("f16_core_bias",
     "mha mode=core q=2,4,6,8 kv=2,4,7,8 bias=2,4,6,7 dtype=f16",
     note="f16 core with a bias")


def case_seed(name):
    return zlib.crc32(name.encode()) & 0x7fffffff


def make_mask(cs, p, gen):
    """0/1 int64 mask of shape (batch[-lead:]..., Sk)."""
    batch, Sk = p["batch"], p["Sk"]
    fn = cs.get("mask_fn")
    lead = cs.get("mask_lead", len(batch))
    mshape = tuple(batch[len(batch) - lead:]) + (Sk,) if lead else (Sk,)
    if isinstance(fn, tuple) and fn[0] in ("pad", "leftpad"):
        assert mshape == (len(fn[1]), Sk)
        return padding_mask(fn[1], Sk, left=fn[0] == "leftpad")
    m = (torch.rand(mshape, generator=gen) < 0.7).long()
    flat = m.view(-1, Sk)
    for r in range(flat.shape[0]):   # every key row keeps at least one key
        if flat[r].sum() == 0:
            flat[r, int(torch.randint(Sk, (1,), generator=gen))] = 1
    if fn == "global_col":
        flat[1] = 0
    elif fn == "one_batch_empty":
        m[1] = 0
    elif fn == "hole_start":
        m[0] = 1
        m[0, :7] = 0
    else:
        assert fn is None, fn
    return m


def linear_init(gen, out_f, in_f, gain=1.0):
    return torch.randn(out_f, in_f, generator=gen) * (gain / math.sqrt(in_f))


def build(cs):
    p = parse_spec(cs["spec"], cs.get("dims", {}))
    gen = torch.Generator().manual_seed(case_seed(cs["name"]))
    t = {}
    if p["mode"] == "core":
        q = torch.randn(p["q"], generator=gen)
        k = torch.randn(p["kvshape"], generator=gen)
        v = torch.randn(p["kvshape"], generator=gen)
        if cs.get("dyadic330"):
            # integers: q entries 6..10, k = base + {-1,0,1}; scale 1/sqrt(16) = 0.25
            q = torch.randint(6, 11, p["q"], generator=gen).double()
            base = torch.randint(9, 12, p["kvshape"][:-2] + (1, p["c"]), generator=gen).double()
            k = base + torch.randint(-1, 2, p["kvshape"], generator=gen).double()
        t.update(q=q * 1.0, k=k * 1.0, v=v)
    else:
        H, G, c, ci, ckv = p["H"], p["G"], p["c"], p["c_in"], p["c_kv"]
        kvw = c if p["global"] else G * c
        t["x"] = torch.randn(p["x"], generator=gen)
        if p["cross"]:
            t["kv"] = torch.randn(p["kvshape"], generator=gen)
        t["wq"] = linear_init(gen, H * c, ci, 1.5)
        t["wk"] = linear_init(gen, kvw, ckv, 1.5)
        t["wv"] = linear_init(gen, kvw, ckv)
        if p["qkv_bias"]:
            t["bq"] = 0.3 * torch.randn(H * c, generator=gen)
            t["bk"] = 0.3 * torch.randn(kvw, generator=gen)
            t["bv"] = 0.3 * torch.randn(kvw, generator=gen)
        t["wo"] = linear_init(gen, ci, H * c)
        if p["out_bias"]:
            t["bo"] = 0.3 * torch.randn(ci, generator=gen)
        if p["gated"]:
            t["wg"] = linear_init(gen, H * c, ci)
            t["bg"] = 0.3 * torch.randn(H * c, generator=gen)
    if p["bias"] is not None:
        t["bias"] = torch.randn(p["bias"], generator=gen)
    if p["sinks"]:
        t["sinks"] = torch.randn(p["H"], generator=gen)
    if p["mask"]:
        t["mask"] = make_mask(cs, p, gen)
    # round to the case's dtype first; the truth is computed from the rounded values
    if p["dtype"] != "f64":
        for key in t:
            if key != "mask":
                t[key] = t[key].to(TORCH_OF[p["dtype"]]).double()
    if cs.get("big_logits"):
        scale_to_logit(p, t, cs["big_logits"])
    build_v2_inputs(cs, p, t, gen)
    return p, t, gen


def llama3_freq_factors(r, theta, factor=8.0, low=1.0, high=4.0, old_ctx=8192):
    """Llama 3's rotary scaling as frequency factors f[d] (inv_freq / f), the
    form llama.cpp stores as rope_freqs: long wavelengths divided by factor,
    short ones kept, a smooth blend between."""
    inv = 1.0 / (theta ** (np.arange(0, r, 2, dtype=np.float64) / r))
    f = []
    for w in 2 * math.pi / inv:
        if w < old_ctx / high:
            f.append(1.0)
        elif w > old_ctx / low:
            f.append(factor)
        else:
            sm = (old_ctx / w - low) / (high - low)
            f.append(1.0 / ((1 - sm) / factor + sm))
    return f


def build_v2_inputs(cs, p, t, gen):
    """Inputs held outside t (which is weights and the v1 inputs): positions,
    frequency factors, caches; int8 weights.  Each goes to p["_write"] as
    stored, and to p["_..."] for the forward."""
    w = p.setdefault("_write", [])
    for key, dt_key in (("q_pos", "q_pos_dtype"), ("k_pos", "k_pos_dtype")):
        if cs.get(key) is not None:
            pos = torch.tensor(cs[key], dtype=torch.int64)
            p["_" + key.replace("_", "")] = pos
            w.append((key, cs.get(dt_key, "I64"), pos.numpy()))
    if cs.get("rope_freqs"):
        f = torch.tensor(llama3_freq_factors((p["rope_dim"] or p["c"]), p["rope_theta"]))
        f = f.to(torch.float32).double()
        assert (f > 1).any() and (f == 1).any() and ((f > 1) & (f < 8)).any(), f  # all three regimes
        p["_rope_freqs"] = f
        w.append(("rope_freqs", "F32", f.numpy()))
    if p["cache"] is not None:
        B, G, c = p["x"][0], p["G"], p["c"]
        assert len(p["x"]) == 3 and p["attn_dim"] == -2 and not p["cross"]
        cl = torch.tensor(cs["cache_len"], dtype=torch.int64)
        assert cl.shape == (B,) and int((cl + p["Sq"]).max()) <= p["cache"]
        p["_cache_len"] = cl
        w.append(("cache_len", "I64", cl.numpy()))
        shape = (B, G, p["cache"], c)
        p["_q8_cache"] = {}
        for name in ("k_cache", "v_cache"):
            if p["kv_dtype"] == "int8":
                q8 = torch.randint(-127, 128, shape, generator=gen)
                sc = (0.02 + 0.02 * torch.rand(shape[:-1], generator=gen)).to(torch.float32).double()
                p["_q8_cache"][name] = (q8, sc)
                p["_" + name] = q8.double() * sc[..., None]
                w.append((name, "I8", q8.numpy()))
                w.append((name + "_scale", "F32", sc.numpy()))
            else:
                vals = torch.randn(shape, generator=gen)
                if p["kv_dtype"] != "f64":
                    vals = vals.to(TORCH_OF[p["kv_dtype"]]).double()
                p["_" + name] = vals
                w.append((name, ST_OF[p["kv_dtype"]], vals.numpy()))
    if p["weights"] == "int8":  # each projection matrix quantised per row; the truth from the dequantised values
        p["_q8"] = {}
        for role in ("wq", "wk", "wv", "wo", "wg"):
            if role in t:
                q8, sc = quantise_rows(t[role])
                p["_q8"][role] = (q8, sc)
                t[role] = q8.double() * sc[:, None]


def raw_logits(p, t):
    """Largest logit q.k*scale (before bias) over keys each row may see."""
    H, G, c = p["H"], p["G"], p["c"]
    x = t["x"].movedim(p["attn_dim"], -2)
    q = (x @ t["wq"].T).view(x.shape[:-1] + (H, c)).transpose(-2, -3)
    k = (x @ t["wk"].T).view(x.shape[:-1] + (G, c)).transpose(-2, -3)
    k = k.repeat_interleave(H // G, dim=-3)
    a = torch.einsum('...qc,...kc->...qk', q * p["scale"], k)
    vis = visibility(p, a.shape[-2], a.shape[-1])
    if "mask" in t:
        vis = vis & (t["mask"] != 0)[..., None, None, :]
    return a.masked_fill(~vis.expand(a.shape), float("-inf")).max()


def scale_to_logit(p, t, target):
    assert p["mode"] == "full" and not p["qkv_bias"] and p["dtype"] == "f64"
    f = math.sqrt(target / float(raw_logits(p, t)))
    t["wq"] = t["wq"] * f
    t["wk"] = t["wk"] * f
    got = float(raw_logits(p, t))
    assert abs(got - target) < 1e-9, got


WEIGHT_NAMES = {
    "af": {"wq": "linear_q.weight", "bq": "linear_q.bias", "wk": "linear_k.weight", "bk": "linear_k.bias",
           "wv": "linear_v.weight", "bv": "linear_v.bias", "wo": "linear_o.weight", "bo": "linear_o.bias",
           "wg": "linear_g.weight", "bg": "linear_g.bias"},
    "hf": {"wq": "q_proj.weight", "bq": "q_proj.bias", "wk": "k_proj.weight", "bk": "k_proj.bias",
           "wv": "v_proj.weight", "bv": "v_proj.bias", "wo": "o_proj.weight", "bo": "o_proj.bias"},
}
INPUTS = ("x", "kv", "bias", "mask", "q", "k", "v", "sinks")


def named_weights(cs, p, t):
    scheme = cs.get("names")
    ws = {k: v for k, v in t.items() if k not in INPUTS}
    if not ws:
        return {}
    if scheme == "torch":
        assert p["G"] == p["H"] and not p["gated"] and not p["global"] and p["c_kv"] == p["c_in"]
        out = {"in_proj_weight": torch.cat([ws["wq"], ws["wk"], ws["wv"]], 0),
               "out_proj.weight": ws["wo"]}
        if "bq" in ws:
            out["in_proj_bias"] = torch.cat([ws["bq"], ws["bk"], ws["bv"]], 0)
        if "bo" in ws:
            out["out_proj.bias"] = ws["bo"]
        return out
    return {WEIGHT_NAMES[scheme][k]: v for k, v in ws.items()}


def torch_mha_check(p, t):
    """Check against torch.nn.MultiheadAttention (batch_first, float64)."""
    assert p["mode"] == "full" and p["G"] == p["H"] and p["c"] * p["H"] == p["c_in"]
    E, H = p["c_in"], p["H"]
    kdim = p["c_kv"]
    m = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True, kdim=kdim, vdim=kdim,
                                    dtype=torch.float64)
    m.eval()
    with torch.no_grad():
        if m._qkv_same_embed_dim:
            m.in_proj_weight.copy_(torch.cat([t["wq"], t["wk"], t["wv"]], 0))
        else:
            m.q_proj_weight.copy_(t["wq"])
            m.k_proj_weight.copy_(t["wk"])
            m.v_proj_weight.copy_(t["wv"])
        m.in_proj_bias.copy_(torch.cat([t["bq"], t["bk"], t["bv"]], 0))
        m.out_proj.weight.copy_(t["wo"])
        m.out_proj.bias.copy_(t["bo"])
        x = t["x"]
        kv = t["kv"] if p["cross"] else x
        kpm = (t["mask"] == 0) if "mask" in t else None
        am = None
        if p["causal"] or p["window"]:
            am = ~visibility(p, p["Sq"], p["Sk"])
        ref, _ = m(x, kv, kv, key_padding_mask=kpm, attn_mask=am, need_weights=False)
    ours, _ = forward_torch(p, t)
    err = float((ref - ours).abs().max())
    assert err < 1e-12, err
    return err


def sdpa_check():
    """F.scaled_dot_product_attention, if this torch has it (1.13 does not)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return "absent"
    p = parse_spec("mha mode=core q=2,4,5,8 kv=2,4,7,8", {})
    g = torch.Generator().manual_seed(7)
    t = {k: torch.randn(s, generator=g) for k, s in (("q", p["q"]), ("k", p["kvshape"]), ("v", p["kvshape"]))}
    ref = F.scaled_dot_product_attention(t["q"], t["k"], t["v"])
    ours, _ = forward_torch(p, t)
    err = float((ref - ours).abs().max())
    assert err < 1e-12, err
    return "%.1e" % err


def same_with_nan(a, b, tol):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    na, nb = np.isnan(a), np.isnan(b)
    assert (na == nb).all(), "NaN positions differ"
    if (~na).any():
        d = np.abs(a[~na] - b[~na]).max()
        assert d <= tol * max(1.0, np.abs(b[~na]).max()), d
        return d
    return 0.0


def output_shape(p):
    if p["mode"] == "core":
        return p["q"]
    s = list(p["x"])
    if p["global"] and not p["gated"]:
        s[p["axis"]] = 1
    return tuple(s)


# --------------------------------------------------------------------------
# Training: Philox dropout, gradients by autograd
# --------------------------------------------------------------------------

M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(ctr, key):
    """Philox4x32-10 (Salmon et al., SC'11) on numpy arrays: ctr a tuple of
    four uint32 arrays, key a tuple of two; returns the four output words.
    Products in uint64, every 32-bit sum masked."""
    c = [np.asarray(w, dtype=np.uint64) for w in ctr]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for rnd in range(10):
        if rnd:
            k0 = (k0 + np.uint64(0x9E3779B9)) & M32
            k1 = (k1 + np.uint64(0xBB67AE85)) & M32
        p0 = c[0] * np.uint64(0xD2511F53)     # < 2^64: no wrap
        p1 = c[2] * np.uint64(0xCD9E8D57)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & M32,
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & M32]
    return [w.astype(np.uint32) for w in c]


def philox_known_answers():
    """DESIGN.md's two known answers (Random123's kat_vectors)."""
    z = np.zeros(1, dtype=np.uint64)
    got = [int(w[0]) for w in philox4x32_10((z, z, z, z), (0, 0))]
    assert got == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8], [hex(w) for w in got]
    ctr = tuple(np.array([w], dtype=np.uint64) for w in (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344))
    got = [int(w[0]) for w in philox4x32_10(ctr, (0xa4093822, 0x299f31d0))]
    assert got == [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1], [hex(w) for w in got]


def keep_mask(p, seed):
    """DESIGN.md's dropout: keep(b, h, i, j) iff word[j mod 4] >= floor(p 2^32),
    word = Philox4x32-10 of the counter (j // 4, i, h, b) under the key
    (seed mod 2^32, seed // 2^32); b the batch index flattened row-major, i
    the logit row (0 for global), j the key.  Bool (batch..., H, Sl, Sk)."""
    nb = int(np.prod(p["batch"])) if p["batch"] else 1
    Sl = 1 if p.get("global") else p["Sq"]
    b, h, i, j = np.meshgrid(np.arange(nb), np.arange(p["H"]), np.arange(Sl), np.arange(p["Sk"]), indexing="ij")
    words = philox4x32_10((j // 4, i, h, b), (seed & 0xFFFFFFFF, seed >> 32))
    word = np.choose(j % 4, words)
    keep = word.astype(np.uint64) >= np.uint64(math.floor(p["dropout"] * 2.0 ** 32))
    return keep.reshape(tuple(p["batch"]) + (p["H"], Sl, p["Sk"]))


def loss_of(p, t, dout):
    out, _ = forward_torch(p, t)
    return (out * dout).sum()


def directional_check(p, t, dout, grads):
    """sum(grad . u) against the fourth-order finite difference of L along a
    random direction u over every leaf: the autograd gradients, checked once
    more.  Returns the relative difference."""
    g = torch.Generator().manual_seed(12345)
    u = {k: torch.randn(v.shape, generator=g) for k, v in grads.items()}
    want = sum(float((grads[k] * u[k]).sum()) for k in grads)
    h = 1e-4
    with torch.no_grad():
        ls = []
        for s in (-2, -1, 1, 2):
            ts = dict(t)
            for k in grads:
                ts[k] = t[k].detach() + s * h * u[k]
            ls.append(float(loss_of(p, ts, dout)))
    fd = (8 * (ls[2] - ls[1]) - (ls[3] - ls[0])) / (12 * h)
    rel = abs(fd - want) / max(abs(want), 1e-300)
    assert rel < 1e-7, (fd, want, rel)
    return rel


def torch_mha_grad_check(p, t, dout, grads):
    """torch.nn.MultiheadAttention's own autograd (in_proj_weight stacked,
    key_padding_mask, a causal attn_mask) against ours."""
    E, H = p["c_in"], p["H"]
    m = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([t["wq"], t["wk"], t["wv"]], 0))
        m.in_proj_bias.copy_(torch.cat([t["bq"], t["bk"], t["bv"]], 0))
        m.out_proj.weight.copy_(t["wo"])
        m.out_proj.bias.copy_(t["bo"])
    x = t["x"].detach().clone().requires_grad_(True)
    kpm = (t["mask"] == 0) if "mask" in t else None
    am = ~visibility(p, p["Sq"], p["Sk"]) if (p["causal"] or p["window"]) else None
    ref, _ = m(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=False)
    (ref * dout).sum().backward()
    pairs = [(x.grad, grads["x"]), (m.in_proj_weight.grad, torch.cat([grads["wq"], grads["wk"], grads["wv"]], 0)),
             (m.in_proj_bias.grad, torch.cat([grads["bq"], grads["bk"], grads["bv"]], 0)),
             (m.out_proj.weight.grad, grads["wo"]), (m.out_proj.bias.grad, grads["bo"])]
    err = max(float((a - b).abs().max()) for a, b in pairs)
    assert err < 1e-12, err
    return err


TRAIN_CASES = []


def train_case(name, spec, seed=0, **kw):
    kw["name"], kw["spec"], kw["seed"] = name, spec, seed
    TRAIN_CASES.append(kw)


# Written the way the model families write them: AlphaFold's gated
# attention with a pair bias shared by a batch axis, the Transformer's
# causal MHA with padding (torch's stacked in_proj names), Llama's GQA with
# rotate_half, Gemma's softcap, gpt-oss's sinks, BLOOM's ALiBi, global
# attention, core mode; dropout in several, one with the weights out.
train_case("train_af_gated_pair_bias",
           "alphafold x=2,3,5,16 attn_dim=-2 heads=2 head_dim=4 gated bias=2,2,5,5 mask=key train dropout=0.1 dtype=f64",
           seed=7, names="af",
           note="MSA row attention: gate, pair bias (2,H,5,5) broadcast over the batch axis of 3 (its gradient summed), key mask, dropout over two batch axes")
train_case("train_mha_causal_pad_inproj",
           "mha x=2,6,16 heads=2 causal mask=key train dtype=f64",
           names="torch", mask_fn=("pad", [6, 4]), torch_grad_check=True,
           note="causal + padding, in_proj_weight/in_proj_bias: gradients checked against nn.MultiheadAttention's autograd")
train_case("train_gqa_rope_neox",
           "gqa x=2,7,32 heads=4 kv_heads=2 rope=neox causal train dtype=f64",
           names="hf", note="Llama: rotate_half RoPE, GQA 4/2, causal")
train_case("train_gemma_softcap",
           "gqa x=2,6,32 heads=4 kv_heads=2 softcap=2.0 causal train dtype=f64",
           names="hf", note="Gemma 2: tanh(logits / 2) * 2")
train_case("train_gptoss_sinks",
           "gqa x=2,6,32 heads=4 kv_heads=2 sinks causal window=2,0 mask=key train dtype=f64",
           names="hf", mask_fn=("pad", [6, 4]), note="gpt-oss: sink logits (with a gradient), sliding window, padding")
train_case("train_bloom_alibi",
           "mha x=2,7,24 heads=6 alibi causal train dtype=f64",
           names="hf", note="BLOOM: ALiBi slopes for 6 heads")
train_case("train_af_global",
           "alphafold x=5,4,12 attn_dim=-3 heads=3 head_dim=4 gated global global_mean=masked mask=key train dropout=0.2 dtype=f64",
           seed=3, names="af", note="extra-MSA global column attention, masked mean, gated; dropout on the one averaged query row")
train_case("train_core_bhsc_bias",
           "mha mode=core q=2,4,5,8 kv=2,2,7,8 causal=bottom_right bias=4,5,7 train dtype=f64",
           note="core (B,H,S,c) GQA 4/2, bottom_right, a bias (H,5,7) broadcast over the batch (its gradient summed)")
train_case("train_dropout_weights",
           "mha x=2,6,16 heads=2 train dropout=0.3 weights_out dtype=f64",
           seed=0x123456789ABCDEF0, names="hf", keep_bits=True,
           note="dropout 0.3 with a seed above 2^32, every key visible: the weights out (before dropout) and the keep bits")
train_case("train_dropout_empty_uniform",
           "mha x=2,6,16 heads=2 causal mask=key empty_rows=uniform train dropout=0.25 dtype=f64",
           seed=11, names="hf", mask_fn=("leftpad", [6, 4]), expect_empty=True,
           note="left padding + causal: rows that see no key keep empty_rows=uniform's 1/Sk, undropped")
train_case("train_mha_f32",
           "mha x=2,5,16 heads=2 causal train dropout=0.2",
           seed=5, names="hf", note="f32 tensors (the truth from the rounded values)")
train_case("train_llama_bf16",
           "gqa x=2,7,32 heads=4 kv_heads=2 rope=neox causal mask=key train dtype=bf16",
           names="hf", mask_fn=("pad", [7, 5]),
           note="Llama trained in bf16: GQA 4/2, rotate_half RoPE, causal + padding; the truth from the bf16 values (gradients stored bf16)")
train_case("train_af_gated_f16",
           "alphafold x=2,3,5,16 attn_dim=-2 heads=2 head_dim=4 gated bias=2,2,5,5 mask=key train dropout=0.1 dtype=f16",
           seed=9, names="af",
           note="AlphaFold's gated row attention in f16: pair bias summed over the batch axis, key mask, dropout")

TRAIN_INDEX_HEADER = """# Training cases of tools/make_golden.py: NAME <TAB> SEED <TAB> SPEC.
# NAME.safetensors holds the weights and inputs, dout, out, grad.NAME for
# every differentiable tensor (F64), attn with weights_out and keep (U8)
# where asked; SEED is the dropout seed (decimal, 64-bit).
"""


def make_train():
    """Write every training case; returns (index lines, summary rows, bytes)."""
    philox_known_answers()
    lines, summary, total = [], [], 0
    for cs in TRAIN_CASES:
        p, t, gen = build(cs)
        assert p["train"]
        if p["dropout"]:
            p["_keep"] = torch.from_numpy(keep_mask(p, cs["seed"]))
        leaves = {k: v.clone().requires_grad_(True) for k, v in t.items() if k != "mask"}
        tl = dict(t)
        tl.update(leaves)
        out, nempty = forward_torch(p, tl)
        assert (nempty > 0) == bool(cs.get("expect_empty")), (cs["name"], nempty)
        dout = torch.randn(out.shape, generator=gen)
        if p["dtype"] != "f64":
            dout = dout.to(TORCH_OF[p["dtype"]]).double()
        (out * dout).sum().backward()
        grads = {k: v.grad.detach() for k, v in leaves.items()}
        out = out.detach()
        attn = p["_attn"].detach()
        assert set(grads) == set(leaves) and all(torch.isfinite(g).all() for g in grads.values())
        rel = directional_check(p, tl, dout, grads)
        if not p["v2"] and not p["dropout"]:
            same_with_nan(out.numpy(), forward_loops(p, {k: v.detach() for k, v in tl.items()}), 1e-12)
        if cs.get("torch_grad_check"):
            torch_mha_grad_check(p, {k: v.detach() for k, v in tl.items()}, dout, grads)
        for k in ("bias",):   # a broadcast bias's gradient has the bias's shape
            if k in grads:
                assert grads[k].shape == t[k].shape
        st_dt = ST_OF[p["dtype"]]
        tensors = []
        for k, v in named_weights(cs, p, t).items():
            tensors.append((k, st_dt, v.numpy()))
        for k, v in named_weights(cs, p, grads).items():
            tensors.append(("grad." + k, "F64", v.numpy()))
        for k in INPUTS:
            if k in t and k != "mask":
                tensors.append((k, st_dt, t[k].numpy()))
                tensors.append(("grad." + k, "F64", grads[k].numpy()))
        if "mask" in t:
            tensors.append(("mask", "U8", t["mask"].numpy()))
        tensors.append(("dout", st_dt, dout.numpy()))
        tensors.append(("out", "F64", out.numpy()))
        if p["weights_out"]:
            tensors.append(("attn", "F64", attn.numpy()))
        if cs.get("keep_bits"):
            tensors.append(("keep", "U8", p["_keep"].numpy().astype(np.uint8)))
            assert p["weights_out"] and "mask" not in t and not p["causal"]
            # every key is visible: every weight out (before dropout) is above 0,
            # and out shows the dropped ones
            assert (attn.numpy() > 0).all()
        path = os.path.join(OUT_DIR, cs["name"] + ".safetensors")
        meta = {"format": "pt", "attnc_spec": cs["spec"], "attnc_seed": str(cs["seed"])}
        write_safetensors(path, tensors, meta)
        back, meta_back = read_safetensors(path)
        assert meta_back == meta and set(back) == {n for n, _, _ in tensors}
        for n, dt, arr in tensors:
            same_with_nan(back[n][1].astype(np.float64), np.asarray(arr, dtype=np.float64), 0.0)
        size = os.path.getsize(path)
        assert size < 100 * 1024, (cs["name"], size)
        total += size
        lines.append("%s\t%d\t%s" % (cs["name"], cs["seed"], cs["spec"]))
        kept = float(p["_keep"].double().mean()) if p["dropout"] else float("nan")
        summary.append((cs["name"], size, nempty, rel, "kept %.3f; %s" % (kept, cs.get("note", ""))))
    return lines, summary, total


README = """# Golden data for attnc

Generated by `tools/make_golden.py` (run `/usr/bin/python3 tools/make_golden.py`
from the repository root; fixed seeds: the inputs come out bit for bit the
same, the float64 outputs to within a unit in the last place, as
PyTorch's threaded kernels may sum in another order).  Do not edit by hand.

`cases.txt` has one line per case: `NAME<TAB>PREFIX<TAB>SPEC`, PREFIX being
`-` for none.  `NAME.safetensors` holds:

* the weights, under one of the three naming schemes of DESIGN.md
  (AlphaFold `linear_q.weight`..., Hugging Face `q_proj.weight`..., torch
  `in_proj_weight`/`in_proj_bias`/`out_proj.*`), in the case's dtype;
  with a PREFIX, weight names carry it (and a decoy layer is present);
  inputs and `out` never carry a prefix;
* the inputs `x`, `kv` (cross), `bias`, `mask`, or `q`, `k`, `v` (core), in
  the case's dtype except `mask` (U8 in most cases, BOOL in one, F32 in one;
  values 0/1, nonzero keeps the key; a mask may have fewer leading dims than
  the batch and is then right-aligned);
* `out`: the expected output, always F64 (the float64 truth computed from the
  stored, already rounded inputs).  NaN where `empty_rows=nan`.
* v2 inputs where a case has them: `q_pos`, `k_pos` (I64, or I32 in one
  case; (S) or batch-shaped like Hugging Face's position_ids),
  `rope_freqs` (F32, Llama 3's scaling as frequency factors), `cache_len`
  (I64), `k_cache`, `v_cache` (the case's kv_dtype; with kv_dtype=int8, I8
  with F32 `k_cache_scale`, `v_cache_scale`); with weights=int8 each
  projection matrix is I8 with its F32 per-row scale NAME + `_scale`, and
  the truth is computed from the dequantised values; with layout=bshc
  the core q, k, v and `out` are stored (B, S, H, c);
* `expect.k_cache`, `expect.v_cache` (and `expect.*_scale`): the caches as
  the run must leave them (the new rows written at cache_len + i, the
  others unchanged), F64 for a float cache, I8 and F32 for an int8 one;
* `attn` (cases with weights_out): the probabilities, F64;
* `lse` (cases with the key lse): PyTorch's logsumexp of each row's final
  logits (its sink column included), F64, (batch axes..., H, Sq).
* `out_torch` (bf16 cases): PyTorch's own result with every tensor in
  bfloat16 (its CPU ops round q, k, v, P and o to bf16), as F64, so that a
  test can show attnc's error beside PyTorch's.  f16 cases have none:
  PyTorch 1.13's CPU kernels do not implement matmul or softmax in Half.
* `__metadata__`: `format`, `attnc_spec`, `attnc_prefix`.

`train.txt` lists the training cases: `NAME<TAB>SEED<TAB>SPEC` (lines
starting with `#` are comments), SEED the dropout seed in decimal.  Their
`NAME.safetensors` hold the weights and inputs as above (no prefix), and:

* `dout`: the gradient of `out` the backward pass is given, in the case's
  dtype; `out`: F64, the float64 truth (dropout included);
* `grad.NAME` for every tensor that has a gradient (x, kv, bias, q, k, v,
  sinks, each weight and projection bias), NAME as stored (in_proj_weight
  whole), F64, from PyTorch's autograd in float64 of L = sum(out * dout);
  a broadcast bias's gradient has the bias's shape (summed over the axes
  it was broadcast along);
* `attn` (weights_out): the probabilities before dropout (DESIGN.md), F64;
* `keep` (one case): U8 (batch..., H, Sq, Sk), 1 where dropout keeps the
  key, from the script's own numpy Philox4x32-10 (checked against
  DESIGN.md's known answers);
* `__metadata__`: `format`, `attnc_spec`, `attnc_seed`.

Each training case's gradients are also checked in the script against a
fourth-order finite difference of L along a random direction, and one
case's against torch.nn.MultiheadAttention's own autograd.  Compare f64
kernels to about 1e-9 of each gradient's scale, f32 ones to about 1e-4.

Named dims in a SPEC (`x=B,S,16`) are bound from the stored inputs' shapes.
Compare f32 kernels against `out` to about 1e-5 relative (relative to the
largest |out|), f64 kernels to about 1e-12, bf16 and f16 ones with
DESIGN.md's bounds (NMSE 1e-4 and 1e-5); NaN positions must match.
"""


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for f in os.listdir(OUT_DIR):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(OUT_DIR, f))
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names)
    for n in (1, 2, 6, 8, 12, 16):  # llama.cpp's slopes at max_bias 8 are the paper's (BLOOM's)
        assert np.allclose(alibi_slopes_max_bias(n, 8.0), alibi_slopes(n), rtol=1e-15, atol=0), n
    lines = []
    total = 0
    summary = []
    mask_dtypes = set()
    torch_checks = 0
    for cs in CASES:
        p, t, gen = build(cs)
        out, nempty = forward_torch(p, t)
        assert tuple(out.shape) == output_shape(p), (out.shape, output_shape(p))
        if p["v2"]:  # v2 keys: the family-style torch code alone here; test_golden holds attnc's reference to it too
            d = float("nan")
        else:
            loops = forward_loops(p, t)
            d = same_with_nan(out.numpy(), loops, 1e-12)
        assert (nempty > 0) == bool(cs.get("expect_empty")), (cs["name"], nempty)
        if cs.get("torch_check"):
            torch_mha_check(p, t)
            torch_checks += 1
        if cs.get("dyadic330"):
            a = torch.einsum('...qc,...kc->...qk', t["q"] * p["scale"], t["k"].repeat_interleave(p["H"] // p["G"], -3))
            rowmax = a.max(dim=-1).values
            assert 300 <= float(rowmax.max()) <= 350 and float(rowmax.min()) > 200, rowmax
            assert torch.equal(a, a.float().double())   # exact in f32
        st_dt = ST_OF[p["dtype"]]
        prefix = cs.get("prefix", "")
        tensors = []
        q8_of = {WEIGHT_NAMES[cs["names"]][r]: qs for r, qs in p.get("_q8", {}).items()} if p["weights"] == "int8" else {}
        for k, v in named_weights(cs, p, t).items():
            if k in q8_of:  # weights=int8: I8 values and the F32 per-row scale NAME_scale
                tensors.append((prefix + k, "I8", q8_of[k][0].numpy()))
                tensors.append((prefix + k + "_scale", "F32", q8_of[k][1].numpy()))
            else:
                tensors.append((prefix + k, st_dt, v.numpy()))
        if cs.get("decoy"):
            # another layer with the same names and different values
            for k, v in named_weights(cs, p, t).items():
                dv = (torch.randn(v.shape, generator=gen) * float(v.std())).numpy()
                tensors.append((cs["decoy"] + k, st_dt, dv))
        bshc = p["layout"] == "bshc"  # core q, k, v and out stored (B, S, H, c)
        for k in INPUTS:
            if k in t and k != "mask":
                tensors.append((k, st_dt, (t[k].transpose(-3, -2) if bshc and k in ("q", "k", "v") else t[k]).numpy()))
        tensors.extend(p.get("_write", []))
        if "mask" in t:
            md = cs.get("mask_dtype", "U8")
            mask_dtypes.add(md)
            tensors.append(("mask", md, t["mask"].numpy() != 0 if md == "BOOL" else t["mask"].numpy()))
        tensors.append(("out", "F64", (out.transpose(-3, -2) if bshc else out).numpy()))
        if p["lse"]:
            tensors.append(("lse", "F64", p["_lse"].numpy()))
        if p["weights_out"]:
            assert p["cache"] is None
            tensors.append(("attn", "F64", p["_attn"].numpy()))
        if p["dtype"] == "bf16":
            # PyTorch's own bf16 result on the same tensors (its CPU ops in
            # bf16 round q, k, v, the weights P and o), beside the truth
            tb = {k: (v if k == "mask" else v.to(torch.bfloat16)) for k, v in t.items()}
            ot, _ = forward_torch(p, tb)
            tensors.append(("out_torch", "F64", ot.double().numpy()))
            nm = float(((ot.double() - out) ** 2).nansum() / (out ** 2).nansum())
            cs["note"] = cs.get("note", "") + "; PyTorch bf16 NMSE %.2e" % nm
        path = os.path.join(OUT_DIR, cs["name"] + ".safetensors")
        meta = {"format": "pt", "attnc_spec": cs["spec"], "attnc_prefix": prefix}
        write_safetensors(path, tensors, meta)
        # read back and verify
        back, meta_back = read_safetensors(path)
        assert meta_back == meta
        assert set(back) == {n for n, _, _ in tensors}
        for n, dt, arr in tensors:
            bdt, barr = back[n]
            assert bdt == dt
            want = (np.asarray(arr, dtype=np.float64) if dt == "BF16"
                    else np.asarray(arr).astype(ST_DTYPES[dt][0]).astype(np.float64))
            same_with_nan(barr.astype(np.float64), want, 0.0)
            if dt != "BOOL":   # stored values are exactly the ones the truth used
                assert n.startswith(cs.get("decoy") or "\0") or np.array_equal(
                    want, np.asarray(arr, dtype=np.float64), equal_nan=True), n
        size = os.path.getsize(path)
        assert size < 40 * 1024, (cs["name"], size)
        total += size
        lines.append("%s\t%s\t%s" % (cs["name"], prefix or "-", cs["spec"]))
        summary.append((cs["name"], size, nempty, d, cs.get("note", "")))
    assert total < 600 * 1024, total
    assert mask_dtypes == {"U8", "BOOL", "F32"}
    with open(os.path.join(OUT_DIR, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    train_lines, train_summary, train_total = make_train()
    assert train_total < 1024 * 1024, train_total
    with open(os.path.join(OUT_DIR, "train.txt"), "w") as f:
        f.write(TRAIN_INDEX_HEADER + "\n".join(train_lines) + "\n")
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write(README)
    for name, size, nempty, d, note in summary:
        print("%-32s %6d B  empty rows %3d  loop diff %.1e  %s" % (name, size, nempty, d, note))
    print("%d cases, %d bytes; %d checked against nn.MultiheadAttention; sdpa: %s"
          % (len(CASES), total, torch_checks, sdpa_check()))
    for name, size, nempty, rel, note in train_summary:
        print("%-32s %6d B  empty rows %3d  directional check %.1e  %s" % (name, size, nempty, rel, note))
    print("%d training cases, %d bytes; Philox known answers OK" % (len(TRAIN_CASES), train_total))


if __name__ == "__main__":
    main()
