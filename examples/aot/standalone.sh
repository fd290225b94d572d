#!/bin/sh
# Check that a program built from attnc-generated C stands alone: ldd shows
# no Lua, tcc or attnc library, and nm no Lua, tcc or attnc runtime symbol.
#
#   usage: examples/aot/standalone.sh BINARY
#
# Exits non-zero, saying why, when the binary needs any of them.
set -eu

fail() {
  echo "standalone: $*" >&2
  exit 1
}

[ $# -eq 1 ] || { echo "usage: $0 BINARY" >&2; exit 2; }
bin=$1
command -v ldd >/dev/null 2>&1 || fail "ldd not found (Debian: libc-bin); cannot verify the binary's libraries"
command -v nm >/dev/null 2>&1 || fail "nm not found (Debian: binutils); cannot verify the binary's symbols"

echo "== ldd / nm $bin: no Lua, no tcc, no libattnc"
libs=$(ldd "$bin" 2>&1) || true
echo "$libs" | sed 's/^/  /'
if echo "$libs" | grep -Ei 'lua|tcc|attnc' >/dev/null; then
  fail "the binary links a Lua, tcc or attnc library"
fi
syms=$(nm "$bin" 2>&1) || fail "nm could not read $bin: $syms"
bad=$(echo "$syms" | awk '{ print $NF }' | grep -E '^_*(lua|luaL|luaopen|tcc|attnc_compile|attnc_run|attnc_bind|attnc_grad)_?' || true)
[ -z "$bad" ] || fail "the binary references Lua/tcc/runtime symbols: $(echo $bad)"
echo "  $(echo "$syms" | grep -c ' U ') undefined symbols, none from Lua or tcc"
