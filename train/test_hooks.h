// Failures made on purpose, for the tests (dev/test) of what a run does about them; read from
// the environment, off unless set:
//   FSDP_TEST_NAN_LOSS_STEPS="3,5"  rank 0's loss is made non-finite at these steps
//   FSDP_TEST_NAN_GRAD_STEPS="3"    rank 0's gradient likewise
//   FSDP_TEST_STALL="RANK:STEP"     that rank hangs before that step, as a stalled GPU or a
//                                   deadlocked host would
//   FSDP_TEST_TP_REPLICAS=1         (not a failure: a check) at every step, the replicated
//                                   tensors' state must be bitwise equal on the ranks of each
//                                   tensor-parallel group, else the run ends saying where
//   FSDP_TEST_TP_TRACE=PREFIX       (a record) each rank of a tensor-parallel run writes
//                                   PREFIX.RANK: a line per TP collective and per kernel, in
//                                   the order the schedule issues them (test_tp_overlap.sh
//                                   reads the backward's order from it)
//   FSDP_TEST_PARAM16=1             (a check) at every step, rank 0 prints a hash of the
//                                   compute-dtype parameters the forward used, each element by
//                                   its place in the whole model (whatever --tp, the sharding
//                                   and the world): runs that round alike print the same
// (STEP: the step that completes with it, from 1.)
#ifndef FSDP_TRAIN_TEST_HOOKS_H
#define FSDP_TRAIN_TEST_HOOKS_H

#include "fsdp/fsdp.h"
#include "model/model.h"
#include "train/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *nan_loss_steps, *nan_grad_steps, *stall, *tp_replicas, *param16;  // NULL: not set
} TestHooks;

void test_hooks_read(TestHooks* h);
// Before step `step`: hangs for good when this rank is to stall there.
void test_hooks_stall(const TestHooks* h, int rank, int step);
// After step `step`'s backward, before its decision: the non-finite loss or gradient asked for,
// and FSDP_TEST_TP_REPLICAS's and FSDP_TEST_PARAM16's checks of the state the steps before it
// left (a host wait; m: the units' layout).
void test_hooks_poison(const TestHooks* h, Fsdp* f, const ModelLayout* m, int rank, int step);
// FSDP_TEST_TP_TRACE, at tp > 1: d's TpComm is wrapped by one that writes each call, then
// makes it, and each kernel the schedule starts (Kernels.on_kernel) is written; the record is
// closed with the device (d->close). Nothing otherwise.
void test_hooks_tp_trace(Device* d, const ProcessGroup* pg);

#ifdef __cplusplus
}
#endif
#endif
