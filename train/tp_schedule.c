// train/: what the training program is made of besides its story (train/device.cuh opens with the
// list). This file: tensor parallelism's overlapped backward (tp_schedule.h).
#include "train/tp_schedule.h"

const void* tp_column_backward(Device* d, const Activations* a, int64_t* rs, void* dweight, void* dbias, const void* dout,
                               const void* x, const void* weight, int N, int C, int OC, int acc) {
    Kernels* k = &d->kernels;
    *rs = 0;
    if (a->tp == 1) {
        kernel_matmul_backward(k, a->dbtc, dweight, dbias, dout, x, weight, NULL, N, C, OC, acc);
        return a->dbtc;
    }
    // The halves give the whole's values (kernels.h); only the order around them changes.
    const size_t n = (size_t)(N / a->tp) * (size_t)C;
    kernel_matmul_backward(k, a->dbtc, NULL, NULL, dout, NULL, weight, NULL, N, C, OC, acc);
    *rs = d->tp.reduce_scatter_start(d->tp.ctx, a->tp_dln, a->dbtc, n);
    d->tp_bytes.reduce_scattered += (uint64_t)(a->tp - 1) * n * k->act_bytes;  // the others' rows, as tp_sum_rows counts
    kernel_matmul_backward(k, NULL, dweight, dbias, dout, x, NULL, NULL, N, C, OC, acc);
    return a->tp_dln;
}

void tp_wait(Device* d, const Activations* a, int64_t rs) {
    if (a->tp > 1) d->tp.wait(d->tp.ctx, rs);
}
