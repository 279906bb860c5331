"""Checks the tensor-parallel backward's order in a rank's FSDP_TEST_TP_TRACE record
(train/test_hooks.c): every column-parallel matmul's input-gradient reduce-scatter is started
right after its dX GEMM and is in flight across its weight-gradient GEMM, waited for only then,
just before the norm's backward reads it (Megatron's overlap, train/tp_schedule.h).

usage: tp_trace_order.py NAME TRACE LAYERS STEPS
Prints one "ok - NAME: ..." or "not ok - NAME: ..." line; exits 0 either way but for a usage error.
"""
import sys


def check(lines, layers, steps):
    """None when the order holds, else why not."""
    starts = [i for i, l in enumerate(lines) if l.startswith("reduce_scatter_start ")]
    # Per step: the LM head's, then per layer from the last the MLP's first matmul and qkv.
    want = steps * (1 + 2 * layers)
    if len(starts) != want:
        return f"{len(starts)} started reduce-scatters, expected {want} ({steps} step(s) x (the head + 2 x {layers} layers))"
    heads = 0
    # start, dW, wait back to back: no other TP collective is issued while one is in flight.
    for n, i in enumerate(starts):
        what = f"started reduce-scatter {n + 1} (line {i + 1})"
        if i == 0 or i + 3 >= len(lines):
            return f"{what}: not between kernels"
        dx, dw, wait, norm = lines[i - 1], lines[i + 1], lines[i + 2], lines[i + 3]
        if dx not in ("kernel matmul backward", "kernel lm_head backward"):
            return f"{what}: not right after a matmul's backward (the dX GEMM) but after '{dx}'"
        if dw != dx:
            return f"{what}: the next call is '{dw}', not the same matmul's weight-gradient GEMM (in flight across it)"
        if wait != "wait":
            return f"{what}: after the weight-gradient GEMM comes '{wait}', not its wait"
        if norm != "kernel norm backward":
            return f"{what}: after the wait comes '{norm}', not the norm's backward that reads it"
        heads += dx == "kernel lm_head backward"
    if heads != steps:
        return f"{heads} LM head backward(s) overlapped, expected {steps}"
    return None


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    name, path, layers, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    try:
        lines = [l.rstrip("\n") for l in open(path)]
    except OSError as e:
        print(f"not ok - {name}: cannot read the trace: {e}")
        return
    why = check(lines, layers, steps)
    n = steps * (1 + 2 * layers)
    print(f"not ok - {name}: {why}" if why else
          f"ok - {name}: each of the {n} column-parallel backwards (the head, c_fc/w13 and c_attn/wqkv per layer) "
          "runs dX GEMM, reduce-scatter start, dW GEMM, wait, norm backward")


if __name__ == "__main__":
    main()
