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
  -- the runtime reads the semantics from spec, as gen/spec.lua left them
  -- (runtime/host.c's read_gen is their one reader)
  return {
    canonical = s.canonical, name = s.name, source = source, header = header, plain = form == "plain",
    inputs = p.sig.inputs, out = p.sig.out, mask = p.sig.mask, lse = p.sig.lse, attn = p.sig.attn, positions = p.sig.positions, spec = s,
  }
end

return M
