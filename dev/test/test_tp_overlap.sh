#!/usr/bin/env bash
# run_tests: cores 1.0, 2 s
# Tensor parallelism's backward overlap, in order (the issue: the reduce-scatter of dX
# overlapped with the weight-gradient GEMM): one step at --tp 2 on the cpu device, GPT-2 and
# Llama, each rank recording its TP collectives and kernels (FSDP_TEST_TP_TRACE,
# train/test_hooks.c); tp_trace_order.py asserts that every column-parallel backward (the LM
# head, c_fc/w13, c_attn/wqkv) runs dX GEMM, reduce-scatter start, dW GEMM, wait, norm
# backward. The checker is shown to fail on the same records with the wait moved before the
# dW GEMM (the schedule this replaced). (The cuda device's order: test_train_emu.sh's TP
# section; equal losses: test_tp.sh.)
set -u
source dev/test/lib.sh
out=$TEST_TMP
common=(--device cpu --layers 2 --channels 64 --heads 4 --max-seq 64 -t 16 -d 192 -x 1 -v 10 --val-steps 1
        -i "$TRAIN_SHARD" -j "$VAL_SHARD" --threads 1 -l 1e-3 -u 2 --seed 5 -b 12 --tp 2)
for arch in gpt2 llama3; do
    extra=()
    [ $arch = llama3 ] && extra=(--arch llama3 --kv-heads 2 --ffn-dim 96)
    FSDP_TEST_TP_TRACE=$out/trace_$arch run_logged "$out" 120 $arch 2 ./train_gpt "${common[@]}" "${extra[@]}" -o "$out/$arch" ||
        continue
    for r in 0 1; do $PYTHON dev/test/tp_trace_order.py "$arch --tp 2, rank $r" "$out/trace_$arch.$r" 2 1; done
    # The mutant: each wait moved before its dW GEMM (start, wait, dW): the checker must say no.
    awk '/^reduce_scatter_start/ { print; getline dw; getline w; print w; print dw; next } { print }' \
        "$out/trace_$arch.0" > "$out/mutant_$arch"
    res=$($PYTHON dev/test/tp_trace_order.py mutant "$out/mutant_$arch" 2 1)
    case "$res" in
        "not ok - mutant: "*"not the same matmul's weight-gradient GEMM"*)
            ok "$arch: a record with the wait before the dW GEMM is refused (${res#not ok - mutant: })" ;;
        *) not_ok "$arch: the record with the wait before the dW GEMM passed the checker: $res" ;;
    esac
done
# One record per rank, named PREFIX.RANK.
ls "$out"/trace_gpt2.* > /dev/null 2>&1 && [ "$(ls "$out"/trace_gpt2.* | wc -l)" = 2 ] &&
    ok "FSDP_TEST_TP_TRACE: one record per rank" || not_ok "FSDP_TEST_TP_TRACE: expected 2 records: $(ls "$out" | tr '\n' ' ')"
