# lightly-train-c: build, test, benchmark, install.
#   make            build build/lightly-train-c (prints what it detected)
#   make test       set up (deps), build, run the whole CPU test suite
#   make asan       the test suite under AddressSanitizer + UBSan
#   make fuzz       each libFuzzer target for FUZZ_SECONDS
#   make bench      input-pipeline benchmarks (see docs/performance.md)
#   make bench-gpu  GPU training benchmark next to PyTorch (on a GPU machine)
#   make demo       a CPU demo (2.5-6 min of training, by CPU): sample data, train, embed, export (tools/demo.sh)
#   make test-gpu   the GPU checks, on a machine with an NVIDIA GPU
#   make bundle     build/bundle: the program and its libraries for GPU nodes
#   make wheel      dist/lightly_train_c-*.whl: pip package with the program and its libraries
#   make first-light  first-light/: what one 15-minute GPU session carries and runs
#   make deps       check libraries (apt-get install when root) and make the test venv
#   make install PREFIX=/usr/local
# CUDA=0 turns GPU parts off; CUDA_HOME / CUDNN_HOME / NCCL_HOME point to installs.
# MPI=0 builds without OpenMPI (no CPU data parallel).

VERSION := 0.1.0
# One job per core unless -j is given (-j1: one at a time): a fresh clone's
# `make test` compiles some 400 files before its tests (serially that took
# minutes of its 15-minute budget on a 2-core machine).
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
# `make` alone builds the program: named here because the emulation's pattern
# rules below come before `all:` and one of them would otherwise be the goal.
.DEFAULT_GOAL := all
CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
OPT ?= -O2
SANITIZE ?=
FUZZ_SECONDS ?= 60
comma := ,

# Deferred (=) so pkg-config runs after `deps` has installed what was missing.
PKGS := libjpeg libpng libwebp libwebpdemux libwebpmux libprotobuf-c zlib libdeflate libcurl \
        libcrypto libzip libtiff-4 libgif libheif libavif libjxl libexif stb
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_LIBS = $(shell pkg-config --libs cmocka 2>/dev/null)
# DICOM: DCMTK, a C++ library (src/decode/dicom_dcmtk.cpp wraps it) whose
# pkg-config file is unusable in Debian 12 (it requires sndfile).
DICOM_LIBS := -ldcmjpls -ldcmjpeg -ldcmdata -loflog -lofstd -lstdc++
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

# ---- MPI: OpenMPI through pkg-config (ompi-c); CPU ranks (src/dist/comm_mpi.c) --
# Deferred (=) like PKG_CFLAGS: found after `deps` installed it. MPI=0 turns it
# off; MPI=1 fails when it is missing. Only its header is used at build time:
# libmpi is opened at run time (src/dist/mpi_library.h), never linked.
MPI ?= auto
MPI_FOUND = $(if $(filter 0,$(MPI)),,$(shell pkg-config --exists ompi-c 2>/dev/null && echo 1))
MPI_CFLAGS = $(if $(MPI_FOUND),-DLTC_WITH_MPI $(shell pkg-config --cflags ompi-c),)
MPI_REASON = $(if $(filter 0,$(MPI)),off (MPI=0),$(if $(MPI_FOUND),yes (OpenMPI $(shell pkg-config --modversion ompi-c)),no (libopenmpi-dev missing: make deps)))

# ---- flags -------------------------------------------------------------------
WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -Isrc -MMD -MP \
             -I$(GEN_DIR) -DLTC_VERSION='"$(VERSION)"' $(PKG_CFLAGS) $(MPI_CFLAGS) $(SAN_FLAGS)
# $ORIGIN/../lib first: a bundle (make bundle) and the wheel (make wheel)
# carry their libraries there.
LDLIBS_ALL = $(PKG_LIBS) $(DICOM_LIBS) $(CPU_LIBS) $(OMP_FLAGS) -lpthread -lm -ldl -Wl,-rpath,'$$ORIGIN/../lib'
ifneq ($(SANITIZE),)
  SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif
