-- gen/plan.lua: turn a validated spec into everything the templates need:
-- sizes as C expressions (constants folded, named dims as variables),
-- row strides for addressing the attention axis in place, broadcast
-- strides for bias and mask, and the kernel's tensor signature.

local M = {}

local type, tostring, ipairs = type, tostring, ipairs
local sformat = string.format
local concat, insert = table.concat, table.insert

-- A C expression for one dim: a literal, or the variable of a named dim.
local function dim(d)
  if type(d) == "number" then return d end
  return "dim_" .. d
end
M.dim = dim

-- Product of dims as a C expression, folding constants; a number if all are.
local function prod(list)
  local k, vars = 1, {}
  for _, d in ipairs(list) do
    if type(d) == "number" then k = k * d else insert(vars, dim(d)) end
  end
  if #vars == 0 then return k end
  if k ~= 1 then insert(vars, tostring(k)) end
  return concat(vars, " * ")
end
M.prod = prod

-- "(B, S, 64)": a shape as the generated comments write it.
local function shape_comment(dims)
  local t = {}
  for i, d in ipairs(dims) do t[i] = tostring(d) end
  return "(" .. concat(t, ", ") .. ")"
end
M.shape_text = shape_comment

local function sub(list, i, j)
  local out = {}
  for n = i, j do insert(out, list[n]) end
  return out
end

-- Row strides of a tensor whose last dim is the width: stride of axis a,
-- in rows, is the product of the dims between it and the width.
local function row_strides(shape)
  local r, out = #shape, {}
  for a = 1, r - 1 do out[a] = prod(sub(shape, a + 1, r - 1)) end
  return out
end

-- Element strides of a dense row-major tensor.
local function strides(shape)
  local r, out = #shape, {}
  for a = 1, r do out[a] = prod(sub(shape, a + 1, r)) end
  return out
end

