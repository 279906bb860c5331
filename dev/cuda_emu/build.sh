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
# command from the same DEP contents. The compiler's messages go to OUT.log.
build() {
    local out=$1 deps=() key
    shift
    while [ "$1" != "--" ]; do deps+=("$1"); shift; done
    shift
    key=$({ printf '%s\n' "$*"; cat "${deps[@]}"; } | sha1sum | cut -d' ' -f1)
    [ -f "$out" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ] && return 0
    rm -f "$out" "$out.key"
    "$@" >"$out.log" 2>&1 && echo "$key" >"$out.key"
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
