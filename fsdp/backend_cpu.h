// The CPU device's FsdpBackend: host memory, fp32 compute dtype, non-blocking collectives
// (comm/comm.h: MPI_Iallgather / MPI_Ireduce_scatter_block, or the TCP transport's ring) on
// the shard group, and the CPU kernels for the elementwise work.
#ifndef FSDP_BACKEND_CPU_H
#define FSDP_BACKEND_CPU_H

#include "fsdp/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

// max_ops: how many collectives may be in flight at once (the engine's parameter slots plus
// gradient slots; 2 * n_units + 2 always suffices).
void fsdp_backend_cpu_init(FsdpBackend* be, const ProcessGroup* pg, int max_ops);
void fsdp_backend_cpu_free(FsdpBackend* be);

#ifdef __cplusplus
}
#endif
#endif
