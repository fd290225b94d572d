-- gen/spec.lua: parse, validate and canonicalise an attention spec.
--
-- A spec is data.  It is split into words and every value is checked
-- against a strict pattern before it is stored; nothing in it is ever
-- loaded as Lua, and only numbers, enumeration values and identifiers
-- that passed these checks can reach the generated C.
--
-- Errors are raised as tables {line=, col=, msg=} so the C host can report
-- "spec:LINE:COL: error: MSG" with the position of the offending word.

local M = {}

local error, type, tostring, tonumber, ipairs, pairs = error, type, tostring, tonumber, ipairs, pairs
local sfind, ssub, sformat, sbyte, smatch = string.find, string.sub, string.format, string.byte, string.match
local concat, insert, sort = table.concat, table.insert, table.sort
local floor, huge, sqrt, min = math.floor, math.huge, math.sqrt, math.min

M.MAX_RANK = 6          -- x may be 2-D .. 6-D
M.MAX_DIM = 1 << 31     -- a constant dim must stay below this
M.MAX_HEADS = 4096
M.MAX_HEAD_DIM = 4096
M.MAX_WIDTH = 1 << 20
M.MAX_NAME = 48         -- identifiers: [A-Za-z_][A-Za-z0-9_]*, at most this long
M.MAX_SPEC = 64 * 1024  -- bytes
M.MAX_ELEMS = 2.0 ^ 40  -- elements in one tensor, counting its constant dims

local PRESETS = { alphafold = true, mha = true, mqa = true, gqa = true }

-- Every key with the kind of value it takes.
local KEYS = {
  preset = "enum", x = "shape", kv = "shape", q = "shape", attn_dim = "int",
  heads = "int", kv_heads = "int", head_dim = "int", qkv_bias = "bool",
  out_bias = "bool", gated = "bool", global = "bool", global_mean = "enum",
  bias = "shape", mask = "enum", causal = "enum", window = "pair", scale = "float",
  empty_rows = "enum", mode = "enum", dtype = "enum", name = "ident", layout = "enum",
  weights = "enum", softcap = "float", alibi = "float", sinks = "bool", lse = "bool",
  rope = "enum", rope_dim = "int", rope_theta = "float", weights_out = "bool", pe = "enum",
  cache = "dim", kv_dtype = "enum", train = "bool", dropout = "float",
}
local ENUMS = {
  preset = { "alphafold", "mha", "mqa", "gqa" },
  global_mean = { "plain", "masked" },
  mask = { "key", "none" },
  causal = { "top_left", "bottom_right", "none", "true", "false" },
  empty_rows = { "zero", "uniform", "nan" },
  mode = { "full", "core" },
  layout = { "bhsc", "bshc" },
  dtype = { "f32", "f64", "bf16", "f16" },
  weights = { "int8", "f32", "f64", "bf16", "f16" },
  kv_dtype = { "f32", "f64", "bf16", "f16", "int8" },
  rope = { "neox", "gptj", "none" },
  pe = { "sinusoidal", "none" },
}
local FLAGS = { gated = "true", global = "true", causal = "top_left", qkv_bias = "true", out_bias = "true",
  alibi = "8", sinks = "true", lse = "true", weights_out = "true", train = "true" }
local KEY_ORDER = {
  "preset", "mode", "x", "kv", "q", "layout", "attn_dim", "heads", "kv_heads", "head_dim", "qkv_bias",
  "out_bias", "gated", "global", "global_mean", "bias", "mask", "causal", "window", "scale",
  "empty_rows", "pe", "rope", "rope_dim", "rope_theta", "softcap", "alibi", "sinks", "cache", "lse", "weights_out", "train", "dropout", "dtype", "weights", "kv_dtype", "name",
}
M.KEY_ORDER = KEY_ORDER

local C_KEYWORDS = {}
for w in ("auto break case char const continue default do double else enum extern float for goto if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while _Bool _Complex _Imaginary main"):gmatch("%S+") do
  C_KEYWORDS[w] = true
end

local function fail(pos, fmt, ...)
  error({ line = pos.line, col = pos.col, msg = sformat(fmt, ...) }, 0)
end
M.fail = fail

