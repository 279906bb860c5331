// llm.c's model file (karpathy/llm.c's train_gpt2 writes and reads it): int32 header[256]
// {20240326, version 3 (fp32) | 5 (bf16), maxT, V, L, NH, C, Vp}, then every tensor in llm.c's
// order: the tensors grouped by kind, each kind stacked over the layers (TensorSpec.llmc_kind
// orders them). GPT-2 only: a family without llm.c kinds has no llm.c file.
#ifndef FSDP_MODEL_LLMC_H
#define FSDP_MODEL_LLMC_H

#include <stddef.h>
#include <stdint.h>
#include "model/model.h"

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

#ifdef __cplusplus
}
#endif
#endif
