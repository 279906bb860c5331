// Tensor parallelism's backward overlap (train_gpt.cu's model_backward; the schedule itself is
// described there, above tp_gather_rows): a column-parallel matmul's input-gradient
// reduce-scatter in flight while its weight-gradient GEMM runs.
#ifndef FSDP_TRAIN_TP_SCHEDULE_H
#define FSDP_TRAIN_TP_SCHEDULE_H

#include <stdint.h>
#include "train/activations.h"
#include "train/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// A column-parallel matmul's backward (qkv, the MLP's first, the LM head) on x, its input's
// rows, every one (gathered): a->dbtc <- dout W, dweight and dbias from dout and x (the
// kernels' accumulate). At tp 1 one kernel call, as ever. Tensor parallel, dbtc holds partial
// sums of every row: their reduce-scatter into a->tp_dln is started between the two GEMMs and
// runs while the weight's does (Megatron's overlap), counted in d->tp_bytes; *rs is its
// ticket, for tp_wait before the rows are read (and before any other TP collective). Returns
// where the rows will be: dbtc at tp 1, else tp_dln.
const void* tp_column_backward(Device* d, const Activations* a, int64_t* rs, void* dweight, void* dbias, const void* dout,
                               const void* x, const void* weight, int N, int C, int OC, int acc);
// The kernels after this read what tp_column_backward's reduce-scatter wrote (nothing at tp 1).
void tp_wait(Device* d, const Activations* a, int64_t rs);

#ifdef __cplusplus
}
#endif
#endif
