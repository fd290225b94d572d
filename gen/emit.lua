-- gen/emit.lua: fill the C templates from a plan -> (source, header).

local M = {}

local ipairs, tostring = ipairs, tostring
local concat, insert = table.concat, table.insert
local supper, sformat, sfind, ssub = string.upper, string.format, string.find, string.sub

local template = require("template")
local templates = require("templates")
-- templates already compiled by the library (tools/embed.c), by file name
local precompiled = package.loaded["templates_bc"] or {}

local compiled = {}
local function render(name, env)
  local fn = compiled[name]
  if not fn then
    local chunk = "templates/" .. name
    fn = precompiled[name] and template.wrap(precompiled[name], chunk) or template.compile(templates[name], chunk)
    compiled[name] = fn
  end
  return fn(env)
end

-- One ENTRY(NAME, key) list of templates/abi.h, the one place the
-- generator, the generated code and the runtime take it from: key -> the
-- C name (prefix .. NAME).
local function abi_list(list, prefix)
  local text = templates["abi.h"]
  local at = sfind(text, "#define " .. list .. "(ENTRY)", 1, true)
  if not at then error("templates/abi.h has no " .. list, 0) end
  local out = {}
  for line in ssub(text, at):gmatch("[^\n]*") do
    for name, key in line:gmatch("ENTRY%((%u[%u_]*), (%l[%l_]*)%)") do out[key] = prefix .. name end
    if not sfind(line, "\\%s*$") then break end
  end
  return out
end

local SLOT_NAMES = abi_list("ATTNC_SLOT_LIST", "ATTNC_SLOT_")
local EMPTY_ROWS = abi_list("ATTNC_EMPTY_ROWS_LIST", "ATTNC_EMPTY_")
M.SLOT_NAMES = SLOT_NAMES

local plan = require("plan")
local shape_text = plan.shape_text