# The CUDA runtime is linked statically (it opens the driver, libcuda.so.1,
# itself when first used); cuDNN, cuBLAS and NCCL are opened with dlopen
# when a GPU backend or GPU ranks need them (src/util/dynamic_library.h), so
# the program starts, and trains on the CPU, where none of them is
# installed. The run paths let dlopen find them in the toolkit's folders on
# the build machine; LD_LIBRARY_PATH comes first (the wheel's launcher puts
# the pip packages' folders there).
ifeq ($(HAVE_CUDA),1)
  CUDNN_INCLUDE := $(if $(wildcard $(CUDNN_HOME)/include/cudnn.h),-I$(CUDNN_HOME)/include,)
  CUDNN_LIBDIR := $(firstword $(wildcard $(CUDNN_HOME)/lib64/libcudnn.so* $(CUDNN_HOME)/lib/libcudnn.so*))
  CFLAGS_ALL += -DLTC_WITH_CUDA -I$(CUDA_HOME)/include $(CUDNN_INCLUDE) -I$(NCCL_HOME)/include
  LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
                $(if $(CUDNN_LIBDIR),-Wl$(comma)-rpath$(comma)$(dir $(CUDNN_LIBDIR)),) \
                -Wl,-rpath,$(NCCL_HOME)/lib64 -lcudart_static -lrt -lstdc++
endif
# CUDA kernels (src/**/*.cu): sm_80 (A100) and sm_90 (H100/H200) code plus
# sm_90 PTX for later GPUs. Host code in them is checked as strictly as C.
# -fmad=false: no contraction of a * b + c into one FMA, so elementwise
# kernels compute exactly the fp32 operations of the C backends (the op
# tests compare them with tolerance 0; the kernels are memory-bound).
NVCC := $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCC_FLAGS = -std=c++17 -O3 -g -fmad=false -Isrc $(CUDNN_INCLUDE) $(CUDA_ARCH) -DLTC_WITH_CUDA \
             --Werror all-warnings -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
AVX2_FLAGS := -mavx2 -mfma
CXXFLAGS_ALL = -std=c++17 $(OPT) -g $(WARN) -Isrc -MMD -MP $(SAN_FLAGS)

# ---- sources -------------------------------------------------------------------
LIB_SRC := $(filter-out src/main.c,$(shell find src -name '*.c' | sort))
CU_SRC := $(shell find src -name '*.cu' | sort)
CXX_SRC := $(shell find src -name '*.cpp' | sort)
ifneq ($(HAVE_CUDA),1)
  LIB_SRC := $(filter-out src/backend/cuda/%,$(LIB_SRC))
  CU_SRC :=
