#!/usr/bin/python3
# make_examples.py: the checkpoints and inputs of the example programs in
# examples/af_msa_row, examples/gpt_decode and examples/cross_attn, and
# the initial weights, data and PyTorch loss curve of examples/train_step.
#
# Regenerate everything (deterministic, fixed seeds) with
#
#     /usr/bin/python3 tools/make_examples.py
#
# (Debian's python3-torch; only the standard library, torch and numpy.)
# Each example gets two files in its folder:
#
#   checkpoint.safetensors  a small model checkpoint laid out like the real
#                           one (OpenFold, Hugging Face Llama, torch
#                           nn.Transformer): the attention layer the example
#                           runs, under its full prefix, among tensors of
#                           other layers that the example must ignore
#                           (some with the very same suffixes);
#   inputs.safetensors      the attention layer's inputs under the names
#                           attnc binds (x, kv, bias, mask) and `expected`,
#                           the layer's output computed here with PyTorch.
#
# Weights and inputs are drawn in float64, rounded to float32 and stored as
# F32; the expected output is computed in float64 from the rounded values
# (so it is the exact answer for the stored data) and stored as F32.  The
# expected outputs come from PyTorch modules and ops written after each
# model's own code (OpenFold's Attention, Hugging Face's LlamaAttention,
# torch.nn.MultiheadAttention inside nn.Transformer), never from attnc.

import copy
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402  (its safetensors writer; importing runs nothing)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX_DIR = os.path.join(ROOT, "examples")

torch.set_default_dtype(torch.float64)

