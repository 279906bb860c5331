// Flat units: the sharding arithmetic, with no communication in it.
//
// A unit's tensors are laid out back to back (row-major) in one flat buffer whose length is
// padded up to a multiple of shard_count x align. Rank r of the shard group owns the
// contiguous slice [r*shard, (r+1)*shard). Because tensors are contiguous in the flat
// buffer, a rank's slice meets each tensor in one contiguous element range, which is what
// optimizers and checkpoints work with; it does not depend on padding.
#ifndef FSDP_FLAT_UNIT_H
#define FSDP_FLAT_UNIT_H

#include <stddef.h>

#include "kernels/optimizer_math.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLAT_UNIT_MAX_TENSORS 64
#define FLAT_UNIT_NAME_LEN 48
#define FLAT_TENSOR_MAX_KEY_RUNS 3   // a tensor-parallel tensor's boxes (one per segment)

typedef struct {
    char name[FLAT_UNIT_NAME_LEN]; // GPT-2 naming: "wte", "h.3.attn.c_attn.weight", ...
    size_t rows, cols;             // shape; vectors have rows == 1
    size_t numel;
    size_t offset;                 // first element in the unit's flat buffer
    int decay;                     // AdamW weight decay applies (matrices only)
    // Whole on every rank of a tensor-parallel group (norms, row-parallel biases, positions)
    // while the unit's other tensors are split over it: the engine sums its gradient over
    // the group and counts it once in the norm. 0 without tensor parallelism.
    int tp_replicated;
    // Where its elements are in the unit as it is without tensor parallelism (the global
    // unit: the same tensors whole, in the same order), which keys their stochastic rounding
    // so that a value rounds the same at any --tp: runs of its local elements, local_begin
    // counted from the tensor's first element, global_begin in the global unit. None
    // (n_key_runs 0): its own place in this unit, as without tensor parallelism.
    int n_key_runs;
    SrKeyRun key_runs[FLAT_TENSOR_MAX_KEY_RUNS];
} FlatTensor;

typedef struct {
    int n_tensors;
    FlatTensor tensors[FLAT_UNIT_MAX_TENSORS];
    size_t numel;   // sum of the tensors' elements
    size_t padded;  // numel rounded up to a multiple of shard_count * align
    size_t shard;   // padded / shard_count: elements each rank owns
    size_t global_numel;  // the global unit's numel (tensor parallelism; 0: numel)
} FlatUnit;

// The most runs flat_unit_key_runs writes for a unit.
#define FLAT_UNIT_MAX_KEY_RUNS (FLAT_UNIT_MAX_TENSORS * FLAT_TENSOR_MAX_KEY_RUNS + 1)

// Appends a tensor; returns its index, or -1 when the unit is full.
int flat_unit_add(FlatUnit* u, const char* name, size_t rows, size_t cols, int decay);
// Fixes padded and shard for a shard group of shard_count ranks and an alignment in elements.
void flat_unit_finalize(FlatUnit* u, int shard_count, size_t align);

// The part of tensor t that lies in the slice [begin, end) of the flat buffer, as an element
// range [*lo, *hi) of the tensor. Returns 0 when they do not meet.
int flat_tensor_slice(const FlatTensor* t, size_t begin, size_t end, size_t* lo, size_t* hi);

// The unit's stochastic-rounding key table (optimizer_math.h's SrKeyRun, sr_key_index): its
// tensors' key runs in unit coordinates, consecutive ones merged, then one run for the
// padding (local index numel + p keyed global_numel + p). Returns how many into out (room
// for FLAT_UNIT_MAX_KEY_RUNS); 0 when the table would be the identity (every element keyed
// by its own index: the unit without tensor parallelism, which so rounds as it always has).
int flat_unit_key_runs(const FlatUnit* u, SrKeyRun* out);

// One piece a rank owns: elements [lo, hi) of tensor `tensor` of unit `unit`, held at element
// `at` of the rank's shard arena (its shards of every unit, back to back in unit order).
// Everything that walks a rank's slices (initialisation, model files, checkpoints, AdamW,
// import) walks this table.
typedef struct {
    int unit, tensor;
    size_t lo, hi;
    size_t at;
} FlatPiece;

// The pieces shard `shard_rank` owns of units[0 .. n_units), in unit then tensor order, into
// out (room for one per tensor of every unit). Returns how many.
int flat_owned_pieces(const FlatUnit* units, int n_units, int shard_rank, FlatPiece* out);
// Tensors over all units: the room flat_owned_pieces needs.
int flat_tensor_count(const FlatUnit* units, int n_units);

#ifdef __cplusplus
}
#endif
#endif
