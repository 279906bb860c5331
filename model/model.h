// model/: the one home of the models' files, shared by train_gpt and the ckpt tool. This
// header: their shapes and parameter layouts (presets, config checks, tensor names, the flat
// FSDP units, llm.c's file order and header). gpt2_state.h: what reads and writes a rank's
// parameters (initialisation, llm.c model files, checkpoints).
//
// Two families, ModelConfig.arch says which (the struct keeps GPT-2's name: it came first):
//
// GPT-2 (ARCH_GPT2). Unit 0 (the root) holds wte [Vp, C] (tied with the LM head), wpe
// [maxT, C] and ln_f. Units 1.. hold layers_per_unit transformer blocks each, 12 tensors per
// block in the order of the block enum below. Linear weights are [out, in] (y = x W^T + b).
// The llm.c model file stores the same tensors grouped by kind across layers (the K_* order).
//
// Llama 3 (ARCH_LLAMA3): pre-norm blocks with RMSNorm, rotary positions, grouped-query
// attention, a SwiGLU MLP, no biases, an untied output head. The root unit holds
// tok_embeddings [Vp, C], norm [C] and output [Vp, C]; a block holds 6 tensors (Meta's /
// torchtitan's names): attention_norm [C], attention.wqkv [(NH + 2 KVH) hs, C] (q, k and v
// stacked: one matmul), attention.wo [C, C], ffn_norm [C], feed_forward.w13 [2F, C] (w1,
// the gate, stacked over w3, the up projection) and feed_forward.w2 [C, F]. q and k rotate
// pairs (2i, 2i+1) of each head (Meta's convention; Hugging Face's files permute q and k).
#ifndef FSDP_MODEL_GPT2_H
#define FSDP_MODEL_GPT2_H

#include <stddef.h>
#include <stdint.h>
#include "fsdp/flat_unit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPT2_VOCAB 50257
#define GPT2_EOT 50256
#define LLAMA3_VOCAB 128256
#define VOCAB_PAD_MULTIPLE 128
#define MODEL_FILE_MAGIC 20240326
#define SHARD_ALIGN 64  // elements: flat units are padded to shard_count x 64
// What model_config_check accepts (every file's header, manifest and flag is held to these
// before anything is sized from it).
#define MODEL_MAX_LAYERS 100000
#define MODEL_MAX_CHANNELS (1 << 16)
#define MODEL_MAX_SEQ (1 << 24)
#define MODEL_MAX_VOCAB (1 << 26)
#define MODEL_MAX_PARAMETERS ((size_t)1 << 40)
#define MODEL_MAX_LAYERS_PER_UNIT (FLAT_UNIT_MAX_TENSORS / 12)   // 12 tensors a block (either family: the larger)
#define LLAMA_MAX_FFN (1 << 20)

enum { ARCH_GPT2 = 0, ARCH_LLAMA3 = 1 };

typedef struct {
    int max_seq_len;    // GPT-2: learned positions; Llama: the longest sequence allowed
    int vocab_size;     // real vocabulary
    int padded_vocab_size;
    int num_layers;
    int num_heads;
    int channels;
    // Llama 3 only (zero for GPT-2, whose code paths never read them):
    int arch;           // ARCH_GPT2 or ARCH_LLAMA3
    int num_kv_heads;   // grouped-query attention: heads of k and v (divides num_heads)
    int ffn_dim;        // the SwiGLU's hidden width F
    float rope_theta;   // RoPE base
    float rope_factor;  // > 1: Llama 3.1's frequency scaling, with the three below
    float rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
} ModelConfig;

// Llama's tensors: the root unit's and a block's, in unit order.
enum { LROOT_EMB, LROOT_NORM, LROOT_OUTPUT, LLAMA_ROOT_TENSORS };
enum { ATTN_NORM_W, WQKV, WO, FFN_NORM_W, W13, W2, LLAMA_BLOCK_TENSORS };

enum { ROOT_WTE, ROOT_WPE, ROOT_LNF_W, ROOT_LNF_B, ROOT_TENSORS };
enum { LN1_W, LN1_B, QKV_W, QKV_B, ATTPROJ_W, ATTPROJ_B, LN2_W, LN2_B, FC_W, FC_B,
       FCPROJ_W, FCPROJ_B, BLOCK_TENSORS };
extern const char* const BLOCK_TENSOR_NAMES[BLOCK_TENSORS];  // "ln_1.weight", ...
extern const char* const LLAMA_BLOCK_TENSOR_NAMES[LLAMA_BLOCK_TENSORS];  // "attention_norm.weight", ...
// The 16 kinds of llm.c's file, in file order.
enum { K_WTE, K_WPE, K_LN1W, K_LN1B, K_QKVW, K_QKVB, K_ATTPROJW, K_ATTPROJB, K_LN2W, K_LN2B,
       K_FCW, K_FCB, K_FCPROJW, K_FCPROJB, K_LNFW, K_LNFB, NUM_KINDS };
