-- gen/plain.lua: what templates/plain.c.tmpl needs to write the plain
-- form of one spec: the algorithm alone, one C function per step, with
-- every size, stride and shape comment already worked out for this spec.

local M = {}

local ipairs, tostring, type = ipairs, tostring, type
local concat, insert = table.concat, table.insert
local sformat = string.format

local plan = require("plan")
local spec = require("spec")

-- Names the plain form uses itself: a named dim that is one of them (or
-- starts with dim_) is written dim_NAME, so it cannot clash.
local TAKEN = {}
for w in ([[
  auto break case char const continue default do double else enum extern float for goto if inline int long
  register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
  real H G C C_IN C_KV HEADS_PER_KV SCALE INFINITY NAN size_t malloc free exp expf
  args n_batch Sq Sk x kv out q k v g o s q_h k_h v_h o_h b h i j d e n r
  wq bq wk bk wv bv wg bg wo bo bias mask mask_b bias_bhi k_bh v_bh q_i o_i
  linear linear_bias split_heads merge_heads mean_query scale scores add_bias apply_mask softmax
  weighted_sum gate done ok
  softcap add_alibi slopes sinks sink_h lse log logf tanh tanhf rope freqs cos sin pow add_pe add_pe_cache copy_real q_pos k_pos pos_q pos_k heads
  cache_len k_cache v_cache k_cache_scale v_cache_scale kv_store kv_load kv_t start nk k_new_h v_new_h qp kp
  project d_project to_heads from_heads rotate row_t row_logit row_forward row_backward philox keep
  d_x d_kv d_q d_k d_v d_o d_og og d_bias d_sinks d_out q_mean n_mean d_q_h d_k_h d_v_h d_o_h d_q_mean D dO sg g_d
  t dp ds dz p m sj l wq wk wv wo seed
  z z0 it bw bw_row bw_for_items bw_project_item bw_run_project bw_d_input_item bw_d_weight_item bw_run_d_project bw_forward_item bw_dq_item bw_dkv_item bw_row_forward_online for_items project_item run_project d_input_item d_weight_item run_d_project forward_item dq_item dkv_item
  d_sink_row zeros i_lo i_hi h_lo h_hi j0 j1 jb j_blocks i_blocks r0 r1 nr n1 e1 BW_ROWS BW_KEYS BW_FEATS row_forward_online alpha pd dot lane bw_exp bw_tile bw_transpose_item BW_LANES Skp bw_logits m_new nan sum pj as ad acc av ak w d0 k0 kt vt i0 e0 nk BW_TK g_k pv dv_j dk_j db bw_transpose bw_pack bw_d_project_prims wt tmp dyt xt raw1 raw2 pw px
  narrow1_bf16 narrow1_f16 compute narrow narrow1 widen_bf16 widen_f16 widen1_bf16 widen1_f16 dequant_int8 store_t f32_bits wide n_out err a
]]):gmatch("%S+") do TAKEN[w] = true end

local function cname(d)
  if TAKEN[d] or d:sub(1, 4) == "dim_" then return "dim_" .. d end
  return d
end

-- A plan expression ("dim_S * 4") with the dims under their C names here.
local function ex(e)
  return (tostring(e):gsub("dim_([%a_][%w_]*)", cname))
end

local function text(dims)
  local t = {}
  for i, d in ipairs(dims) do t[i] = tostring(d) end
  return "(" .. concat(t, ", ") .. ")"
end

-- "(B, S, H*c) = (B, S, 64)": symbols, then this spec's numbers.
local function shape(sym, nums)
  local a, b = text(sym), text(nums)
  return a == b and a or (a .. " = " .. b)
end

local function copy(list, n)
  local t = {}
  for i = 1, n or #list do t[i] = list[i] end
  return t
end

local function with(list, ...)
  local t = copy(list)
  for _, e in ipairs({ ... }) do insert(t, e) end
  return t
end