endif
# C generated by protoc-c from src/logging/*.proto (TensorBoard events) and
# src/embed/*.proto (the ONNX model format) into $(GEN_DIR); never
# committed. Every object waits for it (order-only), since which files
# include the generated headers is only known after compiling.
GEN_DIR := $(BUILD)/gen
PROTO_SRC := $(sort $(wildcard src/logging/*.proto src/embed/*.proto))
vpath %.proto $(sort $(dir $(PROTO_SRC)))
GEN_SRC := $(patsubst %.proto,$(GEN_DIR)/%.pb-c.c,$(notdir $(PROTO_SRC)))
GEN_HDR := $(GEN_SRC:.c=.h)
GEN_OBJ := $(GEN_SRC:$(GEN_DIR)/%.c=$(BUILD)/obj/gen/%.o)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.o) \
           $(CXX_SRC:%.cpp=$(BUILD)/obj/%.o) $(GEN_OBJ)
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
# The test environment (tools/test_venv.sh): PyPI packages the tests talk to.
TEST_VENV_STAMP := $(BUILD)/test-venv/.requirements.sha256

# ---- CUDA emulation (tests/cuda_emu): the cuda backend's kernels on the CPU ------
# make test also builds the cuda backend with the host C++ compiler against
# an emulation of the CUDA runtime and thread model, and runs the cuda groups
# of the tests in EMU_LIST on it ("cuda (CPU emulation)"). Needs only the
# CUDA, cuBLAS, cuBLASLt and cuDNN headers (no GPU, no nvcc); off under sanitizers
# (fibers) and where the headers are missing (the tests then say skipped).
EMU_DIR := $(BUILD)/emu
EMU_CUDNN_INCLUDE := $(firstword $(wildcard $(CUDNN_HOME)/include/cudnn.h $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h))
HAVE_EMU := $(if $(SANITIZE),,$(if $(and $(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),$(wildcard $(CUDA_HOME)/include/cublas_v2.h),$(wildcard $(CUDA_HOME)/include/cublasLt.h),$(EMU_CUDNN_INCLUDE)),1,))
EMU_LIST := $(shell sed -n 's/^\(test_[a-z0-9_]*\)$$/\1/p' tests/cuda_emu/emu_tests.list)
EMU_TEST_BIN := $(if $(HAVE_EMU),$(EMU_LIST:%=$(EMU_DIR)/tests/%),)
EMU_INCLUDES = -I$(CUDA_HOME)/include $(if $(EMU_CUDNN_INCLUDE),-I$(dir $(EMU_CUDNN_INCLUDE)),)
EMU_CXXFLAGS = -std=c++17 $(OPT) -g -Wall -Wextra -Werror -Wno-unused-parameter -MMD -MP \
               -DLTC_WITH_CUDA -I$(EMU_DIR)/src -Isrc -Itests/cuda_emu $(EMU_INCLUDES)
EMU_CFLAGS = $(CFLAGS_ALL) -DLTC_WITH_CUDA -I. $(EMU_INCLUDES)
EMU_CUDA_FILES := $(wildcard src/backend/cuda/*.cu src/backend/cuda/*.cuh src/backend/cuda/*.h)
EMU_REWRITTEN := $(EMU_CUDA_FILES:%=$(EMU_DIR)/%)
# cudnn_library.c and cublaslt_library.c forward to the real cuDNN and
# cuBLASLt; the emulation defines their functions (emu_cudnn.c, emu_cublaslt.c).
EMU_LIBRARY_FORWARDERS := src/backend/cuda/cudnn_library.c src/backend/cuda/cublaslt_library.c
EMU_OBJ := $(patsubst src/%.cu,$(EMU_DIR)/obj/%.o,$(wildcard src/backend/cuda/*.cu)) \
           $(patsubst src/%.c,$(EMU_DIR)/obj/%.o,$(filter-out $(EMU_LIBRARY_FORWARDERS),$(wildcard src/backend/cuda/*.c))) \
           $(EMU_DIR)/obj/backend/backend.o \
           $(patsubst tests/cuda_emu/%,$(EMU_DIR)/obj/runtime/%.o,$(basename $(wildcard tests/cuda_emu/*.cpp tests/cuda_emu/*.c)))
# The library less the cuda backend (and backend.c, built here with it) and
# less the NCCL forwarders (the emulation's NCCL: emu_nccl.c).
EMU_LIB_OBJ = $(filter-out $(BUILD)/obj/src/backend/cuda/% $(BUILD)/obj/src/backend/backend.o \
                           $(BUILD)/obj/src/dist/nccl_library.o,$(LIB_OBJ))
EMU_LDLIBS = $(PKG_LIBS) $(DICOM_LIBS) $(CPU_LIBS) $(OMP_FLAGS) -lpthread -lm -ldl -lstdc++

# The emulation's own checks (test_emu_checks: each done once on purpose by
# a kernel of the file; test_emu_graphs: stream capture and graphs;
# test_emu_streams: streams that run late; test_emu_nccl: its NCCL): built
# for the emulation only, run with the binaries of EMU_LIST.
EMU_CHECKS_SOURCES := tests/cuda_emu/test_emu_checks.cu tests/cuda_emu/test_emu_graphs.cu \
                      tests/cuda_emu/test_emu_streams.cu tests/cuda_emu/test_emu_nccl.cu

$(EMU_CUDA_FILES:%=$(EMU_DIR)/%) $(EMU_CHECKS_SOURCES:%=$(EMU_DIR)/%): $(EMU_DIR)/%: % tests/cuda_emu/rewrite.sed
	@mkdir -p $(@D)
	@{ echo '#line 1 "$<"'; sed -f tests/cuda_emu/rewrite.sed $<; } > $@

$(EMU_DIR)/obj/backend/cuda/%.o: $(EMU_DIR)/src/backend/cuda/%.cu $(EMU_REWRITTEN) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) -x c++ -include tests/cuda_emu/cuda_emu.h -c $< -o $@

$(EMU_DIR)/obj/backend/cuda/%.o: src/backend/cuda/%.c | $(DEPS_STAMP) $(GEN_HDR)
	@mkdir -p $(@D)
	$(CC) $(EMU_CFLAGS) -include tests/cuda_emu/emu_dlopen.h -c $< -o $@

$(EMU_DIR)/obj/backend/backend.o: src/backend/backend.c | $(DEPS_STAMP) $(GEN_HDR)
	@mkdir -p $(@D)
	$(CC) $(EMU_CFLAGS) -c $< -o $@

$(EMU_DIR)/obj/runtime/%.o: tests/cuda_emu/%.cpp | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@

$(EMU_DIR)/obj/runtime/%.o: tests/cuda_emu/%.c | $(DEPS_STAMP) $(GEN_HDR)
	@mkdir -p $(@D)
	$(CC) $(EMU_CFLAGS) -c $< -o $@

$(EMU_DIR)/libltc_emu.a: $(EMU_LIB_OBJ) $(EMU_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The run path of the native binaries, so that a bundle made of these
# (tests/e2e/first_light.sh) finds its libraries as the GPU build's does.
$(EMU_DIR)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELPERS:%.c=$(BUILD)/obj/%.o) $(EMU_DIR)/libltc_emu.a
	@mkdir -p $(@D)
	$(CXX) $(TEST_LINKER) -o $@ $^ $(CMOCKA_LIBS) $(EMU_LDLIBS) -Wl,-rpath,'$$ORIGIN/../lib'

$(EMU_DIR)/obj/tests/test_emu_%.o: $(EMU_DIR)/tests/cuda_emu/test_emu_%.cu $(EMU_REWRITTEN) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) -x c++ -include tests/cuda_emu/cuda_emu.h -c $< -o $@

$(EMU_DIR)/tests/test_emu_%: $(EMU_DIR)/obj/tests/test_emu_%.o $(EMU_DIR)/libltc_emu.a
	@mkdir -p $(@D)
	$(CXX) -o $@ $^ $(CMOCKA_LIBS) $(EMU_LDLIBS)

# The program itself on the emulation: `train --accelerator gpu` runs the
# cuda backend here (tests/e2e/first_light.sh runs the GPU script with it).
# NCCL is the real library, opened at run time from NCCL_HOME (only its
# version is read without a launcher).
EMU_BIN := $(if $(HAVE_EMU),$(EMU_DIR)/lightly-train-c,)
$(EMU_DIR)/lightly-train-c: $(BUILD)/obj/src/main.o $(EMU_DIR)/libltc_emu.a
	$(CXX) -o $@ $^ $(EMU_LDLIBS) -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,$(NCCL_HOME)/lib64

# Object files of tests and tools are kept (not deleted as intermediates).
.SECONDARY:

.PHONY: all deps test test-unit test-e2e test-gpu bundle wheel first-light asan fuzz bench bench-gpu clean install info tools demo
all: info $(BIN)

info: | $(DEPS_STAMP)
	@echo "lightly-train-c $(VERSION): CC=$(CC) OPT=$(OPT) $(if $(SANITIZE),sanitizers=on,)"
	@echo "  CPU SIMD: AVX2 kernels built, chosen at run time (scalar fallback)"
	@echo "  CPU backend: oneDNN $(DNNL_VERSION) (conv, GEMM) + OpenMP loops"
	@echo "  CUDA: $(CUDA_REASON)"
	@echo "  MPI (CPU ranks): $(MPI_REASON)"
	@echo "  CUDA emulation (make test runs the cuda kernels on the CPU): $(if $(HAVE_EMU),yes,no ($(if $(SANITIZE),sanitizers on,CUDA/cuBLAS(Lt)/cuDNN headers missing under $(CUDA_HOME))))"
	@if [ "$(MPI)" = 1 ] && [ -z "$(MPI_FOUND)" ]; then echo "MPI=1 requested but OpenMPI (ompi-c) is missing" >&2; exit 1; fi

deps:
	@tools/deps.sh
	@tools/test_venv.sh $(BUILD)

$(DEPS_STAMP): tools/deps.sh
	@mkdir -p $(@D)
	@tools/deps.sh
	@touch $@

# Only the tests need it: `make` alone installs nothing from PyPI.
$(TEST_VENV_STAMP): tests/requirements.txt tests/requirements-mlflow.txt tools/test_venv.sh | $(DEPS_STAMP)
	@tools/test_venv.sh $(BUILD)

# Both outputs of one protoc-c run (a multi-target pattern rule runs once).
$(GEN_DIR)/%.pb-c.c $(GEN_DIR)/%.pb-c.h: %.proto | $(DEPS_STAMP)
	@mkdir -p $(GEN_DIR)
	protoc-c --c_out=$(GEN_DIR) --proto_path=$(<D) $<

$(BUILD)/obj/gen/%.o: $(GEN_DIR)/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/%_avx2.o: %_avx2.c | $(DEPS_STAMP) $(GEN_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/obj/src/backend/cpu/%.o: src/backend/cpu/%.c | $(DEPS_STAMP) $(GEN_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(OMP_FLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -MD -MP -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP) $(GEN_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# AdamW's update loop (cpu_elementwise.c) vectorises only without sqrtf's
# errno; its values stay the same (IEEE's sqrt and division, four lanes or
# one). Not project-wide: elsewhere a loop that sums and now vectorised
# would change its order of additions, and the trajectories of training.
$(BUILD)/obj/src/backend/cpu/cpu_elementwise.o: CFLAGS_ALL += -fno-math-errno

$(BUILD)/obj/%.o: %.cpp | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_ALL) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/obj/src/main.o $(LIB)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL)

# The test binaries (make test links some 150, each against the whole
# library) link with LLVM's lld, else GNU gold, where the compiler can use
# one: 0.10 s and 0.15 s a link against the default GNU ld's 0.31 s
# (test_knn, 2-core AMD EPYC VM). The program and the tools keep the
# default linker.
TEST_LINKER := $(firstword $(foreach linker,lld gold,$(shell $(CC) -fuse-ld=$(linker) -Wl,--version \
                 >/dev/null 2>&1 && echo -fuse-ld=$(linker))))

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELPERS:%.c=$(BUILD)/obj/%.o) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(TEST_LINKER) $(SAN_FLAGS) -o $@ $^ $(CMOCKA_LIBS) $(LDLIBS_ALL)

$(BUILD)/tests/e2e/%: $(BUILD)/obj/tests/e2e/%.o $(TEST_HELPERS:%.c=$(BUILD)/obj/%.o) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(TEST_LINKER) $(SAN_FLAGS) -o $@ $^ $(CMOCKA_LIBS) $(LDLIBS_ALL)

$(BUILD)/tools/%: $(BUILD)/obj/tools/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_ALL)

tools: $(TOOL_BIN)

# The README's test command. Unit tests (cmocka) then end-to-end CLI tests.
# (The fuzz targets are prerequisites too: `test: $(FUZZ_TEST_BIN)` below,
# after their definition.) LTC_FUZZ_BUILT tells run_tests.sh that a missing
# fuzz target is a failure, not a skip.
test: all $(TEST_BIN) $(E2E_HELPER_BIN) $(TOOL_BIN) $(EMU_TEST_BIN) $(EMU_BIN) $(TEST_VENV_STAMP)
	@LTC_FUZZ_BUILT=$(if $(FUZZ_TEST_BIN),1,0) tests/run_tests.sh $(BUILD)

asan:
	$(MAKE) BUILD=build/asan SANITIZE=1 OPT=-O1 test

# libFuzzer targets (clang), one per decoder and parser, FUZZ_SECONDS each
# (tests/fuzz/run_target.sh). The code they parse (src/decode, src/util, the
# safetensors and checkpoint readers) is compiled with libFuzzer's coverage
# and the sanitizers into $(BUILD)/fuzz/obj; what else it calls links from
# the library as built. make test builds them where clang is (not under
# SANITIZE: they are sanitized already) and runs each over its seeds for a
# few seconds (tests/run_tests.sh).
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -Isrc -I$(GEN_DIR) $(PKG_CFLAGS) -MMD -MP \
             -fno-sanitize-recover=undefined
FUZZ_LIB_SRC = $(filter src/decode/% src/util/% src/nn/safetensors.c src/nn/safetensors_write.c src/nn/json_scan.c \
                        src/logging/mlflow_answers.c src/cli/lightly_args.c src/cli/transform_args.c \
                        src/cli/loggers.c src/cli/callbacks.c src/cli/run_limits.c \
                        src/ssl_methods/method_args.c \
                        src/train/checkpoint.c src/weights/pt_%,$(LIB_SRC))
# The C++ sources (the DCMTK wrapper) by clang++, without the C++ parts of
# UBSan (vptr and function: the link is by clang).
FUZZ_OBJ = $(FUZZ_LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o) $(CXX_SRC:%.cpp=$(BUILD)/fuzz/obj/%.o)
# The library's OpenMP objects need GNU's runtime (clang's -fopenmp is LLVM's).
FUZZ_LDLIBS = $(subst $(OMP_FLAGS),-lgomp,$(LDLIBS_ALL))
HAVE_CLANG := $(shell command -v clang >/dev/null 2>&1 && echo 1)
FUZZ_TEST_BIN := $(if $(and $(HAVE_CLANG),$(if $(SANITIZE),,1)),$(FUZZ_BIN),)
# Here, not on the line of `test:` above: a prerequisite is expanded where
# its rule is read, and FUZZ_TEST_BIN was empty there.
test: $(FUZZ_TEST_BIN)
$(BUILD)/fuzz/obj/%.o: %.c | $(DEPS_STAMP) $(GEN_HDR)
	@command -v clang >/dev/null || { echo "make fuzz needs clang with libFuzzer: apt-get install clang" >&2; exit 1; }
	@mkdir -p $(@D)
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@
$(BUILD)/fuzz/obj/%.o: %.cpp | $(DEPS_STAMP)
	@mkdir -p $(@D)
	clang++ -std=c++17 -O1 -g -Isrc -MMD -MP -fsanitize=fuzzer-no-link,address,undefined \
	    -fno-sanitize=vptr,function -c $< -o $@
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_OBJ) $(LIB)
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_OBJ) $(LIB) $(FUZZ_LDLIBS)
fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do \
	  echo "fuzz: $$(basename $$f) for $(FUZZ_SECONDS)s"; \
	  tests/fuzz/run_target.sh $$f $(FUZZ_SECONDS) $(BUILD)/fuzz/corpus-$$(basename $$f) || exit 1; \
	done

# The GPU checks on a machine with an NVIDIA GPU: every cuda op against ref,
# ResNet-18/50 against the PyTorch fixtures on the GPU, a short train + embed
# + export there (tests/run_gpu_tests.sh; never part of `make test`).
test-gpu: all $(TEST_BIN) $(E2E_HELPER_BIN)
	@if [ "$(HAVE_CUDA)" != 1 ]; then echo "make test-gpu needs a CUDA build: $(CUDA_REASON)" >&2; exit 1; fi
	@tests/run_gpu_tests.sh $(BUILD)

# A relocatable folder for GPU nodes without our Debian packages (tools/bundle.sh).
BUNDLE_DIR ?= $(BUILD)/bundle
bundle: all $(TEST_BIN) $(E2E_HELPER_BIN) $(BUILD)/tools/bench_train_step
	tools/bundle.sh $(BUILD) $(BUNDLE_DIR)

# The pip wheel: the program, the libraries it needs that manylinux systems
# lack, and the Python package (python/lightly_train_c; docs/python.md).
WHEEL_DIR ?= dist
wheel: all
	python3 tools/make_wheel.py $(BUILD) $(VERSION) $(WHEEL_DIR)

# The one folder a GPU session carries and the one command it runs there
# (issue 19; tools/make_first_light.sh, tools/first_light.sh): the bundle,
# the script and real JPEGs, under 64 MiB. Prints the device command.
FIRST_LIGHT_DIR ?= first-light
first-light: all $(TEST_BIN) $(E2E_HELPER_BIN) $(BUILD)/tools/bench_train_step $(BUILD)/tools/photo_crops
	@if [ "$(HAVE_CUDA)" != 1 ]; then echo "make first-light needs a CUDA build: $(CUDA_REASON)" >&2; exit 1; fi
	tools/make_first_light.sh $(BUILD) $(FIRST_LIGHT_DIR)

# The GPU benchmark: ours next to PyTorch (AMP, channels-last) on one GPU.
bench-gpu: all $(BUILD)/tools/bench_train_step
	@if [ "$(HAVE_CUDA)" != 1 ]; then echo "make bench-gpu needs a CUDA build: $(CUDA_REASON)" >&2; exit 1; fi
	tools/bench_gpu.sh $(BUILD)

BENCH_DIR ?= $(BUILD)/bench-images
bench: all $(TOOL_BIN)
	tools/bench.sh $(BUILD) $(BENCH_DIR)
	tools/bench_train.sh $(BUILD) $(BENCH_DIR)

# The README's first command: sample data, a short training run, embed and
# export, all under DEMO_DIR (rerunnable).
DEMO_DIR ?= $(BUILD)/demo
demo: all $(BUILD)/tools/fashion_mnist_folder
	tools/demo.sh $(BUILD) $(DEMO_DIR)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/lightly-train-c

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(EMU_DIR)/obj $(BUILD)/fuzz -name '*.d' 2>/dev/null)
