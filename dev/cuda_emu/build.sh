# Sourced by dev/test/test_kernels_emu.sh and dev/test/test_train_emu.sh (from the repository
# root): where the emulated builds go, the compiler lines, and a build step that is skipped
# when its output was made by the same command from the same inputs.
B=${EMU_BUILD:-build/emu}  # EMU_BUILD: another folder (runs that must not share build/emu)
E=dev/cuda_emu
TAG='[cpu emulation]'
BLAS_INC=/usr/include/x86_64-linux-gnu/openblas-openmp  # as the Makefile
BLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp
CXX_EMU=(g++ -std=gnu++17 -O2 -Wall -Wextra -Werror -I$E/include)
HDRS=($E/emu.h $(find $E/include -type f | sort))
mkdir -p $B

# build OUT DEP... -- CMD...: runs CMD (which writes OUT) unless OUT was built by the same
# command from the same DEP contents. The compiler's messages go to OUT.log. Under a lock on
# OUT.lock: test scripts that run at the same time (dev/test/run_tests.sh's pool) and need
# the same object wait for one build of it instead of writing it together.
build() {
    local out=$1 deps=() key lock rc=0
    shift
    while [ "$1" != "--" ]; do deps+=("$1"); shift; done
    shift
    key=$({ printf '%s\n' "$*"; cat "${deps[@]}"; } | sha1sum | cut -d' ' -f1)
    exec {lock}>"$out.lock"
    flock "$lock"
    if ! { [ -f "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; }; then
        rm -f "$out" "$out.key"
        "$@" >"$out.log" 2>&1 && echo "$key" >"$out.key" || rc=1
    fi
    exec {lock}>&-
    return $rc
}
build_failed() {  # NAME OUT
    echo "not ok - $TAG build of $1 failed: $(grep -m3 -E 'error|Error' "$2.log" | tr '\n' ' ' | cut -c1-400)"
}

# The emulator's runtime ($B/emu.o), fake cuBLASLt ($B/cublaslt.o) and NCCL ($B/nccl.o), in
# parallel. Non-zero (after saying which failed) when any did not build.
RUNTIME_OBJS=($B/emu.o $B/cublaslt.o $B/nccl.o)
build_runtime() {
    local rc=0 p1 p2
    build $B/emu.o $E/emu.cpp "${HDRS[@]}" -- "${CXX_EMU[@]}" -c $E/emu.cpp -o $B/emu.o &
    p1=$!
    build $B/nccl.o $E/nccl.cpp "${HDRS[@]}" -- "${CXX_EMU[@]}" -c $E/nccl.cpp -o $B/nccl.o &
    p2=$!
    build $B/cublaslt.o $E/cublaslt.cpp "${HDRS[@]}" -- "${CXX_EMU[@]}" -c $E/cublaslt.cpp -o $B/cublaslt.o || rc=1
    wait $p1 || rc=1
    wait $p2 || rc=1
    if [ $rc -ne 0 ]; then
        for o in emu.o cublaslt.o nccl.o; do [ -f $B/$o ] || build_failed $o $B/$o; done
    fi
    return $rc
}

# --attention cudnn under the emulator (build_cudnn): kernels/cuda_attention_cudnn.cpp as it is
# built for a GPU ($B/cuda_attention_cudnn.o, the cudnn-frontend compiled against the real
# cudnn.h: it calls no emulated function, streams pass through it as pointers), and the fake
# cuDNN that it dlopens: $B/fake_cudnn/libcudnn_graph.so.9 (dev/cuda_emu/cudnn.cpp) with the
# CUDA runtime the frontend loads for itself ($B/fake_cudnn/libcudart.so.13,
# dev/cuda_emu/cudart_for_cudnn.cpp). Where cudnn.h or the frontend's headers are missing
# (scripts/cudnn_frontend.sh fetches them), the object is the FSDP_NO_CUDNN stub and
# CUDNN_FAKE_WHY says why (the tests of the cudnn path then skip with it). The emulated
# programs link CUDNN_OBJS with -rdynamic: the fakes find the emulator's cudaStreamSynchronize
# in the process. CUDNN_ENV: the environment that points a run at the fakes.
CUDNN_INC=${CUDNN_INC:-$(bash scripts/find_cudnn.sh include "$(command -v nvcc)")}  # as the Makefile
CUDNN_FE_INC=${CUDNN_FE_INC:-.deps/cudnn_frontend/include}
CUDNN_OBJS=($B/cuda_attention_cudnn.o -rdynamic -ldl)
FAKE_CUDNN=$PWD/$B/fake_cudnn/libcudnn_graph.so.9
FAKE_CUDART=$PWD/$B/fake_cudnn/libcudart.so.13
CUDNN_ENV=(FSDP_CUDNN_LIB=$FAKE_CUDNN CUDNN_FRONTEND_CUDART_LIB_NAME=$FAKE_CUDART)
CUDNN_FAKE_WHY=""
build_cudnn() {
    local flags=() fake=(g++ -std=gnu++17 -O2 -Wall -Wextra -Werror -fPIC -shared)
    if [ -z "$CUDNN_INC" ]; then
        CUDNN_FAKE_WHY="no cudnn.h (CUDNN_INC)"
    elif [ ! -f "$CUDNN_FE_INC/cudnn_frontend.h" ]; then
        CUDNN_FAKE_WHY="no cudnn-frontend headers in $CUDNN_FE_INC (bash scripts/cudnn_frontend.sh)"
    fi
    if [ -n "$CUDNN_FAKE_WHY" ]; then flags=(-DFSDP_NO_CUDNN)
    else flags=(-isystem "$CUDNN_INC" -isystem "$CUDNN_FE_INC"); fi
    mkdir -p $B/fake_cudnn
    build $B/cuda_attention_cudnn.o kernels/cuda_attention_cudnn.cpp kernels/cuda_attention_cudnn.cuh \
            $(ls $CUDNN_FE_INC/cudnn_frontend_version.h 2>/dev/null) -- \
        g++ -std=gnu++17 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -I. "${flags[@]}" \
            -c kernels/cuda_attention_cudnn.cpp -o $B/cuda_attention_cudnn.o ||
        { build_failed cuda_attention_cudnn.o $B/cuda_attention_cudnn.o; return 1; }
    [ -n "$CUDNN_FAKE_WHY" ] && return 0
    build $B/fake_cudnn/libcudnn_graph.so.9 $E/cudnn.cpp -- "${fake[@]}" -isystem "$CUDNN_INC" $E/cudnn.cpp \
            -o $B/fake_cudnn/libcudnn_graph.so.9 -ldl ||
        { build_failed "the fake cuDNN" $B/fake_cudnn/libcudnn_graph.so.9; return 1; }
    build $B/fake_cudnn/libcudart.so.13 $E/cudart_for_cudnn.cpp -- "${fake[@]}" -isystem "$CUDNN_INC" \
            $E/cudart_for_cudnn.cpp -o $B/fake_cudnn/libcudart.so.13 -ldl ||
        { build_failed "the fake cudart" $B/fake_cudnn/libcudart.so.13; return 1; }
}
