// model/: the model families and what every tool needs of them, shared by train_gpt and the
// ckpt tool. This header is the family-neutral half: the config, the table that describes a
// family's tensors, the flat FSDP units built from it, names and shapes. Each family is one
// file holding one static table (model/gpt2.c, model/llama3.c); everything else here and in
// state.c (initialisation, checkpoints), llmc.c (llm.c model files) and hf.c (Hugging Face's
// names and layouts, over safetensors.c's container) is a loop over those tables.
//
// How to add a family: copy model/llama3.c to model/NAME.c; write its TensorSpec table (one
// row per tensor: role, name, shape, initialisation, decay, Hugging Face name and transform,
// tensor-parallel split), its presets, its config checks and config keys, and what its Hugging
// Face files say beyond the table (the hf_* hooks: how an import learns the config, the
// metadata and config.json an export writes; or none); fill a ModelFamily with them and list
// it in model_families (model/model.c). The training schedule runs any
// family whose tensors take the roles below and whose norm, MLP and positions are among the
// kinds below (a new kind of op is a new kernel and a new branch in train_gpt.cu, not a new
// copy of the schedule).
#ifndef FSDP_MODEL_MODEL_H
#define FSDP_MODEL_MODEL_H

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
#define SHARD_ALIGN 64  // elements: flat units are padded to shard_count x 64
// What model_config_check accepts (every file's header, manifest and flag is held to these
// before anything is sized from it).
#define MODEL_MAX_LAYERS 100000
#define MODEL_MAX_CHANNELS (1 << 16)
#define MODEL_MAX_SEQ (1 << 24)
#define MODEL_MAX_VOCAB (1 << 26)
#define MODEL_MAX_PARAMETERS ((size_t)1 << 40)
#define MODEL_MAX_BLOCK_TENSORS 12   // the most tensors a family's block has (GPT-2's)
#define MODEL_MAX_LAYERS_PER_UNIT (FLAT_UNIT_MAX_TENSORS / MODEL_MAX_BLOCK_TENSORS)
#define LLAMA_MAX_FFN (1 << 20)
// The norms' epsilon: what GPT-2's and Llama 3's presets, llm.c model files and checkpoints from
// before it was a config key say; model_config_check's range for it.
#define MODEL_DEFAULT_NORM_EPS 1e-5f
#define MODEL_MIN_NORM_EPS 1e-30
#define MODEL_MAX_NORM_EPS 1.0

// The families, in model_families' order (ModelConfig.arch indexes it).
enum { ARCH_GPT2 = 0, ARCH_LLAMA3 = 1, NUM_ARCHS };

typedef struct {
    int max_seq_len;    // learned positions (GPT-2), or the longest sequence allowed (RoPE)
    int vocab_size;     // real vocabulary
    int padded_vocab_size;
    int num_layers;
    int num_heads;
    int channels;
    int arch;           // the family: ARCH_GPT2, ARCH_LLAMA3
    float norm_eps;     // every norm's epsilon (LayerNorm's, RMSNorm's): x / sqrt(var + eps)
    // Read only by the families whose config keys name them (zero otherwise):
    int num_kv_heads;   // grouped-query attention: heads of k and v (divides num_heads)
    int ffn_dim;        // the gated MLP's hidden width F
    float rope_theta;   // RoPE base
    float rope_factor;  // > 1: Llama 3.1's frequency scaling, with the three below
    float rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
} ModelConfig;

// ---- the tensor table

