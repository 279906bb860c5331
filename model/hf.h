// Hugging Face's form of a model: which safetensors tensor (model/safetensors.h) is which rows of
// which of our tensors, read from the family's TensorSpec table (model/model.h), and the export
// and import built on it. Nothing here names a family's tensors: a family's table and its hf_*
// hooks (model/gpt2.c, model/llama3.c) say everything.
//
// The mapping, as loops over the tables:
// - Names: spec_hf_name (a block's "HFPREFIX.N.name"). A tensor without an hf_name is one Hugging
//   Face tensor per segment, each with the segment's name: Llama's wqkv is q_proj, k_proj and
//   v_proj, its w13 gate_proj over up_proj.
// - Order (the file's, Hugging Face's module order): the root's tensors, each layer's block, then
//   the root's tensors marked hf_after_blocks (the final norm, the head).
// - Shapes: ours [rows, cols] ([out, in] for a weight), a vector 1-D [cols]; HF_TRANSPOSED is
//   [cols, rows] (GPT-2's four Conv1D weights per block). A vocabulary tensor (DIM_VOCAB rows)
//   holds the V real rows only: export drops the padded rows, import leaves them zero.
// - RoPE: a segment marked hf_rope has its rows permuted within each head (of the query heads or
//   the kv heads), because Hugging Face rotates the halves of a head (rotate_half) where we
//   rotate pairs (2i, 2i+1) (kernels/rope.h): its row h*hs + a*hs/2 + j is our row h*hs + 2j + a
//   (a = 0, 1; the view(heads, hs/2, 2, C).transpose(1, 2) of its conversion script). Export
//   applies it, import undoes it. (A permuted tensor is never also transposed.)
// - Tied heads: a family with an untied head (ROOT_HEAD) imports a file whose config ties it
//   (tie_word_embeddings: Llama 3.2 1B/3B) and has no head tensor by copying the embedding.
// What the tables cannot say is the family's hf_* hooks: how its import learns the config (the
// tensors' shapes, its config.json, its __metadata__, --heads), the names its files may hold
// beside its tensors, the metadata and config.json its export writes. The two forms:
// - GPT-2 (Hugging Face GPT2Model): wte.weight [V, C], wpe.weight, h.N.ln_1.weight, ...,
//   ln_f.bias; also GPT2LMHeadModel's (the same under "transformer.", attn.bias buffers skipped,
//   an lm_head.weight imported only when it equals wte). The head count is not in the tensors:
//   --heads, the file's __metadata__ n_head, or n_head of the config.json beside it
//   (save_pretrained's), never guessed; that config.json's fields that change the math are
//   checked (model/gpt2.c says which), its layer_norm_epsilon read (else the metadata's). Export:
//   metadata n_layer, n_head, n_embd, n_positions, vocab_size, padded_vocab_size,
//   layer_norm_epsilon, and a config.json for GPT2LMHeadModel.from_pretrained.
// - Llama 3 (Hugging Face LlamaForCausalLM): model.embed_tokens.weight [V, C],
//   model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
//   mlp.{gate,up,down}_proj}.weight, model.norm.weight, lm_head.weight [V, C]. The head counts,
//   positions, RoPE and the RMSNorms' epsilon are not in the tensors: export writes them to a config.json beside the file
//   (save_pretrained's keys), import requires that config.json; read one file or a shard index.
#ifndef FSDP_MODEL_HF_H
#define FSDP_MODEL_HF_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "model/model.h"
#include "model/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

// ---- the mapping

// One Hugging Face tensor: rows [row0, row0 + rows) of our tensor `tensor` (model_tensor_at's
// index), cols wide.
typedef struct {
    const TensorSpec* spec;
    int tensor, is_block, layer;
    int segment;              // -1: the whole tensor
    char name[96];            // Hugging Face's
    size_t row0, rows, cols;
    int ndim;
    uint64_t shape[2];        // Hugging Face's shape
    int transposed;           // stored [cols, rows]
    int rope_heads;           // rows permuted within each of this many heads (0: none)
} HfTensor;

// The Hugging Face tensors of a model, in file order.
int hf_tensor_count(const ModelConfig* c);
void hf_tensor_at(const ModelConfig* c, int k, HfTensor* t);

// ---- export

