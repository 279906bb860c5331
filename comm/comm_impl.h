// Private to the comm transports (comm.c, comm_mpi.c, comm_tcp.c): the table of operations
// a transport provides and the structures comm.h keeps opaque.
#ifndef FSDP_COMM_IMPL_H
#define FSDP_COMM_IMPL_H

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_F64, COMM_I32, COMM_F32 } CommDtype;

typedef struct CommOps {
    const char* name;
    Comm* (*split)(Comm* c, int color, int key);
    void (*barrier)(Comm* c);
    void (*all_reduce)(Comm* c, void* x, size_t n, CommDtype dtype, CommOp op);
    void (*broadcast)(Comm* c, void* buf, size_t bytes, int root);
    void (*gather)(Comm* c, const void* send, size_t bytes, void* recv, int root);
    void (*gatherv)(Comm* c, const void* send, size_t bytes, void* recv, const size_t* recv_bytes, int root);
    CommTicket (*all_gather_start)(Comm* c, const void* shard, void* full, size_t bytes);
    CommTicket (*reduce_scatter_f32_start)(Comm* c, const float* full, float* shard, size_t n);
    void (*wait)(Comm* c, CommTicket t);
    void (*finalize)(CommWorld* w);
    void (*abort)(CommWorld* w, int code);
} CommOps;

struct CommWorld {
    const CommOps* ops;
    double timeout_s;
    int local_rank, local_size;
    Comm* world;
    Comm** groups;          // every group made by comm_split, freed at finalize
    int n_groups, cap_groups;
    void* impl;             // the transport's own state
    // The stop watch (comm_set_stop_watch): read by the transports' own threads, so set and
    // read atomically (comm_stop_check).
    int (*stop_requested)(void);
    double stop_wait_s;
};

struct Comm {
    CommWorld* w;
    int rank, size;
    void* impl;             // MPI_Comm*, or the TCP group's rank list
};

// Registers a group made by a transport's split so that comm_finalize frees it.
void comm_register_group(CommWorld* w, Comm* c);
// The stop watch's check, from any thread: when a stop signal has come and this rank has
// waited waited_s >= the watch's seconds in `op` on a group of group_size ranks, prints the
// line (rank `rank`, transport `transport`) and _exit(128 + signal)s. Otherwise returns.
void comm_stop_check(CommWorld* w, int rank, const char* transport, const char* op, int group_size, double waited_s);

#ifdef __cplusplus
}
#endif
#endif