// Llama's kinds continue the numbering (a kind names a tensor of every layer; initialisation
// draws a stream per kind and layer).
enum { LK_EMB = NUM_KINDS, LK_NORM, LK_OUTPUT, LK_ATTN_NORM, LK_WQKV, LK_WO, LK_FFN_NORM, LK_W13, LK_W2,
       NUM_ALL_KINDS };
// The kinds of c's family: [model_first_kind, model_end_kind).
int model_first_kind(const ModelConfig* c);
int model_end_kind(const ModelConfig* c);
int block_tensor_count(const ModelConfig* c);   // 12 (GPT-2) or 6 (Llama)
int root_tensor_count(const ModelConfig* c);    // 4 or 3
int is_block_kind(int kind);
// The width of the fused qkv projection.
int qkv_width(const ModelConfig* c);            // GPT-2 3C; Llama (NH + 2 KVH) C / NH

typedef struct {
    ModelConfig config;
    int layers_per_unit;
    int n_units;
    FlatUnit* units;      // [n_units], finalized for the shard group (free() it)
    size_t num_parameters;
} ModelLayout;

int pad_vocab(int v);
// NULL when the config is one a model can be built from, else what is wrong with it: a
// dimension < 1 or above the GPT2_MAX_* bounds, heads not dividing channels, padded vocabulary
// below the vocabulary, more than MODEL_MAX_PARAMETERS in all; for Llama kv heads not dividing
// heads, an odd head size, an F out of bounds, RoPE parameters not positive and finite.
// Safe on any values.
const char* model_config_check(const ModelConfig* c);
// GPT-2, llm.c's naming: dN has N layers, 64*N channels and N heads, except GPT-2's released
// d24/d36/d48 (350M/774M/1558M) widths. Llama 3: llama3:tiny (a test model), llama3:1b and
// llama3:3b (Llama 3.2's shapes), llama3:8b (Llama 3.1's), with their vocabulary (128256;
// tiny: GPT-2's) and RoPE scaling. Sets the shape and, for Llama, the vocabulary and
// max_seq_len (GPT-2's come from the caller). Non-zero for an unknown name.
int preset_config(const char* name, ModelConfig* c);
// GPT-2's block tensor j (the llm.c file's kinds; kind_shape covers both families).
void block_tensor_shape(const ModelConfig* c, int j, size_t* rows, size_t* cols);
// Elements of one instance (one layer) of each llm.c kind (GPT-2).
void kind_sizes(const ModelConfig* c, size_t sizes[NUM_KINDS]);
// Instances of llm.c kind `kind`: the number of layers for block tensors, else 1.
int kind_layers(const ModelConfig* c, int kind);
// Our shape ([out, in] for weights, [1, n] for vectors) and checkpoint name ("wte",
// "h.3.attn.c_attn.weight", ...) of llm.c kind `kind` in layer `layer`.
void kind_shape(const ModelConfig* c, int kind, size_t* rows, size_t* cols);
// (Any kind of either family; the kind says which.)
void model_tensor_name(int kind, int layer, char* out, size_t outlen);
// Every parameter, padded vocabulary rows included (what an llm.c file stores).
size_t model_num_parameters(const ModelConfig* c);
// The flat units of a config for a shard group of shard_count ranks. Returns 0; 1 when the
// config fails model_config_check or a unit would hold more than MODEL_MAX_LAYERS_PER_UNIT
// blocks (min(layers_per_unit, num_layers) > 5: its tensors would not fit; callers check
// first, for the message); 2 when out of memory. On failure m is zeroed (no units) and
// nothing stays allocated.
int build_layout(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count);
// Where tensor i of unit u sits in llm.c's file order: its kind and layer.
void tensor_kind(const ModelLayout* m, int u, int i, int* kind, int* layer);
// Element offset of (kind, layer) in the parameter section of an llm.c model file.
size_t llmc_offset(const ModelConfig* c, int kind, int layer);

// llm.c model files: int32 header[256] {20240326, version 3 (fp32) | 5 (bf16), maxT, V, L,
// NH, C, Vp}, then every tensor in llm.c's order. Checks the header and that the file size
// matches it; one-line message naming the file otherwise.
#define MODEL_HEADER_BYTES (256 * sizeof(int32_t))
int read_model_header(const char* path, ModelConfig* c, int* version, char* err, size_t errlen);
void llmc_model_header(const ModelConfig* c, int version, int32_t header[256]);
float bf16_to_float(uint16_t b);

#ifdef __cplusplus
}
#endif
#endif
