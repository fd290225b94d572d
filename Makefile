# attnc build.  `make` builds the library and CLI, `make demo` and
# `make test` do everything a fresh Debian 12 machine needs first.
# `make V=1` shows full commands.

PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
OPT     ?= -O2 -g
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter -Wno-format-truncation
LUA_CFLAGS := -I/usr/include/lua5.4
CFLAGS  += -std=c99 $(OPT) $(WARN) -fPIC -pthread
CPPFLAGS += -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iruntime $(LUA_CFLAGS)
LDLIBS  := -llua5.4 -ltcc -ldl -lm -lpthread

B := build
DEB_PKGS := liblua5.4-dev libtcc-dev libcmocka-dev
DEB_HEADERS := /usr/include/lua5.4/lua.h /usr/include/libtcc.h /usr/include/cmocka.h
# The Python module (python/attnc) runs on Debian's python3 with numpy; the
# build does not need them, and without them `make check-python` says so
# and skips.
DEB_PY_PKGS := python3 python3-numpy
PYTHON3 ?= /usr/bin/python3
PY_OK = { [ -x $(PYTHON3) ] && $(PYTHON3) -c 'import numpy' 2>/dev/null; }
# where `make install` puts the package: Debian's python3 reads
# $(PREFIX)/lib/python3.X/dist-packages for PREFIX=/usr/local and /usr
PYTHON_SITE ?= $(shell [ -x $(PYTHON3) ] && $(PYTHON3) -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])' 2>/dev/null || echo lib/python3/dist-packages)

ifeq ($(V),1)
Q :=
else
Q := @
endif