def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, st_dtype, array), stored in the given order
    within each element size (make_golden.py's writer)."""
    size = make_golden.write_safetensors(path, tensors, metadata, by_name=False)
    print("wrote %s (%d tensors, %d bytes)" % (os.path.relpath(path, ROOT), len(tensors), size))


def f32(t):
    """Round a float64 tensor to float32 values (kept as float64)."""
    return t.to(torch.float32).to(torch.float64)


def npf32(t):
    return t.detach().to(torch.float32).numpy()


def linear_init(gen, out_f, in_f, gain=1.0):
    bound = gain / math.sqrt(in_f)
    return f32((torch.rand(out_f, in_f, generator=gen) * 2 - 1) * bound)


def vec_init(gen, n, amp):
    return f32((torch.rand(n, generator=gen) * 2 - 1) * amp)


# --------------------------------------------------------------------------
# 1. AlphaFold 2 MSA row attention with pair bias (OpenFold names)
# --------------------------------------------------------------------------

def af_msa_row():
    """OpenFold MSARowAttentionWithPairBias, whose `mha` is an
    openfold.model.primitives.Attention(c_m, c_m, c_m, c_hidden, no_heads,
    gating=True): linear_q/k/v without bias, linear_g and linear_o with.
    The example runs `mha` on m after layer_norm_m (x) with the pair bias
    linear_z(layer_norm_z(z)) (bias) and the MSA mask (mask)."""
    gen = torch.Generator().manual_seed(1001)
    S, R, c_m, c_z, H, c = 3, 10, 24, 8, 4, 8  # H*c = 32 != c_m: head_dim is its own setting
    pre = "evoformer.blocks.0."
    ck = []

    def put(name, t):
        ck.append((name, "F32", npf32(t)))
        return t

    def mha_weights(p):
        w = {}
        w["q"] = put(p + "linear_q.weight", linear_init(gen, H * c, c_m))
        w["k"] = put(p + "linear_k.weight", linear_init(gen, H * c, c_m))
        w["v"] = put(p + "linear_v.weight", linear_init(gen, H * c, c_m))
        w["g"] = put(p + "linear_g.weight", linear_init(gen, H * c, c_m))
        w["bg"] = put(p + "linear_g.bias", vec_init(gen, H * c, 1.0))
        w["o"] = put(p + "linear_o.weight", linear_init(gen, c_m, H * c))
        w["bo"] = put(p + "linear_o.bias", vec_init(gen, c_m, 0.2))
        return w

    ln_m_w = put(pre + "msa_att_row.layer_norm_m.weight", f32(1 + 0.1 * torch.randn(c_m, generator=gen)))
    ln_m_b = put(pre + "msa_att_row.layer_norm_m.bias", f32(0.1 * torch.randn(c_m, generator=gen)))
    ln_z_w = put(pre + "msa_att_row.layer_norm_z.weight", f32(1 + 0.1 * torch.randn(c_z, generator=gen)))
    ln_z_b = put(pre + "msa_att_row.layer_norm_z.bias", f32(0.1 * torch.randn(c_z, generator=gen)))
    lin_z = put(pre + "msa_att_row.linear_z.weight", linear_init(gen, H, c_z, gain=2.0))
    w = mha_weights(pre + "msa_att_row.mha.")
    # decoys: the column attention of the same block has the same suffixes
    put(pre + "msa_att_col._msa_att.layer_norm_m.weight", f32(1 + 0.1 * torch.randn(c_m, generator=gen)))
    put(pre + "msa_att_col._msa_att.layer_norm_m.bias", f32(0.1 * torch.randn(c_m, generator=gen)))
    mha_weights(pre + "msa_att_col._msa_att.mha.")
    put(pre + "msa_transition.layer_norm.weight", f32(1 + 0.1 * torch.randn(c_m, generator=gen)))
    put(pre + "msa_transition.layer_norm.bias", f32(0.1 * torch.randn(c_m, generator=gen)))
    put(pre + "msa_transition.linear_1.weight", linear_init(gen, 4 * c_m, c_m))
    put(pre + "msa_transition.linear_1.bias", vec_init(gen, 4 * c_m, 0.1))
    put(pre + "msa_transition.linear_2.weight", linear_init(gen, c_m, 4 * c_m))
    put(pre + "msa_transition.linear_2.bias", vec_init(gen, c_m, 0.1))

    # inputs: the MSA and pair representations, the MSA mask (OpenFold: float 0/1)
    m = f32(torch.randn(S, R, c_m, generator=gen))
    z = f32(torch.randn(R, R, c_z, generator=gen))
    mask = torch.ones(S, R)
    mask[:, R - 2:] = 0          # two padding residues in every sequence
    mask[1, 3] = 0               # and one more key masked in sequence 1

    # what MSARowAttentionWithPairBias.forward hands to self.mha
    x = f32(F.layer_norm(m, (c_m,), ln_m_w, ln_m_b))
    bias = f32(F.linear(F.layer_norm(z, (c_z,), ln_z_w, ln_z_b), lin_z).permute(2, 0, 1))  # (H, R, R)
    inf = 1e9
    mask_bias = (inf * (mask - 1))[..., :, None, None, :]   # (S, 1, 1, R)

    # openfold.model.primitives.Attention.forward (_prep_qkv, _attention, gating, linear_o)
    q = F.linear(x, w["q"]).view(S, R, H, c).transpose(-2, -3)   # (S, H, R, c)
    k = F.linear(x, w["k"]).view(S, R, H, c).transpose(-2, -3)
    v = F.linear(x, w["v"]).view(S, R, H, c).transpose(-2, -3)
    q = q / math.sqrt(c)
    a = torch.matmul(q, k.transpose(-1, -2))                      # (S, H, R, R)
    for b in (mask_bias, bias.unsqueeze(-4)):
        a = a + b
    a = torch.softmax(a, dim=-1)
    o = torch.matmul(a, v).transpose(-2, -3)                       # (S, R, H, c)
    g = torch.sigmoid(F.linear(x, w["g"], w["bg"])).view(S, R, H, c)
    o = (o * g).reshape(S, R, H * c)
    out = F.linear(o, w["o"], w["bo"])

    d = os.path.join(EX_DIR, "af_msa_row")
    meta = {"format": "pt", "made_by": "tools/make_examples.py"}
    write_safetensors(os.path.join(d, "checkpoint.safetensors"), ck, meta)
    write_safetensors(os.path.join(d, "inputs.safetensors"), [
        ("x", "F32", npf32(x)), ("bias", "F32", npf32(bias)), ("mask", "F32", npf32(mask)),
        ("expected", "F32", npf32(out))], meta)


# --------------------------------------------------------------------------
# 2. Llama-style GQA self-attention with RoPE (Hugging Face names), decoding
# --------------------------------------------------------------------------

def gpt_decode():
    """transformers' LlamaAttention with attention_bias=True (biases on
    q_proj, k_proj, v_proj and o_proj), 4 heads sharing 2 kv heads and
    rotary embeddings (rope_theta 10000, rotate_half), run the way
    generate() runs it: the 7-token prompt in one call, then one token per
    call, with a DynamicCache-like list of k and v tensors that grows by
    torch.cat.  expected row t is the output for token t from the call that
    fed it.  The final cache contents (rotated keys, values; HF's layout
    (batch, kv heads, tokens, head_dim)) are stored too."""
    gen = torch.Generator().manual_seed(2002)
    hidden, H, G, N, vocab, inter = 64, 4, 2, 12, 16, 32
    prompt, theta = 7, 10000.0
    c = hidden // H
    ck = []

    def put(name, t):
        ck.append((name, "F32", npf32(t)))
        return t

    def attn_weights(p):
        w = {}
        w["q"] = put(p + "q_proj.weight", linear_init(gen, H * c, hidden))
        w["bq"] = put(p + "q_proj.bias", vec_init(gen, H * c, 0.2))
        w["k"] = put(p + "k_proj.weight", linear_init(gen, G * c, hidden))
        w["bk"] = put(p + "k_proj.bias", vec_init(gen, G * c, 0.2))
        w["v"] = put(p + "v_proj.weight", linear_init(gen, G * c, hidden))
        w["bv"] = put(p + "v_proj.bias", vec_init(gen, G * c, 0.2))
        w["o"] = put(p + "o_proj.weight", linear_init(gen, hidden, H * c))
        w["bo"] = put(p + "o_proj.bias", vec_init(gen, hidden, 0.2))
        return w

    put("model.embed_tokens.weight", f32(torch.randn(vocab, hidden, generator=gen)))
    put("model.layers.0.input_layernorm.weight", f32(1 + 0.1 * torch.randn(hidden, generator=gen)))
    w = attn_weights("model.layers.0.self_attn.")
    put("model.layers.0.post_attention_layernorm.weight", f32(1 + 0.1 * torch.randn(hidden, generator=gen)))
    put("model.layers.0.mlp.gate_proj.weight", linear_init(gen, inter, hidden))
    put("model.layers.0.mlp.up_proj.weight", linear_init(gen, inter, hidden))
    put("model.layers.0.mlp.down_proj.weight", linear_init(gen, hidden, inter))
    put("model.layers.1.input_layernorm.weight", f32(1 + 0.1 * torch.randn(hidden, generator=gen)))
    attn_weights("model.layers.1.self_attn.")       # decoys with the same suffixes
    put("model.norm.weight", f32(1 + 0.1 * torch.randn(hidden, generator=gen)))

    # the layer's input: hidden states of N tokens (after input_layernorm)
    x = f32(torch.randn(1, N, hidden, generator=gen))

    # LlamaRotaryEmbedding (default rope type): cos and sin at position_ids
    inv_freq = 1.0 / (theta ** (torch.arange(0, c, 2, dtype=torch.int64).to(torch.float64) / c))

    def rotary(position_ids):                       # (bsz, q_len) -> cos, sin (bsz, q_len, c)
        freqs = position_ids[:, :, None].to(torch.float64) * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def rotate_half(h):                             # modeling_llama.rotate_half
        h1, h2 = h[..., : h.shape[-1] // 2], h[..., h.shape[-1] // 2:]
        return torch.cat((-h2, h1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    def repeat_kv(h, n_rep):                        # modeling_llama.repeat_kv
        b, nkv, slen, hd = h.shape
        if n_rep == 1:
            return h
        h = h[:, :, None, :, :].expand(b, nkv, n_rep, slen, hd)
        return h.reshape(b, nkv * n_rep, slen, hd)

    class KVCache:                                  # DynamicCache, one layer
        def __init__(self):
            self.key_cache, self.value_cache = [], []

        def get_seq_length(self):
            return self.key_cache[0].shape[-2] if self.key_cache else 0

        def update(self, k, v):
            if not self.key_cache:
                self.key_cache, self.value_cache = [k], [v]
            else:
                self.key_cache[0] = torch.cat([self.key_cache[0], k], dim=-2)
                self.value_cache[0] = torch.cat([self.value_cache[0], v], dim=-2)
            return self.key_cache[0], self.value_cache[0]

    def attention(hidden_states, position_ids, past):
        """LlamaAttention.forward with a cache; eager attention with the
        causal mask that LlamaModel builds (query i at position past + i
        sees keys 0 .. past + i)."""
        bsz, q_len, _ = hidden_states.shape
        q = F.linear(hidden_states, w["q"], w["bq"]).view(bsz, q_len, H, c).transpose(1, 2)   # (1, H, q_len, c)
        k = F.linear(hidden_states, w["k"], w["bk"]).view(bsz, q_len, G, c).transpose(1, 2)   # (1, G, q_len, c)
        v = F.linear(hidden_states, w["v"], w["bv"]).view(bsz, q_len, G, c).transpose(1, 2)
        cos, sin = rotary(position_ids)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = past.update(k, v)                                                              # (1, G, kv_len, c)
        kv_len = k.shape[-2]
        k, v = repeat_kv(k, H // G), repeat_kv(v, H // G)
        qpos = position_ids[0][:, None]
        kpos = torch.arange(kv_len)[None, :]
        causal = torch.zeros(q_len, kv_len).masked_fill(kpos > qpos, float("-inf"))
        a = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(c) + causal
        a = F.softmax(a, dim=-1)
        o = torch.matmul(a, v).transpose(1, 2).reshape(bsz, q_len, H * c)
        return F.linear(o, w["o"], w["bo"])

    # the generation loop: the prompt, then one token per call
    past, rows, t = KVCache(), [], 0
    while t < N:
        n = prompt if t == 0 else 1
        past_len = past.get_seq_length()
        position_ids = torch.arange(past_len, past_len + n)[None, :]
        rows.append(attention(x[:, t:t + n], position_ids, past))
        t += n
    out = torch.cat(rows, dim=1)                                                              # (1, N, hidden)

    # the same layer over all N tokens in one call gives the same rows
    whole = attention(x, torch.arange(N)[None, :], KVCache())
    assert torch.allclose(out, whole, rtol=0, atol=1e-12), (out - whole).abs().max()

    d = os.path.join(EX_DIR, "gpt_decode")
    meta = {"format": "pt", "made_by": "tools/make_examples.py"}
    write_safetensors(os.path.join(d, "checkpoint.safetensors"), ck, meta)
    write_safetensors(os.path.join(d, "inputs.safetensors"), [
        ("x", "F32", npf32(x)), ("expected", "F32", npf32(out)),
        ("expected_k_cache", "F32", npf32(past.key_cache[0])),
        ("expected_v_cache", "F32", npf32(past.value_cache[0]))], meta)


# --------------------------------------------------------------------------
# 3. Encoder-decoder cross-attention (torch nn.Transformer names)
# --------------------------------------------------------------------------

def cross_attn():
    """A whole torch.nn.Transformer (1 encoder and 1 decoder layer, post-norm)
    saved with its state_dict names; the example runs the decoder layer's
    cross-attention decoder.layers.0.multihead_attn (in_proj_weight,
    in_proj_bias, out_proj.*).  Its inputs are computed by the model itself:
    kv is the encoder output (memory) for padded source sentences, x the
    decoder states after the self-attention block (norm1), exactly what
    TransformerDecoderLayer passes to _mha_block; expected is
    multihead_attn(x, memory, memory, key_padding_mask)."""
    torch.manual_seed(3003)
    d_model, nhead, ff, B, T, S = 32, 4, 64, 2, 5, 9
    lengths = [9, 6]  # source tokens per sentence; the rest is padding
    model = torch.nn.Transformer(d_model=d_model, nhead=nhead, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=ff, dropout=0.0, batch_first=True)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1 and p.numel() == d_model * 3:
                p.uniform_(-0.3, 0.3)    # nn.MultiheadAttention's in_proj_bias starts at 0: make it count
            p.copy_(f32(p))
    ck = [(name, "F32", npf32(p)) for name, p in model.state_dict().items()]

    gen = torch.Generator().manual_seed(3004)
    src = f32(torch.randn(B, S, d_model, generator=gen))
    tgt = f32(torch.randn(B, T, d_model, generator=gen))
    pad = torch.zeros(B, S, dtype=torch.bool)       # torch: True = padding
    for b, n in enumerate(lengths):
        pad[b, n:] = True

    # the encoder outside no_grad: its slow path, which (like Hugging Face
    # encoders) leaves real values at the padded positions, not zeros
    memory = f32(model.encoder(src, src_key_padding_mask=pad).detach())
    assert memory[1, lengths[1]:].abs().min() > 0
    with torch.no_grad():
        layer = model.decoder.layers[0]
        assert not layer.norm_first
        x = f32(layer.norm1(tgt + layer._sa_block(tgt, None, None)))
        out = layer.multihead_attn(x, memory, memory, key_padding_mask=pad, need_weights=False)[0]
        assert torch.allclose(layer._mha_block(x, memory, None, pad), out)

    # attnc's mask: nonzero keeps the key (Hugging Face's attention_mask, int64)
    mask = (~pad).to(torch.int64)
    d = os.path.join(EX_DIR, "cross_attn")
    meta = {"format": "pt", "made_by": "tools/make_examples.py"}
    write_safetensors(os.path.join(d, "checkpoint.safetensors"), ck, meta)
    write_safetensors(os.path.join(d, "inputs.safetensors"), [
        ("x", "F32", npf32(x)), ("kv", "F32", npf32(memory)), ("mask", "I64", mask.numpy()),
        ("expected", "F32", npf32(out))], meta)

# --------------------------------------------------------------------------
# 4. A training loop: SGD on a causal nn.MultiheadAttention (train_step)
# --------------------------------------------------------------------------

TRAIN_STEPS, TRAIN_LR = 100, 1.0


def train_step():
    """torch.nn.MultiheadAttention(32, 4, batch_first=True), causal (a bool
    attn_mask above the diagonal), fitted to a target with plain SGD
    (torch.optim.SGD, lr 1.0, no momentum) for 100 steps, every parameter
    updated: in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
    Loss = 0.5 * mean((out - target)^2) over the 16 x 32 outputs, so the
    gradient of out is (out - target) / 512.  The target is the output of a
    second, "teacher" layer of the same shape on the same x, so the student
    can reach it.  Weights start as nn.MultiheadAttention's Xavier-uniform
    draws from a seeded generator, biases uniform in +-0.1 (torch starts
    them at zero; nonzero ones make every bias's gradient count).

    Stored: the student's initial weights (checkpoint.safetensors, under
    layers.0.self_attn., among the teacher's under layers.1.self_attn.,
    which the example must not bind); x, target, lr and expected_loss, the
    loss of each of the 100 steps (before its update) computed with the
    model in float32, as PyTorch trains, from the stored float32 values.
    The same 100 steps in float64 must stay within 1e-5 relative of the
    float32 curve, so the example's 1e-3 tolerance is far above rounding."""
    gen = torch.Generator().manual_seed(4004)
    E, H, S = 32, 4, 16

    def layer():
        m = torch.nn.MultiheadAttention(E, H, batch_first=True)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if p.dim() == 1:
                    p.copy_(vec_init(gen, p.shape[0], 0.1))
                else:  # xavier_uniform_ (in_proj_weight: over each of q, k, v's E rows)
                    fan_out = p.shape[0] // 3 if name == "in_proj_weight" else p.shape[0]
                    bound = math.sqrt(6.0 / (fan_out + p.shape[1]))
                    p.copy_(f32((torch.rand(p.shape, generator=gen) * 2 - 1) * bound))
        return m

    student, teacher = layer(), layer()
    x = f32(torch.randn(1, S, E, generator=gen))
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)   # True: may not attend
    with torch.no_grad():
        target = f32(teacher(x, x, x, attn_mask=mask, need_weights=False)[0])

    def fit(dtype):
        m = copy.deepcopy(student).to(dtype).train()
        xs, ts = x.to(dtype), target.to(dtype)
        opt = torch.optim.SGD(m.parameters(), lr=TRAIN_LR)
        losses = []
        for _ in range(TRAIN_STEPS):
            opt.zero_grad()
            out = m(xs, xs, xs, attn_mask=mask, need_weights=False)[0]
            loss = 0.5 * ((out - ts) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return torch.tensor(losses, dtype=torch.float64)

    curve = fit(torch.float32)
    exact = fit(torch.float64)
    drift = ((curve - exact).abs() / exact).max().item()
    assert drift < 1e-5, "float32 and float64 curves differ by %.3g" % drift
    assert curve[-1] < 0.1 * curve[0], "the loss must fall: %g -> %g" % (curve[0], curve[-1])

    ck = [("layers.0.self_attn." + n, "F32", npf32(p)) for n, p in student.state_dict().items()]
    ck += [("layers.1.self_attn." + n, "F32", npf32(p)) for n, p in teacher.state_dict().items()]
    d = os.path.join(EX_DIR, "train_step")
    meta = {"format": "pt", "made_by": "tools/make_examples.py"}
    write_safetensors(os.path.join(d, "checkpoint.safetensors"), ck, meta)
    write_safetensors(os.path.join(d, "inputs.safetensors"), [
        ("x", "F32", npf32(x)), ("target", "F32", npf32(target)),
        ("lr", "F32", np.array(TRAIN_LR, dtype=np.float32)),
        ("expected_loss", "F32", curve.to(torch.float32).numpy())], meta)
    print("train_step: loss %.4g -> %.4g over %d steps; float32 vs float64 curve: %.2g relative"
          % (curve[0], curve[-1], TRAIN_STEPS, drift))


def main():
    torch.set_num_threads(1)
    for d in ("af_msa_row", "gpt_decode", "cross_attn", "train_step"):
        os.makedirs(os.path.join(EX_DIR, d), exist_ok=True)
    af_msa_row()
    gpt_decode()
    cross_attn()
    train_step()


if __name__ == "__main__":
    main()
