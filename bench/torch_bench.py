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
#
# and prints one JSON line per case:
#   {"case", "peer": "pytorch", "op", "median_ms", "runs", "threads", ...}
# Timing: wall clock (time.perf_counter) around one forward call, after a
# warm-up; enough runs to fill --budget-ms (5..200); median.
#
# Threads: torch.set_num_threads(N), and OMP_NUM_THREADS, OPENBLAS_NUM_THREADS
# and MKL_NUM_THREADS are set to N before torch is imported (they are read
# when the libraries load, so setting them in this process before the import
# is enough); OMP_WAIT_POLICY defaults to PASSIVE (see below).

import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch peer for attnc's benchmark suite")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="", help="comma-separated case ids (default: all)")
    ap.add_argument("--budget-ms", type=float, default=2000.0, help="timed runs per case fill about this much time")
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

def build_full(c):
    B, S, E, H = c["B"], c["S"], c["E"], c["H"]
    m = nn.MultiheadAttention(E, H, batch_first=True).eval()
    x = torch.rand(B, S, E) * 2 - 1
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1) if c["causal"] else None

    def run():
        return m(x, x, x, need_weights=False, attn_mask=mask)[0]
    return "nn.MultiheadAttention" + (" (bool causal mask)" if mask is not None else ""), run


def build_core(c):
    B, H, S, d = c["B"], c["H"], c["S"], c["d"]
    q, k, v = (torch.rand(B, H, S, d) * 2 - 1 for _ in range(3))
    scale = 1 / math.sqrt(d)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1) if c["causal"] else None

    def run():
        a = torch.matmul(q * scale, k.transpose(-1, -2))
        if mask is not None:
            a.masked_fill_(mask, float("-inf"))
        return torch.matmul(torch.softmax(a, dim=-1), v)
    return "matmul-softmax-matmul", run


def build_decode(c):
    B, H, G, Sk, d = c["B"], c["H"], c["G"], c["Sk"], c["d"]
    q = torch.rand(B, H, 1, d) * 2 - 1
    k, v = (torch.rand(B, G, Sk, d) * 2 - 1 for _ in range(2))
    scale = 1 / math.sqrt(d)

    def run():
        qg = q.view(B, G, H // G, d)  # query head h uses KV head h // (H/G)
        a = torch.softmax(torch.matmul(qg * scale, k.transpose(-1, -2)), dim=-1)
        return torch.matmul(a, v).view(B, H, 1, d)
    return "matmul-softmax-matmul (grouped view)", run


def build_alphafold(c):
    N, S, Cin, H, cc = c["N"], c["S"], c["Cin"], c["H"], c["c"]
    m = SeedMultiHeadAttention(Cin, cc, H, attn_dim=-2, gated=True).eval()
    x = torch.rand(N, S, Cin) * 2 - 1
    bias = torch.rand(H, S, S) * 2 - 1

    def run():
        return m(x, bias=bias)
    return "seed MultiHeadAttention.forward", run


BUILDERS = {"full": build_full, "core": build_core, "decode": build_decode, "alphafold": build_alphafold}


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


def main():
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
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
            with torch.inference_mode():
                op, fn = BUILDERS[c["kind"]](c)
                out = fn()
                if not torch.isfinite(out).all():
                    raise RuntimeError("non-finite output")
                times, warm = time_it(fn, ARGS.budget_ms)
            line = {"case": c["case"], "peer": "pytorch", "op": op,
                    "median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
                    "runs": len(times), "warmups": warm, "threads": torch.get_num_threads(),
                    "omp_wait_policy": os.environ["OMP_WAIT_POLICY"], "version": torch.__version__}
            log("%s %s: %.3f ms (%d runs)" % (c["case"], op, line["median_ms"], len(times)))
        except Exception as e:
            line = {"case": c["case"], "peer": "pytorch", "error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