// What a tensor is to the training schedule: train_gpt.cu's RootTensors / BlockTensors have a
// field of each name (wte, ..., fcprojb: llm.c's names). A family's table gives each of its
// tensors one role; a role it lacks is a tensor it does not have (no biases, no learned
// positions; no ROOT_HEAD: the head is tied to ROOT_WTE).
typedef enum {
    ROOT_WTE,            // token embedding [Vp, C]
    ROOT_WPE,            // learned position embedding [maxT, C]
    ROOT_LNFW, ROOT_LNFB,// the final norm
    ROOT_HEAD,           // the LM head [Vp, C], when untied
    NUM_ROOT_ROLES
} RootRole;
typedef enum {
    BLOCK_LN1W, BLOCK_LN1B,          // the attention's norm
    BLOCK_QKVW, BLOCK_QKVB,          // q, k and v stacked: one matmul
    BLOCK_PROJW, BLOCK_PROJB,        // the attention's output projection
    BLOCK_LN2W, BLOCK_LN2B,          // the MLP's norm
    BLOCK_FCW, BLOCK_FCB,            // the MLP's first matmul (GPT-2: 4C wide; gated: gate|up, 2F)
    BLOCK_FCPROJW, BLOCK_FCPROJB,    // the MLP's output projection
    NUM_BLOCK_ROLES
} BlockRole;

// The sizes shapes are written in, resolved against a config by model_dim.
typedef enum {
    DIM_ONE,          // 1 (the rows of a vector)
    DIM_C,            // channels
    DIM_3C, DIM_4C,   // GPT-2's qkv and MLP widths
    DIM_VOCAB,        // padded vocabulary (Hugging Face files hold the real rows only)
    DIM_POSITIONS,    // max_seq_len
    DIM_KV,           // num_kv_heads x head size (grouped-query attention's k or v)
    DIM_QKV,          // C + 2 DIM_KV
    DIM_FFN, DIM_2FFN // the gated MLP's F, and gate|up stacked
} Dim;

typedef enum {
    INIT_NORMAL,         // N(0, 0.02); rows beyond the real vocabulary zero
    INIT_NORMAL_SCALED,  // N(0, 0.02 / sqrt(2 L)): the projections into the residual stream
    INIT_ONES,           // norm weights
    INIT_ZEROS,          // biases
} InitRule;

// How a tensor splits over a tensor-parallel group (Megatron's): COLUMN splits its rows (the
// output features; each segment separately, so a rank keeps whole heads and both halves of a
// gated MLP's pairs), ROW its columns (the input features; a row-parallel bias is added once,
// so it is REPLICATED), VOCAB its rows by vocabulary range.
typedef enum { TP_REPLICATED, TP_COLUMN, TP_ROW, TP_VOCAB } TpSplit;

// Hugging Face's layout of a tensor: as ours ([out, in]), or transposed ([in, out]: GPT-2's
// Conv1D weights).
typedef enum { HF_AS_IS, HF_TRANSPOSED } HfLayout;
// Rows permuted within each head for Hugging Face's rotate_half RoPE (we rotate pairs (2i,
// 2i+1)): over the query heads or the kv heads.
typedef enum { HF_ROPE_NONE, HF_ROPE_Q_HEADS, HF_ROPE_KV_HEADS } HfRope;

// A block of consecutive rows of a fused tensor (q|k|v, gate|up): tensor parallelism splits
// each on its own; Hugging Face may store each as its own tensor.
typedef struct {
    Dim rows;
    const char* hf_name;   // its own Hugging Face tensor (block: after "PREFIX.N."); NULL: in the tensor's
    HfRope hf_rope;
} TensorSegment;

#define MAX_SEGMENTS 3
typedef struct {
    int role;                // RootRole or BlockRole (by the table it is in)
    const char* name;        // checkpoint name (a block's: after "PREFIX.N.", family->block_prefix)
    Dim rows, cols;          // [out, in] for a weight; rows DIM_ONE for a vector
    InitRule init;
    int decay;               // AdamW weight decay applies (matrices; not norms and biases)
    int init_stream;         // the random stream of its initial values: fixed for good (a new number changes the initial model)
    int llmc_kind;           // its place in llm.c's model file order, -1: not in llm.c's format
    const char* hf_name;     // Hugging Face name (block: after "HFPREFIX.N."); NULL: per segment
    HfLayout hf_layout;
    int hf_after_blocks;     // root: after the blocks in Hugging Face's module order (final norm, head)
    TpSplit tp;
    int n_segments;          // 0: one block of rows
    TensorSegment segments[MAX_SEGMENTS];
} TensorSpec;

