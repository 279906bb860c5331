// llm.c's model file (karpathy/llm.c's train_gpt2 writes and reads it): int32 header[256]
// {20240326, version 3 (fp32) | 5 (bf16), maxT, V, L, NH, C, Vp}, then every tensor in llm.c's
// order: the tensors grouped by kind, each kind stacked over the layers (TensorSpec.llmc_kind
// orders them). GPT-2 only: a family without llm.c kinds has no llm.c file.
#ifndef FSDP_MODEL_LLMC_H
#define FSDP_MODEL_LLMC_H

#include <stddef.h>
#include <stdint.h>
#include "comm/process_group.h"
#include "fsdp/flat_unit.h"
#include "model/model.h"
#include "util/atomic_file.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_FILE_MAGIC 20240326
#define MODEL_HEADER_BYTES (256 * sizeof(int32_t))

// Checks the header and that the file size matches it; one-line message naming the file
// otherwise. The config is a GPT-2 (llm.c files hold no other family).
int read_model_header(const char* path, ModelConfig* c, int* version, char* err, size_t errlen);
void llmc_model_header(const ModelConfig* c, int version, int32_t header[256]);
float bf16_to_float(uint16_t b);
// Whether c's family has an llm.c file layout (every tensor has an llm.c kind).
int llmc_has_layout(const ModelConfig* c);
// The table row of llm.c kind `kind`, and whether it is a block tensor (one per layer); NULL
// past the last kind.
const TensorSpec* llmc_kind_spec(const ModelConfig* c, int kind, int* is_block);
// Element offset of (kind, layer) in the file's parameter section.
size_t llmc_offset(const ModelConfig* c, int kind, int layer);

// n parameters starting at element `first` of the file's parameter section, as fp32 (the
// file's dtype is its version: 3 fp32, 5 bf16). One-line message naming the file on error.
int llmc_read_params(int fd, const char* path, int version, size_t first, size_t n, float* dst,
                     char* err, size_t errlen);
// Every parameter of the llm.c file at path (its header read into c by read_model_header) into
// dst, fp32, tensor i of model_tensor_at's order at model_tensor_offset(i): the whole model in
// one buffer in our layout (the ckpt tool's import).
int llmc_read_model(const char* path, const ModelConfig* c, int version, float* dst, char* err, size_t errlen);
// This rank's pieces of an llm.c model file into its arena (every rank reads only its ranges; a
// tensor-parallel rank, the global elements of its local ones: layout_global_element).
int llmc_read_model_file(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* arena,
                         const char* path, int version, char* err, size_t errlen);

// Writing one: the file appears whole or not at all (util/atomic_file.h: PATH.tmp, written,
// synced, renamed).
typedef struct {
    ModelConfig config;
    int version;       // 3 fp32, 5 bf16 (rounded to nearest even)
    AtomicFile file;
} LlmcFileWriter;
int llmc_file_create(LlmcFileWriter* w, const char* path, const ModelConfig* c, int version, char* err, size_t errlen);
// Elements [lo, lo + n) of (kind, layer), fp32 in memory.
int llmc_file_put(LlmcFileWriter* w, int kind, int layer, size_t lo, const float* src, size_t n, char* err, size_t errlen);
int llmc_file_commit(LlmcFileWriter* w, char* err, size_t errlen);
void llmc_file_abort(LlmcFileWriter* w);
// train_gpt --save-model: rank 0 collects each unit's shards from the first replica group's
// shard group (from their arenas) and writes an fp32 model file. At tensor parallel (m->tp_size
// > 1) it collects every TP rank's local unit and writes each local tensor's elements at their
// global places (its TpView), a replicated tensor from TP rank 0's: the same file as at TP 1.
// Collective over pg's world; the file appears whole or not at all.
int llmc_write_model_file(const ModelLayout* m, const float* arena, const ProcessGroup* pg, const char* path,
                          char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
