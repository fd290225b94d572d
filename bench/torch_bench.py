#!/usr/bin/python3
# torch_bench.py: the PyTorch peer of attnc's benchmark suite (issue 3).
#
#     /usr/bin/python3 bench/torch_bench.py --threads N [--cases full_A,core_B]
#                                           [--budget-ms MS] [--verbose]
#
# Debian's python3-torch.  For each case of bench/cases.json it builds what
# the issue names, with random weights and inputs (seeded), in eval mode
# under torch.inference_mode():
#
#   full A-C     nn.MultiheadAttention(batch_first=True), self-attention,
#                need_weights=False; full C passes a bool causal attn_mask
#   core A-C     matmul -> softmax -> matmul (q is scaled first, as the
#                worksheet does; core C fills the masked logits with -inf)
#   decode D     the same on a grouped view: q (1,32,1,128) as (1,8,4,128)
#                against k, v (1,8,4096,128)
#   AlphaFold E  the seed worksheet's MultiHeadAttention forward (linear
#                q/k/v without bias, pair bias, sigmoid gate, linear_o)
#   cache        one decode step of a Hugging Face-style layer (issue 28):
#                q/k/v/o_proj nn.Linear, the new k, v written in place into
#                preallocated caches at cache_len, scaled_dot_product_attention
#                (torch 1.13: F._scaled_dot_product_attention) over the filled
#                part with GQA by repeat_interleave or by a grouped view, and
#                matmul-softmax-matmul on the grouped view; the fastest
#                counts.  Each is first checked at a tiny size against
#                `attnc run` (--attnc) on the same weights, input and caches:
#                output and both caches after the step.
#   train        ("kind": "train") forward and backward of the layer its
#                "layer" names (core, full, alphafold: the builders above,
#                float32), in train mode under autograd: out = layer(...),
#                out.backward(dout), the gradients of the inputs (q, k, v;
#                x; x and the pair bias) and of every weight and bias, as
#                `attnc grad` computes them.  Before timing, the same code
#                at a tiny size is checked against `attnc grad` (--attnc)
#                on the same tensors and dout: out and every gradient.
#                The line adds forward_ms and backward_ms, the medians of
#                each half of the timed pairs.
#
# Cases with a "base" (the 16- and 8-bit rows of issue 26) take their shapes
# from the base case and build the peer their "pytorch" field names:
#   bf16         the same model as the base case's, module and tensors in
#                torch.bfloat16 (the inputs are the f32 draws, rounded)
#   int8         full cases only: an MHA of four nn.Linear (q, k, v, out;
#                attention by matmul and softmax) through
#                torch.ao.quantization.quantize_dynamic to qint8, on each
#                quantized engine torch has of onednn and qnnpack (Debian's
#                torch has no fbgemm), weights per tensor and per output
#                channel; the fastest counts, the others go in
#                "alternatives".  Each must stay within 10% of the float
#                module's output (max error over max |out|).
#   none         no peer (f16: torch 1.13's CPU has no Half matmul); the line
#                says so with "skipped".
#
# and prints one JSON line per case:
#   {"case", "peer": "pytorch", "op", "median_ms", "runs", "threads", ...}
# ("dtype": "bf16" or "int8", and "engine" for int8, on the rows with a base).
# Timing: wall clock (time.perf_counter) around one forward call, after a
# warm-up; enough runs to fill --budget-ms (5..200); median.
#
# Threads: torch.set_num_threads(N), and OMP_NUM_THREADS, OPENBLAS_NUM_THREADS
# and MKL_NUM_THREADS are set to N before torch is imported (they are read
# when the libraries load, so setting them in this process before the import
# is enough); OMP_WAIT_POLICY defaults to PASSIVE (see below).

