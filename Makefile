# lightly-train-c: build, test, benchmark, install.
#   make            build build/lightly-train-c (prints what it detected)
#   make test       set up (deps), build, run the whole CPU test suite
#   make asan       the test suite under AddressSanitizer + UBSan
#   make fuzz       each libFuzzer target for FUZZ_SECONDS
#   make bench      input-pipeline benchmarks (see docs/performance.md)
#   make deps       check libraries; install them with apt-get when root
#   make install PREFIX=/usr/local
# CUDA=0 turns GPU parts off; CUDA_HOME / CUDNN_HOME / NCCL_HOME point to installs.

VERSION := 0.1.0
CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
OPT ?= -O2
SANITIZE ?=
FUZZ_SECONDS ?= 60

# Deferred (=) so pkg-config runs after `deps` has installed what was missing.
PKGS := libjpeg libpng libwebp libwebpdemux libwebpmux
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_LIBS = $(shell pkg-config --libs cmocka 2>/dev/null)
# CPU backend: oneDNN (no pkg-config file; tools/deps.sh checks its header)
# on GNU OpenMP, the runtime Debian's oneDNN is built with, so our OpenMP
# loops and oneDNN's share one thread team.
CPU_LIBS := -ldnnl
OMP_FLAGS := -fopenmp
DNNL_VERSION = $(shell sed -n 's/^\#define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' /usr/include/oneapi/dnnl/dnnl_version.h 2>/dev/null | paste -sd.)

# ---- CUDA detection: nvcc + cuDNN + NCCL, all three or nothing ----------------
CUDA_HOME ?= /usr/local/cuda
CUDNN_HOME ?= $(CUDA_HOME)
NCCL_HOME ?= $(CUDA_HOME)
CUDA ?= auto
ifeq ($(CUDA),0)
  HAVE_CUDA := 0
  CUDA_REASON := off (CUDA=0)
else
  HAVE_NVCC := $(shell test -x $(CUDA_HOME)/bin/nvcc && echo 1)
  HAVE_CUDNN := $(shell test -f $(CUDNN_HOME)/include/cudnn.h -o -f /usr/include/cudnn.h && echo 1)
  HAVE_NCCL := $(shell test -f $(NCCL_HOME)/include/nccl.h -o -f /usr/include/nccl.h && echo 1)
  ifeq ($(HAVE_NVCC)$(HAVE_CUDNN)$(HAVE_NCCL),111)
    HAVE_CUDA := 1
    CUDA_REASON := yes ($(CUDA_HOME), $(shell $(CUDA_HOME)/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p'))
  else
    HAVE_CUDA := 0
    CUDA_REASON := no (nvcc:$(if $(HAVE_NVCC),found,missing) cuDNN:$(if $(HAVE_CUDNN),found,missing) NCCL:$(if $(HAVE_NCCL),found,missing) under $(CUDA_HOME))
    ifeq ($(CUDA),1)
      $(error CUDA=1 requested but $(CUDA_REASON))
    endif
  endif
endif

# ---- flags -------------------------------------------------------------------
WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -Isrc -MMD -MP \
             -DLTC_VERSION='"$(VERSION)"' $(PKG_CFLAGS) $(SAN_FLAGS)
LDLIBS_ALL = $(PKG_LIBS) $(CPU_LIBS) $(OMP_FLAGS) -lpthread -lm
ifneq ($(SANITIZE),)
  SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif
ifeq ($(HAVE_CUDA),1)
  CFLAGS_ALL += -DLTC_WITH_CUDA -I$(CUDA_HOME)/include
  LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
endif
AVX2_FLAGS := -mavx2 -mfma

# ---- sources -------------------------------------------------------------------
LIB_SRC := $(filter-out src/main.c,$(shell find src -name '*.c' | sort))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB := $(BUILD)/libltc.a
BIN := $(BUILD)/lightly-train-c
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_HELPERS := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
E2E_HELPER_SRC := $(wildcard tests/e2e/*.c)
E2E_HELPER_BIN := $(E2E_HELPER_SRC:tests/e2e/%.c=$(BUILD)/tests/e2e/%)
TOOL_SRC := $(wildcard tools/*.c)
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BUILD)/tools/%)
DEPS_STAMP := $(BUILD)/.deps-ok

# Object files of tests and tools are kept (not deleted as intermediates).
.SECONDARY:

.PHONY: all deps test test-unit test-e2e asan fuzz bench clean install info tools
all: info $(BIN)

info: | $(DEPS_STAMP)
	@echo "lightly-train-c $(VERSION): CC=$(CC) OPT=$(OPT) $(if $(SANITIZE),sanitizers=on,)"
	@echo "  CPU SIMD: AVX2 kernels built, chosen at run time (scalar fallback)"
	@echo "  CPU backend: oneDNN $(DNNL_VERSION) (conv, GEMM) + OpenMP loops"
	@echo "  CUDA: $(CUDA_REASON)"

deps:
	@tools/deps.sh

$(DEPS_STAMP): tools/deps.sh
	@mkdir -p $(@D)
	@tools/deps.sh
	@touch $@

$(BUILD)/obj/%_avx2.o: %_avx2.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/obj/src/backend/cpu/%.o: src/backend/cpu/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(OMP_FLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/obj/src/main.o $(LIB)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELPERS:%.c=$(BUILD)/obj/%.o) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(CMOCKA_LIBS) $(LDLIBS_ALL)

$(BUILD)/tests/e2e/%: $(BUILD)/obj/tests/e2e/%.o $(TEST_HELPERS:%.c=$(BUILD)/obj/%.o) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/tools/%: $(BUILD)/obj/tools/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL)

tools: $(TOOL_BIN)

# The README's test command. Unit tests (cmocka) then end-to-end CLI tests.
test: all $(TEST_BIN) $(E2E_HELPER_BIN) $(TOOL_BIN)
	@tests/run_tests.sh $(BUILD)

asan:
	$(MAKE) BUILD=build/asan SANITIZE=1 OPT=-O1 test

# libFuzzer targets (clang), one per decoder and parser, FUZZ_SECONDS each.
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -Isrc $(PKG_CFLAGS) \
             -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_decode_common.h $(LIB_SRC) | $(DEPS_STAMP)
	@command -v clang >/dev/null || { echo "make fuzz needs clang with libFuzzer: apt-get install clang" >&2; exit 1; }
	@mkdir -p $(@D)
	clang $(FUZZ_FLAGS) -mavx2 -mfma -o $@ $< $(LIB_SRC) $(PKG_LIBS) $(CPU_LIBS) -lpthread -lm
fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do \
	  name=$$(basename $$f); corpus=$(BUILD)/fuzz/corpus-$$name; mkdir -p $$corpus; \
	  seeds=tests/fuzz/seeds/$${name#fuzz_}; [ -d $$seeds ] || seeds=tests/fuzz/seeds/decode; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  $$f -artifact_prefix=$(BUILD)/fuzz/ -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -max_len=1048576 $$corpus $$( [ -d $$seeds ] && echo $$seeds ) \
	    2>$(BUILD)/fuzz/$$name.log || { tail -n 40 $(BUILD)/fuzz/$$name.log; exit 1; }; \
	  tail -n 1 $(BUILD)/fuzz/$$name.log; \
	done

BENCH_DIR ?= $(BUILD)/bench-images
bench: all $(TOOL_BIN)
	tools/bench.sh $(BUILD) $(BENCH_DIR)
	tools/bench_train.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/lightly-train-c

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