// One key of the manifest's state.config that a family adds to the common six: a whole number
// or a float field of ModelConfig.
typedef struct {
    const char* key;
    size_t offset;           // offsetof(ModelConfig, field)
    int is_float;
    // What a manifest without the key (written before the key existed) means: 0, nothing (the
    // key is required); else the value every model had then (norm_eps: 1e-5).
    float absent;
} ConfigKey;

typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;
typedef enum { MLP_GELU, MLP_SWIGLU } MlpKind;

struct HfImport;
struct cJSON;

typedef struct ModelFamily {
    const char* name;            // "gpt2": --arch, the manifest's state.config.arch
    const char* title;           // "GPT-2": messages
    const TensorSpec* root;      // the root unit's tensors, in unit order
    int n_root;
    const TensorSpec* block;     // one block's tensors, in unit order
    int n_block;
    const char* block_prefix;    // checkpoint names "PREFIX.N.name"
    const char* hf_block_prefix; // Hugging Face names "HFPREFIX.N.name"
    // What the schedule runs (train_gpt.cu branches on these, never on the family):
    NormKind norm;
    MlpKind mlp;
    int rope;                    // rotary positions on q and k (the config's rope_* fields)
    // The family's shapes by name ("d12", "llama3:8b"): fills c (the whole config) and returns
    // 1, else 0. default_preset: what --arch NAME alone trains.
    int (*preset)(const char* name, ModelConfig* c);
    const char* default_preset;
    // What is wrong with c beyond the common checks (NULL: nothing).
    const char* (*check)(const ModelConfig* c);
    // The manifest's state.config keys beyond the common six.
    const ConfigKey* config_keys;
    int n_config_keys;
    // "Llama 3, 4 layers, 4 heads (2 kv heads), 256 channels, SwiGLU 768, RoPE theta 500000"
    // (the model line of train_gpt and --plan, before the sequence and vocabulary), or terse
    // "L=4 NH=4 KVH=2 C=256 F=768 maxT=1024 V=50257 Vp=50304" (the ckpt tool's).
    void (*describe)(const ModelConfig* c, int terse, char* out, size_t n);

    // Hugging Face safetensors (model/hf.h): hf.c maps the tables' tensors to Hugging Face's by
    // their hf_* columns and segments; these say what a table cannot. NULL hf_config: the family
    // has no Hugging Face form.
    const char* hf_export_what;     // the export's line: "Hugging Face GPT2Model names, F32"
    const char* hf_alias_prefix;    // its names are looked up under this prefix too (GPT2LMHeadModel's "transformer."), or NULL
    // Prefixes of names that make a file this family's (NULL-terminated); NULL: a file whose names
    // no family's markers begin (GPT-2's names have no common prefix).
    const char* const* hf_markers;
    // A name its files may hold that is none of its tensors (buffers, a tied head): skipped.
    int (*hf_ignorable)(const char* name);
    // Import: the config of the model im holds, from its tensors' shapes (hf_get, hf_layers),
    // the config.json beside it (hf_read_config_json), its metadata and --heads (im->heads),
    // cross-checked and passing model_config_check, each refusal one line naming the file; also
    // whether the head is tied (im->tie, head_from_embedding) and what the read line says
    // (im->what, from, note). 0, or non-zero with the message in err.
    int (*hf_config)(struct HfImport* im, ModelConfig* c, char* err, size_t errlen);
    // Export: the __metadata__ keys after "format" (hf_meta_int, hf_meta_float); the config.json
    // written beside the file (NULL: none).
    void (*hf_metadata)(const ModelConfig* c, struct cJSON* meta);
    struct cJSON* (*hf_config_json)(const ModelConfig* c);
} ModelFamily;