import argparse
import contextlib
import copy
import json
import math
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch peer for attnc's benchmark suite")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="", help="comma-separated case ids (default: all)")
    ap.add_argument("--budget-ms", type=float, default=2000.0, help="timed runs per case fill about this much time")
    ap.add_argument("--attnc", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "attnc"),
                    help="the attnc binary the cache cases are checked against (attnc run)")
    ap.add_argument("--verbose", "-v", action="store_true")
    a = ap.parse_args()
    if a.threads < 1:
        ap.error("--threads must be positive")
    return a


ARGS = parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
# Torch's OpenMP threads and OpenBLAS's own threads take turns on the same
# cores; with libgomp's default (spinning after each parallel region) they
# steal the cores from each other and small cases get 10x slower, worst on a
# machine with other work.  Passive waiting is the better setting for this
# peer; an OMP_WAIT_POLICY from the caller wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import torch
    import torch.nn as nn
except Exception as e:  # no python3-torch
    print(json.dumps({"peer": "pytorch", "skipped": "cannot import torch (apt-get install -y python3-torch): %s" % e}))
    sys.exit(0)

torch.set_num_threads(ARGS.threads)
try:
    torch.set_num_interop_threads(1)
except RuntimeError:
    pass
torch.manual_seed(1234)


def log(*m):
    if ARGS.verbose:
        print("pytorch:", *m, file=sys.stderr)


# ---------------------------------------------------------------- the seed

class SeedMultiHeadAttention(nn.Module):
    """The AlphaFold worksheet's MultiHeadAttention (non-global path), as in
    shared/seeds: linear_q/k/v (bias = use_bias_for_embeddings), linear_o,
    optional linear_g gate; attention along attn_dim."""

    def __init__(self, c_in, c, N_head, attn_dim, gated=False, use_bias_for_embeddings=False):
        super().__init__()
        self.c_in = c_in
        self.c = c
        self.N_head = N_head
        self.gated = gated
        self.attn_dim = attn_dim
        self.linear_q = nn.Linear(c_in, c * N_head, bias=use_bias_for_embeddings)
        self.linear_k = nn.Linear(c_in, c * N_head, bias=use_bias_for_embeddings)
        self.linear_v = nn.Linear(c_in, c * N_head, bias=use_bias_for_embeddings)
        self.linear_o = nn.Linear(c * N_head, c_in)
        if gated:
            self.linear_g = nn.Linear(c_in, c * N_head)

    def prepare_qkv(self, q, k, v):
        q = q.movedim(self.attn_dim, -2)
        k = k.movedim(self.attn_dim, -2)
        v = v.movedim(self.attn_dim, -2)
        q = q.view(q.shape[:-1] + (self.N_head, -1))
        k = k.view(k.shape[:-1] + (self.N_head, -1))
        v = v.view(v.shape[:-1] + (self.N_head, -1))
        return q.transpose(-2, -3), k.transpose(-2, -3), v.transpose(-2, -3)

    def forward(self, x, bias=None, attention_mask=None):
        q = self.linear_q(x)
        k = self.linear_k(x)
        v = self.linear_v(x)
        q, k, v = self.prepare_qkv(q, k, v)
        q = q / math.sqrt(self.c)
        a = torch.einsum('...qc,...kc->...qk', q, k)
        if bias is not None:
            bias_batch_shape = bias.shape[:-3]
            bias_bc_shape = bias_batch_shape + (1,) * (a.ndim - len(bias_batch_shape) - 3) + bias.shape[-3:]
            a = a + bias.view(bias_bc_shape)
        if attention_mask is not None:
            attention_mask = attention_mask[..., None, None, :]
            a = a + (attention_mask == 0) * -1e8
        a = torch.softmax(a, dim=-1)
        o = torch.einsum('...qk,...kc->...qc', a, v)
        o = o.transpose(-3, -2)
        o = torch.flatten(o, start_dim=-2)
        o = o.moveaxis(-2, self.attn_dim)
        if self.gated:
            o = torch.sigmoid(self.linear_g(x)) * o
        return self.linear_o(o)


# ------------------------------------------------------------------ cases
# Each builder returns (op name, a no-argument callable that runs one forward).