GEN_SRC  := $(sort $(wildcard gen/*.lua))
TMPL_SRC := $(sort $(wildcard templates/*))
LIB_SRC  := runtime/error.c runtime/convert.c runtime/host.c runtime/jit_tcc.c runtime/jit_cc.c runtime/cc_index.c runtime/kernel.c \
            runtime/bindings.c runtime/run.c runtime/quantize.c runtime/safetensors.c runtime/explain.c \
            runtime/pool.c runtime/prims.c runtime/prims_avx512.c runtime/prims_avx2.c runtime/prims_amx.c runtime/prims_bf16.c runtime/prims_vnni.c
LIB_OBJ  := $(LIB_SRC:runtime/%.c=$(B)/obj/%.o) $(B)/obj/embedded.o
TESTS    := test_kernels test_specs test_train test_stress test_spec test_safetensors test_reference test_prims test_runtime test_golden test_cli test_validation
SPECS    := $(sort $(wildcard specs/*.attn))

.PHONY: all deps demo test aot bench install clean examples example check-asan check-valgrind check-avx512-emu check-python
all: deps $(B)/libattnc.a $(B)/libattnc.so $(B)/attnc

# ---- set-up: install the Debian packages we build against ----
deps: $(B)/.deps
$(B)/.deps:
	@missing=""; for h in $(DEB_HEADERS); do [ -f $$h ] || missing=1; done; \
	py=""; $(PY_OK) || py="$(DEB_PY_PKGS)"; \
	root=""; [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && root=1; \
	if [ -n "$$missing" ] && [ -n "$$root" ]; then \
	  echo "attnc: installing $(DEB_PKGS) $$py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PKGS) $$py >/dev/null || exit 1; \
	elif [ -n "$$missing" ]; then \
	  echo "attnc: missing build dependencies; run:"; \
	  echo "  sudo apt-get install -y $(DEB_PKGS) $(DEB_PY_PKGS)"; exit 1; \
	elif [ -n "$$py" ] && [ -n "$$root" ]; then \
	  echo "attnc: installing $$py (for the Python module)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$py >/dev/null; } || \
	    echo "attnc: could not install $$py: the build goes on, and make check-python will skip"; \
	elif [ -n "$$py" ]; then \
	  echo "attnc: no $(PYTHON3) with numpy: the build goes on, and make check-python will skip; to run it:"; \
	  echo "  sudo apt-get install -y $(DEB_PY_PKGS)"; \
	fi
	@mkdir -p $(B) && touch $@

# ---- the library ----
$(B)/embed: tools/embed.c | $(B)/.deps
	@mkdir -p $(B)
	@echo "  CC      $@"
	$(Q)$(CC) -std=c99 -O1 -Wall -Wextra $(LUA_CFLAGS) -o $@ $< -llua5.4 -lm -ldl

$(B)/embedded.c: $(B)/embed $(GEN_SRC) $(TMPL_SRC)
	@echo "  EMBED   $@"
	$(Q)$(B)/embed $@ . $(GEN_SRC) $(TMPL_SRC)

$(B)/obj/%.o: runtime/%.c runtime/attnc.h runtime/internal.h templates/abi.h | $(B)/.deps
	@mkdir -p $(B)/obj
	@echo "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

ifeq ($(AVX512_EMU),1)
# make check-avx512-emu: the AVX-512 code on a C model of its intrinsics,
# chosen on any CPU (the library in build/emu is for that check only)
EMU_OPT ?= -O2
ifneq ($(OBJ_FROM),)
# Only prims.o and prims_avx512.o differ from the build in OBJ_FROM (made
# with the same flags): every other object, the tests' and the CLI's, is
# taken from there rather than compiled again.
EMU_OWN := $(B)/obj/prims.o $(B)/obj/prims_avx512.o
LIB_OBJ := $(filter-out $(EMU_OWN:$(B)/%=$(OBJ_FROM)/%),$(LIB_OBJ:$(B)/%=$(OBJ_FROM)/%)) $(EMU_OWN)
TOBJ := $(OBJ_FROM)/tobj
endif
$(B)/obj/prims_avx512.o: CFLAGS += $(EMU_OPT) -include tests/avx512_emu.h
$(B)/obj/prims.o $(B)/obj/prims_avx512.o: CPPFLAGS += -DATTNC_AVX512_EMU
$(B)/obj/prims_avx512.o: tests/avx512_emu.h
else
# only reached after a run-time check that the CPU has AVX-512 (prims.c);
# aligned like the AVX2 primitives below (bench/ab_build.sh reads this line)
AVX512_FLAGS := -O3 -mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma -falign-functions=64 -falign-loops=32
$(B)/obj/prims_avx512.o: CFLAGS += $(AVX512_FLAGS)
endif
# only reached after a run-time check that the CPU has AVX2 and FMA (prims.c).
# gcc's generic tuning on purpose: a CPU-specific -mtune and -funroll-loops
# both slow these kernels down (docs/performance.md).  Functions start on
# 64-byte boundaries and loops on 32-byte ones, so that where each loop
# falls in a 64-byte line depends on the source only, not on where the
# linker puts the object, and two builds of the same source time the same.
# bench/ab_build.sh compiles the old side of an A/B with these flags too.
AVX2_FLAGS := -O3 -mavx2 -mfma -falign-functions=64 -falign-loops=32
$(B)/obj/prims_avx2.o: CFLAGS += $(AVX2_FLAGS)
# prims_amx.c, prims_bf16.c and prims_vnni.c name their instruction sets
# in target attributes, and are only reached after prims.c found AMX-BF16
# and the kernel's permission, AVX512-BF16 or AVX512-VNNI
DP_OBJ := $(B)/obj/prims_amx.o $(B)/obj/prims_bf16.o $(B)/obj/prims_vnni.o
# (bench/ab_build.sh reads the next line for REV's prims_vnni.c)
$(DP_OBJ): CFLAGS += -O3 -falign-functions=64 -falign-loops=32
$(B)/obj/prims_amx.o $(B)/obj/prims_bf16.o: runtime/prims_bf16.h
$(B)/obj/prims.o $(B)/obj/prims_avx512.o $(B)/obj/prims_avx2.o $(DP_OBJ) $(B)/obj/run.o: runtime/prims.h
$(B)/obj/prims_avx512.o $(B)/obj/prims_avx2.o: runtime/prefetch.h

$(B)/obj/embedded.o: $(B)/embedded.c
	@mkdir -p $(B)/obj
	@echo "  CC      $@"
	$(Q)$(CC) -std=c99 -O0 -fPIC -c -o $@ $<

$(B)/libattnc.a: $(LIB_OBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# Debian's libtcc.a is not position-independent: the shared library links
# it whole with only attnc_* exported (runtime/attnc.map) and hidden
# stand-ins for the glibc variables it names (runtime/tcc_shim.c).
$(B)/libattnc.so: $(LIB_OBJ) $(B)/obj/tcc_shim.o runtime/attnc.map
	@echo "  LD      $@"
	$(Q)$(CC) -shared -pthread -Wl,--version-script=runtime/attnc.map -Wl,-soname,libattnc.so -o $@ $(LIB_OBJ) $(B)/obj/tcc_shim.o \
	  -Wl,--whole-archive /usr/lib/x86_64-linux-gnu/libtcc.a -Wl,--no-whole-archive -llua5.4 -ldl -lm 2>&1 | \
	  grep -v 'relocation in read-only section\|creating DT_TEXTREL' || true
	@test -f $@

# ---- the CLI (links the float64 reference for `attnc check`) ----
# Objects of the CLI and the tests are in $(TOBJ), compiled once for every
# program; check/ (the checker and the float64 reference) serves both.
TOBJ ?= $(B)/tobj
TEST_HDR := $(wildcard tests/*.h) $(wildcard check/*.h) $(wildcard runtime/*.h) templates/abi.h cli/heatmap.h
$(B)/tobj/%.o: tests/%.c $(TEST_HDR) | $(B)/.deps
	@mkdir -p $(B)/tobj
	@echo "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) -Itests -Icheck $(CFLAGS) -c -o $@ $<
$(B)/tobj/check_%.o: check/%.c $(TEST_HDR) | $(B)/.deps
	@mkdir -p $(B)/tobj
	@echo "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) -Icheck $(CFLAGS) -c -o $@ $<
$(B)/tobj/cli_%.o: cli/%.c $(TEST_HDR) | $(B)/.deps
	@mkdir -p $(B)/tobj
	@echo "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) -Icheck -Icli $(CFLAGS) -c -o $@ $<
CHECK_OBJ = $(TOBJ)/check_checker.o $(TOBJ)/check_reference.o
# Named here, so they are not intermediate files: make keeps them, and a
# missing one is made again (check-avx512-emu links them from this build).
TOBJ_FILES := $(TESTS:%=$(B)/tobj/%.o) $(B)/tobj/check_checker.o $(B)/tobj/check_reference.o $(B)/tobj/cli_attnc.o $(B)/tobj/cli_heatmap.o
.PHONY: test-objs
test-objs: $(TOBJ_FILES)

$(B)/attnc: $(TOBJ)/cli_attnc.o $(TOBJ)/cli_heatmap.o $(CHECK_OBJ) $(B)/libattnc.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# ---- tests ----
$(B)/tests/%: $(TOBJ)/%.o $(CHECK_OBJ) $(B)/libattnc.a
	@mkdir -p $(B)/tests
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

test: all $(TESTS:%=$(B)/tests/%)
	@echo "== docs/tutorial.md is current (tools/tutorial.sh)"
	@tools/tutorial.sh $(B)/attnc | diff -u docs/tutorial.md - > /dev/null || { \
	  echo "docs/tutorial.md is stale: run tools/tutorial.sh $(B)/attnc > docs/tutorial.md"; exit 1; }
	@echo "== every example: AOT, JIT on tcc and cc, Python (make examples)"
	@$(MAKE) --no-print-directory examples
	@echo "== install into a temporary prefix, build a program with pkg-config (make install-check)"
	@$(MAKE) --no-print-directory install-check
	@$(MAKE) --no-print-directory check-python
	@ATTNC_CACHE_DIR=$(CURDIR)/$(B)/cache ATTNC_CC_FLAGS="-Wall -Wextra -Werror -pedantic" \
	  ATTNC=$(CURDIR)/$(B)/attnc bash tests/run_all.sh $(B) $(TESTS)
	@echo "== random spec combinations against the reference (make check-combos, a short fixed seed)"
	@ATTNC_CC_FLAGS="-Wall -Wextra -Werror -pedantic" $(MAKE) --no-print-directory check-combos COMBOS=300 COMBOS_SEED=1 COMBOS_CC_EVERY=16

# check-python: the Python module's tests (python/tests, unittest) on
# Debian's python3 and numpy, against this build's library and CLI.  As root
# a missing python3-numpy is installed with apt-get; where that cannot be
# done, the step prints the command and skips, saying why.
check-python: all
	@echo "== the Python module: python/tests with $(PYTHON3) (make check-python)"
	@why="installing it needs root"; \
	if ! $(PY_OK) && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "attnc: installing $(DEB_PY_PKGS)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PY_PKGS) >/dev/null; } || \
	    why="apt-get install $(DEB_PY_PKGS) failed"; \
	fi; \
	if $(PY_OK); then \
	  PYTHONPATH=$(CURDIR)/python ATTNC_LIB=$(CURDIR)/$(B)/libattnc.so ATTNC_CLI=$(CURDIR)/$(B)/attnc \
	    ATTNC_CACHE_DIR=$(CURDIR)/$(B)/cache PYTHONDONTWRITEBYTECODE=1 \
	    $(PYTHON3) -m unittest discover -v -s python/tests -t python/tests 2>&1 || exit 1; \
	else \
	  echo "check-python: SKIPPED: no $(PYTHON3) with numpy, and $$why; run:"; \
	  echo "  sudo apt-get install -y $(DEB_PY_PKGS)"; \
	fi

# check-avx512-emu: the whole suite again, on a library whose AVX-512
# primitives run on tests/avx512_emu.h's C model of their intrinsics, so
# a machine without AVX-512 still runs that code (CI runs it after make test: .ci/run).
# It shares the main build's kernel cache: the generated C calls the
# primitives through a table, so the same cached kernels serve both.  It
# compiles only the two objects the model changes and links the rest.
EMU_B := $(B)/emu
# $(call emu_isa,DIR): DIR/attnc must run the AVX-512 set, or the model
# suite would pass on the AVX2 primitives and prove nothing
emu_isa = $(1)/attnc bench "mha mode=core q=1,1,16,16" --runs 1 --json | grep -q '"isa": "avx512"' || \
  { echo "check-avx512-emu: $(1)/attnc does not run the AVX-512 primitives"; exit 1; }
check-avx512-emu: all $(TESTS:%=$(B)/tests/%)
	@echo "== the suite with the AVX-512 primitives on a C model of their intrinsics (make check-avx512-emu)"
	@$(MAKE) --no-print-directory B=$(EMU_B) AVX512_EMU=1 OBJ_FROM=$(B) $(EMU_B)/libattnc.a $(EMU_B)/attnc $(TESTS:%=$(EMU_B)/tests/%)
	@$(call emu_isa,$(EMU_B))
	@ATTNC_CACHE_DIR=$(CURDIR)/$(B)/cache ATTNC_CC_FLAGS="-Wall -Wextra -Werror -pedantic" \
	  ATTNC_TEST_MODEL=1 ATTNC=$(CURDIR)/$(EMU_B)/attnc bash tests/run_all.sh $(EMU_B) $(TESTS)

# ---- sanitizers ----
# check-asan: the library, CLI and every test built with ASan + UBSan into
# build/asan/, then the whole suite (and the AOT example's generator) run
# with both set to stop at the first error; LeakSanitizer checks each exit.
# Code compiled at run time (libtcc, the cc backend) is not instrumented.
ASAN_B   := $(B)/asan
# the model's masked loads and stores touch only their lanes, so ASan sees
# any lane the AVX-512 code lets past a buffer's end (-O1 -g1 for it: the
# model inlined under both sanitizers takes minutes to compile at -O2 -g)
ASAN_EMU_B := $(B)/asan-emu
ASAN_EMU_TESTS := test_kernels test_prims test_validation
ASAN_OPT := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_ENV  := ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
            UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
check-asan:
	@$(MAKE) --no-print-directory B=$(ASAN_B) OPT='$(ASAN_OPT)' $(ASAN_B)/libattnc.a $(ASAN_B)/attnc $(TESTS:%=$(ASAN_B)/tests/%)
	@echo "== AOT example, generated by the sanitized attnc"
	@$(SAN_ENV) sh examples/aot/check.sh $(ASAN_B)/attnc $(ASAN_B)/example
	@$(SAN_ENV) sh examples/aot_train/check.sh $(ASAN_B)/attnc $(ASAN_B)/example
	@$(SAN_ENV) ATTNC_CACHE_DIR=$(CURDIR)/$(ASAN_B)/cache ATTNC_CC_FLAGS="-Wall -Wextra -Werror -pedantic" \
	  ATTNC=$(CURDIR)/$(ASAN_B)/attnc bash tests/run_all.sh $(ASAN_B) $(TESTS)
	@echo "== the AVX-512 primitives on their C model (check-avx512-emu), under the sanitizers: $(ASAN_EMU_TESTS)"
	@$(MAKE) --no-print-directory B=$(ASAN_EMU_B) AVX512_EMU=1 OBJ_FROM=$(ASAN_B) OPT='$(ASAN_OPT)' EMU_OPT='-O1 -g1' \
	  $(ASAN_EMU_B)/libattnc.a $(ASAN_EMU_B)/attnc $(ASAN_EMU_TESTS:%=$(ASAN_EMU_B)/tests/%)
	@$(SAN_ENV) $(call emu_isa,$(ASAN_EMU_B))
	@$(SAN_ENV) ATTNC_CACHE_DIR=$(CURDIR)/$(ASAN_B)/cache ATTNC_CC_FLAGS="-Wall -Wextra -Werror -pedantic" \
	  ATTNC_TEST_MODEL=1 ATTNC=$(CURDIR)/$(ASAN_EMU_B)/attnc bash tests/run_all.sh $(ASAN_EMU_B) $(ASAN_EMU_TESTS)

# check-valgrind: memcheck (leaks count as errors) on a representative
# subset: the runtime and safetensors tests, 1000 compile/run/release cycles
# of the stress test, and the CLI on good and bad input.  Valgrind has no
# AVX-512: it hides it from CPUID (the AVX2 primitives run) and the cc
# backend builds for x86-64-v3.
VG_SPEC  := specs/gpt_decoder.attn
VG_CASE  := mha_named_symbol
VG       := valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
            --smc-check=all-non-file --track-fds=no
check-valgrind: all $(B)/tests/test_runtime $(B)/tests/test_safetensors $(B)/tests/test_stress
	@command -v valgrind >/dev/null || { echo "check-valgrind: valgrind not found (Debian: apt-get install valgrind)"; exit 1; }
	@set -e; d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	export ATTNC_CACHE_DIR=$$d/cache ATTNC_CC_FLAGS=-march=x86-64-v3 ATTNC=$(CURDIR)/$(B)/attnc; \
	vg() { echo "== valgrind $$*" >&2; $(VG) --error-exitcode=1 "$$@"; }; \
	vg $(B)/tests/test_runtime; \
	vg $(B)/tests/test_safetensors; \
	ATTNC_TEST_FILTER='*cycles*' ATTNC_STRESS_CYCLES=1000 vg $(B)/tests/test_stress; \
	vg $(B)/attnc check @$(VG_SPEC) --dim B=2 --dim S=33 >/dev/null; \
	vg $(B)/attnc check "gqa x=B,S,40 heads=4 kv_heads=2 mask=key causal bias=B,4,S,S" --dim S=70 >/dev/null; \
	vg $(B)/attnc check "alphafold x=B,R,S,16 heads=2 gated global global_mean=masked mask=key" --backend cc >/dev/null; \
	vg $(B)/attnc check "mha x=B,S,128 heads=2 causal" --dim B=2 --dim S=70 --backend cc >/dev/null; \
	vg $(B)/attnc check "mha mode=core q=B,2,S,64" --dim B=2 --dim S=200 --backend cc >/dev/null; \
	vg $(B)/attnc check "alphafold x=4,S,64 heads=2 head_dim=32 gated bias=2,S,S" --dim S=70 --backend cc >/dev/null; \
	vg $(B)/attnc explain @$(VG_SPEC) --dim B=2 --dim S=33 >/dev/null; \
	vg $(B)/attnc show @$(VG_SPEC) >/dev/null; \
	spec=$$(awk -F'\t' '$$1 == "$(VG_CASE)" { print $$3 }' tests/golden/cases.txt); \
	vg $(B)/attnc run "$$spec" --tensors tests/golden/$(VG_CASE).safetensors --out $$d/out.safetensors; \
	head -c 300 tests/golden/$(VG_CASE).safetensors > $$d/cut.safetensors; \
	vgfail() { echo "== valgrind $$* (must fail cleanly)"; rc=0; $(VG) --error-exitcode=99 "$$@" 2>$$d/err || rc=$$?; \
	  grep -q error $$d/err && [ $$rc -ge 1 ] && [ $$rc -le 127 ] && [ $$rc -ne 99 ] || { cat $$d/err; echo "check-valgrind: exit $$rc"; exit 1; }; }; \
	vgfail $(B)/attnc run "$$spec" --tensors $$d/cut.safetensors --out $$d/o2.safetensors; \
	vgfail $(B)/attnc explain "mha x=B,S,8 heads=0"; \
	echo "check-valgrind: clean"

# ---- demo: JIT an example spec, check it against the reference, show the code ----
DEMO_SPEC := specs/gpt_decoder.attn
demo: all
	@echo "== attnc explain @$(DEMO_SPEC) --dim B=2 --dim S=33"
	@$(B)/attnc explain @$(DEMO_SPEC) --dim B=2 --dim S=33
	@echo
	@echo "== attnc check @$(DEMO_SPEC) --dim B=2 --dim S=33   (JIT with libtcc, compared with the float64 reference)"
	@$(B)/attnc check @$(DEMO_SPEC) --dim B=2 --dim S=33
	@echo
	@echo "== attnc show --plain @$(DEMO_SPEC)   (the kernel's steps, from its plain form; attnc show prints the fast form)"
	@$(B)/attnc show --plain @$(DEMO_SPEC) | sed -n '/^int .*_run(/,/^}/p'

# ---- AOT: every spec file -> C -> one static library ----
# One object per spec, so `make aot` regenerates and recompiles only the
# specs that changed (or all of them when build/attnc changes).  Prints
# `[i/N] gen specs/x.attn` and `[i/N] cc build/aot/src/x.c`, i the spec's
# place among the N spec files.  The .o is named after the spec file, the
# .c/.h after the spec's `name=` (the C symbol prefix).
AOT_DIR := $(B)/aot
AOT_OBJ := $(SPECS:specs/%.attn=$(AOT_DIR)/obj/%.o)
AOT_CFLAGS := -std=c99 -O2 -Wall -Wextra -Werror -pedantic -fPIC
aot: $(AOT_DIR)/libattnc_kernels.a $(B)/attnc
	@$(AOT_EXAMPLE)
$(AOT_DIR)/libattnc_kernels.a: $(AOT_OBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(AOT_DIR)/obj/%.o: specs/%.attn $(B)/attnc
	@mkdir -p $(AOT_DIR)/src $(AOT_DIR)/obj
	$(Q)set -e; i=0; for s in $(SPECS); do i=$$((i + 1)); if [ "$$s" = "$<" ]; then break; fi; done; \
	echo "[$$i/$(words $(SPECS))] gen $<"; \
	n=$$($(B)/attnc gen @$< -o $(AOT_DIR)/src --print-name); \
	echo "[$$i/$(words $(SPECS))] cc $(AOT_DIR)/src/$$n.c"; \
	$(CC) $(AOT_CFLAGS) -c -o $@ $(AOT_DIR)/src/$$n.c

# `make install PREFIX=/usr/local DESTDIR=`: the CLI, both libraries, the
# header, a pkg-config file whose prefix is PREFIX (DESTDIR only stages),
# and the Python package in $(PREFIX)/$(PYTHON_SITE)/attnc, told where
# libattnc.so is by its _libpath.py.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -d $(DESTDIR)$(PREFIX)/$(PYTHON_SITE)/attnc
	install -m 644 python/attnc/__init__.py $(DESTDIR)$(PREFIX)/$(PYTHON_SITE)/attnc/__init__.py
	printf '# Written by make install: the libattnc.so this package loads.\nLIBRARY = "%s"\n' \
	    '$(PREFIX)/lib/libattnc.so' >$(DESTDIR)$(PREFIX)/$(PYTHON_SITE)/attnc/_libpath.py
	chmod 644 $(DESTDIR)$(PREFIX)/$(PYTHON_SITE)/attnc/_libpath.py
	install -m 755 $(B)/attnc $(DESTDIR)$(PREFIX)/bin/attnc
	install -m 644 $(B)/libattnc.a $(DESTDIR)$(PREFIX)/lib/libattnc.a
	install -m 755 $(B)/libattnc.so $(DESTDIR)$(PREFIX)/lib/libattnc.so
	install -m 644 runtime/attnc.h $(DESTDIR)$(PREFIX)/include/attnc.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' \
	    -e "s|@VERSION@|$$(sed -n 's/^#define ATTNC_VERSION "\(.*\)"/\1/p' runtime/attnc.h)|g" \
	    runtime/attnc.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/attnc.pc
	chmod 644 $(DESTDIR)$(PREFIX)/lib/pkgconfig/attnc.pc

clean:
	rm -rf $(B)

# ---- examples: every program in examples/, built and run (`make test`
# runs them too).  One name for all of them: there is no `make example`.
#   aot          one kernel generated ahead of time in a plain C program,
#                checked with ldd and nm to need no Lua or tcc (check.sh)
#   aot_train    a bf16 training kernel's NAME_backward ahead of time, its
#                gradients checked against an f64 kernel's (check.sh)
#   af_msa_row, gpt_decode, cross_attn
#                JIT programs on real checkpoint layouts, built against
#                libattnc.a and run on their folder's data (from
#                tools/make_examples.py) with both backends
#   train_step   100 SGD steps from attnc_grad's gradients, each step's
#                loss against PyTorch's (tools/make_examples.py), both backends
#   python       attn_heatmap.py on the Python module, its output compared
#                with attn_heatmap.txt (skipped, saying so, without numpy)
# Every example runs even when one fails; the last line names the failures.
AOT_EXAMPLE := sh examples/aot/check.sh $(B)/attnc $(B)/example
AOT_TRAIN_EXAMPLE := sh examples/aot_train/check.sh $(B)/attnc $(B)/example
EXAMPLES := af_msa_row gpt_decode cross_attn train_step
examples: $(B)/attnc $(B)/libattnc.so $(EXAMPLES:%=$(B)/examples/%)
	@fail=""; \
	echo "== examples/aot (AOT: generated C, no Lua or tcc)"; \
	$(AOT_EXAMPLE) || fail="$$fail aot"; \
	echo "== examples/aot_train (AOT: a bf16 backward, no Lua or tcc)"; \
	$(AOT_TRAIN_EXAMPLE) || fail="$$fail aot_train"; \
	for e in $(EXAMPLES); do for be in tcc cc; do \
	  echo "== examples/$$e ($$be)"; \
	  ATTNC_BACKEND=$$be ATTNC_CACHE_DIR=$(CURDIR)/$(B)/cache $(B)/examples/$$e examples/$$e || fail="$$fail $$e($$be)"; \
	done; done; \
	echo "== examples/python/attn_heatmap.py"; \
	if $(PY_OK); then \
	  ( cd $(B)/examples && PYTHONPATH=$(CURDIR)/python ATTNC_LIB=$(CURDIR)/$(B)/libattnc.so \
	      ATTNC_CACHE_DIR=$(CURDIR)/$(B)/cache PYTHONDONTWRITEBYTECODE=1 \
	      $(PYTHON3) $(CURDIR)/examples/python/attn_heatmap.py heatmap.svg >attn_heatmap.out && \
	    diff -u $(CURDIR)/examples/python/attn_heatmap.txt attn_heatmap.out && echo "python example: OK" ) || fail="$$fail python"; \
	else \
	  echo "python example: SKIPPED: no $(PYTHON3) with numpy; run: sudo apt-get install -y $(DEB_PY_PKGS)"; \
	fi; \
	if [ -n "$$fail" ]; then echo "examples FAILED:$$fail"; exit 1; fi; \
	echo "examples: all OK"
# not a second name: it stops and names the one that is
example:
	@echo "attnc: there is no 'make example': run 'make examples', which builds and runs every example (examples/aot among them)" >&2; exit 2
$(B)/examples/%: examples/%/main.c runtime/attnc.h $(B)/libattnc.a
	@mkdir -p $(B)/examples
	@echo "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(B)/libattnc.a $(LDLIBS)

# ---- install into a temporary prefix, then build and run a program with
# pkg-config (shared and static) outside the source tree ----
.PHONY: install-check
install-check: all
	$(Q)MAKE='$(MAKE)' PYTHON3='$(PYTHON3)' sh tests/install_check.sh

# ---- fuzzing: libFuzzer harnesses (clang); see tests/fuzz/README.md ----
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz: $(B)/embedded.c
	@MAKE="$(MAKE)" sh tests/fuzz/run.sh $(FUZZ_SECONDS)

# ---- benchmarks: attnc vs PyTorch and ONNX Runtime (bench/README.md) ----
BENCH_THREADS ?= 2
bench: all $(B)/fma_peak $(B)/prims_bench
	@bash bench/run.sh $(BENCH_THREADS)

# the primitives alone, one thread, against that peak (bench/prims_bench.c)
$(B)/prims_bench: bench/prims_bench.c runtime/prims.h $(B)/libattnc.a
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(B)/libattnc.a $(LDLIBS)

# layout=bshc against bhsc, alternated in one process (bench/pair_layout.c)
$(B)/pair_layout: bench/pair_layout.c runtime/attnc.h $(B)/libattnc.a
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(B)/libattnc.a $(LDLIBS)

# the machine's FMA peak, for the percent-of-peak target (bench/fma_peak.c)
$(B)/fma_peak: bench/fma_peak.c | $(B)
	$(Q)$(CC) -std=c99 -O2 -Wall -Wextra -pthread -o $@ $<

# check-combos: random combinations of the spec language's keys, each run
# through `attnc check` against the float64 reference (tests/combos.c), and
# a share of invalid combinations that must be refused with a position.
# make check-combos COMBOS=500 COMBOS_SEED=1 [COMBOS_CC_EVERY=8]
COMBOS ?= 200
COMBOS_SEED ?= 1
COMBOS_CC_EVERY ?= 8
$(B)/combos: tests/combos.c
	@echo "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $<
.PHONY: check-combos
check-combos: all $(B)/combos
	@echo "  combos: $(COMBOS) cases from seed $(COMBOS_SEED), cc every $(COMBOS_CC_EVERY)th"
	@ATTNC_CACHE_DIR=$(CURDIR)/$(B)/cache $(B)/combos -n $(COMBOS) -s $(COMBOS_SEED) -c $(COMBOS_CC_EVERY) -a $(B)/attnc
