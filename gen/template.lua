-- gen/template.lua: a tiny template engine in Penlight's style.
--
-- A line whose first non-blank character is '>' is Lua; every other line
-- is C text in which $(expr) is replaced by the value of a Lua expression.
-- Templates are ours (embedded in the library); specs never reach here as
-- code, only as values that the planner has already validated.

local M = {}

local load, tostring, error, type = load, tostring, error, type
local sfind, ssub, sformat, smatch = string.find, string.sub, string.format, string.match
local concat, insert = table.concat, table.insert

-- Split a text line into Lua source that appends it to _o.
local function text_line(line, chunk, lineno)
  local parts, i = {}, 1
  while true do
    local s = sfind(line, "$(", i, true)
    if not s then
      insert(parts, sformat("%q", ssub(line, i)))
      break
    end
    insert(parts, sformat("%q", ssub(line, i, s - 1)))
    local depth, j = 1, s + 2
    while j <= #line and depth > 0 do
      local ch = ssub(line, j, j)
      if ch == "(" then depth = depth + 1 elseif ch == ")" then depth = depth - 1 end
      j = j + 1
    end
    if depth ~= 0 then error(sformat("%s:%d: unclosed $(", chunk, lineno), 0) end
    insert(parts, "_s(" .. ssub(line, s + 2, j - 2) .. ")")
    i = j
  end
  return "_o[#_o+1]=" .. concat(parts, "..") .. "..'\\n'"
end

-- Translate template text to the Lua source of a chunk called with
-- (env, s): env becomes its _ENV, s checks and converts each $(value).
function M.translate(text, chunk)
  local src = { "local _ENV, _s = ... ; local _o = {} ;" }
  local lineno = 0
  for line in (text .. (ssub(text, -1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do
    lineno = lineno + 1
    local code = smatch(line, "^%s*>(.*)$")
    if code then insert(src, code) else insert(src, text_line(line, chunk, lineno)) end
  end
  insert(src, "return table.concat(_o)")
  return concat(src, "\n")
end

-- A loaded translation -> function(env) -> string.
function M.wrap(fn, chunk)
  local function s(v)
    if type(v) ~= "string" and type(v) ~= "number" then
      error(sformat("%s: template value is %s, not text", chunk, tostring(v)), 2)
    end
    return tostring(v)
  end
  local base = { __index = { table = table, string = string, ipairs = ipairs, pairs = pairs, tostring = tostring, math = math } }
  return function(env)
    setmetatable(env, base)
    return fn(env, s)
  end
end

-- Compile template text to a function(env) -> string (loaded once).  The
-- library embeds templates already translated and compiled to bytecode
-- (tools/embed.c), so this runs only for templates read from disk.
function M.compile(text, chunk)
  local fn, err = load(M.translate(text, chunk), "=" .. chunk, "t", {})
  if not fn then error(err, 0) end
  return M.wrap(fn, chunk)
end

return M
