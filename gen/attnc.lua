-- gen/attnc.lua: the generator's entry points, called by the C host.

local M = {}

local spec = require("spec")
local plan = require("plan")
local emit = require("emit")

M.VERSION = "0.1.0"

-- spec text -> canonical string
function M.canonical(text)
  return spec.parse(text).canonical
end

-- spec text and form ("fast" or "plain") -> everything the runtime needs
-- to compile and bind a kernel
function M.generate(text, form)
  local s = spec.parse(text)
  local p = plan.plan(s, M.VERSION)
  local source, header = emit.emit(p, form)
  return {
    canonical = s.canonical, name = s.name, source = source, header = header, plain = form == "plain",
    dtype = s.dtype, dims = s.dims, inputs = p.sig.inputs, out = p.sig.out,
    mask = p.sig.mask, core = p.core,
    global = s.global, gated = s.gated, global_mean = s.global_mean,
    mode = s.mode, rank = s.rank, axis = s.axis, self = s.self,
    heads = s.heads, kv_heads = s.kv_heads, head_dim = s.head_dim,
    qkv_bias = s.qkv_bias, out_bias = s.out_bias,
    bias = s.bias, has_mask = s.mask == "key", causal = s.causal,
    window = s.window, scale = s.scale, empty_rows = s.empty_rows,
    c_in = s.c_in, c_kv = s.c_kv, spec = s,
  }
end

return M