-- The C expression for batch axis a's index, from the flattened batch
-- index b (row-major over the batch axes).
local function batch_index(batch, a)
  local after = {}
  -- (plan.prod takes spec dims: a named axis's size "dim_T" goes back to "T")
  for n = a + 1, #batch do
    local size = batch[n].size
    insert(after, type(size) == "number" and size or size:gsub("^dim_", ""))
  end
  local e = "b"
  if #after > 0 then e = "b / " .. (#after > 1 and "(" .. ex(plan.prod(after)) .. ")" or ex(plan.prod(after))) end
  if a > 1 then e = "(" .. e .. ") % " .. ex(batch[a].size) end
  return e
end

local function mul(a, b)
  if tostring(b) == "1" then return tostring(a) end
  return tostring(a) .. " * " .. tostring(b)
end

function M.env(p)
  local s = p.spec
  local e = {
    name = p.name, canonical = p.canonical, version = p.version, real = p.real, exp = p.exp,
    core = p.core, H = p.H, G = p.G, C = p.C, HPG = p.HPG, f64 = p.dtype == "f64",
    scale = "(real)" .. p.scale, empty_rows = p.empty_rows,
    softcap = p.softcap and ("(real)" .. p.softcap) or false, alibi = p.alibi, sinks = p.sinks, lse = p.lse,
    tanh = p.dtype == "f64" and "tanh" or "tanhf", log = p.dtype == "f64" and "log" or "logf",
    pos_off = p.core and "Sk - Sq" or (p.cache and "cache_len[b]" or "0"),
    cache = p.cache, kv = p.cache and p.kv_dtype or false, positions = p.positions,
    pe = p.pe, kv_copy = (p.pe and p.self) and true or false, rope = p.rope, rope_dim = p.rope_dim, rope_theta = p.rope_theta, weights_out = p.weights_out,
    global = p.global or false, gated = p.gated or false, self = p.self,
    has_bias = p.has_bias, has_mask = p.has_mask, C_IN = p.C_IN, C_KV = p.C_KV,
    train = p.train, dropout = p.dropout,
  }
  -- bf16 and f16: the tensors widened to f32 first, and the output narrowed
  -- at the end; int8 (or 16-bit) weight matrices widened with them
  e.store = p.store
  e.wide = {}
  local wide = require("emit").widened(p)
  for _, w in ipairs(wide) do
    insert(e.wide, { slot = w.slot, src = w.src, key = w.key, n = ex(w.n), kind = w.kind, scale = w.scale, n_in = w.n_in,
                     pe = w.pe and { width = w.pe.width, step = ex(w.pe.step), len = w.pe.len, pos = w.pe.pos,
                                     cache = w.pe.cache, pos_len = w.pe.pos_len, from_start = w.pe.from_start } or nil })
  end
  e.widen = #wide > 0
  if p.store then e.out_n = ex(plan.prod(p.sig.out)) end
  e.dims = {}
  for i, d in ipairs(p.dims) do e.dims[i] = { c = cname(d.name), index = d.index, name = d.name } end
  local batch = spec.batch_dims(s)
  e.n_batch = ex(p.n_batch)
  e.Sq, e.Sk = ex(p.Sq), ex(p.Sk)
  e.batch_text = #batch > 0 and text(batch) or "()"
  -- the query rows of the logits: one averaged row for global attention
  e.Sl = e.global and "1" or "Sq"

  -- key visibility (step 6): the conditions that hide key j from query i
  local hide, params = {}, {}
  -- (a cache: query i sits at start + i, start = cache_len[b], the positions already filled)
  local p_off = p.cache and " + start" or (s.causal == "bottom_right" and " + Sk - Sq" or "")
  if s.causal ~= "none" then insert(hide, "j > i" .. p_off) end
  if s.window then
    insert(hide, sformat("j < i%s - %d", p_off, s.window[1]))
    if s.causal == "none" then insert(hide, sformat("j > i%s + %d", p_off, s.window[2])) end
  end
  if p.has_mask then insert(hide, "!mask_b[j]") end
  e.masked = #hide > 0
  -- the same bounds as an attend tile takes them (j >= i + lo, j <= i + hi), for a spec without a cache
  local t_off = s.causal == "bottom_right" and "Sk - Sq" or "0"
  e.tile_lo = s.window and sformat("%s - %d", t_off, s.window[1]) or false
  e.tile_hi = s.causal ~= "none" and t_off or (s.window and sformat("%s + %d", t_off, s.window[2])) or false
  e.hide = concat(hide, " || ")
  e.mask_uses_i = s.causal ~= "none" or s.window and true or false
  e.mask_uses_S = p_off == " + Sk - Sq"
  e.mask_uses_start = p.cache
  -- a row may see no key (and needs empty_rows) unless only top-left causal hides keys
  e.may_be_empty = e.masked and not (s.causal == "top_left" and not s.window and not p.has_mask)
  local why = {}
  if s.causal ~= "none" then insert(why, sformat("causal, %s: j <= i%s", s.causal, p_off)) end
  if s.window then insert(why, sformat("window %d,%d: i%s - %d <= j <= i%s + %d", s.window[1], s.window[2], p_off, s.window[1], p_off, s.window[2])) end
  if p.has_mask then insert(why, "key mask: mask_b[j] != 0") end
  e.mask_why = concat(why, "; ")

  -- batch offsets of the mask (strides from args->mask_stride) and the bias
  local moff, boff = {}, {}
  for a, ax in ipairs(p.batch) do
    if ax.size ~= 1 then
      local idx = #batch == 1 and "b" or batch_index(p.batch, a)
      insert(moff, mul(idx, "args->mask_stride[" .. ax.mask_index .. "]"))
      if ax.bias_stride then insert(boff, mul(idx, ex(ax.bias_stride))) end
    end
  end
  e.mask_off = #moff > 0 and concat(moff, " + ") or "0"
  if p.has_bias then
    if p.bias_h then insert(boff, mul("h", ex(p.bias_h))) end
    if p.bias_i and not e.global then insert(boff, mul("i", ex(p.bias_i))) end
    e.bias_off = #boff > 0 and concat(boff, " + ") or "0"
    e.bias_j = p.bias_j and "j" or "0"
    -- the bias's strides along the queries and keys (0: shared along them)
    e.bias_is = (p.bias_i and not e.global) and ex(p.bias_i) or "0"
    e.bias_js = p.bias_j and ex(p.bias_j) or "0"
    e.bias_shape = text(s.bias)
    e.bias_n = ex(plan.prod(s.bias))
  end

  -- the (batch element, kv head) block that query head h reads
  e.gqa = not e.global and p.G > 1 and p.G < p.H
  if e.global or p.G == 1 then e.kv_block = "b"
  elseif p.G == p.H then e.kv_block = "(b * G + h)"
  else e.kv_block = "(b * G + h / HEADS_PER_KV)" end

  e.bshc = s.layout == "bshc"
  if p.core then
    local lead = copy(s.q, s.rank - 3)
    if e.bshc then
      e.q_shape = shape(with(lead, "Sq", "H", "c"), s.q)
      e.kv_shape = shape(with(copy(s.kv, s.rank - 3), "Sk", "G", "c"), s.kv)
      e.row, e.inner_arg, e.inner_param = "b * len + i", "", "" -- q rows (batch, Sq) of H*c
    else
      e.q_shape = shape(with(lead, "H", "Sq", "c"), s.q)
      e.kv_shape = shape(with(copy(s.kv, s.rank - 3), "G", "Sk", "c"), s.kv)
    end
  else
    -- rows of x (and kv, out): attention position i of batch element b
    -- is row (b / inner * len + i) * inner + b % inner, inner = the
    -- product of the batch axes after the attention axis
    local inner = {}
    for a = s.axis + 1, s.rank - 1 do insert(inner, s.x[a]) end
    local ip = plan.prod(inner)
    local inner = tostring(ip) ~= "1" and ex(ip) or nil
    e.row = inner and "(b / inner * len + i) * inner + b % inner" or "b * len + i"
    e.inner_arg = inner and ", " .. inner or ""
    e.inner_param = inner and ", long inner" or ""
    e.inner_expr = inner
    local xr, kr = copy(s.x, s.rank - 1), copy(s.kv, s.rank - 1)
    e.x_shape = shape(with(xr, "c_in"), s.x)
    e.kv_shape = shape(with(kr, "c_kv"), s.kv)
    e.q_shape = shape(with(xr, "H*c"), with(xr, p.H * p.C))
    e.kv_proj_shape = shape(with(kr, "G*c"), with(kr, p.G * p.C))
    local orows = copy(xr)
    if e.global and not e.gated then orows[s.axis] = 1 end
    e.o_shape = shape(with(orows, "H*c"), with(orows, p.H * p.C))
    e.out_shape = shape(with(orows, "c_in"), with(orows, p.C_IN))
    e.out_len = (e.global and not e.gated) and "1" or "Sq"
    e.qkv_bias, e.out_bias = p.qkv_bias, p.out_bias
    e.use_linear = not (p.qkv_bias and p.out_bias and true)
    e.use_linear_bias = p.qkv_bias or p.out_bias or e.gated
    e.global_masked = p.global_masked or false
  end
  return e
end

return M