// The family of c (its arch), or NULL for an unknown arch; by name ("gpt2", "llama3").
const ModelFamily* model_family(const ModelConfig* c);
const ModelFamily* model_family_named(const char* name);
const ModelFamily* model_family_at(int arch);   // NULL beyond NUM_ARCHS
// "gpt2 or llama3" (quote: "\"gpt2\" or \"llama3\""), for messages.
void model_family_names(int quote, char* out, size_t n);
// Whether the family's config keys include the field at `offset` (offsetof(ModelConfig, f)):
// the flags that set a field apply to the families that have it.
int family_has_config(const ModelFamily* f, size_t offset);
// Whether a config field (its offset) is fixed by the model's weights: the family, layers,
// widths, heads, vocabulary, and the positions of a family with learned positions (a tensor of
// DIM_POSITIONS rows); else it is a setting a resumed run may change (RoPE's, the norm's
// epsilon, the longest sequence of a RoPE family).
int model_config_fixed(const ModelFamily* f, size_t offset);
// A table row's role, or NULL when the family has no tensor of that role.
const TensorSpec* family_root_role(const ModelFamily* f, int role);
const TensorSpec* family_block_role(const ModelFamily* f, int role);

// A Dim's size under c.
size_t model_dim(const ModelConfig* c, Dim d);
// A spec's shape under c: rows x cols.
void spec_shape(const ModelConfig* c, const TensorSpec* s, size_t* rows, size_t* cols);
// The first row of segment i of spec s (and its row count).
size_t spec_segment_row(const ModelConfig* c, const TensorSpec* s, int i, size_t* rows);
// "h.3.mlp.c_fc.weight" / "wte": a tensor's checkpoint name (layer ignored for the root's).
void spec_name(const ModelFamily* f, const TensorSpec* s, int is_block, int layer, char* out, size_t n);
// The Hugging Face name of segment seg of s (seg -1: the whole tensor's).
void spec_hf_name(const ModelFamily* f, const TensorSpec* s, int seg, int is_block, int layer, char* out, size_t n);

// Every tensor of a model, root first, then each layer's block: index i < n_root is root
// tensor i, else block tensor (i - n_root) % n_block of layer (i - n_root) / n_block.
typedef struct {
    const TensorSpec* spec;
    int is_block, layer;
} ModelTensor;
int model_tensor_count(const ModelConfig* c);
ModelTensor model_tensor_at(const ModelConfig* c, int i);
// Element offset of tensor i in the model's tensors back to back in that order (the whole model
// in one buffer: the ckpt tool's import).
size_t model_tensor_offset(const ModelConfig* c, int i);

int pad_vocab(int v);
// NULL when the config is one a model can be built from, else what is wrong with it: an unknown
// family, a dimension < 1 or above the MODEL_MAX_* bounds, heads not dividing channels, padded
// vocabulary below the vocabulary, norm_eps outside [MODEL_MIN_NORM_EPS, MODEL_MAX_NORM_EPS],
// more than MODEL_MAX_PARAMETERS in all, or the family's own checks. Safe on any values.
const char* model_config_check(const ModelConfig* c);
// A preset of any family (model/gpt2.c, model/llama3.c say which): the whole config. Non-zero
// for an unknown name.
int preset_config(const char* name, ModelConfig* c);
// Every parameter, padded vocabulary rows included.
size_t model_num_parameters(const ModelConfig* c);
// The family's describe (an unknown family: "unknown model family N"), then ", norm eps 1e-06"
// (terse: " eps=1e-06") when norm_eps is not MODEL_DEFAULT_NORM_EPS (the default left unsaid, so
// that the lines of default models read as before it was a setting).
void model_describe(const ModelConfig* c, int terse, char* out, size_t n);
// A RoPE family's positions: "theta 500000, no scaling", or "theta 500000, llama3 scaling:
// factor 8, low_freq_factor 1, high_freq_factor 4, original_max_pos 8192" (Llama 3.1's).
void model_rope_text(const ModelConfig* c, char* out, size_t n);

// ---- the flat FSDP units

