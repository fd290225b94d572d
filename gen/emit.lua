-- gen/emit.lua: fill the C templates from a plan -> (source, header).

local M = {}

local ipairs, tostring = ipairs, tostring
local concat, insert = table.concat, table.insert
local supper, sformat = string.upper, string.format

local template = require("template")
local templates = require("templates")

local compiled = {}
local function render(name, env)
  local fn = compiled[name]
  if not fn then
    fn = template.compile(templates[name], "templates/" .. name)
    compiled[name] = fn
  end
  return fn(env)
end

local SLOT_NAMES = {
  x = "ATTNC_SLOT_X", kv = "ATTNC_SLOT_KV", bias = "ATTNC_SLOT_BIAS", mask = "ATTNC_SLOT_MASK",
  q = "ATTNC_SLOT_Q", k = "ATTNC_SLOT_K", v = "ATTNC_SLOT_V",
  wq = "ATTNC_SLOT_WQ", bq = "ATTNC_SLOT_BQ", wk = "ATTNC_SLOT_WK", bk = "ATTNC_SLOT_BK",
  wv = "ATTNC_SLOT_WV", bv = "ATTNC_SLOT_BV", wg = "ATTNC_SLOT_WG", bg = "ATTNC_SLOT_BG",
  wo = "ATTNC_SLOT_WO", bo = "ATTNC_SLOT_BO",
}
M.SLOT_NAMES = SLOT_NAMES

local function shape_text(shape)
  local t = {}
  for i, d in ipairs(shape) do t[i] = tostring(d) end
  return "(" .. concat(t, ", ") .. ")"
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
    (p.G ~= p.H and not p.global) and sformat(", %d kv heads", p.G) or ""))
  local steps = {}
  if not p.core then insert(steps, "project") end
  insert(steps, "split heads")
  insert(steps, "scale")
  insert(steps, "scores")
  if p.has_bias then insert(steps, "bias") end
  if p.has_mask or p.causal ~= "none" or p.window then insert(steps, "mask") end
  insert(steps, "softmax")
  insert(steps, "weighted sum")
  if not p.core then
    insert(steps, "merge heads")
    if p.gated then insert(steps, "gate") end
    insert(steps, "output projection")
  end
  insert(out, "Steps: " .. concat(steps, ", ") .. ".")
  return out
end

function M.emit(p)
  local env = {}
  for k, v in pairs(p) do env[k] = v end
  local names = {}
  for i, d in ipairs(p.dims) do names[i] = '"' .. d.name .. '"' end
  env.dim_names_c = #names > 0 and concat(names, ", ") or "0"
  env.dim_list = #names > 0 and concat((function() local t = {} for i, d in ipairs(p.dims) do t[i] = d.name end return t end)(), ", ") or "none"
  env.summary = summary(p)
  env.mul = function(a, b)
    if b == 1 then return tostring(a) end
    if a == 1 then return tostring(b) end
    return tostring(a) .. " * " .. tostring(b)
  end
  env.fast_ok = p.dtype == "f32"
  env.QT = p.global and 1 or math.max(1, 64 // p.HPG)
  env.empty_code = ({ zero = 0, uniform = 1, nan = 2 })[p.empty_rows]
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
  env.bias_h, env.bias_i, env.bias_j = p.bias_h or false, p.bias_i or false, p.bias_j or false
  if not p.core then
    local s = p.spec
    local xr, kr = {}, {}
    for i = 1, s.rank - 1 do xr[i] = s.x[i]; kr[i] = s.kv[i] end
    env.x_rows_shape, env.kv_rows_shape = shape_text(xr), shape_text(kr)
  end
  local source = render("kernel.c.tmpl", env)

  local tensors = {}
  for _, t in ipairs(p.sig.inputs) do
    insert(tensors, { slot_name = SLOT_NAMES[t.slot], shape = shape_text(t.shape) })
  end
  local hb = {}
  if p.sig.mask then for _, d in ipairs(p.sig.mask.batch) do insert(hb, tostring(d)) end end
  local henv = {
    name = p.name, upper = supper(p.name), guard = supper(p.name) .. "_H",
    canonical = p.canonical, version = p.version, dims = p.dims, dim_list = env.dim_list,
    tensors = tensors, out_shape = shape_text(p.sig.out), has_mask = p.has_mask,
    mask_batch = "(" .. concat(hb, ", ") .. ")", abi = templates["abi.h"],
    H = p.H, G = p.G, C = p.C, core = p.core, C_IN = p.C_IN, C_KV = p.C_KV,
  }
  local header = render("header.h.tmpl", henv)
  return source, header
end

return M