-- Edit distance for "did you mean": insertions, deletions, substitutions
-- and swaps of two neighbouring letters (bf61 is one edit from bf16).
local function distance(a, b)
  local la, lb = #a, #b
  local pp, prev, cur = {}, {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    for j = 1, lb do
      local ca, cb = sbyte(a, i), sbyte(b, j)
      local cost = (ca == cb) and 0 or 1
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
      if i > 1 and j > 1 and ca == sbyte(b, j - 1) and sbyte(a, i - 1) == cb then
        cur[j] = min(cur[j], pp[j - 2] + 1)
      end
    end
    pp, prev, cur = prev, cur, pp
  end
  return prev[lb]
end

local function suggest(word, candidates)
  -- at most 2 edits (1 for words under 3 letters: no 'x' for every short typo)
  local best, bestd = nil, (#word >= 3) and 3 or 2
  if #word > 32 then return nil end -- no key is that long; keeps refusals of huge words fast
  for _, c in ipairs(candidates) do
    -- the distance is at least the difference in length: skip what cannot win
    if math.abs(#word - #c) < bestd then
      local d = distance(word, c)
      if d < bestd then best, bestd = c, d end
    end
  end
  if best or #word < 2 then return best end
  -- else the one candidate the word begins (pe=sin: sinusoidal)
  for _, c in ipairs(candidates) do
    if ssub(c, 1, #word) == word then
      if best then return nil end
      best = c
    end
  end
  return best
end

-- Quote user text for an error message: printable ASCII only, short.
local function show(s)
  s = s:gsub("[^%w%p ]", "?")
  if #s > 40 then s = ssub(s, 1, 37) .. "..." end
  return "'" .. s .. "'"
end
M.show = show

local function is_ident(s)
  return #s <= M.MAX_NAME and smatch(s, "^[A-Za-z_][A-Za-z0-9_]*$") ~= nil
end
M.is_ident = is_ident

-- Split text into words with their line and column; '#' starts a comment.
local function words(text)
  local out = {}
  local line, col, i, n = 1, 1, 1, #text
  while i <= n do
    local ch = ssub(text, i, i)
    if ch == "\n" then
      line, col, i = line + 1, 1, i + 1
    elseif ch == " " or ch == "\t" or ch == "\r" or ch == "\f" or ch == "\v" then
      col, i = col + 1, i + 1
    elseif ch == "#" then
      local e = sfind(text, "\n", i, true) or (n + 1)
      col, i = col + (e - i), e
    else
      local s = i
      while i <= n do
        local c2 = ssub(text, i, i)
        if c2 == " " or c2 == "\t" or c2 == "\n" or c2 == "\r" or c2 == "\f" or c2 == "\v" or c2 == "#" then break end
        i = i + 1
      end
      insert(out, { text = ssub(text, s, i - 1), line = line, col = col })
      col = col + (i - s)
    end
  end
  return out
end

local function parse_int(s, pos, what)
  if not smatch(s, "^[+-]?%d+$") then
    fail(pos, "%s must be an integer, got %s", what, show(s))
  end
  local digits = s:gsub("^[+-]", "")
  if #digits > 10 then fail(pos, "%s %s is out of range", what, show(s)) end
  return tonumber(s)
end

-- an example of each decimal key's values, for its errors
local FLOAT_EXAMPLE = { scale = "0.125", rope_theta = "500000", alibi = "8", softcap = "50", dropout = "0.1" }

local function parse_float(s, pos, what)
  -- decimal notation only: no hex, no inf/nan, no Lua syntax
  if not (smatch(s, "^[+-]?%d+%.?%d*[eE][+-]?%d+$") or smatch(s, "^[+-]?%d+%.?%d*$")
          or smatch(s, "^[+-]?%.%d+[eE][+-]?%d+$") or smatch(s, "^[+-]?%.%d+$")) then
    fail(pos, "%s must be a decimal number such as %s=%s, got %s", what, what, FLOAT_EXAMPLE[what] or "0.125", show(s))
  end
  local v = tonumber(s)
  if v == nil or v ~= v or v == huge or v == -huge then
    fail(pos, "%s %s is not a finite number", what, show(s))
  end
  v = v + 0.0            -- always a float, so equal values print equally
  if v == 0 then v = 0.0 end -- and -0.0 is 0.0
  return v
end

-- A shape: comma-separated dims, each a positive integer or a name.
local function parse_shape(s, pos, key)
  if s == "" then fail(pos, "%s needs a shape such as %s=B,S,512", key, key) end
  local dims, col = {}, 0
  for piece in (s .. ","):gmatch("([^,]*),") do
    local dpos = { line = pos.line, col = pos.col + col }
    if piece == "" then
      fail(dpos, "empty dim in %s=%s (dims are separated by single commas)", key, show(s))
    elseif smatch(piece, "^[+-]?%d+$") then
      local v = parse_int(piece, dpos, "dim")
      if v <= 0 then fail(dpos, "dim %s of %s must be positive", show(piece), key) end
      if v >= M.MAX_DIM then fail(dpos, "dim %s of %s is too large (limit %d)", show(piece), key, M.MAX_DIM - 1) end
      insert(dims, v)
    elseif is_ident(piece) then
      if C_KEYWORDS[piece] then fail(dpos, "dim name %s is a C keyword; choose another name", show(piece)) end
      insert(dims, piece)
    else
      fail(dpos, "dim %s of %s is neither a positive integer nor a name like S", show(piece), key)
    end
    col = col + #piece + 1
  end
  if #dims > M.MAX_RANK + 2 then fail(pos, "%s has %d dims; at most %d are supported", key, #dims, M.MAX_RANK + 2) end
  local elems = 1.0
  for _, d in ipairs(dims) do if type(d) == "number" then elems = elems * d end end
  if elems > M.MAX_ELEMS then
    fail(pos, "%s=%s has %.3g elements, more than the limit 2^40", key, show(s), elems)
  end
  return dims
end

local function shape_str(dims)
  local t = {}
  for i, d in ipairs(dims) do t[i] = tostring(d) end
  return concat(t, ",")
end
M.shape_str = shape_str

-- boolean words that are not numbers: alibi=1 is max_bias 1 and softcap=0 an error
local TRUE_WORDS = { ["true"] = true, yes = true, on = true }
local FALSE_WORDS = { ["false"] = true, no = true, off = true }

local function parse_value(key, s, pos)
  local kind = KEYS[key]
  -- the optional keys whose default is "none" take that word (and false)
  -- back; alibi is a flag too, so its boolean words mean 8 and off
  if (key == "cache" or key == "softcap" or key == "alibi") and (s == "none" or FALSE_WORDS[s]) then
    return false
  end
  if key == "alibi" and TRUE_WORDS[s] then return 8.0 end
  if kind == "shape" then return parse_shape(s, pos, key)
  elseif kind == "dim" then -- one dim: a positive integer or a name
    if smatch(s, ",") then fail(pos, "%s takes one dim (a number or a name such as CAP), got %s", key, show(s)) end
    return parse_shape(s, pos, key)[1]
  elseif kind == "int" then return parse_int(s, pos, key)
  elseif kind == "float" then return parse_float(s, pos, key)
  elseif kind == "bool" then
    if s == "true" or s == "1" or s == "yes" or s == "on" then return true end
    if s == "false" or s == "0" or s == "no" or s == "off" then return false end
    fail(pos, "%s must be true or false, got %s", key, show(s))
  elseif kind == "ident" then
    if not is_ident(s) then
      fail(pos, "%s must be a C identifier ([A-Za-z_][A-Za-z0-9_]*, at most %d characters), got %s", key, M.MAX_NAME, show(s))
    end
    if C_KEYWORDS[s] then fail(pos, "%s %s is a C keyword; choose another name", key, show(s)) end
    if s:lower():sub(1, 5) == "attnc" and not smatch(s, "^attnc_%x%x%x%x%x%x%x%x$") then
      fail(pos, "%s %s: names starting with 'attnc' are reserved for the library (and its derived names attnc_XXXXXXXX); choose another prefix", key, show(s))
    end
    return s
  elseif kind == "pair" then
    if s == "none" then return false end
    local a, b = smatch(s, "^(%d+),(%d+)$")
    if not a then fail(pos, "window must be L,R with non-negative integers (e.g. window=128,0), got %s", show(s)) end
    local l, r = parse_int(a, pos, "window"), parse_int(b, pos, "window")
    if l >= M.MAX_DIM or r >= M.MAX_DIM then fail(pos, "window %s is too large", show(s)) end
    return { l, r }
  elseif kind == "enum" then
    for _, v in ipairs(ENUMS[key]) do
      if v == s then return s end
    end
    local hint = suggest(s, ENUMS[key])
    fail(pos, "%s must be one of %s, got %s%s", key, concat(ENUMS[key], ", "), show(s),
         hint and (" (did you mean '" .. hint .. "'?)") or "")
  end
end

-- Read words into raw {key -> {value=, pos=}} without interpreting combinations.
local function read(text)
  if type(text) ~= "string" then fail({ line = 0, col = 0 }, "the spec must be a string") end
  if #text > M.MAX_SPEC then fail({ line = 1, col = 1 }, "the spec is %d bytes; the limit is %d", #text, M.MAX_SPEC) end
  local nul = sfind(text, "\0", 1, true)
  if nul then fail({ line = 1, col = nul }, "the spec contains a NUL byte") end
  local raw, keys = {}, {}
  for _, w in ipairs(words(text)) do
    local pos = { line = w.line, col = w.col }
    local k, v = smatch(w.text, "^([^=]*)=(.*)$")
    if not k then
      if PRESETS[w.text] then
        k, v = "preset", w.text
      elseif FLAGS[w.text] then
        k, v = w.text, FLAGS[w.text]
      else
        local all = { "alphafold", "mha", "mqa", "gqa" }
        for _, key in ipairs(KEY_ORDER) do insert(all, key) end
        local hint = suggest(w.text, all)
        if KEYS[w.text] then
          fail(pos, "'%s' needs a value: %s=...", w.text, w.text)
        end
        fail(pos, "unknown word %s%s", show(w.text),
             hint and (" (did you mean '" .. hint .. "'?)") or " (expected key=value, a flag or a preset)")
      end
    end
    if k == "" then fail(pos, "a word cannot start with '=': write key=value") end
    if not KEYS[k] then
      local hint = suggest(k, KEY_ORDER)
      fail(pos, "unknown key %s%s", show(k), hint and (" (did you mean '" .. hint .. "'?)") or "")
    end
    if raw[k] then
      fail(pos, "duplicate key '%s' (first given at %d:%d)", k, raw[k].keypos.line, raw[k].keypos.col)
    end
    local vpos = { line = pos.line, col = pos.col + #k + 1 }
    if k == "preset" and not smatch(w.text, "=") then vpos = pos end
    raw[k] = { value = parse_value(k, v, vpos), pos = vpos, keypos = pos, text = v, flag = not smatch(w.text, "=") }
    insert(keys, k)
  end
  return raw, keys
end

local function same_dim(a, b) return a == b end

-- Parse and validate; returns the resolved spec table.
function M.parse(text)
  local raw = read(text)
  local whole = { line = 1, col = 1 }
  local function get(k, default)
    if raw[k] then return raw[k].value end
    return default
  end
  local function pos(k) return raw[k] and raw[k].pos or whole end
  -- a key that does not apply here is an error, unless it is written at
  -- its default (dflt), which says nothing: "gated=false" in core mode
  local function forbid(k, why, dflt)
    if raw[k] and not (dflt ~= nil and raw[k].value == dflt) then fail(raw[k].keypos, "'%s' %s", k, why) end
  end

  local s = {}
  s.preset = get("preset", nil)
  s.mode = get("mode", "full")
  s.dtype = get("dtype", "f32")
  s.mask = get("mask", "none")
  s.empty_rows = get("empty_rows", "zero")
  local causal = get("causal", "none")
  if causal == "true" then causal = "top_left" elseif causal == "false" then causal = "none" end
  s.causal = causal
  s.window = get("window", false)

  if s.mode == "core" then
    local dflt = { attn_dim = -2, qkv_bias = true, out_bias = true, gated = false, global = false, global_mean = "plain",
      weights = s.dtype }
    for _, k in ipairs({ "x", "attn_dim", "head_dim", "qkv_bias", "out_bias", "gated", "global", "global_mean", "weights" }) do
      forbid(k, "does not apply in mode=core (core mode takes already-projected q, k, v)", dflt[k])
    end
    -- layout bhsc: q (*, heads, Sq, head_dim); bshc: q (*, Sq, heads, head_dim), as projections leave it
    local layout = get("layout", "bhsc")
    local order = layout == "bshc" and "(*, Sq, heads, head_dim)" or "(*, heads, Sq, head_dim)"
    if not raw.q then
      fail(whole, "mode=core needs the query shape, e.g. q=%s %s", layout == "bshc" and "B,S,8,64" or "B,8,S,64", order)
    end
    local q = raw.q.value
    if #q < 3 then fail(raw.q.pos, "q must have at least 3 dims %s, got %d", order, #q) end
    if #q > M.MAX_RANK + 1 then fail(raw.q.pos, "q has %d dims; at most %d are supported", #q, M.MAX_RANK + 1) end
    local kv = raw.kv and raw.kv.value or q
    local kvpos = raw.kv and raw.kv.pos or raw.q.pos
    if #kv ~= #q then fail(kvpos, "kv must have the same rank as q (%d), got %d", #q, #kv) end
    local r = #q
    for i = 1, r - 3 do
      if not same_dim(q[i], kv[i]) then
        fail(kvpos, "batch dim %d of kv (%s) differs from q's (%s)", i, tostring(kv[i]), tostring(q[i]))
      end
    end
    local hd, sd = r - 2, r - 1 -- the heads and the sequence dims
    if layout == "bshc" then hd, sd = r - 1, r - 2 end
    local H, c = q[hd], q[r]
    local of = layout == "bshc" and (" of " .. order) or ""
    if type(H) ~= "number" then fail(raw.q.pos, "the heads dim of q (dim %d%s) must be a number, got '%s'", hd, of, H) end
    if type(c) ~= "number" then fail(raw.q.pos, "head_dim (last dim of q) must be a number, got '%s'", c) end
    local G, ck = kv[hd], kv[r]
    if type(G) ~= "number" then fail(kvpos, "the kv heads dim of kv (dim %d%s) must be a number, got '%s'", hd, of, G) end
    if ck ~= c then fail(kvpos, "the last dim of kv (%s) must equal q's head_dim %d", tostring(ck), c) end
    if H > M.MAX_HEADS then fail(raw.q.pos, "%d heads is more than the limit %d", H, M.MAX_HEADS) end
    if c > M.MAX_HEAD_DIM then fail(raw.q.pos, "head_dim %d is more than the limit %d", c, M.MAX_HEAD_DIM) end
    if raw.heads and raw.heads.value ~= H then
      fail(raw.heads.pos, "heads=%d disagrees with q, whose heads dim is %d (in mode=core heads comes from q)", raw.heads.value, H)
    end
    if raw.kv_heads and raw.kv_heads.value ~= G then
      fail(raw.kv_heads.pos, "kv_heads=%d disagrees with kv, whose heads dim is %d", raw.kv_heads.value, G)
    end
    if s.preset == "mqa" and G ~= 1 then fail(kvpos, "mqa has one kv head, but kv has %d; use gqa or mha", G) end
    if H % G ~= 0 then fail(kvpos, "heads %d is not divisible by kv heads %d", H, G) end
    s.q, s.kv, s.self = q, kv, raw.kv == nil
    s.heads, s.kv_heads, s.head_dim = H, G, c
    s.rank = r
    s.batch_rank = r - 3
    s.Sq, s.Sk = q[sd], kv[sd]
    s.layout = layout
    s.qkv_bias, s.out_bias, s.gated, s.global = false, false, false, false
  else
    forbid("q", "is for mode=core; in full mode the query input is x")
    forbid("layout", "is for mode=core; full mode lays out its own projections", "bhsc")
    -- the projection weights' storage: int8 (with per-row scales) or a dtype
    s.weights = get("weights", s.dtype)
    s.weights_word = s.weights -- as written, for the canonical form
    -- f64 weights in an f32-arithmetic kernel, or f32/bf16/f16 weights in
    -- an f64 one: the kernel holds them in its arithmetic's precision,
    -- converted once at bind time (f64 rounded to f32, the others exact)
    if s.weights ~= "int8" and (s.dtype == "f64") ~= (s.weights == "f64") then
      s.weights = s.dtype == "f64" and "f64" or "f32"
    end
    s.layout = "bhsc"
    if not raw.x then fail(whole, "missing key 'x': the query input shape, e.g. x=B,S,512") end
    local x = raw.x.value
    local r = #x
    if r < 2 then fail(raw.x.pos, "x must have at least 2 dims (positions, width), got %d", r) end
    if r > M.MAX_RANK then fail(raw.x.pos, "x has %d dims; at most %d are supported", r, M.MAX_RANK) end
    local cin = x[r]
    if type(cin) ~= "number" then fail(raw.x.pos, "the last dim of x (the width c_in) must be a number, got '%s'", cin) end
    if cin > M.MAX_WIDTH then fail(raw.x.pos, "width %d is more than the limit %d", cin, M.MAX_WIDTH) end
    local kv = raw.kv and raw.kv.value or x
    local kvpos = raw.kv and raw.kv.pos or raw.x.pos
    if #kv ~= r then fail(kvpos, "kv must have the same rank as x (%d), got %d", r, #kv) end
    local ckv = kv[r]
    if type(ckv) ~= "number" then fail(kvpos, "the last dim of kv (its width) must be a number, got '%s'", ckv) end
    if ckv > M.MAX_WIDTH then fail(kvpos, "width %d is more than the limit %d", ckv, M.MAX_WIDTH) end

    local ad = get("attn_dim", -2)
    if ad == -1 or ad == r - 1 then
      fail(pos("attn_dim"), "attn_dim=%d is the feature axis (the last dim of x holds c_in); attention runs along another axis, e.g. attn_dim=-2", ad)
    end
    if ad < -r or ad > r - 1 then
      fail(pos("attn_dim"), "attn_dim=%d is out of range for a %d-D x (use %d..%d or 0..%d)", ad, r, -r, -2, r - 2)
    end
    if ad >= 0 then ad = ad - r end
    local axis = r + ad + 1          -- 1-based index of the attention axis
    for i = 1, r - 1 do
      if i ~= axis and not same_dim(x[i], kv[i]) then
        fail(kvpos, "batch dim %d of kv (%s) differs from x's (%s); only the attention axis and the width may differ",
             i, tostring(kv[i]), tostring(x[i]))
      end
    end

    if not raw.heads then fail(whole, "missing key 'heads': the number of query heads, e.g. heads=8") end
    local H = raw.heads.value
    if H < 1 or H > M.MAX_HEADS then fail(raw.heads.pos, "heads must be between 1 and %d, got %d", M.MAX_HEADS, H) end
    local global = get("global", false)
    local G
    if s.preset == "mqa" then
      if raw.kv_heads and raw.kv_heads.value ~= 1 then
        fail(raw.kv_heads.pos, "mqa means one kv head, but kv_heads=%d; use gqa for grouped heads", raw.kv_heads.value)
      end
      G = 1
    elseif s.preset == "gqa" and not raw.kv_heads then
      fail(raw.preset.keypos, "gqa needs kv_heads, e.g. kv_heads=8 (it must divide heads=%d)", H)
    else
      G = get("kv_heads", H)
    end
    if global and (raw.kv_heads or s.preset == "mqa") then
      fail(raw.kv_heads and raw.kv_heads.keypos or raw.preset.pos,
           "global attention already shares one k/v head of width head_dim across all heads; drop kv_heads (or mqa)")
    end
    if G < 1 then fail(pos("kv_heads"), "kv_heads must be at least 1, got %d", G) end
    if H % G ~= 0 then
      fail(pos("kv_heads"), "heads=%d is not divisible by kv_heads=%d (each kv head serves heads/kv_heads query heads)", H, G)
    end
    local c = get("head_dim", nil)
    if c == nil then
      if cin % H ~= 0 then
        fail(raw.heads.pos, "the width %d is not divisible by heads=%d; give head_dim explicitly", cin, H)
      end
      c = cin // H
    end
    if c < 1 or c > M.MAX_HEAD_DIM then
      if raw.head_dim then
        fail(raw.head_dim.pos, "head_dim must be between 1 and %d, got %d", M.MAX_HEAD_DIM, c)
      end
      fail(raw.heads.pos, "head_dim = width %d / heads %d = %d is more than the limit %d; use more heads or give head_dim",
           cin, H, c, M.MAX_HEAD_DIM)
    end

    -- the weights must fit the same per-tensor limit as the inputs
    local hc, gc = H * c, (global and 1 or G) * c
    if hc * cin > M.MAX_ELEMS or gc * ckv > M.MAX_ELEMS then
      fail(raw.heads.pos, "the projection weights would have %.3g elements (heads*head_dim x width), more than the limit 2^40",
           math.max(hc * cin, gc * ckv) + 0.0)
    end

    local qkv_default = true
    if s.preset == "alphafold" then qkv_default = false end
    s.qkv_bias = get("qkv_bias", qkv_default)
    s.out_bias = get("out_bias", true)
    s.gated = get("gated", false)
    s.global = global
    s.x, s.kv, s.self = x, kv, raw.kv == nil
    s.rank, s.attn_dim, s.axis = r, ad, axis
    s.batch_rank = r - 2
    s.heads, s.kv_heads, s.head_dim = H, global and 1 or G, c
    s.c_in, s.c_kv = cin, ckv
    s.Sq, s.Sk = x[axis], kv[axis]
    if global then
      s.global_mean = get("global_mean", "plain")
      if s.causal ~= "none" then fail(raw.causal.keypos, "causal does not apply to global attention (there is one averaged query)") end
      if s.window then fail(raw.window.keypos, "window does not apply to global attention (there is one averaged query)") end
      if s.global_mean == "masked" then
        if s.mask ~= "key" then fail(raw.global_mean.pos, "global_mean=masked averages q over unmasked positions; add mask=key") end
        if not s.self then fail(raw.global_mean.pos, "global_mean=masked needs self-attention (the key mask must cover the query positions); drop kv=") end
      end
    else
      forbid("global_mean", "only applies with global", "plain")
    end
  end

  -- a cache first: its keys, which bias and mask cover, are the CAP cache positions
  M.parse_cache(s, raw, forbid)
  if raw.bias then
    local b = raw.bias.value
    local nb = #b - 3
    if nb < 0 then fail(raw.bias.pos, "bias must have at least 3 dims (*, heads, Sq, Sk), got %d", #b) end
    if nb > s.batch_rank then
      fail(raw.bias.pos, "bias has %d leading dims but the logits have only %d batch axes", nb, s.batch_rank)
    end
    local batch = M.batch_dims(s)
    for i = 1, nb do
      if b[i] ~= 1 and not same_dim(b[i], batch[i]) then
        fail(raw.bias.pos, "bias dim %d (%s) does not broadcast against batch axis %d (%s): leading bias dims align with the leading batch axes and must equal them or be 1",
             i, tostring(b[i]), i, tostring(batch[i]))
      end
    end
    local want = { s.heads, s.global and 1 or s.Sq, s.Sk }
    local what = { "heads", s.global and "the one global query" or "Sq", "Sk" }
    for i = 1, 3 do
      local d = b[nb + i]
      if d ~= 1 and not same_dim(d, want[i]) then
        if s.cache and i == 3 then
          fail(raw.bias.pos, "bias dim %d (%s) must be Sk or 1, and with a cache the keys are the CAP positions: Sk = CAP = %s",
               nb + i, tostring(d), tostring(want[i]))
        end
        fail(raw.bias.pos, "bias dim %d (%s) must be %s (%s) or 1", nb + i, tostring(d), what[i], tostring(want[i]))
      end
    end
    s.bias = b
  end

  if s.window then
    if s.mode == "full" and s.global then fail(raw.window.keypos, "window does not apply to global attention") end
  end
  -- With Sq and Sk the same dim the two causal conventions coincide: keep
  -- one spelling so both hit the same kernel.
  if s.causal == "bottom_right" and same_dim(s.Sq, s.Sk) and not s.cache then s.causal = "top_left" end

  if raw.scale then
    s.scale = raw.scale.value
    s.scale_given = true
  else
    s.scale = 1 / sqrt(s.head_dim)
  end

  -- score modifiers (DESIGN.md "Positions and score modifiers") and the lse output
  s.softcap = get("softcap", false)
  if s.softcap and s.softcap <= 0 then fail(pos("softcap"), "softcap must be a positive number (the cap of cap * tanh(s / cap)), got %g: write e.g. softcap=50 (Gemma 2), or drop the key for no cap", s.softcap) end
  s.alibi = get("alibi", false)
  if s.alibi and s.alibi <= 0 then fail(pos("alibi"), "alibi must be a positive max_bias (alibi alone means 8), got %g", s.alibi) end
  if s.alibi and s.mode == "full" and s.global then
    fail(raw.alibi.keypos, "alibi does not apply to global attention: its one averaged query has no position")
  end
  s.sinks = get("sinks", false)
  if s.sinks and s.empty_rows ~= "zero" then
    fail(raw.sinks.keypos, "sinks with empty_rows=%s: a row that sees no key puts its mass on the sink (output 0); drop empty_rows", s.empty_rows)
  end
  s.lse = get("lse", false)
  s.weights_out = get("weights_out", false)
  -- sinusoidal positional encoding of x (and kv) before the projections
  s.pe = get("pe", "none")
  if s.pe ~= "none" then
    if s.mode == "core" then fail(raw.pe.keypos, "pe does not apply in mode=core: it is added to x before the projections") end
    if s.c_in % 2 ~= 0 then fail(raw.pe.keypos, "pe=%s needs an even width of x (sin and cos pairs), got %d: make x's last dim even, or drop pe", s.pe, s.c_in) end
    if not s.self and s.c_kv % 2 ~= 0 then fail(raw.pe.keypos, "pe=%s needs an even width of kv (sin and cos pairs), got %d: make kv's last dim even, or drop pe", s.pe, s.c_kv) end
  end
  -- rotary embedding of q and k (before the scale)
  s.rope = get("rope", "none")
  if s.rope == "none" then
    forbid("rope_dim", "needs rope=neox or rope=gptj")
    forbid("rope_theta", "needs rope=neox or rope=gptj", 10000)
  else
    if s.mode == "full" and s.global then
      fail(raw.rope.keypos, "rope does not apply to global attention: its one averaged query has no position")
    end
    s.rope_dim = get("rope_dim", s.head_dim)
    if s.rope_dim < 2 or s.rope_dim % 2 ~= 0 or s.rope_dim > s.head_dim then
      fail(pos("rope_dim"), "rope_dim=%d must be even, at least 2 and at most head_dim=%d (the rotated features come in pairs)%s",
           s.rope_dim, s.head_dim, s.rope_dim == 0 and "; to rotate nothing, leave rope out (rope=none)" or "")
    end
    s.rope_theta = get("rope_theta", 10000.0)
    if not (s.rope_theta > 1) then fail(pos("rope_theta"), "rope_theta must be greater than 1 (the angle base), got %g: write e.g. rope_theta=10000 (the default) or 500000 (Llama 3)", s.rope_theta) end
  end

  M.parse_train(s, raw, pos)

  if raw.name then
    s.name = raw.name.value
  end
  s.canonical_noname = M.canonical(s, true)
  if not s.name then
    s.name = "attnc_" .. M.hash_hex(s.canonical_noname)
  end
  s.canonical = M.canonical(s, false)
  s.dims = M.named_dims(s)
  return s
end

-- train and dropout=P (DESIGN.md "Training"): a backward pass, and dropout
-- of the attention probabilities.  Gradients are stored in dtype (a bf16
-- or f16 kernel's backward computes in f32 on widened copies), so train
-- needs weights stored as dtype, not int8; a KV cache is for decoding,
-- where nothing is trained.
function M.parse_train(s, raw, pos)
  local function get(k, d) if raw[k] then return raw[k].value end return d end
  s.train = get("train", false)
  s.dropout = get("dropout", 0)
  if raw.dropout and raw.dropout.value ~= 0 and not s.train then
    fail(raw.dropout.keypos, "dropout needs train: it drops probabilities in training only (add train, or drop dropout)")
  end
  if not (s.dropout >= 0 and s.dropout < 1) then
    fail(pos("dropout"), "dropout must be a probability with 0 <= p < 1, got %g: write e.g. dropout=0.1, or dropout=0 for none", s.dropout)
  end
  if not s.train then return end
  if s.weights == "int8" then
    fail(raw.train.keypos, "train with weights=int8: the weights get gradients, so they are stored as dtype=%s (drop weights=int8)", s.dtype)
  end
  -- 16-bit (or f32 in an f64 kernel) float weights: held in dtype, widened
  -- exactly once at bind time, so their gradients are dtype's.  A 16-bit
  -- kernel could hold wider weights only by rounding them
  if s.weights and s.weights ~= s.dtype and (s.dtype == "bf16" or s.dtype == "f16") then
    fail(raw.train.keypos, "train with dtype=%s weights=%s: a %s kernel holds its weights, and their gradients, in %s, "
         .. "which would round these (drop weights=%s, or use dtype=f32)", s.dtype, s.weights, s.dtype, s.dtype, s.weights)
  end
  if s.weights then s.weights = s.dtype end
  if s.cache then
    fail(raw.train.keypos, "train with cache: a KV cache is for decoding, which computes no gradients (drop cache, or train)")
  end
end

-- cache=CAP and kv_dtype (DESIGN.md "Decoding with a KV cache"): full-mode
-- self-attention that appends its new k, v rows to caller-owned caches and
-- attends over them.  The keys become the CAP cache positions (s.Sk), the
-- queries stay the Sn new rows of x (s.Sq), and the causal rule is the
-- cache's: query i of batch element b sees keys j <= cache_len[b] + i,
-- which the canonical form writes causal=bottom_right.
function M.parse_cache(s, raw, forbid)
  if not (raw.cache and raw.cache.value) then
    forbid("kv_dtype", "sets the storage of a KV cache; it needs cache=CAP", s.dtype)
    return
  end
  local at = raw.cache.keypos
  if s.mode == "core" then
    fail(at, "cache does not apply in mode=core: it is for full-mode self-attention, which projects the new rows itself (core mode takes k and v as they are)")
  end
  if not s.self then fail(at, "cache is for self-attention: the new rows of x are appended to the cache; drop kv=") end
  if s.global then fail(at, "cache does not apply to global attention (its one averaged query has no position)") end
  if raw.causal and not (raw.causal.flag or raw.causal.text == "true" or raw.causal.text == "bottom_right") then
    fail(raw.causal.pos, "causal=%s with cache: a cache is causal from the end (query i sees keys up to cache_len + i, as causal=bottom_right); drop causal=", raw.causal.text)
  end
  s.cache = raw.cache.value
  s.causal = "bottom_right"
  s.Sk = s.cache
  s.kv_dtype = raw.kv_dtype and raw.kv_dtype.value or s.dtype
end

-- The batch axes of the logits, as dims (numbers or names), in order.
function M.batch_dims(s)
  local out = {}
  if s.mode == "core" then
    for i = 1, s.rank - 3 do insert(out, s.q[i]) end
  else
    for i = 1, s.rank - 1 do
      if i ~= s.axis then insert(out, s.x[i]) end
    end
  end
  return out
end

-- Named dims in order of first appearance in the canonical spec.
function M.named_dims(s)
  local seen, out = {}, {}
  local function add(shape)
    if not shape then return end
    for _, d in ipairs(shape) do
      if type(d) == "string" and not seen[d] then seen[d] = true; insert(out, d) end
    end
  end
  if s.mode == "core" then add(s.q); add(s.kv) else add(s.x); add(s.kv) end
  add(s.bias)
  if s.cache then add({ s.cache }) end
  return out
end

-- FNV-1a, 32 bits, as 8 hex digits: a short stable name for a spec.
function M.hash_hex(text)
  local h = 0x811c9dc5
  for i = 1, #text do
    h = ((h ~ sbyte(text, i)) * 0x01000193) & 0xffffffff
  end
  return sformat("%08x", h)
end

local function fmt_float(v)
  local s = sformat("%.17g", v)
  -- shortest round-trip form
  for p = 1, 17 do
    local t = sformat("%." .. p .. "g", v)
    if tonumber(t) == v then s = t; break end
  end
  if not sfind(s, "[%.eEn]") then s = s .. ".0" end
  return s
end
M.fmt_float = fmt_float

-- The v2 keys' decimals (softcap=30.0, alibi=8.0): the shortest decimal
-- that reads back as v, in positional notation where one of at most 17
-- places does (v1's scale keeps fmt_float, so its strings do not change).
local function fmt_decimal(v)
  for p = 1, 17 do
    local t = sformat("%." .. p .. "f", v)
    if tonumber(t) == v then
      t = t:gsub("0+$", "")
      if t:sub(-1) == "." then t = t .. "0" end
      return t
    end
  end
  return fmt_float(v)
end
M.fmt_decimal = fmt_decimal

-- One string per variant: fixed key order, every default spelled out.
function M.canonical(s, noname)
  local t = {}
  local function add(k, v) insert(t, k .. "=" .. v) end
  add("mode", s.mode)
  if s.mode == "core" then
    add("q", shape_str(s.q))
    add("kv", shape_str(s.kv))
    if s.layout ~= "bhsc" then add("layout", s.layout) end -- v1 canonical strings keep their form
  else
    add("x", shape_str(s.x))
    if not s.self then add("kv", shape_str(s.kv)) end
    add("attn_dim", tostring(s.attn_dim))
    add("heads", tostring(s.heads))
    if not s.global then add("kv_heads", tostring(s.kv_heads)) end
    add("head_dim", tostring(s.head_dim))
    add("qkv_bias", tostring(s.qkv_bias))
    add("out_bias", tostring(s.out_bias))
    add("gated", tostring(s.gated))
    add("global", tostring(s.global))
    if s.global then add("global_mean", s.global_mean) end
  end
  if s.bias then add("bias", shape_str(s.bias)) end
  add("mask", s.mask)
  add("causal", s.causal)
  add("window", s.window and (s.window[1] .. "," .. s.window[2]) or "none")
  add("scale", fmt_float(s.scale))
  add("empty_rows", s.empty_rows)
  -- v2 keys: written only when set, so v1 canonical strings keep their form
  if s.pe and s.pe ~= "none" then add("pe", s.pe) end
  if s.rope and s.rope ~= "none" then
    add("rope", s.rope)
    if s.rope_dim ~= s.head_dim then add("rope_dim", tostring(s.rope_dim)) end
    if s.rope_theta ~= 10000 then add("rope_theta", fmt_decimal(s.rope_theta)) end
  end
  if s.softcap then add("softcap", fmt_decimal(s.softcap)) end
  if s.alibi then add("alibi", fmt_decimal(s.alibi)) end
  if s.sinks then add("sinks", "true") end
  if s.cache then add("cache", tostring(s.cache)) end
  if s.lse then add("lse", "true") end
  if s.weights_out then add("weights_out", "true") end
  if s.train then add("train", "true") end
  if s.dropout and s.dropout > 0 then add("dropout", fmt_decimal(s.dropout)) end
  add("dtype", s.dtype)
  local w = s.weights_word or s.weights
  if w and w ~= s.dtype then add("weights", w) end -- v1 canonical strings keep their form
  if s.kv_dtype and s.kv_dtype ~= s.dtype then add("kv_dtype", s.kv_dtype) end
  if not noname then add("name", s.name) end
  return concat(t, " ")
end

return M