function M.plan(s, version)
  local p = {
    spec = s, name = s.name, canonical = s.canonical, version = version,
    real = s.dtype == "f64" and "double" or "float",
    exp = s.dtype == "f64" and "exp" or "expf",
    lit = s.dtype == "f64" and "" or "f",
    dtype = s.dtype,
    -- bf16 and f16 are storage types: the kernel widens them to f32, computes, and narrows out
    store = (s.dtype == "bf16" or s.dtype == "f16") and s.dtype or nil,
    -- the weight matrices' storage (int8, or a dtype); biases are stored as dtype says
    weights = s.weights or s.dtype,
    core = s.mode == "core",
    H = s.heads, G = s.kv_heads, C = s.head_dim,
    HPG = s.heads // s.kv_heads,
    causal = s.causal, window = s.window, empty_rows = s.empty_rows,
    has_mask = s.mask == "key", has_bias = s.bias ~= nil,
    scale = require("spec").fmt_float(s.scale),
    softcap = s.softcap and require("spec").fmt_decimal(s.softcap) or false,
    sinks = s.sinks or false, lse = s.lse or false, weights_out = s.weights_out or false,
    rope = (s.rope and s.rope ~= "none") and s.rope or false,
    pe = (s.pe and s.pe ~= "none") and s.pe or false,
    rope_dim = s.rope_dim, rope_theta = s.rope_theta and sformat("%.17g", s.rope_theta) or nil,
    train = s.train or false,
  }
  -- dropout (DESIGN.md "Training"): key j of query i is kept iff Philox's
  -- word j mod 4 >= floor(p * 2^32); kept probabilities are scaled by 1/(1-p)
  if s.dropout and s.dropout > 0 then
    p.dropout = {
      p = require("spec").fmt_decimal(s.dropout),
      threshold = sformat("%.0f", math.floor(s.dropout * 4294967296.0)),
      scale = sformat("%.17g", 1 / (1 - s.dropout)),
    }
  else
    p.dropout = false
  end
  -- ALiBi slopes (DESIGN.md): n = the largest power of two <= H,
  -- m0 = 2^(-max_bias/n), m1 = 2^(-max_bias/(2n)); head h < n: m0^(h+1), else m1^(2(h-n)+1)
  if s.alibi then
    local n = 1
    while n * 2 <= s.heads do n = n * 2 end
    local m0, m1 = 2.0 ^ (-s.alibi / n), 2.0 ^ (-s.alibi / (2 * n))
    p.alibi = {}
    for h = 0, s.heads - 1 do
      p.alibi[h + 1] = sformat("%.17g", h < n and m0 ^ (h + 1) or m1 ^ (2 * (h - n) + 1))
    end
  else
    p.alibi = false
  end
  p.dims = {}
  for i, n in ipairs(s.dims) do p.dims[i] = { name = n, var = dim(n), index = i - 1 } end
  p.Sq, p.Sk = dim(s.Sq), dim(s.Sk)

  local batch = require("spec").batch_dims(s)
  p.batch = {}
  p.n_batch = prod(batch)
  -- Mask strides come from the runtime (a mask may have fewer dims); bias
  -- strides are fixed by the spec's bias shape.
  local bstr = s.bias and strides(s.bias) or nil
  local nbb = s.bias and (#s.bias - 3) or 0
  for a, d in ipairs(batch) do
    local ax = { var = "i" .. (a - 1), size = dim(d), label = tostring(d), mask_index = a - 1 }
    if s.bias and a <= nbb and s.bias[a] ~= 1 then ax.bias_stride = bstr[a] end
    p.batch[a] = ax
  end
  p.nbatch_axes = #batch
  if s.bias then
    local r = #s.bias
    p.bias_h = s.bias[r - 2] ~= 1 and bstr[r - 2] or nil
    p.bias_i = s.bias[r - 1] ~= 1 and bstr[r - 1] or nil
    p.bias_j = s.bias[r] ~= 1 and bstr[r] or nil
    p.bias_shape = shape_comment(s.bias)
  end

  -- The tensors the kernel reads, with their shapes (numbers or dim names).
  local sig = { inputs = {}, out = nil }
  local function input(slot, shape, role) insert(sig.inputs, { slot = slot, shape = shape, role = role }) end

  if p.core then
    local r = s.rank
    p.q_shape, p.kv_shape = shape_comment(s.q), shape_comment(s.kv)
    input("q", s.q, "input"); input("k", s.kv, "input"); input("v", s.kv, "input")
    sig.out = s.q
  else
    local r, axis = s.rank, s.axis
    p.global, p.gated = s.global, s.gated
    p.global_masked = s.global and s.global_mean == "masked"
    p.qkv_bias, p.out_bias = s.qkv_bias, s.out_bias
    p.self = s.self
    p.C_IN, p.C_KV = s.c_in, s.c_kv
    p.HC, p.GC = s.heads * s.head_dim, s.kv_heads * s.head_dim
    local out_shape = {}
    for i, d in ipairs(s.x) do out_shape[i] = d end
    if s.global and not s.gated then out_shape[axis] = 1 end
    p.x_shape, p.kv_shape, p.out_shape = shape_comment(s.x), shape_comment(s.kv), shape_comment(out_shape)
    p.n_x_rows = prod(sub(s.x, 1, r - 1))
    p.n_kv_rows = prod(sub(s.kv, 1, r - 1))
    p.n_out_rows = prod(sub(out_shape, 1, r - 1))
    local xrs, kvrs, ors = row_strides(s.x), row_strides(s.kv), row_strides(out_shape)
    p.x_step, p.kv_step, p.out_step = xrs[axis], kvrs[axis], ors[axis]
    local a = 0
    for i = 1, r - 1 do
      if i ~= axis then
        a = a + 1
        p.batch[a].x_rs, p.batch[a].kv_rs, p.batch[a].out_rs = xrs[i], kvrs[i], ors[i]
      end
    end
    p.axis_label = tostring(s.x[axis])
    p.axis_index = axis - 1
    input("x", s.x, "input")
    if not s.self then input("kv", s.kv, "input") end
    -- weights=int8: each weight matrix has an F32 scale per output row
    local function matrix(slot, shape)
      input(slot, shape, "matrix")
      if s.weights == "int8" then input(slot .. "_scale", { shape[1] }, "scale") end
    end
    matrix("wq", { p.HC, s.c_in })
    if s.qkv_bias then input("bq", { p.HC }, "weight") end
    matrix("wk", { p.GC, s.c_kv })
    if s.qkv_bias then input("bk", { p.GC }, "weight") end
    matrix("wv", { p.GC, s.c_kv })
    if s.qkv_bias then input("bv", { p.GC }, "weight") end
    if s.gated then
      matrix("wg", { p.HC, s.c_in }); input("bg", { p.HC }, "weight")
    end
    matrix("wo", { s.c_in, p.HC })
    if s.out_bias then input("bo", { s.c_in }, "weight") end
    sig.out = out_shape
  end
  if s.bias then input("bias", s.bias, "input") end
  if s.sinks then input("sinks", { s.heads }, "input") end
  -- RoPE's frequency factors (Llama 3): optional, all 1 when not bound
  if p.rope then input("rope_freqs", { s.rope_dim // 2 }, "optional") end
  -- explicit positions (rope, alibi and pe read them): optional, of any rank
  -- (S) .. (batch axes..., S); the runtime hands the kernel a dense copy
  p.positions = (p.rope or p.alibi or p.pe) and true or false
  if p.positions then
    local q, k = {}, {}
    for _, d in ipairs(batch) do insert(q, d); insert(k, d) end
    insert(q, s.Sq); insert(k, s.Sk)
    sig.positions = { q = q, k = k } -- the full shapes (batch axes..., S)
    input("q_pos", q, "optional")
    input("k_pos", k, "optional")
  end
  -- a KV cache (full-mode self-attention): k_cache and v_cache (batch
  -- axes..., G, CAP, c) in kv_dtype, written in place; int8 scales per
  -- stored row; cache_len, a scalar or one per batch element
  p.cache = s.cache and true or false
  if s.cache then
    p.kv_dtype = s.kv_dtype
    p.CAP = dim(s.cache)
    local kc, ks = {}, {}
    for _, d in ipairs(batch) do insert(kc, d); insert(ks, d) end
    insert(kc, s.kv_heads); insert(kc, s.cache); insert(kc, s.head_dim)
    insert(ks, s.kv_heads); insert(ks, s.cache)
    input("k_cache", kc, "cache")
    input("v_cache", kc, "cache")
    if s.kv_dtype == "int8" then
      input("k_cache_scale", ks, "cache_scale")
      input("v_cache_scale", ks, "cache_scale")
    end
    input("cache_len", batch, "cache_len")
    -- the attention reads an f32 (f64) cache of an f32 (f64) kernel as it is; others it widens
    p.kv_direct = (s.kv_dtype == "f32" and p.real == "float") or (s.kv_dtype == "f64" and p.real == "double")
    sig.cache = { kv = kc, scale = s.kv_dtype == "int8" and ks or nil, len = batch, dtype = s.kv_dtype }
  end
  sig.mask = p.has_mask and { batch = batch, Sk = s.Sk } or nil
  -- the lse output: (batch axes..., H, Sq), Sq = 1 for global attention
  if s.lse then
    local l = {}
    for _, d in ipairs(batch) do insert(l, d) end
    insert(l, s.heads); insert(l, (s.mode == "full" and s.global) and 1 or s.Sq)
    sig.lse = l
  end
  -- the attention weights output attn: (batch axes..., H, Sq, Sk)
  if s.weights_out then
    local a = {}
    for _, d in ipairs(batch) do insert(a, d) end
    insert(a, s.heads); insert(a, (s.mode == "full" and s.global) and 1 or s.Sq); insert(a, s.Sk)
    sig.attn = a
  end
  p.sig = sig
  p.sched = M.schedule(p)
  return p
end

local function round_up(n) return (n + 15) // 16 * 16 end

-- What the fast form's schedule can do for this spec, decided from the
-- spec and its known dims: each flag says that a path may run (its
-- run-time condition still checks the named dims, the threads and whether
-- the primitives are there), so the template writes that path, or none
-- of it.  The numbers restate the run-time conditions of
-- templates/kernel.c.tmpl's get_sizes for the dims known here.
function M.schedule(p)
  local function num(e) return type(e) == "number" and e or nil end
  local nb, sq, sk = num(p.n_batch), num(p.Sq), num(p.Sk)
  local k = {}
  -- the vectorised primitives compute in f32 (a bf16 or f16 kernel's too)
  k.prims = p.dtype ~= "f64"
  -- the attend primitive takes the softcap (tile.softcap), but no other
  -- score modifier, and writes no lse: with those, attention runs in the
  -- C loops (the projections still use the primitives), and the paths
  -- built around the primitive are off
  k.attend = k.prims and not (p.alibi or p.sinks or p.lse or p.weights_out or p.dropout)
  -- alibi, sinks and lse alone: the attend primitive runs as for a key
  -- split (o unnormalised, with each row's max and sum) and the kernel
  -- finishes the rows: the sink joins the sum, lse = m + log l; ALiBi's
  -- key term is a bias table (slope * key position) and its query term,
  -- constant along a row, moves to m (softmax does not see it)
  k.finish = k.prims and not k.attend and not p.weights_out and not p.dropout and not (p.alibi and p.has_bias)
  -- a short query against many keys (decoding): split the keys, then combine
  -- (a bf16, f16 or int8 cache: each split widens its own keys, a chunk at a time; not with
  -- empty_rows=uniform, whose mean of v the combine would take from the widened keys)
  k.split = k.attend and not p.global and (not p.cache or p.kv_direct or p.empty_rows ~= "uniform") and (not sq or sq * p.HPG <= 16) and (not sk or sk >= 1024)
  -- RoPE in full mode without a cache: q and k rows rotated where they are
  -- projected (in every projection path), at angles from a table of the
  -- default positions built in phase 0
  k.rope_proj = p.rope and not p.core and not p.cache and true or false
  -- whole batch elements, or one kv head of one, per attend item, projections included
  -- a cache: k and v rows appended in phase 2, attention over the caches
  local whole = k.attend and not p.core and not p.global and not p.cache
  k.fuse = whole and (not nb or nb >= 4)
    and (not (sq and sk) or 2 * round_up(sq * p.HC) + 2 * round_up(sk * p.GC) <= (1 << 19))
  -- k and v projected head-major: the heads start on the packed weights' 32-wide panels
  k.hm = k.prims and not p.core and p.C % 32 == 0
  k.kv_hm = k.hm and tostring(p.kv_step) == "1" and not p.cache
  k.by_head = whole and k.hm and (not nb or nb * p.G >= 2)
  -- layout bshc: k and v copied head by head into contiguous blocks, when
  -- enough query rows (more than one tile's worth per kv head) reuse each key
  k.kv_t = k.attend and p.core and not p.rope and p.spec.layout == "bshc" and (not sq or sq * p.HPG > 16)
  -- a bias shared by every batch element, transposed once per run
  local shared = true
  for _, ax in ipairs(p.batch) do
    if ax.size ~= 1 and ax.bias_stride then shared = false end
  end
  k.bias_t = k.attend and p.has_bias and shared and p.bias_i ~= nil and p.bias_j ~= nil and p.HPG == 1
    and not p.global and (not nb or nb >= 4)
    and (not (sq and sk) or (p.bias_h and p.H or 1) * sk * round_up(sq) <= (1 << 22))
  return k
end

return M