# dt: torch.float32, or torch.bfloat16 for the bf16 peer (the module and
# every tensor; the draws are the same f32 draws, rounded).

def build_full(c, dt):
    B, S, E, H = c["B"], c["S"], c["E"], c["H"]
    m = nn.MultiheadAttention(E, H, batch_first=True).eval().to(dt)
    x = (torch.rand(B, S, E) * 2 - 1).to(dt)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1) if c["causal"] else None

    def run():
        return m(x, x, x, need_weights=False, attn_mask=mask)[0]
    return "nn.MultiheadAttention" + (" (bool causal mask)" if mask is not None else ""), run


def build_core(c, dt):
    B, H, S, d = c["B"], c["H"], c["S"], c["d"]
    q, k, v = ((torch.rand(B, H, S, d) * 2 - 1).to(dt) for _ in range(3))
    scale = 1 / math.sqrt(d)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1) if c["causal"] else None

    def run():
        a = torch.matmul(q * scale, k.transpose(-1, -2))
        if mask is not None:
            a.masked_fill_(mask, float("-inf"))
        return torch.matmul(torch.softmax(a, dim=-1), v)
    return "matmul-softmax-matmul", run


def build_decode(c, dt):
    B, H, G, Sk, d = c["B"], c["H"], c["G"], c["Sk"], c["d"]
    q = (torch.rand(B, H, 1, d) * 2 - 1).to(dt)
    k, v = ((torch.rand(B, G, Sk, d) * 2 - 1).to(dt) for _ in range(2))
    scale = 1 / math.sqrt(d)

    def run():
        qg = q.view(B, G, H // G, d)  # query head h uses KV head h // (H/G)
        a = torch.softmax(torch.matmul(qg * scale, k.transpose(-1, -2)), dim=-1)
        return torch.matmul(a, v).view(B, H, 1, d)
    return "matmul-softmax-matmul (grouped view)", run


def build_alphafold(c, dt):
    N, S, Cin, H, cc = c["N"], c["S"], c["Cin"], c["H"], c["c"]
    m = SeedMultiHeadAttention(Cin, cc, H, attn_dim=-2, gated=True).eval().to(dt)
    x = (torch.rand(N, S, Cin) * 2 - 1).to(dt)
    bias = (torch.rand(H, S, S) * 2 - 1).to(dt)

    def run():
        return m(x, bias=bias)
    return "seed MultiHeadAttention.forward", run


# ------------------------------------------------------- KV cache steps

def sdpa():
    """torch.nn.functional.scaled_dot_product_attention (torch 2.0 on), else
    torch 1.13's F._scaled_dot_product_attention, the same function before it
    was public (it returns (out, weights)); None without either."""
    import torch.nn.functional as F
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention, "F.scaled_dot_product_attention"
    if hasattr(F, "_scaled_dot_product_attention"):
        return (lambda q, k, v: F._scaled_dot_product_attention(q, k, v)[0]), "F._scaled_dot_product_attention"
    return None, None


class CacheDecoderAttention(nn.Module):
    """A Hugging Face-style attention layer stepping over a KV cache: q, k,
    v and o_proj nn.Linear with biases (attnc's gqa preset), the new k and
    v rows written in place into preallocated caches (B, G, CAP, d) at
    cache_len, attention over the cache_len + S filled positions, o_proj.
    gqa: "repeat" gives each query head its kv head by repeat_interleave
    (HF's repeat_kv copies the same way); "grouped" views the H/G query
    heads of a kv head as rows against it, which copies nothing and is
    exact for one new row (S = 1: no causal mask among new rows).
    attend: "sdpa" or "matmul" (matmul, softmax, matmul)."""

    def __init__(self, E, H, G, d, gqa, attend):
        super().__init__()
        self.H, self.G, self.d, self.gqa = H, G, d, gqa
        self.q_proj = nn.Linear(E, H * d)
        self.k_proj = nn.Linear(E, G * d)
        self.v_proj = nn.Linear(E, G * d)
        self.o_proj = nn.Linear(H * d, E)
        if attend == "sdpa":
            self.attend = sdpa()[0]
        else:
            scale = 1 / math.sqrt(d)
            self.attend = lambda q, k, v: torch.matmul(torch.softmax(torch.matmul(q * scale, k.transpose(-1, -2)), dim=-1), v)

    def forward(self, x, k_cache, v_cache, cache_len):
        B, S, _ = x.shape
        H, G, d = self.H, self.G, self.d
        q = self.q_proj(x).view(B, S, H, d).transpose(1, 2)
        k = self.k_proj(x).view(B, S, G, d).transpose(1, 2)
        v = self.v_proj(x).view(B, S, G, d).transpose(1, 2)
        end = cache_len + S
        k_cache[:, :, cache_len:end] = k
        v_cache[:, :, cache_len:end] = v
        k_all, v_all = k_cache[:, :, :end], v_cache[:, :, :end]
        if self.gqa == "repeat":
            o = self.attend(q, k_all.repeat_interleave(H // G, dim=1), v_all.repeat_interleave(H // G, dim=1))
        else:
            assert S == 1, "the grouped view is exact for one new row only"
            o = self.attend(q.reshape(B, G, H // G, d), k_all, v_all).view(B, H, S, d)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, H * d))


CACHE_VARIANTS = (("repeat", "sdpa"), ("grouped", "sdpa"), ("grouped", "matmul"))


def cache_op_name(gqa, attend):
    how = {"repeat": "GQA by repeat_interleave", "grouped": "GQA by a grouped view"}[gqa]
    what = (sdpa()[1] or "scaled_dot_product_attention") if attend == "sdpa" else "matmul-softmax-matmul"
    return "HF-style layer, in-place cache, %s, %s" % (what, how)


def write_safetensors(path, tensors):
    """tensors: name -> float32 or int32 torch tensor (CPU, contiguous)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": {torch.float32: "F32", torch.int32: "I32"}[t.dtype],
                        "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors_f32(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    out = {}
    for name, t in json.loads(raw[8:8 + n]).items():
        if name != "__metadata__" and t["dtype"] == "F32":
            a, b = t["data_offsets"]
            out[name] = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.float32).view(t["shape"])
    return out


def check_cache_tiny(gqa, attend):
    """The layer at a tiny size against attnc's own step (attnc run) on the
    same weights, input and caches: the output and both caches after the
    step. None when they agree, else why not."""
    import subprocess
    B, E, H, G, d, CAP, L = 2, 16, 4, 2, 8, 8, 5
    m = CacheDecoderAttention(E, H, G, d, gqa, attend).eval()
    x = torch.rand(B, 1, E) * 2 - 1
    kc, vc = torch.rand(B, G, CAP, d) * 2 - 1, torch.rand(B, G, CAP, d) * 2 - 1
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        t = {k: v for k, v in m.state_dict().items()}
        t.update(x=x, k_cache=kc, v_cache=vc, cache_len=torch.full((B,), L, dtype=torch.int32))
        write_safetensors(inp, t)
        spec = "gqa x=%d,1,%d heads=%d kv_heads=%d head_dim=%d cache=%d" % (B, E, H, G, d, CAP)
        r = subprocess.run([ARGS.attnc, "run", spec, "--tensors", inp, "--out", outp, "--quiet", "--threads", "1"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            return "attnc run (%s) failed: %s" % (ARGS.attnc, r.stderr.decode(errors="replace").strip().splitlines()[:1])
        mine = read_safetensors_f32(outp)
    out = m(x, kc, vc, L)
    for name, got, want in (("output", out, mine["out"]), ("k cache", kc, mine["k_cache"]), ("v cache", vc, mine["v_cache"])):
        err = ((got - want.view(got.shape)).abs().max() / want.abs().max()).item()
        if not err <= 2e-5:
            return "its %s differs from attnc's by %.3g of max |value|" % (name, err)
    return None


def build_cache(c):
    """(variants, rejected): the layer once per GQA and attention choice,
    each checked against attnc at a tiny size first, all on the same
    weights and caches at full size."""
    B, E, H, G, d, CAP, L = c["B"], c["E"], c["H"], c["G"], c["d"], c["CAP"], c["cache_len"]
    x = torch.rand(B, 1, E) * 2 - 1
    k_cache, v_cache = torch.rand(B, G, CAP, d) * 2 - 1, torch.rand(B, G, CAP, d) * 2 - 1
    base = None
    variants, rejected = [], {}
    for gqa, attend in CACHE_VARIANTS:
        op = cache_op_name(gqa, attend)
        if attend == "sdpa" and not sdpa()[0]:
            rejected[op] = "this torch has no scaled_dot_product_attention"
            continue
        why = check_cache_tiny(gqa, attend)
        if why:
            rejected[op] = "tiny check: " + why
            continue
        m = CacheDecoderAttention(E, H, G, d, gqa, attend).eval()
        if base is None:
            base = m
        else:  # the same weights for every variant
            m.load_state_dict(base.state_dict())
        # every run writes the same new row at L, so each starts from the same cache
        variants.append((op, None, lambda m=m: m(x, k_cache, v_cache, L)))
    return variants, rejected



# ------------------------------------------------------- training (autograd)

def train_layer(layer, c, draw):
    """The forward of a train case's layer with its leaves requiring grad:
    (spec of the same layer at c's shapes, {attnc name: leaf tensor},
    forward) with forward() -> out.  draw(shape) makes a tensor."""
    if layer == "core":
        B, H, S, d = c["B"], c["H"], c["S"], c["d"]
        q, k, v = (draw((B, H, S, d)).requires_grad_() for _ in range(3))
        scale = 1 / math.sqrt(d)

        def fwd():
            return torch.matmul(torch.softmax(torch.matmul(q * scale, k.transpose(-1, -2)), dim=-1), v)
        return "mha mode=core q=%d,%d,%d,%d train" % (B, H, S, d), {"q": q, "k": k, "v": v}, fwd
    if layer == "full":
        B, S, E, H = c["B"], c["S"], c["E"], c["H"]
        m = nn.MultiheadAttention(E, H, batch_first=True).train()
        with torch.no_grad():
            for p in m.parameters():  # its biases start at zero: make their gradients count
                p.copy_(draw(p.shape) * (0.1 if p.dim() == 1 else 1 / math.sqrt(E)))
        x = draw((B, S, E)).requires_grad_()

        def fwd():
            return m(x, x, x, need_weights=False)[0]
        leaves = dict(m.named_parameters(), x=x)
        return "mha x=%d,%d,%d heads=%d train" % (B, S, E, H), leaves, fwd
    if layer == "alphafold":
        N, S, Cin, H, cc = c["N"], c["S"], c["Cin"], c["H"], c["c"]
        m = SeedMultiHeadAttention(Cin, cc, H, attn_dim=-2, gated=True).train()
        x = draw((N, S, Cin)).requires_grad_()
        bias = draw((H, S, S)).requires_grad_()

        def fwd():
            return m(x, bias=bias)
        leaves = dict(m.named_parameters(), x=x, bias=bias)
        spec = "alphafold x=%d,%d,%d attn_dim=-2 heads=%d head_dim=%d gated bias=%d,%d,%d train" % (N, S, Cin, H, cc, H, S, S)
        return spec, leaves, fwd
    raise ValueError("no train layer '%s'" % layer)


TRAIN_TINY = {"core": {"B": 2, "H": 2, "S": 7, "d": 8},
              "full": {"B": 2, "S": 7, "E": 16, "H": 2},
              "alphafold": {"N": 3, "S": 7, "Cin": 16, "H": 2, "c": 4}}


def check_train_tiny(layer):
    """The layer at a tiny size, forward and backward, against `attnc grad`
    on the same tensors and dout: out and the gradient of every leaf within
    1e-4 of that tensor's largest magnitude.  None when they agree, else why
    not."""
    import subprocess
    spec, leaves, fwd = train_layer(layer, TRAIN_TINY[layer], lambda shape: torch.rand(shape) * 2 - 1)
    out = fwd()
    dout = torch.rand(out.shape) * 2 - 1
    out.backward(dout)
    with tempfile.TemporaryDirectory() as tmp:
        inp, dp, outp = (os.path.join(tmp, n + ".safetensors") for n in ("in", "dout", "out"))
        write_safetensors(inp, {n: t.detach() for n, t in leaves.items()})
        write_safetensors(dp, {"dout": dout})
        r = subprocess.run([ARGS.attnc, "grad", spec, "--tensors", inp, "--dout", dp, "--out", outp, "--threads", "1"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            return "attnc grad (%s) failed: %s" % (ARGS.attnc, r.stderr.decode(errors="replace").strip().splitlines()[:1])
        mine = read_safetensors_f32(outp)
    want = [("out", out.detach())] + [("grad." + n, t.grad) for n, t in leaves.items()]
    for name, t in want:
        if name not in mine:
            return "attnc grad wrote no %s (it wrote %s)" % (name, ", ".join(sorted(mine)))
        err = ((mine[name].view(t.shape) - t).abs().max() / t.abs().max()).item()
        if not err <= 1e-4:
            return "%s differs from attnc's by %.3g of its max |value|" % (name, err)
    return None


def bench_train(c):
    """Forward + backward under autograd, float32, after the tiny check.
    Each timed run: leaves' .grad cleared (untimed), out = forward(),
    out.backward(dout); the pair, and each half, timed."""
    why = check_train_tiny(c["layer"])
    if why:
        raise RuntimeError("tiny check against attnc grad: " + why)
    spec, leaves, fwd = train_layer(c["layer"], c, lambda shape: torch.rand(shape) * 2 - 1)
    dout = torch.rand(fwd().shape) * 2 - 1

    def one():
        for t in leaves.values():
            t.grad = None
        t0 = time.perf_counter()
        out = fwd()
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3

    # warm-up as time_it's: two runs unless one takes half the budget, more
    # while they take under a fifth of it (at most 20)
    w0 = time.perf_counter()
    warm = [one()]
    while ((len(warm) < 2 and warm[0][0] < ARGS.budget_ms / 2)
           or ((time.perf_counter() - w0) * 1e3 < 0.2 * ARGS.budget_ms and len(warm) < 20)):
        warm.append(one())
    runs = max(5, min(200, round(ARGS.budget_ms / max(min(w[0] for w in warm), 1e-3))))
    times = [one() for _ in range(runs)]
    for n, t in leaves.items():
        if t.grad is None or not torch.isfinite(t.grad).all():
            raise RuntimeError("no finite gradient for %s" % n)
    pair = [t[0] for t in times]
    return dict(case=c["case"], peer="pytorch", op="autograd: %s forward + backward (float32)" % {
        "core": "matmul-softmax-matmul", "full": "nn.MultiheadAttention",
        "alphafold": "seed MultiHeadAttention"}[c["layer"]],
        median_ms=round(statistics.median(pair), 4), min_ms=round(min(pair), 4),
        forward_ms=round(statistics.median(t[1] for t in times), 4),
        backward_ms=round(statistics.median(t[2] for t in times), 4),
        runs=runs, warmups=len(warm), threads=torch.get_num_threads(), grads=sorted(leaves),
        checked="tiny size against attnc grad: out and %d gradients within 1e-4 of max |value|" % len(leaves),
        omp_wait_policy=os.environ["OMP_WAIT_POLICY"], version=torch.__version__)


BUILDERS = {"full": build_full, "core": build_core, "decode": build_decode, "alphafold": build_alphafold}


# ------------------------------------------------------------ the int8 peer

class LinearMultiHeadAttention(nn.Module):
    """Self-attention with its four projections as nn.Linear, so that
    quantize_dynamic can replace them: q, k, v and out (with biases, as
    nn.MultiheadAttention has), the attention by matmul and softmax."""

    def __init__(self, E, H):
        super().__init__()
        self.H = H
        self.d = E // H
        self.q = nn.Linear(E, E)
        self.k = nn.Linear(E, E)
        self.v = nn.Linear(E, E)
        self.out = nn.Linear(E, E)

    def forward(self, x):
        B, S, E = x.shape

        def heads(t):  # (B, S, E) -> (B, H, S, d)
            return t.view(B, S, self.H, self.d).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        a = torch.softmax(torch.matmul(q * (1 / math.sqrt(self.d)), k.transpose(-1, -2)), dim=-1)
        return self.out(torch.matmul(a, v).transpose(1, 2).reshape(B, S, E))


class QuietStderr:
    """qnnpack's dynamic linear warns on every call that it ignores the
    reduce_range the module passes, through c10's logging, which neither
    GLOG_minloglevel nor TORCH_CPP_LOG_LEVEL silences here: fd 2 goes to a
    file meanwhile, and every other line is passed on at the end."""
    NOISE = ("ignores reduce_range", "Logging before InitGoogleLogging")

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.file = tempfile.TemporaryFile()
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        for raw in self.file:
            line = raw.decode(errors="replace")
            if not any(n in line for n in self.NOISE):
                sys.stderr.write(line)
        self.file.close()
        return False


def build_full_int8(c):
    """(op, engine, run) for each quantized engine and weight scheme that
    builds and passes the check against the float module."""
    from torch.ao.quantization import quantize_dynamic, default_dynamic_qconfig, per_channel_dynamic_qconfig
    import torch.ao.nn.quantized.dynamic as nnqd
    if c.get("causal"):
        raise ValueError("the int8 peer has no mask")
    B, S, E, H = c["B"], c["S"], c["E"], c["H"]
    m = LinearMultiHeadAttention(E, H).eval()
    x = torch.rand(B, S, E) * 2 - 1
    ref = m(x)
    engines = [e for e in ("onednn", "qnnpack") if e in torch.backends.quantized.supported_engines]
    if not engines:
        raise RuntimeError("torch has neither the onednn nor the qnnpack quantized engine (has %s)"
                           % torch.backends.quantized.supported_engines)
    variants, rejected = [], {}
    for engine in engines:
        for scheme, qconfig in (("per tensor", default_dynamic_qconfig), ("per channel", per_channel_dynamic_qconfig)):
            op = "quantize_dynamic qint8 nn.Linear MHA (%s, %s)" % (engine, scheme)
            try:
                # the engine packs the weights, so it is set before quantising
                torch.backends.quantized.engine = engine
                mq = quantize_dynamic(copy.deepcopy(m), {nn.Linear: qconfig}, dtype=torch.qint8)
                if not all(isinstance(getattr(mq, n), nnqd.Linear) for n in ("q", "k", "v", "out")):
                    raise RuntimeError("quantize_dynamic left a float nn.Linear")
                with QuietStderr() if engine == "qnnpack" else contextlib.nullcontext():
                    err = ((mq(x) - ref).abs().max() / ref.abs().max()).item()
                if not err <= 0.1:
                    raise RuntimeError("differs from the float module by %.3g of max |out|" % err)
                variants.append((op, engine, lambda mq=mq: mq(x)))
            except Exception as e:
                rejected[op] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    return variants, rejected


def resolve(c, by_id):
    """A case with a base takes the base's shapes; its own fields win."""
    if "base" not in c:
        return c
    return dict(by_id[c["base"]], **c)


def time_it(fn, budget_ms):
    warm = []
    w0 = time.perf_counter()
    # at least one warm-up run, two unless one run takes half the budget,
    # more while they take under a fifth of the budget (at most 20)
    while (not warm or (len(warm) < 2 and warm[0] < budget_ms / 2)
           or ((time.perf_counter() - w0) * 1e3 < 0.2 * budget_ms and len(warm) < 20)):
        t0 = time.perf_counter()
        fn()
        warm.append((time.perf_counter() - t0) * 1e3)
    runs = max(5, min(200, round(budget_ms / max(min(warm), 1e-3))))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, len(warm)


def bench_one(c):
    """The case's JSON line."""
    kind = c.get("pytorch", "f32")
    head = {"case": c["case"], "peer": "pytorch"}
    if c["kind"] == "overhead":
        return dict(head, skipped="no peer: its target is attnc with the key over attnc without it (%s)" % c["base"])
    if kind == "none" and c["kind"] == "cache":
        return dict(head, skipped="no PyTorch peer of its own: its target is against attnc's f32 step (%s)" % c["base"])
    if kind == "none":
        return dict(head, skipped="no PyTorch peer for dtype=%s (torch 1.13's CPU has no Half matmul)" % c.get("dtype"))
    if c["kind"] == "train":
        return bench_train(c)
    with torch.inference_mode():
        if c["kind"] == "cache" and kind == "f32":
            variants, rejected = build_cache(c)
        elif kind == "int8":
            if c["kind"] != "full":
                raise ValueError("the int8 peer is built for full cases only")
            variants, rejected = build_full_int8(c)
        else:
            dt = {"f32": torch.float32, "bf16": torch.bfloat16}[kind]
            op, fn = BUILDERS[c["kind"]](c, dt)
            if kind != "f32":
                op += " (%s)" % kind
            variants, rejected = [(op, None, fn)], {}
        best, alternatives = None, {}
        for op, engine, fn in variants:
            try:
                if engine:
                    torch.backends.quantized.engine = engine
                with QuietStderr() if engine == "qnnpack" else contextlib.nullcontext():
                    out = fn()
                    if not torch.isfinite(out).all():
                        raise RuntimeError("non-finite output")
                    times, warm = time_it(fn, ARGS.budget_ms)
            except Exception as e:
                if len(variants) == 1:
                    raise
                rejected[op] = "%s: %s" % (type(e).__name__, e)
                continue
            med = statistics.median(times)
            alternatives[op] = round(med, 4)
            log("%s %s: %.3f ms (%d runs)" % (c["case"], op, med, len(times)))
            if best is None or med < best[0]:
                best = (med, op, engine, times, warm)
    for op, why in rejected.items():
        print("pytorch: %s %s: not used: %s" % (c["case"], op, why), file=sys.stderr)
    if best is None:
        return dict(head, error="no variant ran", rejected=rejected)
    med, op, engine, times, warm = best
    line = dict(head, op=op, median_ms=round(med, 4), min_ms=round(min(times), 4),
                runs=len(times), warmups=warm, threads=torch.get_num_threads(),
                omp_wait_policy=os.environ["OMP_WAIT_POLICY"], version=torch.__version__)
    if kind != "f32":
        line["dtype"] = kind
    if engine:
        line["engine"] = engine
    if len(variants) > 1:
        line["alternatives"] = alternatives
    if rejected:
        line["rejected"] = rejected
    return line


def main():
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    by_id = {c["case"]: c for c in cases}
    want = [w for w in ARGS.cases.split(",") if w]
    known = {c["case"] for c in cases}
    for w in want:
        if w not in known:
            sys.exit("pytorch: error: unknown case '%s'" % w)
    log("torch %s, %d threads, %s" % (torch.__version__, torch.get_num_threads(), torch.__config__.parallel_info().splitlines()[0]))
    for c in cases:
        if want and c["case"] not in want:
            continue
        try:
            line = bench_one(resolve(c, by_id))
        except Exception as e:
            line = {"case": c["case"], "peer": "pytorch", "error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