-- The tensors a kernel widens before it computes: with dtype bf16 or f16
-- every input but the mask; weight matrices stored otherwise than the
-- arithmetic (int8 with their scales, or a 16-bit dtype).  Each has its
-- kind (bf16, f16, int8), its element count (a C expression of the named
-- dims), and for a weight matrix, its scale slot (int8) and row width;
-- the primitives take weight matrices packed, so one is widened only when
-- args->packed has none.
function M.widened(p)
  local out, compute = {}, p.dtype == "f64" and "f64" or "f32"
  for _, t in ipairs(p.sig.inputs) do
    local kind
    if t.role == "matrix" then
      if p.weights ~= compute then kind = p.weights end
    elseif t.role == "input" or t.role == "weight" then -- (caches, scales, cache_len and optional inputs are read as they are)
      kind = p.store
    end
    -- pe: x (and kv) copied with the positional encoding added
    local pe = p.pe and (t.slot == "x" or t.slot == "kv")
    if pe and not kind then kind = "copy" end
    if kind then
      insert(out, { slot = SLOT_NAMES[t.slot], key = t.slot, n = plan.prod(t.shape), kind = kind,
                    pe = pe and { width = t.slot == "x" and "C_IN" or "C_KV", step = t.slot == "x" and p.x_step or p.kv_step,
                                  len = t.slot == "x" and "Sq" or "Sk", n_in = t.shape[#t.shape],
                                  pos = t.slot == "x" and "ATTNC_SLOT_Q_POS" or "ATTNC_SLOT_K_POS",
                                  cache = p.cache and true, pos_len = "Sq", from_start = 0 } or nil,
                    packable = t.role == "matrix", n_in = t.shape[2],
                    scale = kind == "int8" and SLOT_NAMES[t.slot .. "_scale"] or nil, src = SLOT_NAMES[t.slot] })
      -- self-attention with pe: the k and v projections read x encoded at
      -- the key positions (k_pos), a second copy in the kv slot
      if pe and p.self then
        insert(out, { slot = SLOT_NAMES.kv, src = SLOT_NAMES.x, key = "kv (x at the key positions)", n = plan.prod(t.shape), kind = kind,
                      pe = { width = "C_IN", step = p.kv_step, len = p.cache and "Sq" or "Sk", pos = "ATTNC_SLOT_K_POS",
                             -- a cache: x's new row i is key cache_len + i, and k_pos numbers the CAP positions
                             cache = p.cache and true, pos_len = "Sk", from_start = 1 } })
      end
    end
  end
  return out
end

-- What templates/convert.c.tmpl writes for a kernel: the kinds it widens,
-- and the storage in words.
local function convert_env(p, env, wide)
  env.need = {}
  env.need_pe = false
  for _, w in ipairs(wide) do
    env.need[w.kind] = true
    if w.pe then env.need_pe = true end
  end
  -- a backward pass with pe copies x (and kv) itself, already widened
  if p.train and p.pe then env.need.copy = true end
  local words = {}
  if p.store then insert(words, "every tensor but the mask in " .. p.store) end
  if p.pe then insert(words, "x" .. (p.self and "" or " and kv") .. " read with a sinusoidal positional encoding added") end
  if p.weights == "int8" then insert(words, "the weight matrices in int8 with a scale per row")
  elseif p.weights ~= p.dtype then insert(words, "the weight matrices in " .. p.weights) end
  -- a KV cache: its storage type, and whether the attention reads it as it is
  env.kv = p.cache and p.kv_dtype or false
  env.kv_c = ({ f32 = "float", f64 = "double", bf16 = "store_t", f16 = "store_t", int8 = "signed char" })[p.kv_dtype or "f32"]
  if p.cache then
    insert(words, "the KV cache in " .. p.kv_dtype .. (p.kv_dtype == "int8" and " with a scale per row" or ""))
  end
  env.storage_text = concat(words, "; ")
  if #wide == 0 and not p.store and not p.cache then return "" end
  return (render("convert.c.tmpl", env):gsub("\n$", ""))
end

-- A few lines describing the variant, in the worksheet's words.
local function summary(p)
  local s, out = p.spec, {}
  if p.core then
    insert(out, sformat("Scaled dot-product attention on projected q %s, k and v %s.", p.q_shape, p.kv_shape))
  else
    insert(out, sformat("%s attention over axis %d of x %s%s.",
      s.global and "Global" or (s.self and "Self" or "Cross"), p.axis_index, p.x_shape,
      s.self and "" or (", keys and values from kv " .. p.kv_shape)))
  end
  local kind = (p.G == p.H) and "MHA" or ((p.G == 1) and "MQA" or "GQA")
  if p.global then kind = "global (one k/v head)" end
  insert(out, sformat("%d heads of width %d, %s%s.", p.H, p.C, kind,
    (p.G ~= p.H and not p.global) and sformat(", %d kv head%s", p.G, p.G == 1 and "" or "s") or ""))
  local steps = {}
  if p.pe then insert(steps, "add the positional encoding (" .. p.pe .. ")") end
  if not p.core then insert(steps, "project") end
  insert(steps, "split heads")
  if p.rope then insert(steps, "rotate (RoPE " .. p.rope .. ")") end
  if p.cache then insert(steps, "append k and v to the cache (" .. p.kv_dtype .. ")") end
  insert(steps, "scale")
  insert(steps, "scores")
  if p.softcap then insert(steps, "softcap") end
  if p.has_bias then insert(steps, "bias") end
  if p.alibi then insert(steps, "ALiBi") end
  if p.has_mask or p.causal ~= "none" or p.window then insert(steps, "mask") end
  insert(steps, p.sinks and "softmax with a sink" or "softmax")
  if p.dropout then insert(steps, "dropout") end
  insert(steps, "weighted sum")
  if not p.core then
    insert(steps, "merge heads")
    if p.gated then insert(steps, "gate") end
    insert(steps, "output projection")
  end
  insert(out, "Steps: " .. concat(steps, ", ") .. ".")
  return out
end

-- One line per buffer: name, meaning, shape in symbols = shape in numbers.
local function buffers(p)
  local s, out = p.spec, {}
  local function row(name, what, sym, nums)
    local shape = shape_text(sym)
    if nums then shape = shape .. " = " .. shape_text(nums) end
    insert(out, sformat("%-5s %-40s %s", name .. ":", what, shape))
  end
  local H, G, C = p.H, p.G, p.C
  if p.core then
    local r = s.rank
    local qs, ks = {}, {}
    for i = 1, r - 3 do qs[i] = s.q[i]; ks[i] = s.kv[i] end
    local q_sym, k_sym = {}, {}
    for i, d in ipairs(qs) do q_sym[i] = d; k_sym[i] = ks[i] end
    if s.layout == "bshc" then
      insert(q_sym, "Sq"); insert(q_sym, "H"); insert(q_sym, "c")
      insert(k_sym, "Sk"); insert(k_sym, "G"); insert(k_sym, "c")
    else
      insert(q_sym, "H"); insert(q_sym, "Sq"); insert(q_sym, "c")
      insert(k_sym, "G"); insert(k_sym, "Sk"); insert(k_sym, "c")
    end
    row("q", "queries", q_sym, s.q)
    row("k", "keys", k_sym, s.kv)
    row("v", "values", k_sym, s.kv)
    row("out", "attention output", q_sym, s.q)
  else
    local r, ax = s.rank, s.axis
    local rows_x, rows_kv = {}, {}
    for i = 1, r - 1 do rows_x[i] = s.x[i]; rows_kv[i] = s.kv[i] end
    local function with(list, ...) local t = {} for i, d in ipairs(list) do t[i] = d end for _, e in ipairs({ ... }) do insert(t, e) end return t end
    row("x", "input, attention along axis " .. (ax - 1), with(rows_x, "c_in"), s.x)
    if not s.self then row("kv", "key/value input", with(rows_kv, "c_kv"), s.kv) end
    row("wq", "query projection", { "H*c", "c_in" }, { H * C, s.c_in })
    row("wk", "key projection" .. (p.global and " (one head)" or ""), { "G*c", "c_kv" }, { G * C, s.c_kv })
    row("wv", "value projection", { "G*c", "c_kv" }, { G * C, s.c_kv })
    if p.gated then row("wg", "gate projection", { "H*c", "c_in" }, { H * C, s.c_in }) end
    row("wo", "output projection", { "c_in", "H*c" }, { s.c_in, H * C })
    row("q", "queries, heads side by side", with(rows_x, "H", "c"), with(rows_x, H, C))
    row("k", "keys", with(rows_kv, "G", "c"), with(rows_kv, G, C))
    row("v", "values", with(rows_kv, "G", "c"), with(rows_kv, G, C))
    if p.gated then row("g", "gate pre-activation", with(rows_x, "H", "c"), with(rows_x, H, C)) end
    local rows_o = {}
    for i, d in ipairs(rows_x) do rows_o[i] = (i == ax and p.global and not p.gated) and 1 or d end
    row("o", "attention output, heads merged", with(rows_o, "H", "c"), with(rows_o, H, C))
    row("out", "output", with(rows_o, "c_in"), with(rows_o, s.c_in))
  end
  if p.cache then
    local kc, ks = {}, {}
    for _, d in ipairs(p.sig.cache.len) do insert(kc, d); insert(ks, d) end
    insert(kc, "G"); insert(kc, "CAP"); insert(kc, "c")
    row("k_cache", "keys of every position, " .. p.kv_dtype .. ", in place", kc, p.sig.cache.kv)
    row("v_cache", "values of every position, likewise", kc, p.sig.cache.kv)
    if p.sig.cache.scale then
      insert(ks, "G"); insert(ks, "CAP")
      row("k_cache_scale", "a scale per k_cache row (v_cache_scale too)", ks, p.sig.cache.scale)
    end
  end
  if s.bias then row("bias", "logit bias (*, H, Sq, Sk)", s.bias, nil) end
  if p.has_mask then
    local m = {}
    for _, d in ipairs(require("spec").batch_dims(s)) do insert(m, d) end
    insert(m, s.Sk)
    row("mask", "key mask, nonzero keeps (may have fewer dims)", m, nil)
  end
  local tile = { "QT*" .. p.HPG, "64" }
  row("s", "scores of one tile: query rows x key tile", tile, { (p.global and 1 or math.max(1, 64 // p.HPG)) * p.HPG, 64 })
  return out
end

-- NAME_mask_strides(), which both forms define for a spec with a key mask.
local function mask_strides(p)
  if not p.has_mask then return "" end
  local env = {}
  for k, v in pairs(p) do env[k] = v end
  return (render("mask_strides.c.tmpl", env):gsub("\n$", ""))
end

-- "B, S": the named dims, or "none".
local function dim_list(p)
  local t = {}
  for i, d in ipairs(p.dims) do t[i] = d.name end
  return #t > 0 and concat(t, ", ") or "none"
end
M.dim_list = dim_list

-- The fast form (what runs by default) or the plain form (gen/plain.lua).
function M.emit(p, form)
  local source
  if form == "plain" then
    local env = require("plain").env(p)
    env.summary = summary(p)
    env.mask_strides = mask_strides(p)
    env.dim_list = dim_list(p)
    env.convert = convert_env(p, env, M.widened(p))
    env.dropout_c = p.dropout and render("dropout.c.tmpl", env) or ""
    source = render("plain.c.tmpl", env)
    if p.train then
      source = source .. render("backward_common.c.tmpl", env) .. render("backward.c.tmpl", env) .. render("backward_bytes.c.tmpl", env)
      if p.store then source = source .. render("backward_wide.c.tmpl", env) end
    end
  else
    source = M.fast(p)
    if p.train then
      -- the backward pass: the plain form's steps and rows, run in
      -- passes of independent items over the runtime's threads
      local env = require("plain").env(p)
      convert_env(p, env, M.widened(p))
      env.HPG = p.HPG
      env.bias_h_on, env.bias_i_on = p.bias_h and true or false, (p.bias_i and not p.global) and true or false
      -- the bias has its own block for each batch element (every batch axis of more than one)
      env.bias_b_on = p.has_bias and true or false
      for _, ax in ipairs(p.batch) do
        if ax.size ~= 1 and not ax.bias_stride then env.bias_b_on = false end
      end
      env.use_prims = p.dtype ~= "f64"
      -- the forward's rows on the attend primitive (its lse output): what it takes without finishing rows
      env.prim_forward = env.use_prims and not p.global and not p.alibi and not p.sinks and not p.dropout and not p.cache
      env.empty_code = EMPTY_ROWS[p.empty_rows]
      env.fast = true
      source = source .. render("backward_common.c.tmpl", env) .. render("fast_backward.c.tmpl", env) .. render("backward_bytes.c.tmpl", env)
      if p.store then source = source .. render("backward_wide.c.tmpl", env) end
    end
  end
  return source, M.header(p, form == "plain")
end

function M.fast(p)
  local env = {}
  for k, v in pairs(p) do env[k] = v end
  local names = {}
  for i, d in ipairs(p.dims) do names[i] = '"' .. d.name .. '"' end
  env.dim_names_c = #names > 0 and concat(names, ", ") or "0"
  env.summary = summary(p)
  env.buffers = buffers(p)
  env.mask_strides = mask_strides(p)
  env.dim_list = dim_list(p)
  env.mul = function(a, b)
    if b == 1 then return tostring(a) end
    if a == 1 then return tostring(b) end
    return tostring(a) .. " * " .. tostring(b)
  end
  -- the projections' primitive, and where its packed weight's columns
  -- n0.. start: f32 panels of n_in floats a column, or, for int8 weights
  -- kept int8 (weights=int8), ATTNC_Q8_PANEL(n_in) bytes a panel of 32
  -- kept int8 (weights=int8), ATTNC_Q8_PANEL(n_in) bytes a panel of 32;
  -- bf16 weights of bf16 activations kept bf16, ATTNC_BF16_PANEL(n_in)
  local w16 = p.weights == "int8" and "q8" or (p.weights == "bf16" and p.dtype == "bf16") and "bf16" or nil
  env.linear = w16 and "linear_" .. w16 or "linear"
  env.linear_heads = w16 and "linear_heads_" .. w16 or "linear_heads"
  env.w_at = function(w, n0, n_in)
    if w16 then return "(const unsigned char *)" .. w .. " + " .. n0 .. " / 32 * ATTNC_" .. w16:upper() .. "_PANEL(" .. n_in .. ")" end
    return w .. " + " .. n0 .. " * " .. n_in
  end
  -- a bf16 kernel's attention may round q, k, v and p to bf16 (AMX tiles)
  env.attend_fn = p.dtype == "bf16" and "attend_bf16" or "attend"
  env.QT = p.global and 1 or math.max(1, 64 // p.HPG)
  -- a bf16 kernel's tiles may take attend_bf16's row count (z.qt)
  env.qt_rows = p.dtype == "bf16" and not p.global and p.sched.prims
  env.empty_code = EMPTY_ROWS[p.empty_rows]
  -- batch offsets of bias and mask, from the batch index variables
  local bo, mo = {}, {}
  for _, ax in ipairs(p.batch) do
    if ax.size ~= 1 then
      if ax.bias_stride then insert(bo, env.mul(ax.var, ax.bias_stride)) end
      insert(mo, ax.var .. " * args->mask_stride[" .. ax.mask_index .. "]")
    end
  end
  env.bias_offset = #bo > 0 and concat(bo, " + ") or "0"
  env.mask_offset = #mo > 0 and concat(mo, " + ") or "0"
  env.global, env.gated, env.global_masked = p.global or false, p.gated or false, p.global_masked or false
  env.self = p.self
  env.layout = p.spec.layout
  env.bias_h, env.bias_i, env.bias_j = p.bias_h or false, p.bias_i or false, p.bias_j or false
  -- the paths the schedule may take (plan.schedule): the template writes no other
  local k = p.sched
  env.fast_ok, env.split_ok, env.fuse_ok, env.head_ok = k.prims, k.split, k.fuse, k.by_head
  env.hm_ok, env.kv_hm_ok, env.bias_t_ok, env.kv_t_ok = k.hm, k.kv_hm, k.bias_t, k.kv_t
  env.attend_ok = k.attend
  -- by head with int8 weights: x's rows quantised once for every head (q8_by_rows)
  env.q8h = k.by_head and p.weights == "int8"
  env.rope_proj = k.rope_proj
  env.finish_ok = k.finish
  env.tanh, env.log = p.dtype == "f64" and "tanh" or "tanhf", p.dtype == "f64" and "log" or "logf"
  env.phase0 = not p.core or k.bias_t or k.kv_t -- the project phase has items
  env.wide, env.out_n = M.widened(p), p.store and plan.prod(p.sig.out) or nil
  env.widen = #env.wide > 0
  -- a bf16 or f16 core kernel's decoding step: attend_kv reads k and v as
  -- they are stored (half an f32 copy's bytes), so they are not widened;
  -- which of the widened tensors they are (C indices)
  env.kv16 = false
  if p.core and (p.store == "bf16" or p.store == "f16") and k.attend and k.split and p.empty_rows ~= "uniform" and p.spec.layout ~= "bshc"
      and not p.rope and not p.global then
    for i, w in ipairs(env.wide) do
      if w.key == "k" then env.kv16_k = i - 1 elseif w.key == "v" then env.kv16_v = i - 1 end
    end
    env.kv16 = env.kv16_k ~= nil and env.kv16_v ~= nil
  end
  env.convert = convert_env(p, env, env.wide)
  env.dropout_c = p.dropout and render("dropout.c.tmpl", env) or ""
  if not p.core then
    local s = p.spec
    local xr, kr = {}, {}
    for i = 1, s.rank - 1 do xr[i] = s.x[i]; kr[i] = s.kv[i] end
    env.x_rows_shape, env.kv_rows_shape = shape_text(xr), shape_text(kr)
  end
  -- one sub-template per phase, each a function of its work items
  local function phase(name) return (render(name, env):gsub("\n$", "")) end
  env.phase_project = phase("fast_project.c.tmpl")
  env.phase_attend = phase("fast_attend.c.tmpl")
  env.phase_combine = env.split_ok and phase("fast_combine.c.tmpl") or ""
  env.phase_output = not p.core and phase("fast_output.c.tmpl") or ""
  return render("kernel.c.tmpl", env)
end

-- The C element type of each storage type, as a header comment names it
local C_TYPE = {
  f32 = "float", f64 = "double", bf16 = "bf16 as unsigned short", f16 = "f16 as unsigned short",
  int8 = "int8 as signed char",
}

-- What the kernel reads in a slot, by the input's role in gen/plan.lua:
-- the twin of attnc_slot_dtype in runtime/host.c, which the runtime
-- converts bound tensors to (test_runtime checks that the two agree)
local function slot_type(p, t)
  local s = p.spec
  if t.role == "matrix" then return C_TYPE[s.weights or s.dtype] end
  if t.role == "cache" then return C_TYPE[p.kv_dtype] end
  if t.role == "scale" or t.role == "cache_scale" or t.slot == "rope_freqs" then return "float" end
  if t.role == "cache_len" or t.slot == "q_pos" or t.slot == "k_pos" then return "long long" end
  return C_TYPE[s.dtype]
end

local OPTIONAL = {
  rope_freqs = "or NULL for all 1", q_pos = "or NULL for the default positions",
  k_pos = "or NULL for the default positions",
}

function M.header(p, plain)
  local tensors = {}
  for _, t in ipairs(p.sig.inputs) do
    local ty = slot_type(p, t)
    if OPTIONAL[t.slot] then ty = ty .. ", " .. OPTIONAL[t.slot] end
    insert(tensors, { slot_name = SLOT_NAMES[t.slot], shape = shape_text(t.shape), type = ty })
  end
  local hb = {}
  if p.sig.mask then for _, d in ipairs(p.sig.mask.batch) do insert(hb, tostring(d)) end end
  local henv = {
    name = p.name, upper = supper(p.name), guard = supper(p.name) .. "_H",
    canonical = p.canonical, version = p.version, dims = p.dims, dim_list = dim_list(p),
    tensors = tensors, out_shape = shape_text(p.sig.out), has_mask = p.has_mask, out_type = C_TYPE[p.spec.dtype],
    lse_shape = p.sig.lse and shape_text(p.sig.lse), attn_shape = p.sig.attn and shape_text(p.sig.attn),
    mask_batch = "(" .. concat(hb, ", ") .. ")", abi = templates["abi.h"],
    H = p.H, G = p.G, C = p.C, core = p.core, C_IN = p.C_IN, C_KV = p.C_KV, plain = plain,
    cache = p.cache, kv = p.kv_dtype, cap = p.cache and tostring(p.spec.cache), train = p.train,
    kv_c = p.cache and ({ f32 = "float", f64 = "double", bf16 = "bf16 as unsigned short", f16 = "f16 as unsigned short", int8 = "int8 as signed char" })[p.kv_dtype],
  }
  return render("header.h.tmpl", henv)
end

return M
