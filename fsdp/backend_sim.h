// The sim device's FsdpBackend (train_gpt --plan): the real engine (fsdp.c) runs its
// schedule of gathers, reduce-scatters, waits and optimizer passes over this backend, whose
// functions only record costs on the clock it shares with the sim kernels
// (kernels/kernels_sim.h). Allocations return fake addresses that nothing dereferences: the
// plan of a model whose state would need many gigabytes runs in a few megabytes.
//
// Collectives: the ring algorithm's alpha-beta cost over the slowest link the group spans
// (the caller picks NVLink or InfiniBand from the topology, train/plan.c):
//   all-gather, reduce-scatter of n elements per rank over p ranks:
//       (p - 1) x latency + (p - 1) x n x bytes per element / bandwidth
//   all-reduce of n elements: twice that (a reduce-scatter then an all-gather).
// A collective starts on the comm stream when both the comm stream is free and the compute
// stream has issued it; wait() moves the compute clock to its end.
// --offload optimizer adds two clocks: the copy stream (host link) and the host's optimizer
// thread (host memory bandwidth): a gradient copy starts when its reduce-scatter ends, its fold
// on the host after it; the decision waits for the compute stream; each unit's AdamW follows
// on the host; its upload starts when that AdamW ends, and the unit's gather waits for it.
#ifndef FSDP_BACKEND_SIM_H
#define FSDP_BACKEND_SIM_H

#include "fsdp/fsdp.h"
#include "kernels/kernels_sim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double bw;        // bytes/s one rank sends (and receives) on the group's slowest link
    double latency;   // seconds per ring step
} SimLink;

typedef struct {
    int fp32;                 // 1: the cpu device's engine (fp32 gathers and reductions, host
                              // memory is device memory, unfused optimizer); 0: the cuda device's
                              // (bf16 shards and gathers, fused optimizer path, host mirror)
    int reduce_fp32;          // cuda: --reduce-dtype fp32 (fp32 reduce-scatter)
    int shard_size, replicate_size;
    SimLink shard_link, replica_link;
    // --offload optimizer: the host link's bytes/s per direction (PCIe) and the host memory
    // bytes/s the optimizer's threads stream at (each rank's share)
    double host_link_bw, host_mem_bw;
} SimBackendConfig;

void fsdp_backend_sim_init(FsdpBackend* be, SimClock* clock, const SimBackendConfig* cfg, int max_ops);
void fsdp_backend_sim_free(FsdpBackend* be);
// Ring time of one collective moving `bytes` per rank-step unit (see above): exposed for the
// plan's lower bounds and the tests.
double sim_ring_time(const SimLink* link, int ranks, double bytes_per_rank, int all_reduce);

#ifdef __cplusplus
}
#endif
#endif
