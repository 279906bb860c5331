# fsdp.c build.
#   make            train_gpt (with nvcc when it exists, else the host compiler) and the tools
#   make test       builds everything and runs dev/test/run_tests.sh ("N passed, M failed")
#   make clean
# Variables: NO_CUDA=1 forces a host-only build; GPU_ARCH="80 90" picks the CUDA targets (75 for
# a T4: it trains with --param-dtype fp16 and --attention cublas, the flash kernels need 80);
# NCCL_HOME=DIR (with include/nccl.h, lib/libnccl.so.2) names the NCCL to use [the toolkit's or
# the system's, else PyTorch's pip wheel: scripts/find_nccl.sh];
# NO_MPI=1 builds without MPI (the default when there is no mpicc): ranks then meet over the
# TCP transport (scripts/launch_local.sh, srun without PMI, torchrun-style variables).

ifeq ($(NO_MPI),)
NO_MPI   := $(if $(shell command -v mpicc 2>/dev/null),,1)
endif
ifeq ($(NO_MPI),1)
CC       := gcc
CXX      := g++
MPI_DEF  := -DFSDP_NO_MPI
else
CC       := mpicc
CXX      := mpicxx
MPI_DEF  :=
endif
NVCC     ?= $(shell command -v nvcc 2>/dev/null)
PYTHON   ?= $(CURDIR)/.venv/bin/python
export PYTHON

# OpenBLAS's OpenMP build shares the OpenMP thread pool with our kernels; the pthread build's
# threads and OpenMP's spinning workers would fight over the cores.
BLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_INC := /usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIB := -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas

# WERROR= (empty) lets warnings through: scripts/device_check.sh builds that way, so that a GPU
# machine's other compiler cannot stop the check over a warning; everywhere else they are errors.
WERROR   ?= -Werror
WARN     := -Wall -Wextra $(WERROR) -Wno-unused-parameter -Wno-format-truncation
# -fno-math-errno lets sqrtf vectorise (AdamW); results are unchanged.
OPT      := -O3 -march=native -fno-math-errno
CFLAGS   := $(OPT) -std=gnu11 $(WARN) $(MPI_DEF) -fopenmp -I. -I$(BLAS_INC)
CXXFLAGS := $(OPT) -std=gnu++17 $(WARN) $(MPI_DEF) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -fopenmp -I. -I$(BLAS_INC)
LDLIBS   := $(BLAS_LIB) -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm -fopenmp