// Unit 0 (the root) holds the root tensors; units 1.. hold layers_per_unit blocks each, a
// block's tensors in table order.
typedef struct {
    ModelConfig config;
    const ModelFamily* family;
    int layers_per_unit;
    int n_units;
    FlatUnit* units;      // [n_units], finalized for the shard group (free() it)
    size_t num_parameters;  // every parameter of the model: all tensor-parallel ranks' together
    int tp_size, tp_rank;   // the tensor-parallel rank whose local tensors the units hold (1, 0: whole)
} ModelLayout;

// The flat units of a config for a shard group of shard_count ranks. Returns 0; 1 when the
// config fails model_config_check or a unit would hold more than MODEL_MAX_LAYERS_PER_UNIT
// blocks (callers check first, for the message); 2 when out of memory. On failure m is zeroed
// (no units) and nothing stays allocated.
int build_layout(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count);

// ---- tensor parallelism: each TP rank's local part of every tensor (the spec's TpSplit)
//
// For tp ranks t of tp_size: REPLICATED, the whole tensor; COLUMN, the output features (a
// weight's rows; a bias's elements), each segment on its own: segment i of R_i rows starting at
// global row G_i gives rows [G_i + t R_i/tp, + R_i/tp), stacked in segment order; ROW, the input
// features: local [rows, cols/tp] at global column t cols/tp; VOCAB, rows [t Vp/tp, + Vp/tp).
// Every split is even (model_tp_check), so every TP rank's units have the same sizes and offsets.

// NULL when a model of c can be split over tp ranks, else the refusal, naming the flag: "--tp 3
// does not divide the 12 heads", "... the 4 kv heads", "... the MLP width 3072", "... the padded
// vocabulary 50304" (or "--tp 0 is not a positive number", a config failing model_config_check:
// its message), into msg[n]. tp 1 passes any valid config. 0: it splits; 1: it does not.
int model_tp_check(const ModelConfig* c, int tp, char* msg, size_t n);
// As build_layout, for TP rank tp_rank of tp_size (tp_size 1: exactly build_layout's units): the
// FlatTensors hold the local shapes (rows, cols, numel, offset: what the engine shards); the names
// stay the global names. Returns as build_layout, and 1 too when model_tp_check fails or tp_rank is
// not in [0, tp_size).
int build_layout_tp(ModelLayout* m, const ModelConfig* c, int layers_per_unit, int shard_count, int tp_size, int tp_rank);

// A local tensor as boxes of its global [global_rows, global_cols] tensor: box b is its global
// rows [global_row, + rows) x cols [global_col, + cols), held at local rows [local_row, + rows)
// (every local column: all boxes have the local tensor's cols). A vector ([1, n]: rows DIM_ONE)
// is viewed as [n, 1], its elements as rows, so that its segments split like a weight's rows (the
// row-major element order of [1, n] and [n, 1] is the same).
typedef struct { size_t local_row, global_row, rows, global_col, cols; } TpBox;
typedef struct {
    size_t global_rows, global_cols;
    int n_boxes;
    TpBox boxes[MAX_SEGMENTS];
    int replicated;   // 1: the tensor is whole on every TP rank (TP_REPLICATED, or tp_size 1)
} TpView;
// The TP view of tensor i of unit u of m.
void layout_tp_view(const ModelLayout* m, int u, int i, TpView* v);
// The global element (row-major in the global tensor) of local element e of tensor i of unit u.
size_t layout_global_element(const ModelLayout* m, int u, int i, size_t e);
// The same from a view (a loop over a tensor's elements computes the view once); *run (when not
// NULL): how many local elements from e on are consecutive global elements (one read of a file).
size_t tp_view_global_element(const TpView* v, size_t e, size_t* run);

// Tensor i of unit u: its table row and layer (0 for the root's).
const TensorSpec* unit_tensor_spec(const ModelLayout* m, int u, int i, int* layer);
// Its index in model_tensor_at's order.
int unit_tensor_index(const ModelLayout* m, int u, int i);

#ifdef __cplusplus
}
#endif
#endif