// Elements [lo, hi) of our tensor `name` (spec_name's) as fp32: where export reads the model.
typedef int (*HfReadTensor)(void* ctx, const char* name, size_t lo, size_t hi, float* dst, char* err, size_t errlen);
// One F32 safetensors file at path with the family's metadata, then the family's config.json
// beside it (its path into json_path; "" when the family writes none); *n_tensors: how many the
// file holds. Both appear whole or not at all (util/atomic_file.h).
int hf_export(const ModelConfig* c, HfReadTensor read, void* ctx, const char* path, int* n_tensors, char* json_path,
              size_t json_len, char* err, size_t errlen);
// Values for the families' hf_metadata and hf_config_json hooks: a whole number or a float as a
// metadata string (safetensors metadata values are strings), a float as a JSON number, both in
// the form Python's json writes a float (500000.0, 1e-05), so that Hugging Face reads a float.
void hf_meta_int(struct cJSON* meta, const char* key, long v);
void hf_meta_float(struct cJSON* meta, const char* key, float v);
void hf_json_float(struct cJSON* obj, const char* key, float v);

// ---- import

// An import under way: what the family's hf_config hook reads and fills.
typedef struct HfImport {
    StSet set;                    // the files
    const ModelFamily* family;    // the family whose names the files hold
    const struct cJSON* names;    // st_names(&set)
    int heads;                    // --heads (0: not given)
    struct cJSON* config_json;    // the config.json beside set.path (hf_read_config_json); NULL: none
    char config_path[PATH_MAX + 16];
    ModelConfig config;           // the hook's, once it returned
    int tie;                      // the config ties the head to the embedding (a family with ROOT_HEAD)
    int head_from_embedding;      // ... and there is no head tensor: it starts as the embedding
    char what[128];               // the read line: "read PATH: WHAT, <config>FROM"
    char from[PATH_MAX + 256];
    char note[512];               // a line after it ("" for none)
} HfImport;

// Tensor `name`, also under the family's hf_alias_prefix: *found 0 when there is none, else 1 and
// t parsed (model/safetensors.h's checks). 0, or non-zero with a message.
int hf_get(const HfImport* im, const char* name, StTensor* t, int* found, char* err, size_t errlen);
// Whether the file has tensor `name` (also under the alias), without parsing it.
int hf_has(const HfImport* im, const char* name);
// 1 + the highest N of the names "HFPREFIX.N.*" (also under the alias); 0 when there are none.
int hf_layers(const HfImport* im);
// The config.json beside set.path into im->config_json (NULL when there is none; its path into
// config_path either way); refused when it is not a regular file of at most 1 MiB holding a
// JSON object.
int hf_read_config_json(HfImport* im, char* err, size_t errlen);
// config.json's `key` as true or false: absent or null is dflt (transformers' default), another
// value is refused ("PATH: KEY = VALUE is not true or false"); the value, or -1 with a message.
int hf_config_bool(const HfImport* im, const char* key, int dflt, char* err, size_t errlen);
// A JSON value of an untrusted file as one short line for a message: as JSON (a string quoted,
// control characters escaped), cut to about 60 characters.
void hf_json_text(const struct cJSON* v, char* out, size_t n);
// "%s: tensor %s has shape [a, b], expected [c, d]" unless t is ndim-D of shape d0 (x d1).
int hf_expect_shape(const HfImport* im, const char* name, const StTensor* t, int ndim, uint64_t d0, uint64_t d1,
                    char* err, size_t errlen);

// The model read, in one buffer.
typedef struct {
    ModelConfig config;
    float* params;                // model_num_parameters(&config) of them, tensor i at model_tensor_offset(i); free()
    size_t n;
    char line[PATH_MAX + 512];    // what was read: "safetensors, L=2 NH=4 ... (heads from --heads)"
    char note[512];               // a line after it, or ""
} HfModel;

// A safetensors file, or a shard index (model.safetensors.index.json), of any family with a
// Hugging Face form (its names say which), with --heads (0: none). Every tensor is checked to be
// there with its shape, and no other, before the model's memory is allocated. 0, or non-zero
// with a one-line message naming the file (and the tensor) and nothing allocated.
int hf_import_file(const char* path, int heads, HfModel* m, char* err, size_t errlen);
int hf_import_index(const char* index_path, int heads, HfModel* m, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