# The libraries: plain C, unit-testable without a GPU (util/ is what all of them may use).
LIB_SRCS := $(wildcard util/*.c comm/*.c kernels/*.c fsdp/*.c dataloader/*.c checkpoint/*.c model/*.c train/*.c)
ifeq ($(NO_MPI),1)
LIB_SRCS := $(filter-out comm/comm_mpi.c,$(LIB_SRCS))
endif
LIB_OBJS := $(patsubst %.c,build/%.o,$(LIB_SRCS))
HEADERS  := $(wildcard util/*.h comm/*.h kernels/*.h kernels/*.cuh fsdp/*.h fsdp/*.cuh dataloader/*.h checkpoint/*.h model/*.h train/*.h train/*.cuh)

TOOLS     := $(patsubst data/%.c,%,$(wildcard data/*.c)) $(if $(wildcard checkpoint/tool/ckpt.c),ckpt)
TEST_BINS := $(patsubst dev/test/%.c,build/%,$(wildcard dev/test/test_*.c)) build/test_gpt2

ifeq ($(NO_CUDA),1)
NVCC :=
endif

ifneq ($(NVCC),)
GPU_ARCH  ?= 80 90
GENCODE   := $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
# The MPI compiler wrapper is nvcc's host compiler: it adds the include and link flags of
# whichever MPI it belongs to (Open MPI, MPICH), as CC/CXX do for the host-only build.
NVCCFLAGS := -O3 -std=c++17 $(GENCODE) $(if $(WERROR),--Werror all-warnings) -I. -ccbin $(CXX) \
             -Xcompiler "$(OPT) -fopenmp $(WARN) $(MPI_DEF) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX" \
             -I$(BLAS_INC)
# GPU tests: dev/test/test_*_cuda.cu, built only when nvcc exists (run by test_kernels_gpu.sh,
# which reports them as skipped on a machine without a GPU).
TEST_BINS += $(patsubst dev/test/%.cu,build/%,$(wildcard dev/test/test_*_cuda.cu))
# NCCL from the toolkit or the system, else from a directory such as PyTorch's pip wheel
# (nvidia-nccl-cu13), which has lib/libnccl.so.2 but no libnccl.so: linked by that name, and
# found at run time through the rpath.
ifeq ($(origin NCCL_HOME),undefined)
NCCL_HOME := $(shell scripts/find_nccl.sh $(NVCC))
endif
ifneq ($(NCCL_HOME),)
NVCCFLAGS += -I$(NCCL_HOME)/include
NCCL_LIB  := -L$(NCCL_HOME)/lib -Xlinker -rpath,$(NCCL_HOME)/lib -l:libnccl.so.2
else
NCCL_LIB  := -lnccl
endif
# --attention cudnn: kernels/cuda_attention_cudnn.cpp, the one file that includes cudnn.h (from
# CUDNN_INC: the toolkit's include folder, /usr/include, else PyTorch's nvidia-cudnn wheel:
# scripts/find_cudnn.sh include) and NVIDIA's
# header-only cudnn-frontend (CUDNN_FE_INC: scripts/setup.sh unpacks the pinned wheel's include/
# into .deps/cudnn_frontend/include). Nothing of cuDNN is linked: the library is dlopen'ed at run
# time. Without either header the file is built with FSDP_NO_CUDNN (--attention cudnn then says
# so); the frontend's headers are system headers (-isystem): their warnings are not ours.
CUDA_INC     := $(abspath $(dir $(NVCC))../include)
ifeq ($(origin CUDNN_INC),undefined)
CUDNN_INC    := $(if $(NVCC),$(shell scripts/find_cudnn.sh include $(NVCC)))
endif
CUDNN_FE_INC ?= .deps/cudnn_frontend/include
CUDNN_FLAGS  := $(if $(and $(CUDNN_INC),$(wildcard $(CUDNN_INC)/cudnn.h),$(wildcard $(CUDNN_FE_INC)/cudnn_frontend.h)),\
                -isystem $(CUDNN_INC) -isystem $(CUDA_INC) -isystem $(CUDNN_FE_INC),-DFSDP_NO_CUDNN -isystem $(CUDA_INC))
CUDNN_OBJ    := build/kernels/cuda_attention_cudnn.o
NVCC_LIBS := -ldl -lcublasLt -lcublas $(NCCL_LIB) -Xcompiler -fopenmp -L$(BLAS_DIR) -Xlinker -rpath,$(BLAS_DIR) -lopenblas -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm
endif

# Every object depends on a stamp named after the build's flavour (CUDA targets, MPI or not):
# another choice makes a new stamp (deleting the old), so `make GPU_ARCH=90` or `make NO_MPI=1`
# after another build recompiles what it must instead of linking stale objects.
BUILD_FLAVOUR := $(if $(NVCC),sm_$(subst $(eval) ,_,$(strip $(GPU_ARCH))),host)_$(if $(filter 1,$(NO_MPI)),nompi,mpi)
FLAVOUR_STAMP := build/flavour_$(BUILD_FLAVOUR)

.PHONY: all test clean tools print-host-cxxflags
all: train_gpt $(TOOLS) $(TEST_BINS)

$(FLAVOUR_STAMP):
	@mkdir -p build
	@rm -f build/flavour_*
	@touch $@

build/%.o: %.c $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The offloaded AdamW must round every operation as the GPU kernel does (no FMA contraction;
# kernels/optimizer_math.h).
build/fsdp/offload.o: CFLAGS += -ffp-contract=off

# test_gpt2.cu includes train_gpt.cu (like llm.c's test_gpt2) to drive the model schedule.
ifneq ($(NVCC),)
$(CUDNN_OBJ): kernels/cuda_attention_cudnn.cpp kernels/cuda_attention_cudnn.cuh $(FLAVOUR_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(CUDNN_FLAGS) -c $< -o $@
build/train_gpt.o: train_gpt.cu $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
build/test_gpt2.o: dev/test/test_gpt2.cu train_gpt.cu $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(NVCC) $(NVCCFLAGS) -Xcompiler -Wno-unused-function -c $< -o $@
LINK      := $(NVCC) $(NVCCFLAGS)
LINK_LIBS := $(NVCC_LIBS)
GPU_OBJS  := $(CUDNN_OBJ)
else
build/train_gpt.o: train_gpt.cu $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) -x c++ -c $< -o $@
build/test_gpt2.o: dev/test/test_gpt2.cu train_gpt.cu $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) -Wno-unused-function -x c++ -c $< -o $@
LINK      := $(CXX) $(CXXFLAGS)
LINK_LIBS := $(LDLIBS)
endif

train_gpt: build/train_gpt.o $(LIB_OBJS) $(GPU_OBJS)
	$(LINK) $^ -o $@ $(LINK_LIBS)

build/test_gpt2: build/test_gpt2.o $(LIB_OBJS) $(GPU_OBJS)
	$(LINK) $^ -o $@ $(LINK_LIBS)

ifneq ($(NVCC),)
build/test_%_cuda: dev/test/test_%_cuda.cu $(LIB_OBJS) $(GPU_OBJS) $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(NVCC) $(NVCCFLAGS) $< $(LIB_OBJS) $(GPU_OBJS) -o $@ $(NVCC_LIBS)
# Attention timings at training shapes (dev/bench/bench_attention_cuda.cu): GPU only, and not
# in `all` (scripts/device_prebuild.sh and scripts/device_check.sh build it by name).
build/bench_attention_cuda: dev/bench/bench_attention_cuda.cu $(GPU_OBJS) $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(NVCC) $(NVCCFLAGS) $< $(GPU_OBJS) -o $@ $(NVCC_LIBS)
# The vector kernels against the copy bandwidth (dev/bench/bench_vector_cuda.cu), their bytes
# from the planner's model (kernels_sim.o): likewise GPU only, built by name.
build/bench_vector_cuda: dev/bench/bench_vector_cuda.cu build/kernels/kernels_sim.o $(GPU_OBJS) $(HEADERS) $(FLAVOUR_STAMP)
	@mkdir -p build
	$(NVCC) $(NVCCFLAGS) $< build/kernels/kernels_sim.o $(GPU_OBJS) -o $@ $(NVCC_LIBS)
endif

build/test_%: dev/test/test_%.c $(LIB_OBJS) $(HEADERS)
	@mkdir -p build
	$(CC) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

ckpt: checkpoint/tool/ckpt.c $(LIB_OBJS) $(HEADERS)
	$(CC) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

# tokenize_text reads gzip through zlib where its header is installed (zlib1g-dev). A machine
# without it (a bare CUDA image) still builds the tool; gzip input then says what is missing.
ZLIB_FLAGS := $(if $(shell echo '\#include <zlib.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1),-lz)

%: data/%.c $(LIB_OBJS) $(HEADERS)
	$(CC) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS) $(ZLIB_FLAGS)

test: all
	@bash dev/test/run_tests.sh

clean:
	rm -rf build train_gpt $(TOOLS)

# For dev/test/test_build.sh: the flags the host-only build compiles train_gpt.cu with.
print-host-cxxflags:
	@echo $(CXXFLAGS)

# ---------------------------------------------------------------------------------------
# Sanitizers and fuzzing (dev/test/test_asan.sh, dev/test/test_fuzz.sh). Separate build
# folders: the normal build above is never touched.
#   make asan   build/asan/{train_gpt,ckpt,tokenize_text,test_tp_layout}_asan: ASan + UBSan, host-only
#               (the cpu device, as NO_CUDA=1), the same compiler and MPI choice as above
#   make fuzz   build/fuzz/fuzz_*: the libFuzzer harnesses of dev/fuzz/ (clang, no MPI)
ASAN_DIR    := build/asan
ASAN_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# -O1 -g: readable reports at a bearable speed; no -Werror (warnings at -O1 differ from -O3's).
ASAN_CFLAGS := -O1 -g $(ASAN_SAN) -std=gnu11 $(filter-out -Werror,$(WARN)) $(MPI_DEF) -fopenmp -I. -I$(BLAS_INC)
ASAN_CXXFLAGS := -O1 -g $(ASAN_SAN) -std=gnu++17 $(filter-out -Werror,$(WARN)) $(MPI_DEF) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX \
                 -fopenmp -I. -I$(BLAS_INC)
ASAN_OBJS   := $(patsubst %.c,$(ASAN_DIR)/%.o,$(LIB_SRCS))
ASAN_STAMP  := $(ASAN_DIR)/flavour_$(if $(filter 1,$(NO_MPI)),nompi,mpi)
ASAN_BINS   := $(ASAN_DIR)/train_gpt_asan $(ASAN_DIR)/ckpt_asan $(ASAN_DIR)/tokenize_text_asan \
               $(ASAN_DIR)/test_tp_layout_asan

.PHONY: asan fuzz
asan: $(ASAN_BINS)

$(ASAN_STAMP):
	@mkdir -p $(ASAN_DIR)
	@rm -f $(ASAN_DIR)/flavour_*
	@touch $@

$(ASAN_DIR)/%.o: %.c $(HEADERS) $(ASAN_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_CFLAGS) -c $< -o $@

$(ASAN_DIR)/train_gpt_asan: train_gpt.cu $(ASAN_OBJS) $(HEADERS) $(ASAN_STAMP)
	$(CXX) $(ASAN_CXXFLAGS) -x c++ -c $< -o $(ASAN_DIR)/train_gpt.o
	$(CXX) $(ASAN_CXXFLAGS) $(ASAN_DIR)/train_gpt.o $(ASAN_OBJS) -o $@ $(LDLIBS)

$(ASAN_DIR)/ckpt_asan: checkpoint/tool/ckpt.c $(ASAN_OBJS) $(HEADERS) $(ASAN_STAMP)
	$(CC) $(ASAN_CFLAGS) $< $(ASAN_OBJS) -o $@ $(LDLIBS)

$(ASAN_DIR)/tokenize_text_asan: data/tokenize_text.c $(ASAN_OBJS) $(HEADERS) $(ASAN_STAMP)
	$(CC) $(ASAN_CFLAGS) $< $(ASAN_OBJS) -o $@ $(LDLIBS) $(ZLIB_FLAGS)

# The tensor-parallel layout's index arithmetic (dev/test/test_tp_layout.c) under the sanitizers.
$(ASAN_DIR)/test_tp_layout_asan: dev/test/test_tp_layout.c $(ASAN_OBJS) $(HEADERS) $(ASAN_STAMP)
	$(CC) $(ASAN_CFLAGS) $< $(ASAN_OBJS) -o $@ $(LDLIBS)

FUZZ_CC     ?= $(shell command -v clang-14 2>/dev/null || command -v clang 2>/dev/null)
FUZZ_DIR    := build/fuzz
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# The library without MPI (a harness is one process), OpenMP (its pragmas are ignored: the
# readers fuzzed here have none worth running in parallel) or -march=native (a corpus entry
# must replay on any x86-64).
FUZZ_CFLAGS := -O1 -g $(FUZZ_SAN) -std=gnu11 -DFSDP_NO_MPI -I. -I$(BLAS_INC) -Wall -Wno-unused-parameter -Wno-unused-function \
               -Wno-pass-failed -Wno-unknown-pragmas
FUZZ_SRCS   := $(filter-out comm/comm_mpi.c,$(LIB_SRCS))
FUZZ_OBJS   := $(patsubst %.c,$(FUZZ_DIR)/%.o,$(FUZZ_SRCS))
FUZZ_NAMES  := $(patsubst dev/fuzz/fuzz_%.c,%,$(wildcard dev/fuzz/fuzz_*.c))
FUZZ_BINS   := $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZ_NAMES))
FUZZ_LIBS   := $(BLAS_LIB) -lzstd -lpcre2-8 -lcjson -lxxhash -lpthread -lm

fuzz: $(FUZZ_BINS)

$(FUZZ_DIR)/%.o: %.c $(HEADERS)
	@test -n "$(FUZZ_CC)" || { echo "make fuzz: no clang (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)"; exit 1; }
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/libfsdp_fuzz.a: $(FUZZ_OBJS)
	rm -f $@
	ar rcs $@ $^

# A harness links only the library objects it uses (an archive).
$(FUZZ_DIR)/fuzz_%: dev/fuzz/fuzz_%.c $(FUZZ_DIR)/libfsdp_fuzz.a $(HEADERS)
	@test -n "$(FUZZ_CC)" || { echo "make fuzz: no clang (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_DIR)/libfsdp_fuzz.a -o $@ $(FUZZ_LIBS)
