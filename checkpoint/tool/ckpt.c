// ckpt: inspect, verify, export and import fsdp.c's sharded checkpoints.
//
//   ckpt info   PATH
//   ckpt verify PATH
//   ckpt export PATH --llmc OUT.bin [--dtype fp32|bf16]
//   ckpt export PATH --safetensors OUT.safetensors
//   ckpt import SRC OUT_ROOT --world W [--step N] [--compress none|zstd[:L]] [--heads N]
//
// SRC: an llm.c model file, a safetensors file, a Hugging Face shard index
// (model.safetensors.index.json) or a directory holding one of the last two.
// PATH is a step directory (ROOT/step_00000100), a checkpoint root (RUN/ckpt: its newest
// complete checkpoint) or a run directory holding ckpt/. One process, no MPI: the reader and
// ckpt_write_offline work on files only.
//
// Formats:
// - llm.c model file: int32 header[256] = {20240326, 3 (fp32) | 5 (bf16), maxT, V, L, NH, C,
//   Vp}, then the tensors in llm.c's order (model/model.h: K_* kinds, per-layer ones stacked
//   over L), wte with all Vp rows. bf16 is fp32 rounded to nearest even.
// - safetensors (Hugging Face GPT2Model): u64 little-endian header length N, N bytes of JSON
//   {name: {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {...}} padded with
//   spaces to a multiple of 8, then the data. Names wte.weight [V, C] (the real rows only),
//   wpe.weight, h.N.ln_1.weight, ..., ln_f.bias; the four Linear weights of a block are HF
//   Conv1D weights stored [in, out], the transpose of ours ([out, in]); biases and LayerNorm
//   parameters are 1-D.
// - safetensors (Hugging Face LlamaForCausalLM, for a Llama 3 checkpoint): the same container,
//   F32, with model.embed_tokens.weight [V, C] and lm_head.weight [V, C] (the real rows only),
//   model.layers.N.{input_layernorm, post_attention_layernorm}.weight [C],
//   model.layers.N.self_attn.{q_proj [NH hs, C], k_proj [KVH hs, C], v_proj [KVH hs, C],
//   o_proj [C, C]}.weight, model.layers.N.mlp.{gate_proj [F, C], up_proj [F, C], down_proj
//   [C, F]}.weight and model.norm.weight [C]. Linear weights are [out, in] like ours: q/k/v are
//   row blocks of our wqkv, gate/up of our w13 (w1 over w3). Hugging Face rotates the halves of
//   a head (rotate_half) where we rotate pairs (2i, 2i+1) (kernels/rope.h), so its conversion
//   script permutes the rows of q_proj and k_proj within each head: its row j < hs/2 is our row
//   2j, its row hs/2 + j our row 2j + 1. Export applies that permutation, import undoes it. The
//   head counts and RoPE are not in the tensors: export writes them to a config.json beside the
//   file (save_pretrained's keys) and import requires that config.json.
// - sharded safetensors (Hugging Face's form for large models, import only, Llama only):
//   model.safetensors.index.json = {"metadata": {"total_size": N}, "weight_map": {tensor name:
//   shard file name}} beside the shard files (each a safetensors file as above, holding some of
//   the tensors) and config.json. SRC is the index, or a directory holding it (or holding one
//   model.safetensors). Shard names are plain file names in the index's directory; every
//   shard's header gets a single file's checks, and the map must agree with the headers both
//   ways (each tensor in exactly one shard, the one the map names). Export writes one file.
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint/checkpoint.h"
#include "model/model.h"
#include "model/state.h"
#include "util/atomic_file.h"

#define ERRLEN 1024
#define SAFETENSORS_MAX_HEADER (100u << 20)

static const char* USAGE =
"usage: ckpt COMMAND ...\n"
"\n"
"  ckpt info PATH                  format, step, tokens, ranks at save, model, sizes, codec\n"
"  ckpt verify PATH                read every chunk and check its checksum; exit 1 on damage\n"
"  ckpt export PATH --llmc OUT.bin [--dtype fp32|bf16]\n"
"                                  one llm.c model file (version 3 fp32 [default] or 5 bf16)\n"
"  ckpt export PATH --safetensors OUT.safetensors\n"
"                                  Hugging Face GPT-2 (GPT2Model names, Conv1D layout), F32;\n"
"                                  a Llama 3 checkpoint: Hugging Face LlamaForCausalLM names\n"
"                                  (q/k permuted for rotate_half), F32, and a config.json\n"
"                                  beside OUT (llm.c files hold GPT-2 only: no --llmc); one\n"
"                                  file always (export does not write shards)\n"
"  ckpt import SRC OUT_ROOT --world W [--step N] [--compress none|zstd[:L]] [--heads N]\n"
"              [--seq-len T] [--seed S] [--shuffle 0|1]\n"
"                                  an llm.c model file, a GPT-2 safetensors file or a Hugging\n"
"                                  Face Llama safetensors file (model.embed_tokens.weight; its\n"
"                                  shape and RoPE from the config.json beside it, required), or\n"
"                                  a sharded Hugging Face Llama: its model.safetensors.index.json\n"
"                                  (the shard files and config.json beside it) or the directory\n"
"                                  holding it (or holding one model.safetensors), into\n"
"                                  a sharded checkpoint for W ranks under OUT_ROOT (step N [0],\n"
"                                  Adam moments zero, no data consumed); --heads sets NH for\n"
"                                  GPT-2 safetensors input [its metadata's n_head, else n_head of\n"
"                                  the config.json beside it; refused when none of these gives\n"
"                                  it]; --seq-len/--seed/--shuffle: the data loader state to\n"
"                                  record [any T (0), 1337, 0: train_gpt's defaults]\n"
"\n"
"PATH: a step directory (ROOT/step_00000100), a checkpoint root (RUN/ckpt: the newest complete\n"
"checkpoint there) or a run directory holding ckpt/.\n";

static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ckpt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void* xmalloc(size_t n) {
    void* p = malloc(n ? n : 1);
    if (!p) fail("out of memory (%zu bytes)", n);
    return p;
}

static void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fail("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

// ---------------------------------------------------------------------------------------
// Command-line helpers

typedef struct {
    const char* name;   // "--dtype"
    const char** value; // where its value goes
} Flag;

// Splits argv[first..] into positional arguments and the given --flags (each takes a value,
// as "--flag V" or "--flag=V"). Unknown flags and missing values are errors.
static int parse_args(const char* cmd, int argc, char** argv, int first, const Flag* flags, int n_flags,
                      const char** pos, int max_pos) {
    int n_pos = 0;
    for (int i = first; i < argc; i++) {
        const char* a = argv[i];
        if (a[0] == '-' && a[1] == '-' && a[2] != '\0') {
            const char* eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            int found = 0;
            for (int f = 0; f < n_flags; f++) {
                if (strlen(flags[f].name) != len || strncmp(flags[f].name, a, len) != 0) continue;
                found = 1;
                if (eq) *flags[f].value = eq + 1;
                else if (i + 1 < argc) *flags[f].value = argv[++i];
                else fail("%s: %s needs a value", cmd, flags[f].name);
                break;
            }
            if (!found) fail("%s: unknown option '%s' (see ckpt --help)", cmd, a);
        } else if (a[0] == '-' && a[1] != '\0') {
            fail("%s: unknown option '%s' (see ckpt --help)", cmd, a);
        } else {
            if (n_pos == max_pos) fail("%s: unexpected argument '%s' (see ckpt --help)", cmd, a);
            pos[n_pos++] = a;
        }
    }
    return n_pos;
}

static long parse_long_arg(const char* flag, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0') fail("%s: expected an integer, got '%s'", flag, s);
    if (v < lo || v > hi) fail("%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

// ---------------------------------------------------------------------------------------
// Files

static int read_at(int fd, void* buf, size_t n, off_t at) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        at += r;
    }
    return 0;
}

// Output files appear atomically (util/atomic_file.h: PATH.tmp, fsync, rename, fsync of the
// directory); an error ends the tool.
static void atomic_open(AtomicFile* f, const char* path) {
    char err[ERRLEN];
    if (atomic_file_open(f, path, ATOMIC_TMP, err, sizeof(err))) fail("%s", err);
}

static void atomic_write(AtomicFile* f, const void* buf, size_t n) {
    char err[ERRLEN];
    if (atomic_file_write(f, buf, n, err, sizeof(err))) fail("%s", err);
}

static void atomic_commit(AtomicFile* f) {
    char err[ERRLEN];
    if (atomic_file_commit(f, err, sizeof(err))) fail("%s", err);
}

// ---------------------------------------------------------------------------------------
// Model tensors: our names and shapes, in llm.c's file order

// The four Linear weights a Hugging Face GPT-2 stores as Conv1D ([in, out]).
static int is_conv1d(int kind) {
    return kind == K_QKVW || kind == K_ATTPROJW || kind == K_FCW || kind == K_FCPROJW;
}

static void print_config(const ModelConfig* c) {
    if (c->arch == ARCH_LLAMA3) {
        printf("L=%d NH=%d KVH=%d C=%d F=%d maxT=%d V=%d Vp=%d", c->num_layers, c->num_heads, c->num_kv_heads,
               c->channels, c->ffn_dim, c->max_seq_len, c->vocab_size, c->padded_vocab_size);
        return;
    }
    printf("L=%d NH=%d C=%d maxT=%d V=%d Vp=%d", c->num_layers, c->num_heads, c->channels,
           c->max_seq_len, c->vocab_size, c->padded_vocab_size);
}

// Llama's RoPE: the base, and Llama 3.1's frequency scaling when it is on (factor > 1).
static void print_rope(const ModelConfig* c) {
    printf("theta %g, ", (double)c->rope_theta);
    if (c->rope_factor > 1.0f)
        printf("llama3 scaling: factor %g, low_freq_factor %g, high_freq_factor %g, original_max_pos %d",
               (double)c->rope_factor, (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
               c->rope_original_max_pos);
    else
        printf("no scaling");
}

// ---------------------------------------------------------------------------------------
// Opening a checkpoint

static void open_ckpt(const char* path, Ckpt* c) {
    char dir[PATH_MAX], err[ERRLEN];
    if (ckpt_resolve(path, dir, sizeof(dir), err, sizeof(err))) fail("%s", err);
    memset(c, 0, sizeof(*c));
    if (ckpt_open(c, dir, err, sizeof(err)) != 0) fail("%s", err);
}

static void open_model_ckpt(const char* path, Ckpt* c, ModelConfig* cfg) {
    char err[ERRLEN];
    open_ckpt(path, c);
    if (model_checkpoint_config(c, cfg, err, sizeof(err)) || model_checkpoint_check_tensors(c, cfg, err, sizeof(err))) {
        ckpt_close(c);
        fail("%s", err);
    }
}

// ---------------------------------------------------------------------------------------
// info

static void print_bytes(const char* label, uint64_t n) {
    double v = (double)n;
    const char* unit = "B";
    if (v >= 1024.0 * 1024 * 1024) { v /= 1024.0 * 1024 * 1024; unit = "GiB"; }
    else if (v >= 1024.0 * 1024) { v /= 1024.0 * 1024; unit = "MiB"; }
    else if (v >= 1024.0) { v /= 1024.0; unit = "KiB"; }
    printf("%-16s %" PRIu64 " bytes (%.2f %s)\n", label, n, v, unit);
}

static void print_state_number(const cJSON* state, const char* key, const char* label) {
    const cJSON* it = state ? cJSON_GetObjectItemCaseSensitive(state, key) : NULL;
    if (cJSON_IsNumber(it)) printf("%-16s %.0f\n", label, it->valuedouble);
    else if (cJSON_IsString(it)) printf("%-16s %s\n", label, it->valuestring);
}

static int cmd_info(int argc, char** argv) {
    const char* pos[1];
    if (parse_args("info", argc, argv, 2, NULL, 0, pos, 1) != 1) fail("info: expected PATH (see ckpt --help)");
    Ckpt c;
    open_ckpt(pos[0], &c);
    printf("%-16s %s\n", "checkpoint", c.dir);
    printf("%-16s %d\n", "format version", c.format_version);
    printf("%-16s %ld\n", "step", c.step);
    print_state_number(c.state, "tokens", "tokens");
    printf("%-16s %d\n", "world at save", c.world);
    ModelConfig cfg;
    char err[ERRLEN];
    const int have_cfg = model_checkpoint_config(&c, &cfg, err, sizeof(err)) == 0;
    if (have_cfg) {
        printf("%-16s %s\n", "family", cfg.arch == ARCH_LLAMA3 ? "llama3 (Llama 3)" : "gpt2 (GPT-2)");
        printf("%-16s ", "model");
        print_config(&cfg);
        printf("\n");
        if (cfg.arch == ARCH_LLAMA3) {
            printf("%-16s %d (%d query heads per kv head)\n", "kv heads", cfg.num_kv_heads, cfg.num_heads / cfg.num_kv_heads);
            printf("%-16s %d (SwiGLU hidden width F)\n", "ffn dim", cfg.ffn_dim);
            printf("%-16s ", "rope");
            print_rope(&cfg);
            printf("\n");
        }
    } else {
        printf("%-16s (%s)\n", "model", err);
    }
    uint64_t n_params = 0;
    for (int i = 0; i < c.n_tensors; i++) n_params += c.tensors[i].rows * c.tensors[i].cols;
    // The padded vocabulary rows: of wte (GPT-2: tied with the head), of tok_embeddings and of
    // output (Llama: untied).
    const int llama = have_cfg && cfg.arch == ARCH_LLAMA3;
    const CkptTensor* wte = ckpt_tensor(&c, llama ? "tok_embeddings.weight" : "wte");
    const uint64_t padded_copies = llama ? 2 : 1;
    if (wte && have_cfg && cfg.padded_vocab_size > cfg.vocab_size)
        printf("%-16s %" PRIu64 " (%.2fM; %" PRIu64 " without the %d padded vocabulary rows%s)\n", "parameters", n_params,
               n_params / 1e6, n_params - padded_copies * (uint64_t)(cfg.padded_vocab_size - cfg.vocab_size) * wte->cols,
               cfg.padded_vocab_size - cfg.vocab_size, llama ? " of the embedding and of the head" : "");
    else
        printf("%-16s %" PRIu64 " (%.2fM)\n", "parameters", n_params, n_params / 1e6);
    printf("%-16s %d\n", "tensors", c.n_tensors);
    print_state_number(c.state, "seq_len", "seq len");
    print_state_number(c.state, "total_batch_tokens", "batch tokens");
    const cJSON* loader = c.state ? cJSON_GetObjectItemCaseSensitive(c.state, "loader") : NULL;
    if (cJSON_IsObject(loader)) {
        print_state_number(loader, "windows_consumed", "loader windows");
        print_state_number(loader, "seed", "loader seed");
        print_state_number(loader, "shuffle", "loader shuffle");
    }
    const cJSON* scaler = c.state ? cJSON_GetObjectItemCaseSensitive(c.state, "loss_scaler") : NULL;
    if (cJSON_IsObject(scaler)) {  // an fp16 run's (--param-dtype fp16)
        print_state_number(scaler, "scale", "loss scale");
        print_state_number(scaler, "good_steps", "loss scale steps");
    }

    uint64_t stored[CKPT_KINDS] = {0}, raw[CKPT_KINDS] = {0};
    int per_codec[CKPT_CODECS] = {0}, per_kind_chunks[CKPT_KINDS] = {0};
    for (int i = 0; i < c.n_chunks; i++) {
        const CkptChunk* ch = &c.chunks[i];
        int k = ch->kind >= 0 && ch->kind < CKPT_KINDS ? ch->kind : 0;
        stored[k] += ch->bytes;
        raw[k] += (ch->hi - ch->lo) * sizeof(float);
        per_kind_chunks[k]++;
        per_codec[ch->codec]++;   // checked by ckpt_open
    }
    uint64_t st_total = 0, raw_total = 0, st_lib = 0, raw_lib = 0;
    for (int k = 0; k < CKPT_KINDS; k++) { st_total += stored[k]; raw_total += raw[k]; }
    ckpt_sizes(&c, &st_lib, &raw_lib);
    printf("%-16s %d\n", "chunks", c.n_chunks);
    int kinds_used = 0, used = 0;
    for (int k = 0; k < CKPT_CODECS; k++) if (per_codec[k]) { kinds_used++; used = k; }
    if (kinds_used <= 1) printf("%-16s %s\n", "codec", CKPT_CODEC_NAMES[used]);
    else printf("%-16s mixed: %d raw, %d zstd, %d zstd_shuffle chunks\n", "codec", per_codec[0], per_codec[1], per_codec[2]);
    print_bytes("stored", st_lib ? st_lib : st_total);
    print_bytes("raw", raw_lib ? raw_lib : raw_total);
    if (st_lib) printf("%-16s %.3fx (raw / stored)\n", "compression", (double)raw_lib / (double)st_lib);
    for (int k = 0; k < CKPT_KINDS; k++) {
        printf("kind %-11s %d chunks, stored %" PRIu64 " bytes, raw %" PRIu64 " bytes (%.3fx)\n", CKPT_KIND_NAMES[k],
               per_kind_chunks[k], stored[k], raw[k], stored[k] ? (double)raw[k] / (double)stored[k] : 0.0);
    }
    ckpt_close(&c);
    return 0;
}

// ---------------------------------------------------------------------------------------
// verify

static int cmd_verify(int argc, char** argv) {
    const char* pos[1];
    if (parse_args("verify", argc, argv, 2, NULL, 0, pos, 1) != 1) fail("verify: expected PATH (see ckpt --help)");
    Ckpt c;
    open_ckpt(pos[0], &c);
    char err[ERRLEN];
    int rc = ckpt_verify(&c, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "ckpt: verify failed: %s\n", err);
        ckpt_close(&c);
        return 1;
    }
    uint64_t stored = 0, raw = 0;
    ckpt_sizes(&c, &stored, &raw);
    printf("ok: %s: %d chunks in %d rank files, %" PRIu64 " bytes, checksums match\n", c.dir, c.n_chunks, c.world, stored);
    ckpt_close(&c);
    return 0;
}

// ---------------------------------------------------------------------------------------
// export

static void export_llmc(Ckpt* c, const ModelConfig* cfg, const char* out, int bf16) {
    size_t sizes[NUM_KINDS], max_n = 0, total = 0;
    kind_sizes(cfg, sizes);
    for (int k = 0; k < NUM_KINDS; k++) if (sizes[k] > max_n) max_n = sizes[k];
    float* buf = (float*)xmalloc(max_n * sizeof(float));
    char err[ERRLEN];
    LlmcFileWriter f;
    if (llmc_file_create(&f, out, cfg, bf16 ? 5 : 3, err, sizeof(err))) fail("%s", err);
    for (int k = 0; k < NUM_KINDS; k++) {
        for (int l = 0; l < kind_layers(cfg, k); l++) {
            char name[CKPT_NAME_LEN];
            model_tensor_name(k, l, name, sizeof(name));
            if (ckpt_read(c, name, CKPT_PARAM, 0, sizes[k], buf, err, sizeof(err)) != 0 ||
                llmc_file_put(&f, k, l, 0, buf, sizes[k], err, sizeof(err)) != 0) {
                llmc_file_abort(&f);
                fail("%s", err);
            }
            total += sizes[k];
        }
    }
    if (llmc_file_commit(&f, err, sizeof(err))) fail("%s", err);
    free(buf);
    printf("wrote %s: llm.c model file version %d (%s), ", out, bf16 ? 5 : 3, bf16 ? "bf16" : "fp32");
    print_config(cfg);
    printf(", %zu parameters, step %ld\n", total, c->step);
}

typedef struct {
    char name[64];      // HF name
    int kind, layer;    // source tensor
    int ndim;
    uint64_t shape[2];
    uint64_t numel;
    uint64_t row0;      // Llama: the entry is rows [row0, row0 + shape[0]) of the source tensor
    int rope_heads;     // Llama's q_proj / k_proj: heads whose rows are permuted (0: none)
} StEntry;

// The HF GPT2Model tensors of a config in module order: wte, wpe, h.0.*, h.1.*, ..., ln_f
// (wte.weight has only the V real rows).
static StEntry* safetensors_entries(const ModelConfig* cfg, int* n_out) {
    int n = 4 + BLOCK_TENSORS * cfg->num_layers;
    StEntry* e = (StEntry*)xcalloc((size_t)n, sizeof(StEntry));
    for (int i = 0; i < n; i++) {
        StEntry* s = &e[i];
        int k, l = 0;
        if (i < 2) k = i == 0 ? K_WTE : K_WPE;
        else if (i >= n - 2) k = i == n - 2 ? K_LNFW : K_LNFB;
        else { k = K_LN1W + (i - 2) % BLOCK_TENSORS; l = (i - 2) / BLOCK_TENSORS; }
        s->kind = k;
        s->layer = l;
        if (k == K_WTE || k == K_WPE) {
            snprintf(s->name, sizeof(s->name), "%s.weight", k == K_WTE ? "wte" : "wpe");
        } else {
            model_tensor_name(k, l, s->name, sizeof(s->name));
        }
        size_t rows, cols;
        kind_shape(cfg, k, &rows, &cols);
        if (k == K_WTE) rows = (size_t)cfg->vocab_size;
        if (rows == 1) { s->ndim = 1; s->shape[0] = cols; }
        else if (is_conv1d(k)) { s->ndim = 2; s->shape[0] = cols; s->shape[1] = rows; }  // [in, out]
        else { s->ndim = 2; s->shape[0] = rows; s->shape[1] = cols; }
        s->numel = (uint64_t)rows * cols;
    }
    *n_out = n;
    return e;
}

// The HF LlamaForCausalLM tensors of a Llama config, in forward order: model.embed_tokens,
// model.layers.N.* (input_layernorm, q/k/v/o_proj, post_attention_layernorm, gate/up/down_proj),
// model.norm, lm_head. Each is a block of rows of one of our tensors ([out, in] on both sides:
// no transposes); q_proj and k_proj are permuted within each head (rope_heads). The embedding
// and the head hold the V real rows only. Export and import both walk this one table.
#define LLAMA_HF_BLOCK 9
// One entry: rows [row0, row0 + rows) of our tensor (kind, layer), `cols` wide; rows 0: a 1-D
// vector of cols elements (our [1, C] norms). In a block (layer >= 0 and a block kind) the
// name is model.layers.<layer>.<name>.
static void llama_entry(StEntry* s, int kind, int layer, uint64_t row0, uint64_t rows, uint64_t cols, int rope_heads,
                        const char* name) {
    if (is_block_kind(kind)) snprintf(s->name, sizeof(s->name), "model.layers.%d.%s", layer, name);
    else snprintf(s->name, sizeof(s->name), "%s", name);
    s->kind = kind;
    s->layer = layer;
    s->row0 = row0;
    s->rope_heads = rope_heads;
    s->ndim = rows == 0 ? 1 : 2;
    s->shape[0] = rows == 0 ? cols : rows;
    s->shape[1] = rows == 0 ? 0 : cols;
    s->numel = (rows == 0 ? 1 : rows) * cols;
}

static StEntry* llama_entries(const ModelConfig* cfg, int* n_out) {
    const uint64_t C = (uint64_t)cfg->channels, F = (uint64_t)cfg->ffn_dim, V = (uint64_t)cfg->vocab_size;
    const uint64_t hs = C / (uint64_t)cfg->num_heads, q = (uint64_t)cfg->num_heads * hs, kv = (uint64_t)cfg->num_kv_heads * hs;
    const int n = 3 + LLAMA_HF_BLOCK * cfg->num_layers;
    StEntry* e = (StEntry*)xcalloc((size_t)n, sizeof(StEntry));
    int at = 0;
    llama_entry(&e[at++], LK_EMB, 0, 0, V, C, 0, "model.embed_tokens.weight");
    for (int l = 0; l < cfg->num_layers; l++) {
        llama_entry(&e[at++], LK_ATTN_NORM, l, 0, 0, C, 0, "input_layernorm.weight");
        llama_entry(&e[at++], LK_WQKV, l, 0, q, C, cfg->num_heads, "self_attn.q_proj.weight");
        llama_entry(&e[at++], LK_WQKV, l, q, kv, C, cfg->num_kv_heads, "self_attn.k_proj.weight");
        llama_entry(&e[at++], LK_WQKV, l, q + kv, kv, C, 0, "self_attn.v_proj.weight");
        llama_entry(&e[at++], LK_WO, l, 0, C, C, 0, "self_attn.o_proj.weight");
        llama_entry(&e[at++], LK_FFN_NORM, l, 0, 0, C, 0, "post_attention_layernorm.weight");
        llama_entry(&e[at++], LK_W13, l, 0, F, C, 0, "mlp.gate_proj.weight");   // w1
        llama_entry(&e[at++], LK_W13, l, F, F, C, 0, "mlp.up_proj.weight");     // w3
        llama_entry(&e[at++], LK_W2, l, 0, C, F, 0, "mlp.down_proj.weight");
    }
    llama_entry(&e[at++], LK_NORM, 0, 0, 0, C, 0, "model.norm.weight");
    llama_entry(&e[at++], LK_OUTPUT, 0, 0, V, C, 0, "lm_head.weight");
    *n_out = n;
    return e;
}

// Rotary permutation of `heads` heads of hs rows of `cols` each, between our interleaved pairs
// and Hugging Face's halves. to_hf: HF row h*hs + a*hs/2 + j = our row h*hs + 2j + a (a = 0, 1;
// the view(heads, hs/2, 2, cols).transpose(1, 2) of HF's conversion script); else the inverse.
static void rope_permute(const float* src, float* dst, int heads, uint64_t hs, uint64_t cols, int to_hf) {
    const uint64_t half = hs / 2;
    for (uint64_t h = 0; h < (uint64_t)heads; h++)
        for (uint64_t j = 0; j < half; j++)
            for (uint64_t a = 0; a < 2; a++) {
                const uint64_t ours = h * hs + 2 * j + a, hf = h * hs + a * half + j;
                const float* from = src + (to_hf ? ours : hf) * cols;
                float* to = dst + (to_hf ? hf : ours) * cols;
                memcpy(to, from, cols * sizeof(float));
            }
}

static void add_metadata_int(cJSON* meta, const char* key, long v) {
    char s[32];
    snprintf(s, sizeof(s), "%ld", v);
    cJSON_AddStringToObject(meta, key, s);
}

// A float as the shortest decimal that reads back as the same float, in the form Python's json
// writes a float: positional with a '.' for decimal exponents in [-4, 16) (500000.0, 0.02),
// else an exponent (1e-05), so that config.json's floats stay floats for Hugging Face.
static void float_text(float v, char* out, size_t n) {
    char e[48];
    int prec = 1;
    for (; prec < 9; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, (double)v);
        if (strtof(e, NULL) == v) break;
    }
    snprintf(e, sizeof(e), "%.*e", prec - 1, (double)v);
    const char* ex = strchr(e, 'e');
    const int x = ex ? (int)strtol(ex + 1, NULL, 10) : 0;   // the decimal exponent
    if (v != 0.0f && (x < -4 || x >= 16)) snprintf(out, n, "%s", e);
    else snprintf(out, n, "%.*f", prec - 1 - x > 0 ? prec - 1 - x : 0, (double)v);
    if (!strpbrk(out, ".e")) strncat(out, ".0", n - strlen(out) - 1);
}

static void add_metadata_float(cJSON* meta, const char* key, float v) {
    char s[48];
    float_text(v, s, sizeof(s));
    cJSON_AddStringToObject(meta, key, s);
}

static void add_json_float(cJSON* obj, const char* key, float v) {
    char s[48];
    float_text(v, s, sizeof(s));
    cJSON_AddRawToObject(obj, key, s);
}

// The bos and eos tokens of the two vocabularies fsdp.c knows (Llama 3's, GPT-2's), for the
// config.json; 0 for another vocabulary (then config.json names none).
static int known_vocab_tokens(int V, int* bos, int* eos) {
    if (V == LLAMA3_VOCAB) { *bos = 128000; *eos = 128001; return 1; }   // <|begin_of_text|>, <|end_of_text|>
    if (V == GPT2_VOCAB) { *bos = GPT2_EOT; *eos = GPT2_EOT; return 1; }  // <|endoftext|>
    return 0;
}

// config.json beside a Llama export, with the keys transformers' save_pretrained writes for a
// LlamaForCausalLM of this shape (what import reads back).
static void write_llama_config_json(const ModelConfig* cfg, const char* out) {
    char dir[PATH_MAX], path[PATH_MAX + 16];
    snprintf(dir, sizeof(dir), "%s", out);
    snprintf(path, sizeof(path), "%s/config.json", dirname(dir));
    cJSON* j = cJSON_CreateObject();
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddFalseToObject(j, "attention_bias");
    add_json_float(j, "attention_dropout", 0.0f);
    int bos, eos;
    if (known_vocab_tokens(cfg->vocab_size, &bos, &eos)) {
        cJSON_AddNumberToObject(j, "bos_token_id", bos);
        cJSON_AddNumberToObject(j, "eos_token_id", eos);
    }
    cJSON_AddNumberToObject(j, "head_dim", cfg->channels / cfg->num_heads);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", cfg->channels);
    add_json_float(j, "initializer_range", 0.02f);
    cJSON_AddNumberToObject(j, "intermediate_size", cfg->ffn_dim);
    cJSON_AddNumberToObject(j, "max_position_embeddings", cfg->max_seq_len);
    cJSON_AddFalseToObject(j, "mlp_bias");
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddNumberToObject(j, "num_attention_heads", cfg->num_heads);
    cJSON_AddNumberToObject(j, "num_hidden_layers", cfg->num_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", cfg->num_kv_heads);
    cJSON_AddNumberToObject(j, "pretraining_tp", 1);
    cJSON_AddRawToObject(j, "rms_norm_eps", "1e-05");   // RMSNORM_EPS (kernels/cpu_kernels_llama.h)
    if (cfg->rope_factor > 1.0f) {
        cJSON* rs = cJSON_AddObjectToObject(j, "rope_scaling");
        add_json_float(rs, "factor", cfg->rope_factor);
        add_json_float(rs, "high_freq_factor", cfg->rope_high_freq_factor);
        add_json_float(rs, "low_freq_factor", cfg->rope_low_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", cfg->rope_original_max_pos);
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    add_json_float(j, "rope_theta", cfg->rope_theta);
    cJSON_AddFalseToObject(j, "tie_word_embeddings");
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddTrueToObject(j, "use_cache");
    cJSON_AddNumberToObject(j, "vocab_size", cfg->vocab_size);
    char* text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) fail("out of memory building %s", path);
    AtomicFile f;
    atomic_open(&f, path);
    atomic_write(&f, text, strlen(text));
    atomic_write(&f, "\n", 1);
    free(text);
    atomic_commit(&f);
}

static void export_safetensors(Ckpt* c, const ModelConfig* cfg, const char* out) {
    const int llama = cfg->arch == ARCH_LLAMA3;
    int n;
    StEntry* e = llama ? llama_entries(cfg, &n) : safetensors_entries(cfg, &n);
    cJSON* header = cJSON_CreateObject();
    cJSON* meta = cJSON_AddObjectToObject(header, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    if (llama) {
        // config.json's essentials (safetensors metadata values are strings).
        cJSON_AddStringToObject(meta, "model_type", "llama");
        add_metadata_int(meta, "num_hidden_layers", cfg->num_layers);
        add_metadata_int(meta, "num_attention_heads", cfg->num_heads);
        add_metadata_int(meta, "num_key_value_heads", cfg->num_kv_heads);
        add_metadata_int(meta, "hidden_size", cfg->channels);
        add_metadata_int(meta, "intermediate_size", cfg->ffn_dim);
        add_metadata_int(meta, "max_position_embeddings", cfg->max_seq_len);
        add_metadata_int(meta, "vocab_size", cfg->vocab_size);
        add_metadata_int(meta, "padded_vocab_size", cfg->padded_vocab_size);
        add_metadata_float(meta, "rope_theta", cfg->rope_theta);
        if (cfg->rope_factor > 1.0f) {
            cJSON_AddStringToObject(meta, "rope_type", "llama3");
            add_metadata_float(meta, "rope_factor", cfg->rope_factor);
            add_metadata_float(meta, "rope_low_freq_factor", cfg->rope_low_freq_factor);
            add_metadata_float(meta, "rope_high_freq_factor", cfg->rope_high_freq_factor);
            add_metadata_int(meta, "rope_original_max_position_embeddings", cfg->rope_original_max_pos);
        }
        cJSON_AddStringToObject(meta, "rms_norm_eps", "1e-05");
    } else {
        add_metadata_int(meta, "n_layer", cfg->num_layers);
        add_metadata_int(meta, "n_head", cfg->num_heads);
        add_metadata_int(meta, "n_embd", cfg->channels);
        add_metadata_int(meta, "n_positions", cfg->max_seq_len);
        add_metadata_int(meta, "vocab_size", cfg->vocab_size);
        add_metadata_int(meta, "padded_vocab_size", cfg->padded_vocab_size);
    }
    uint64_t off = 0, max_n = 0;
    for (int i = 0; i < n; i++) {
        cJSON* t = cJSON_AddObjectToObject(header, e[i].name);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON* shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e[i].shape[d]));
        cJSON* offs = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += e[i].numel * sizeof(float);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        if (e[i].numel > max_n) max_n = e[i].numel;
    }
    char* json = cJSON_PrintUnformatted(header);
    cJSON_Delete(header);
    if (!json) fail("out of memory building the safetensors header");
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;
    char* hbuf = (char*)xmalloc(padded);
    memcpy(hbuf, json, jlen);
    memset(hbuf + jlen, ' ', padded - jlen);
    free(json);

    AtomicFile f;
    atomic_open(&f, out);
    uint64_t hlen = padded;
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)(hlen >> (8 * b));
    atomic_write(&f, le, 8);
    atomic_write(&f, hbuf, padded);
    free(hbuf);
    float* buf = (float*)xmalloc(max_n * sizeof(float));
    float* tr = (float*)xmalloc(max_n * sizeof(float));
    const uint64_t hs = (uint64_t)(cfg->channels / cfg->num_heads);
    for (int i = 0; i < n; i++) {
        char name[CKPT_NAME_LEN], err[ERRLEN];
        model_tensor_name(e[i].kind, e[i].layer, name, sizeof(name));
        const uint64_t cols = e[i].ndim == 2 ? e[i].shape[1] : e[i].shape[0];
        const uint64_t lo = llama ? e[i].row0 * cols : 0;
        if (ckpt_read(c, name, CKPT_PARAM, lo, lo + e[i].numel, buf, err, sizeof(err)) != 0) { atomic_file_abort(&f); fail("%s", err); }
        const float* src = buf;
        if (!llama && is_conv1d(e[i].kind)) {
            size_t rows, cols;  // ours: [out = rows, in = cols]; HF: [in, out]
            kind_shape(cfg, e[i].kind, &rows, &cols);
            for (size_t r = 0; r < rows; r++)
                for (size_t k = 0; k < cols; k++) tr[k * rows + r] = buf[r * cols + k];
            src = tr;
        }
        if (llama && e[i].rope_heads) {
            rope_permute(buf, tr, e[i].rope_heads, hs, cols, 1);
            src = tr;
        }
        atomic_write(&f, src, e[i].numel * sizeof(float));
    }
    atomic_commit(&f);
    free(buf);
    free(tr);
    free(e);
    if (llama) {
        write_llama_config_json(cfg, out);
        printf("wrote %s: safetensors (Hugging Face LlamaForCausalLM names, q/k permuted for rotate_half, F32), ", out);
    } else {
        printf("wrote %s: safetensors (Hugging Face GPT2Model names, F32), ", out);
    }
    print_config(cfg);
    printf(", %d tensors, step %ld\n", n, c->step);
    if (llama) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", out);
        printf("wrote %s/config.json: ", dirname(dir));
        print_rope(cfg);
        printf("\n");
    }
}

static int cmd_export(int argc, char** argv) {
    const char *llmc = NULL, *st = NULL, *dtype = NULL;
    Flag flags[] = {{"--llmc", &llmc}, {"--safetensors", &st}, {"--dtype", &dtype}};
    const char* pos[1];
    if (parse_args("export", argc, argv, 2, flags, 3, pos, 1) != 1) fail("export: expected PATH (see ckpt --help)");
    if (!llmc && !st) fail("export: give --llmc OUT.bin or --safetensors OUT.safetensors");
    if (llmc && st) fail("export: give one of --llmc and --safetensors, not both");
    int bf16 = 0;
    if (dtype) {
        if (!strcmp(dtype, "bf16")) bf16 = 1;
        else if (strcmp(dtype, "fp32") != 0) fail("export: --dtype: expected fp32 or bf16, got '%s'", dtype);
        if (st && bf16) fail("export: --dtype bf16 applies to --llmc only (safetensors are written in F32)");
    }
    const char* out = llmc ? llmc : st;
    if (!*out) fail("export: empty output path");
    Ckpt c;
    ModelConfig cfg;
    open_model_ckpt(pos[0], &c, &cfg);
    if (llmc && cfg.arch != ARCH_GPT2) {
        ckpt_close(&c);
        fail("export: %s is a Llama 3 checkpoint: llm.c model files hold GPT-2 only (use --safetensors)", pos[0]);
    }
    if (llmc) export_llmc(&c, &cfg, out, bf16);
    else export_safetensors(&c, &cfg, out);
    ckpt_close(&c);
    return 0;
}

// ---------------------------------------------------------------------------------------
// import

// The whole model in llm.c's layout (the order of llmc_offset), fp32.
typedef struct {
    ModelConfig cfg;
    float* params;
    size_t n;
} Weights;

// Element offset of (kind, layer) in Weights.params: llm.c's order for GPT-2 (llmc_offset);
// for Llama its kinds in order (LK_EMB, LK_NORM, LK_OUTPUT, then the block kinds), each
// stacked over the layers.
static size_t weights_offset(const ModelConfig* c, int kind, int layer) {
    if (c->arch != ARCH_LLAMA3) return llmc_offset(c, kind, layer);
    size_t off = 0, rows, cols;
    for (int k = LK_EMB; k < kind; k++) {
        kind_shape(c, k, &rows, &cols);
        off += rows * cols * (size_t)kind_layers(c, k);
    }
    kind_shape(c, kind, &rows, &cols);
    return off + (size_t)layer * rows * cols;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) u = sign;
    else {  // subnormal
        int e = -1;
        do { e++; man <<= 1; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void load_llmc(const char* path, Weights* w, int heads) {
    char err[ERRLEN];
    int version;
    if (read_model_header(path, &w->cfg, &version, err, sizeof(err)) != 0) fail("%s", err);
    if (heads && heads != w->cfg.num_heads)
        fail("%s: --heads %d disagrees with the model file's %d heads (--heads is for safetensors input)", path, heads,
             w->cfg.num_heads);
    // (read_model_header checked the config and that the file holds all of its parameters)
    w->n = model_num_parameters(&w->cfg);
    w->params = (float*)xmalloc(w->n * sizeof(float));
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", path, strerror(errno));
    if (llmc_read_params(fd, path, version, 0, w->n, w->params, err, sizeof(err))) fail("%s", err);
    close(fd);
    printf("read %s: llm.c model file version %d (%s), ", path, version, version == 3 ? "fp32" : "bf16");
    print_config(&w->cfg);
    printf("\n");
}

typedef struct {
    const cJSON* item;
    int dtype;          // 0 F32, 1 BF16, 2 F16
    uint64_t shape[2];
    int ndim;
    uint64_t begin, end;
    int file;           // which file of an StSet holds it (the Llama reader)
} StTensor;

// Looks a tensor up by its GPT2Model name, also under GPT2LMHeadModel's "transformer." prefix.
static const cJSON* st_find(const cJSON* header, const char* name) {
    const cJSON* it = cJSON_GetObjectItemCaseSensitive(header, name);
    if (it) return it;
    char full[96];
    snprintf(full, sizeof(full), "transformer.%s", name);
    return cJSON_GetObjectItemCaseSensitive(header, full);
}

// An entry's data_offsets [begin, end): whole numbers, begin <= end <= the data's length.
static void st_offsets(const char* path, const cJSON* it, const char* name, uint64_t data_len, uint64_t* begin, uint64_t* end) {
    const cJSON* of = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "data_offsets") : NULL;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        fail("%s: tensor %s: header entry lacks dtype, shape or data_offsets", path, name);
    if (!ckpt_json_uint(cJSON_GetArrayItem(of, 0), CKPT_MAX_INT, begin) ||
        !ckpt_json_uint(cJSON_GetArrayItem(of, 1), CKPT_MAX_INT, end) || *end < *begin)
        fail("%s: tensor %s: bad data_offsets (whole numbers begin <= end expected)", path, name);
    if (*end > data_len)
        fail("%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 ") run past the end of the data (%" PRIu64 " bytes; truncated file?)",
             path, name, *begin, *end, data_len);
}

static void st_parse(const char* path, const cJSON* it, const char* name, uint64_t data_len, StTensor* t) {
    if (!cJSON_IsObject(it)) fail("%s: tensor %s: not an object in the header", path, name);
    const cJSON* dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON* sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh))
        fail("%s: tensor %s: header entry lacks dtype, shape or data_offsets", path, name);
    size_t esize;
    if (!strcmp(dt->valuestring, "F32")) { t->dtype = 0; esize = 4; }
    else if (!strcmp(dt->valuestring, "BF16")) { t->dtype = 1; esize = 2; }
    else if (!strcmp(dt->valuestring, "F16")) { t->dtype = 2; esize = 2; }
    else fail("%s: tensor %s: unsupported dtype %s (expected F32, BF16 or F16)", path, name, dt->valuestring);
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim < 1 || t->ndim > 2) fail("%s: tensor %s: %d dimensions (expected 1 or 2)", path, name, t->ndim);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (!ckpt_json_uint(cJSON_GetArrayItem(sh, d), 1e12, &t->shape[d])) fail("%s: tensor %s: bad shape", path, name);
        if (t->shape[d] != 0 && numel > ((uint64_t)1 << 50) / t->shape[d]) fail("%s: tensor %s: bad shape (more than 2^50 elements)", path, name);
        numel *= t->shape[d];
    }
    st_offsets(path, it, name, data_len, &t->begin, &t->end);
    if (t->end - t->begin != numel * esize)
        fail("%s: tensor %s: %" PRIu64 " bytes of data for %" PRIu64 " elements of %s", path, name, t->end - t->begin, numel,
             dt->valuestring);
    t->item = it;
}

static void st_expect_shape(const char* path, const char* name, const StTensor* t, int ndim, uint64_t d0, uint64_t d1) {
    int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
    if (ok) return;
    char want[64], got[64];
    if (ndim == 1) snprintf(want, sizeof(want), "[%" PRIu64 "]", d0);
    else snprintf(want, sizeof(want), "[%" PRIu64 ", %" PRIu64 "]", d0, d1);
    if (t->ndim == 1) snprintf(got, sizeof(got), "[%" PRIu64 "]", t->shape[0]);
    else snprintf(got, sizeof(got), "[%" PRIu64 ", %" PRIu64 "]", t->shape[0], t->shape[1]);
    fail("%s: tensor %s has shape %s, expected %s", path, name, got, want);
}

static void st_read(const char* path, int fd, uint64_t data_start, const StTensor* t, float* dst) {
    uint64_t n = t->dtype == 0 ? (t->end - t->begin) / 4 : (t->end - t->begin) / 2;
    if (t->dtype == 0) {
        if (read_at(fd, dst, n * 4, (off_t)(data_start + t->begin)) != 0) fail("%s: read failed: %s", path, strerror(errno));
        return;
    }
    uint16_t* tmp = (uint16_t*)xmalloc(n * 2);
    if (read_at(fd, tmp, n * 2, (off_t)(data_start + t->begin)) != 0) fail("%s: read failed: %s", path, strerror(errno));
    for (uint64_t i = 0; i < n; i++) dst[i] = t->dtype == 1 ? bf16_to_float(tmp[i]) : half_to_float(tmp[i]);
    free(tmp);
}

// Is `key` a name we know but do not need (HF buffers, the tied LM head)?
static int st_ignorable(const char* key) {
    const char* k = strncmp(key, "transformer.", 12) == 0 ? key + 12 : key;
    if (!strcmp(k, "lm_head.weight") || !strcmp(key, "lm_head.weight")) return 1;
    size_t n = strlen(k);
    const char* suf[2] = {".attn.bias", ".attn.masked_bias"};
    for (int i = 0; i < 2; i++) {
        size_t m = strlen(suf[i]);
        if (n > m && !strcmp(k + n - m, suf[i]) && !strncmp(k, "h.", 2)) return 1;
    }
    return 0;
}

typedef struct { uint64_t begin, end; const char* name; } StRange;
static int range_cmp(const void* a, const void* b) {
    const StRange *x = (const StRange*)a, *y = (const StRange*)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// No two tensors may share bytes: an overlap would import one tensor's data as another's.
static void st_check_overlaps(const char* path, const cJSON* header, uint64_t data_len) {
    int n = 0;
    for (const cJSON* e = header->child; e; e = e->next) n++;
    StRange* r = (StRange*)xcalloc((size_t)n, sizeof(StRange));
    int k = 0;
    for (const cJSON* e = header->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        st_offsets(path, e, e->string, data_len, &r[k].begin, &r[k].end);
        r[k].name = e->string;
        if (r[k].end > r[k].begin) k++;   // an empty tensor holds no bytes
    }
    qsort(r, (size_t)k, sizeof(StRange), range_cmp);
    for (int i = 1; i < k; i++)
        if (r[i].begin < r[i - 1].end)
            fail("%s: tensors %s and %s overlap in the data: data_offsets [%" PRIu64 ", %" PRIu64 ") and [%" PRIu64 ", %" PRIu64 ")",
                 path, r[i - 1].name, r[i].name, r[i - 1].begin, r[i - 1].end, r[i].begin, r[i].end);
    free(r);
}

// A head count written as a decimal string (safetensors metadata values are strings).
static int parse_heads_text(const char* s, int* out) {
    size_t n = strlen(s);
    if (n < 1 || n > 6 || strspn(s, "0123456789") != n) return 0;
    long v = strtol(s, NULL, 10);
    if (v < 1 || v > (1 << 16)) return 0;
    *out = (int)v;
    return 1;
}

// The config.json beside the safetensors file `path` (its path into cfg_path), parsed: NULL
// when there is none; refused when it is not a regular file of at most 1 MiB holding a JSON
// object.
static cJSON* read_config_json(const char* path, char* cfg_path, size_t cfg_len) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    snprintf(cfg_path, cfg_len, "%s/config.json", dirname(dir));
    struct stat st;
    if (stat(cfg_path, &st) != 0) return NULL;
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", cfg_path);
    if (st.st_size > (1 << 20)) fail("%s: %lld bytes: too large for a model config", cfg_path, (long long)st.st_size);
    int fd = open(cfg_path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", cfg_path, strerror(errno));
    char* text = (char*)xmalloc((size_t)st.st_size + 1);
    if (read_at(fd, text, (size_t)st.st_size, 0) != 0) fail("%s: read failed: %s", cfg_path, strerror(errno));
    close(fd);
    text[st.st_size] = '\0';
    cJSON* j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) fail("%s: not a JSON object (invalid JSON, or another JSON value)", cfg_path);
    return j;
}

// config.json beside the safetensors file, as Hugging Face's save_pretrained writes it: its
// n_head, with n_embd / n_layer / n_positions / vocab_size checked against the tensors.
// Returns the head count, or 0 when there is no config.json.
static int hf_config_heads(const char* path, const ModelConfig* c, char* cfg_path, size_t cfg_len) {
    cJSON* j = read_config_json(path, cfg_path, cfg_len);
    if (!j) return 0;
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "gpt2") != 0))
        fail("%s: model_type is %s, not gpt2", cfg_path, cJSON_IsString(mt) ? mt->valuestring : "not a string");
    const char* keys[4] = {"n_embd", "n_layer", "n_positions", "vocab_size"};
    const int have[4] = {c->channels, c->num_layers, c->max_seq_len, c->vocab_size};
    const char* from[4] = {"wte.weight's columns", "the h.N blocks", "wpe.weight's rows", "wte.weight's rows"};
    for (int i = 0; i < 4; i++) {
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        uint64_t x;
        if (!v) continue;
        if (!ckpt_json_uint(v, 1 << 30, &x)) fail("%s: %s is not a whole number", cfg_path, keys[i]);
        if (x != (uint64_t)have[i]) fail("%s: %s = %" PRIu64 ", but the safetensors file has %d (%s)", cfg_path, keys[i], x, have[i], from[i]);
    }
    const cJSON* nh = cJSON_GetObjectItemCaseSensitive(j, "n_head");
    uint64_t heads;
    if (!nh) fail("%s: no n_head", cfg_path);
    if (!ckpt_json_uint(nh, 1 << 16, &heads) || heads < 1) fail("%s: n_head is not a head count (a whole number >= 1)", cfg_path);
    cJSON_Delete(j);
    return (int)heads;
}

// ---- Hugging Face Llama (LlamaForCausalLM) safetensors

// A file of Hugging Face's Llama names (model.embed_tokens, model.layers.N, model.norm), not
// GPT-2's (wte, h.N, or those under "transformer.").
static int is_hf_llama(const cJSON* header) {
    for (const cJSON* e = header->child; e; e = e->next)
        if (!strncmp(e->string, "model.embed_tokens.", 19) || !strncmp(e->string, "model.layers.", 13) ||
            !strncmp(e->string, "model.norm.", 11))
            return 1;
    return 0;
}

// obj[key] (`what` names it in messages, "rope_scaling.factor") from config.json: a whole
// number in [lo, hi], or a finite number. Missing (or null): refused when required, else 0.
static int cfg_uint(const char* cfg_path, const cJSON* obj, const char* key, const char* what, int required, uint64_t lo,
                    uint64_t hi, uint64_t* out) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) fail("%s: %s is missing (a Llama import needs it: it is not in the tensors)", cfg_path, what);
        return 0;
    }
    if (!ckpt_json_uint(v, (double)hi, out) || *out < lo)
        fail("%s: %s is not a whole number in [%" PRIu64 ", %" PRIu64 "]", cfg_path, what, lo, hi);
    return 1;
}

static int cfg_number(const char* cfg_path, const cJSON* obj, const char* key, const char* what, int required, double* out) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) fail("%s: %s is missing (a Llama import needs it: it is not in the tensors)", cfg_path, what);
        return 0;
    }
    if (!cJSON_IsNumber(v)) fail("%s: %s is not a number", cfg_path, what);
    // (cJSON reads 1e999 as infinity; a comparison that NaN fails too)
    if (!(v->valuedouble > -1e300 && v->valuedouble < 1e300)) fail("%s: %s = %g is not a finite number", cfg_path, what, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

// An optional boolean of config.json: absent or null gives `dflt`.
static int cfg_bool(const char* cfg_path, const cJSON* obj, const char* key, int dflt) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) fail("%s: %s is not true or false", cfg_path, key);
    return cJSON_IsTrue(v);
}

// An optional whole number of config.json that the tensors also give: refused when it differs.
static void cfg_matches(const char* cfg_path, const cJSON* j, const char* key, int have, const char* from) {
    uint64_t x;
    if (cfg_uint(cfg_path, j, key, key, 0, 0, (uint64_t)1 << 31, &x) && x != (uint64_t)have)
        fail("%s: %s = %" PRIu64 ", but the safetensors file has %d (%s)", cfg_path, key, x, have, from);
}

// The model's RoPE from config.json: rope_theta, and rope_scaling (required: null for plain
// RoPE, or Llama 3.1's {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}, which kernels/rope.h implements).
static void hf_llama_rope(const char* cfg_path, const cJSON* j, ModelConfig* c) {
    double theta;
    cfg_number(cfg_path, j, "rope_theta", "rope_theta", 1, &theta);
    if (!(theta > 1.0 && theta < 1e30)) fail("%s: rope_theta = %g is not a number > 1 (RoPE's base)", cfg_path, theta);
    c->rope_theta = (float)theta;
    // Plain RoPE keeps the scaling fields of Llama 3's presets (train_gpt's): a resume compares
    // every RoPE field of the checkpoint with its own, used or not.
    c->rope_factor = 0.0f;
    c->rope_low_freq_factor = 1.0f;
    c->rope_high_freq_factor = 4.0f;
    c->rope_original_max_pos = 8192;
    const cJSON* rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!rs)
        fail("%s: rope_scaling is missing (null for plain RoPE, or {\"rope_type\": \"llama3\", ...}): a Llama import needs it",
             cfg_path);
    if (cJSON_IsNull(rs)) return;
    if (!cJSON_IsObject(rs)) fail("%s: rope_scaling is neither null nor an object", cfg_path);
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");   // (older transformers' key)
    if (!cJSON_IsString(type)) fail("%s: rope_scaling has no rope_type string", cfg_path);
    if (!strcmp(type->valuestring, "default")) return;
    if (strcmp(type->valuestring, "llama3") != 0)
        fail("%s: rope_scaling.rope_type \"%s\" is not supported (fsdp.c's RoPE has Llama 3.1's \"llama3\" scaling only)",
             cfg_path, type->valuestring);
    double factor, low, high;
    uint64_t orig;
    cfg_number(cfg_path, rs, "factor", "rope_scaling.factor", 1, &factor);
    cfg_number(cfg_path, rs, "low_freq_factor", "rope_scaling.low_freq_factor", 1, &low);
    cfg_number(cfg_path, rs, "high_freq_factor", "rope_scaling.high_freq_factor", 1, &high);
    cfg_uint(cfg_path, rs, "original_max_position_embeddings", "rope_scaling.original_max_position_embeddings", 1, 1,
             INT32_MAX, &orig);
    // (factor 1 is plain RoPE in both conventions; below 1 Hugging Face would divide by it)
    if (!(factor >= 1.0 && factor < 1e6)) fail("%s: rope_scaling.factor = %g is not in [1, 1e6)", cfg_path, factor);
    if (!(low > 0.0 && high > low && high < 1e6))
        fail("%s: rope_scaling needs 0 < low_freq_factor < high_freq_factor (< 1e6): low %g, high %g", cfg_path, low, high);
    c->rope_factor = (float)factor;
    c->rope_low_freq_factor = (float)low;
    c->rope_high_freq_factor = (float)high;
    c->rope_original_max_pos = (int)orig;
}

// ---- A safetensors model: one file, or the shards of a Hugging Face index

// One safetensors file: its header (parsed, its ranges checked) and where its data lies.
typedef struct {
    char* path;
    const char* name;   // a shard: its file name as the index's weight_map gives it
    uint64_t data_start, data_len;
    cJSON* header;
} StFile;

// The tensors of a model, in one file (map NULL: the file's header names them) or in the shards
// of a model.safetensors.index.json (map: its weight_map, tensor name -> shard file name, already
// checked both ways against every shard's header, so a name in the map is in exactly that
// shard). path is what messages name for the model as a whole: the file, or the index. The
// files are opened one at a time as their tensors are read, not all at once (the 405B has 191).
typedef struct {
    const char* path;
    StFile* files;      // a shard index's: sorted by name
    int n_files;
    cJSON* index;       // the parsed index (map is its weight_map); NULL for one file
    const cJSON* map;
    int fd, fd_file;    // the open file and which of files it is (-1: none)
} StSet;

// The object whose keys are the model's tensor names (and, in one file, "__metadata__").
static const cJSON* st_names(const StSet* s) { return s->map ? s->map : s->files[0].header; }

static int st_file_cmp(const void* a, const void* b) { return strcmp(((const StFile*)a)->name, ((const StFile*)b)->name); }

// The file of a sharded set named `shard` in the weight_map (-1: none).
static int st_shard_of(const StSet* s, const char* shard) {
    StFile key;
    key.name = shard;
    const StFile* f = (const StFile*)bsearch(&key, s->files, (size_t)s->n_files, sizeof(StFile), st_file_cmp);
    return f ? (int)(f - s->files) : -1;
}

// The header entry of tensor `name` and which file holds it; NULL when the model has no such
// tensor (in one file: not in its header; sharded: not in the weight_map).
static const cJSON* st_get(const StSet* s, const char* name, int* file) {
    *file = 0;
    if (!s->map) return cJSON_GetObjectItemCaseSensitive(s->files[0].header, name);
    const cJSON* m = cJSON_GetObjectItemCaseSensitive(s->map, name);
    if (!m) return NULL;
    *file = st_shard_of(s, m->valuestring);   // (every value was checked to be a shard read)
    const cJSON* it = *file < 0 ? NULL : cJSON_GetObjectItemCaseSensitive(s->files[*file].header, name);
    if (!it) fail("%s: the weight_map puts tensor %s in %s, which does not hold it", s->path, name, m->valuestring);
    return it;
}

// st_parse of an entry st_get found, recording its file.
static void st_parse_in(const StSet* s, int file, const cJSON* it, const char* name, StTensor* t) {
    st_parse(s->files[file].path, it, name, s->files[file].data_len, t);
    t->file = file;
}

// A descriptor for reading `file` of the set: the one open, or that one closed and this one
// opened (and checked to still hold the data its header described).
static int st_fd(StSet* s, int file) {
    if (s->fd_file == file) return s->fd;
    if (s->fd >= 0) close(s->fd);
    const StFile* f = &s->files[file];
    s->fd = open(f->path, O_RDONLY);
    if (s->fd < 0) fail("%s: cannot open: %s", f->path, strerror(errno));
    s->fd_file = file;
    struct stat st;
    if (fstat(s->fd, &st) != 0 || (uint64_t)st.st_size < f->data_start + f->data_len)
        fail("%s: shorter than when its header was read (changed during the import?)", f->path);
    return s->fd;
}

static void st_set_free(StSet* s) {
    if (s->fd >= 0) close(s->fd);
    for (int i = 0; i < s->n_files; i++) {
        cJSON_Delete(s->files[i].header);
        if (s->map) free(s->files[i].path);   // (one file's path is the caller's)
    }
    if (s->map) free(s->files);
    cJSON_Delete(s->index);
    memset(s, 0, sizeof(*s));
    s->fd = s->fd_file = -1;
}

// Reads a Hugging Face Llama model, one safetensors file or a shard index (headers parsed, their
// ranges checked), into w: the shape from the tensors (V, C from model.embed_tokens, F from
// layer 0's gate_proj, L from the model.layers.N names) and from the config.json beside it
// (head counts, positions, RoPE), all cross-checked; q_proj and k_proj un-permuted into our
// interleaved-pair rows, q/k/v stacked into wqkv and gate/up into w13; the vocabulary padded
// with zero rows. Frees the set.
static void load_hf_llama(StSet* set, Weights* w, int heads) {
    const char* path = set->path;
    const cJSON* names = st_names(set);
    int f;
    char cfg_path[PATH_MAX + 16];
    cJSON* j = read_config_json(path, cfg_path, sizeof(cfg_path));
    if (!j)
        fail("%s: a Hugging Face Llama file needs the config.json beside it (%s: not found): its head counts and RoPE "
             "are not in the tensors", path, cfg_path);
    const cJSON* mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama") != 0))
        fail("%s: model_type is %s, not llama", cfg_path, cJSON_IsString(mt) ? mt->valuestring : "not a string");
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        fail("%s: hidden_act is %s: fsdp.c's Llama MLP is SwiGLU (silu)", cfg_path,
             cJSON_IsString(act) ? act->valuestring : "not a string");
    if (cfg_bool(cfg_path, j, "attention_bias", 0) || cfg_bool(cfg_path, j, "mlp_bias", 0))
        fail("%s: attention_bias or mlp_bias is true: fsdp.c's Llama has no biases", cfg_path);
    double eps;
    if (cfg_number(cfg_path, j, "rms_norm_eps", "rms_norm_eps", 0, &eps) && (float)eps != 1e-5f)
        fail("%s: rms_norm_eps = %g, but fsdp.c's RMSNorm adds 1e-05 (Llama 3's)", cfg_path, eps);
    const int tie = cfg_bool(cfg_path, j, "tie_word_embeddings", 0);
    uint64_t nh, kvh, max_pos;
    cfg_uint(cfg_path, j, "num_attention_heads", "num_attention_heads", 1, 1, 1 << 16, &nh);
    cfg_uint(cfg_path, j, "num_key_value_heads", "num_key_value_heads", 1, 1, 1 << 16, &kvh);
    cfg_uint(cfg_path, j, "max_position_embeddings", "max_position_embeddings", 1, 1, MODEL_MAX_SEQ, &max_pos);
    ModelConfig* c = &w->cfg;
    memset(c, 0, sizeof(*c));
    c->arch = ARCH_LLAMA3;
    hf_llama_rope(cfg_path, j, c);

    // The shape the tensors give.
    const char* emb_name = "model.embed_tokens.weight";
    const cJSON* it = st_get(set, emb_name, &f);
    if (!it)
        fail("%s: tensor %s is missing%s", path, emb_name,
             tie ? " (with tie_word_embeddings true it is the output head too)" : "");
    StTensor emb;
    st_parse_in(set, f, it, emb_name, &emb);
    if (emb.ndim != 2) fail("%s: tensor %s has %d dimension(s), expected 2 ([vocab, hidden])", path, emb_name, emb.ndim);
    if (emb.shape[0] < 1 || emb.shape[0] > MODEL_MAX_VOCAB || emb.shape[1] < 1 || emb.shape[1] > MODEL_MAX_CHANNELS)
        fail("%s: tensor %s is [%" PRIu64 ", %" PRIu64 "]: not a plausible [vocab, hidden] (at most [2^26, 65536])", path,
             emb_name, emb.shape[0], emb.shape[1]);
    int max_layer = -1;
    for (const cJSON* e = names->child; e; e = e->next) {
        if (strncmp(e->string, "model.layers.", 13) != 0 || !isdigit((unsigned char)e->string[13])) continue;
        char* end;
        long l = strtol(e->string + 13, &end, 10);
        if (*end == '.' && l >= 0 && l < MODEL_MAX_LAYERS && l > max_layer) max_layer = (int)l;
    }
    if (max_layer < 0) fail("%s: no decoder layers (model.layers.N.*) found", path);
    const char* gate_name = "model.layers.0.mlp.gate_proj.weight";
    it = st_get(set, gate_name, &f);
    if (!it) fail("%s: tensor %s is missing", path, gate_name);
    StTensor gate;
    st_parse_in(set, f, it, gate_name, &gate);
    if (gate.ndim != 2 || gate.shape[0] < 1 || gate.shape[0] > LLAMA_MAX_FFN || gate.shape[1] != emb.shape[1])
        fail("%s: tensor %s is not [F, %" PRIu64 "] with F in [1, 2^20]", path, gate_name, emb.shape[1]);
    c->vocab_size = (int)emb.shape[0];
    c->padded_vocab_size = pad_vocab(c->vocab_size);
    c->channels = (int)emb.shape[1];
    c->ffn_dim = (int)gate.shape[0];
    c->num_layers = max_layer + 1;
    c->max_seq_len = (int)max_pos;
    cfg_matches(cfg_path, j, "hidden_size", c->channels, "model.embed_tokens.weight's columns");
    cfg_matches(cfg_path, j, "vocab_size", c->vocab_size, "model.embed_tokens.weight's rows");
    cfg_matches(cfg_path, j, "intermediate_size", c->ffn_dim, "model.layers.0.mlp.gate_proj.weight's rows");
    cfg_matches(cfg_path, j, "num_hidden_layers", c->num_layers, "the model.layers.N tensors");
    // The head counts, which only config.json gives.
    if ((uint64_t)c->channels % nh != 0)
        fail("%s: num_attention_heads %" PRIu64 " does not divide hidden_size %d", cfg_path, nh, c->channels);
    if (kvh > nh || nh % kvh != 0)
        fail("%s: num_key_value_heads %" PRIu64 " does not divide num_attention_heads %" PRIu64, cfg_path, kvh, nh);
    c->num_heads = (int)nh;
    c->num_kv_heads = (int)kvh;
    cfg_matches(cfg_path, j, "head_dim", c->channels / c->num_heads, "hidden_size / num_attention_heads");
    if (heads && heads != c->num_heads)
        fail("%s: --heads %d disagrees with %s's num_attention_heads %d", path, heads, cfg_path, c->num_heads);
    const char* bad = model_config_check(c);
    if (bad) fail("%s: inconsistent model (%s; from the tensors and %s)", path, bad, cfg_path);
    cJSON_Delete(j);

    // Every tensor there with its shape, and nothing else, before the model's memory is allocated.
    int n;
    StEntry* e = llama_entries(c, &n);
    StTensor* found = (StTensor*)xcalloc((size_t)n, sizeof(StTensor));
    int head_from_embedding = 0;
    for (int i = 0; i < n; i++) {
        it = st_get(set, e[i].name, &f);
        if (!it && e[i].kind == LK_OUTPUT && tie) { head_from_embedding = 1; continue; }
        if (!it && e[i].kind == LK_OUTPUT)
            fail("%s: tensor lm_head.weight is missing (and %s does not say tie_word_embeddings: true)", path, cfg_path);
        if (!it) fail("%s: tensor %s is missing (a model with %d layers)", path, e[i].name, c->num_layers);
        st_parse_in(set, f, it, e[i].name, &found[i]);
        st_expect_shape(set->files[f].path, e[i].name, &found[i], e[i].ndim, e[i].shape[0], e[i].shape[1]);
    }
    int n_used = 0;
    for (const cJSON* k = names->child; k; k = k->next) {
        if (!strcmp(k->string, "__metadata__")) continue;
        size_t len = strlen(k->string), sl = strlen(".rotary_emb.inv_freq");
        if (len > sl && !strcmp(k->string + len - sl, ".rotary_emb.inv_freq")) continue;   // older transformers' buffer
        int known = 0;
        for (int i = 0; i < n && !known; i++) known = !strcmp(k->string, e[i].name);
        if (!known) fail("%s: unexpected tensor %s (not one of a Llama with %d layers)", path, k->string, c->num_layers);
        n_used++;
    }
    if (n_used != n - head_from_embedding)
        fail("%s: a tensor name appears twice in the %s", path, set->map ? "weight_map" : "header");

    w->n = model_num_parameters(c);
    w->params = (float*)xcalloc(w->n, sizeof(float));   // the padded vocabulary rows stay zero
    const uint64_t C = (uint64_t)c->channels, hs = C / (uint64_t)c->num_heads;
    float* tmp = (float*)xmalloc(C * C * sizeof(float));   // q_proj, the largest permuted tensor
    for (int i = 0; i < n; i++) {
        if (e[i].kind == LK_OUTPUT && head_from_embedding) continue;
        const uint64_t cols = e[i].ndim == 2 ? e[i].shape[1] : e[i].shape[0];
        float* dst = w->params + weights_offset(c, e[i].kind, e[i].layer) + e[i].row0 * cols;
        const StFile* file = &set->files[found[i].file];
        const int fd = st_fd(set, found[i].file);
        if (e[i].rope_heads) {
            st_read(file->path, fd, file->data_start, &found[i], tmp);
            rope_permute(tmp, dst, e[i].rope_heads, hs, cols, 0);
        } else {
            st_read(file->path, fd, file->data_start, &found[i], dst);
        }
    }
    const size_t vc = (size_t)c->vocab_size * C * sizeof(float);
    const float* emb_w = w->params + weights_offset(c, LK_EMB, 0);
    float* out_w = w->params + weights_offset(c, LK_OUTPUT, 0);
    if (head_from_embedding) memcpy(out_w, emb_w, vc);
    else if (tie && memcmp(out_w, emb_w, vc) != 0)
        fail("%s: %s says tie_word_embeddings: true, but lm_head.weight differs from %s", path, cfg_path, emb_name);
    free(tmp);
    free(found);
    free(e);
    if (set->map) printf("read %s: safetensors in %d shards (Hugging Face Llama), ", path, set->n_files);
    else printf("read %s: safetensors (Hugging Face Llama), ", path);
    print_config(c);
    printf(", RoPE ");
    print_rope(c);
    printf(" (heads, positions and RoPE from %s)\n", cfg_path);
    if (head_from_embedding)
        printf("note: no lm_head.weight and tie_word_embeddings: true: the output head starts as a copy of %s "
               "(fsdp.c's Llama trains it untied)\n", emb_name);
    st_set_free(set);
}

static void load_safetensors(const char* path, uint64_t file_size, uint64_t hlen, Weights* w, int heads) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", path, strerror(errno));
    char* json = (char*)xmalloc(hlen + 1);
    if (read_at(fd, json, hlen, 8) != 0) fail("%s: read failed: %s", path, strerror(errno));
    json[hlen] = '\0';
    cJSON* header = cJSON_Parse(json);
    free(json);
    if (!cJSON_IsObject(header)) fail("%s: safetensors header is not a JSON object", path);
    uint64_t data_start = 8 + hlen, data_len = file_size - data_start;
    st_check_overlaps(path, header, data_len);
    if (is_hf_llama(header)) {
        StFile file = {(char*)path, NULL, data_start, data_len, header};
        StSet set = {path, &file, 1, NULL, NULL, fd, 0};
        load_hf_llama(&set, w, heads);
        return;
    }

    // Shape of the model from the tensors.
    StTensor wte, wpe;
    const cJSON* it = st_find(header, "wte.weight");
    if (!it) fail("%s: no tensor wte.weight (not a GPT-2 safetensors file?)", path);
    st_parse(path, it, "wte.weight", data_len, &wte);
    it = st_find(header, "wpe.weight");
    if (!it) fail("%s: no tensor wpe.weight", path);
    st_parse(path, it, "wpe.weight", data_len, &wpe);
    if (wte.ndim != 2 || wpe.ndim != 2) fail("%s: wte.weight and wpe.weight must be 2-D", path);
    if (wpe.shape[1] != wte.shape[1])
        fail("%s: tensor wpe.weight has %" PRIu64 " columns, wte.weight %" PRIu64, path, wpe.shape[1], wte.shape[1]);
    if (wte.shape[0] > MODEL_MAX_VOCAB || wte.shape[1] > MODEL_MAX_CHANNELS || wpe.shape[0] > MODEL_MAX_SEQ)
        fail("%s: wte.weight [%" PRIu64 ", %" PRIu64 "] / wpe.weight [%" PRIu64 ", %" PRIu64 "]: implausibly large model", path,
             wte.shape[0], wte.shape[1], wpe.shape[0], wpe.shape[1]);
    int max_layer = -1;
    for (const cJSON* e = header->child; e; e = e->next) {
        const char* k = e->string;
        if (!strcmp(k, "__metadata__")) continue;
        if (!strncmp(k, "transformer.", 12)) k += 12;
        if (!strncmp(k, "h.", 2) && isdigit((unsigned char)k[2])) {
            char* end;
            long l = strtol(k + 2, &end, 10);
            if (*end == '.' && l >= 0 && l < MODEL_MAX_LAYERS && l > max_layer) max_layer = (int)l;
        }
    }
    if (max_layer < 0) fail("%s: no transformer blocks (h.N.*) found", path);
    ModelConfig* c = &w->cfg;
    c->channels = (int)wte.shape[1];
    c->vocab_size = (int)wte.shape[0];
    c->padded_vocab_size = pad_vocab(c->vocab_size);
    c->max_seq_len = (int)wpe.shape[0];
    c->num_layers = max_layer + 1;

    // The head count is not in the tensors: --heads, the metadata's n_head, or config.json's.
    // Never guessed (channels / 64 is wrong for any other head size); sources that disagree
    // are refused.
    const cJSON* meta = cJSON_GetObjectItemCaseSensitive(header, "__metadata__");
    const cJSON* nh = cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, "n_head") : NULL;
    int meta_heads = 0;
    if (nh && !(cJSON_IsString(nh) && parse_heads_text(nh->valuestring, &meta_heads)))
        fail("%s: __metadata__ n_head = %s is not a head count (a whole number >= 1, as a string)", path,
             cJSON_IsString(nh) ? nh->valuestring : "not a string");
    char cfg_path[PATH_MAX + 16];
    int cfg_heads = hf_config_heads(path, c, cfg_path, sizeof(cfg_path));
    if (meta_heads && cfg_heads && meta_heads != cfg_heads)
        fail("%s: __metadata__ n_head %d disagrees with %s's n_head %d", path, meta_heads, cfg_path, cfg_heads);
    const char* heads_from;
    char from_buf[PATH_MAX + 32];
    if (heads) { c->num_heads = heads; heads_from = "--heads"; }
    else if (meta_heads) { c->num_heads = meta_heads; heads_from = "metadata n_head"; }
    else if (cfg_heads) {
        c->num_heads = cfg_heads;
        snprintf(from_buf, sizeof(from_buf), "%s n_head", cfg_path);
        heads_from = from_buf;
    } else {
        fail("%s: no head count: no __metadata__ n_head and no config.json beside it (%s); give --heads N", path, cfg_path);
    }
    if (c->channels % c->num_heads != 0)
        fail("%s: channels %d is not a multiple of %d heads (from %s); give --heads N", path, c->channels, c->num_heads, heads_from);
    int file_heads = meta_heads ? meta_heads : cfg_heads;
    if (heads && file_heads && heads != file_heads)
        fail("%s: --heads %d disagrees with the file's %d heads (%s)", path, heads, file_heads,
             meta_heads ? "metadata n_head" : cfg_path);
    const char* bad = model_config_check(c);
    if (bad) fail("%s: inconsistent model (%s)", path, bad);

    // Every key must be one we use or know to skip; every tensor we need must be there with its
    // shape, all checked before the model's memory is allocated.
    int n_used = 0;
    for (const cJSON* e = header->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__") || st_ignorable(e->string)) continue;
        n_used++;
    }
    int expected = 0;
    for (int k = 0; k < NUM_KINDS; k++) expected += kind_layers(c, k);
    StTensor* found = (StTensor*)xcalloc((size_t)expected, sizeof(StTensor));
    int at = 0;
    for (int k = 0; k < NUM_KINDS; k++) {
        for (int l = 0; l < kind_layers(c, k); l++, at++) {
            char name[96];
            if (k == K_WTE || k == K_WPE) snprintf(name, sizeof(name), "%s.weight", k == K_WTE ? "wte" : "wpe");
            else model_tensor_name(k, l, name, sizeof(name));
            it = st_find(header, name);
            if (!it) fail("%s: tensor %s is missing (model with %d layers)", path, name, c->num_layers);
            StTensor* t = &found[at];
            st_parse(path, it, name, data_len, t);
            size_t rows, cols;
            kind_shape(c, k, &rows, &cols);
            if (k == K_WTE) rows = (size_t)c->vocab_size;
            if (rows == 1) st_expect_shape(path, name, t, 1, cols, 0);
            else if (is_conv1d(k)) st_expect_shape(path, name, t, 2, cols, rows);
            else st_expect_shape(path, name, t, 2, rows, cols);
        }
    }
    if (n_used != expected) {
        for (const cJSON* e = header->child; e; e = e->next) {
            if (!strcmp(e->string, "__metadata__") || st_ignorable(e->string)) continue;
            const char* k = strncmp(e->string, "transformer.", 12) == 0 ? e->string + 12 : e->string;
            int known = !strcmp(k, "wte.weight") || !strcmp(k, "wpe.weight") || !strcmp(k, "ln_f.weight") || !strcmp(k, "ln_f.bias");
            for (int j = 0; j < BLOCK_TENSORS && !known; j++) {
                const char* dot = strchr(k + 2, '.');
                if (!strncmp(k, "h.", 2) && dot && !strcmp(dot + 1, BLOCK_TENSOR_NAMES[j])) known = 1;
            }
            if (!known) fail("%s: unexpected tensor %s (not a GPT-2 tensor)", path, e->string);
        }
        fail("%s: %d GPT-2 tensors, expected %d (duplicates under two prefixes?)", path, n_used, expected);
    }

    w->n = model_num_parameters(c);
    w->params = (float*)xcalloc(w->n, sizeof(float));  // padded wte rows stay zero
    size_t C = (size_t)c->channels;
    float* tmp = (float*)xmalloc(4 * C * C * sizeof(float));  // the largest Conv1D weight, for transposing
    at = 0;
    for (int k = 0; k < NUM_KINDS; k++) {
        for (int l = 0; l < kind_layers(c, k); l++, at++) {
            size_t rows, cols;
            kind_shape(c, k, &rows, &cols);
            float* dst = w->params + llmc_offset(c, k, l);
            if (is_conv1d(k)) {
                st_read(path, fd, data_start, &found[at], tmp);   // [in = cols, out = rows]
                for (size_t i = 0; i < cols; i++)
                    for (size_t o = 0; o < rows; o++) dst[o * cols + i] = tmp[i * rows + o];
            } else {
                st_read(path, fd, data_start, &found[at], dst);
            }
        }
    }
    free(found);
    free(tmp);
    close(fd);
    cJSON_Delete(header);
    printf("read %s: safetensors, ", path);
    print_config(c);
    printf(" (heads from %s)\n", heads_from);
}

// ---- Hugging Face's sharded form: model.safetensors.index.json beside its shard files

#define SAFETENSORS_MAX_INDEX (16u << 20)   // the 405B's index is ~100 KiB
#define SAFETENSORS_MAX_SHARDS 4096         // the largest public checkpoints have a few hundred

// A shard's file name as the weight_map gives it: a plain *.safetensors name in the index's own
// directory. No '/' or "..", so that no index reaches into another directory, and no control
// characters, which would break the one-line messages that name it.
static int shard_name_ok(const char* s) {
    const size_t n = strlen(s), suf = strlen(".safetensors");
    if (n <= suf || n > 255 || strcmp(s + n - suf, ".safetensors") != 0) return 0;
    if (strchr(s, '/') || strstr(s, "..")) return 0;
    for (const char* p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return 0;
    return 1;
}

// A name from the file, for a message: control characters as '?', at most 80 characters.
static const char* printable(const char* s, char* buf, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n && i < 80; i++) buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

// One shard's header, with a single file's checks (the container's framing, a JSON object, data
// offsets within the file and not overlapping); the file is closed again. `budget`: header bytes
// the remaining shards may still hold in memory together.
static void st_read_shard(StFile* f, uint64_t* budget) {
    struct stat st;
    if (stat(f->path, &st) != 0) fail("%s: cannot open: %s", f->path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", f->path);
    int fd = open(f->path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", f->path, strerror(errno));
    unsigned char head[9] = {0};
    ssize_t got = pread(fd, head, 9, 0);
    uint64_t hlen = 0;
    for (int b = 0; b < 8 && got >= 8; b++) hlen |= (uint64_t)head[b] << (8 * b);
    if (got != 9 || head[8] != '{' || hlen < 2 || hlen > SAFETENSORS_MAX_HEADER || 8 + hlen > (uint64_t)st.st_size)
        fail("%s: not a safetensors file (no header of at most 100 MiB within its %lld bytes)", f->path, (long long)st.st_size);
    if (hlen > *budget) fail("%s: the shards' headers together exceed 100 MiB", f->path);
    *budget -= hlen;
    char* json = (char*)xmalloc(hlen + 1);
    if (read_at(fd, json, hlen, 8) != 0) fail("%s: read failed: %s", f->path, strerror(errno));
    close(fd);
    json[hlen] = '\0';
    f->header = cJSON_Parse(json);
    free(json);
    if (!cJSON_IsObject(f->header)) fail("%s: safetensors header is not a JSON object", f->path);
    f->data_start = 8 + hlen;
    f->data_len = (uint64_t)st.st_size - f->data_start;
    st_check_overlaps(f->path, f->header, f->data_len);
}

typedef struct { const char* name; int file; } StName;
static int st_name_cmp(const void* a, const void* b) { return strcmp(((const StName*)a)->name, ((const StName*)b)->name); }
static int str_ptr_cmp(const void* a, const void* b) { return strcmp(*(const char* const*)a, *(const char* const*)b); }

// Reads the shards a model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor:
// shard file}}) names, and checks the map against their headers both ways before any tensor is
// read: every tensor of a shard is in the map and mapped to that shard, every tensor of the map
// is in the shard it names, none is in two shards. The Llama reader then takes each tensor from
// its shard. The config.json beside the index is required, as beside a single file.
static void load_sharded(const char* index_path, Weights* w, int heads) {
    struct stat st;
    if (stat(index_path, &st) != 0) fail("%s: cannot open: %s", index_path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", index_path);
    if (st.st_size > SAFETENSORS_MAX_INDEX)
        fail("%s: %lld bytes: too large for a safetensors index (at most 16 MiB)", index_path, (long long)st.st_size);
    int fd = open(index_path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", index_path, strerror(errno));
    char* text = (char*)xmalloc((size_t)st.st_size + 1);
    if (read_at(fd, text, (size_t)st.st_size, 0) != 0) fail("%s: read failed: %s", index_path, strerror(errno));
    close(fd);
    text[st.st_size] = '\0';
    StSet set;
    memset(&set, 0, sizeof(set));
    set.path = index_path;
    set.fd = set.fd_file = -1;
    set.index = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(set.index)) fail("%s: not a JSON object (invalid JSON, or another JSON value)", index_path);
    set.map = cJSON_GetObjectItemCaseSensitive(set.index, "weight_map");
    if (!cJSON_IsObject(set.map))
        fail("%s: no weight_map object (tensor name -> shard file): not a model.safetensors.index.json", index_path);
    if (!set.map->child) fail("%s: the weight_map is empty", index_path);

    // The shard files: the map's distinct values, each a plain file name beside the index.
    char buf[96];
    int n_map = 0;
    for (const cJSON* m = set.map->child; m; m = m->next) {
        if (!strcmp(m->string, "__metadata__")) fail("%s: the weight_map lists __metadata__, which is not a tensor", index_path);
        if (!cJSON_IsString(m)) fail("%s: weight_map: tensor %s: not a file name (a string)", index_path, m->string);
        if (!shard_name_ok(m->valuestring))
            fail("%s: weight_map: tensor %s is in \"%s\": not a *.safetensors file name in the index's directory "
                 "(no '/' or '..')", index_path, m->string, printable(m->valuestring, buf, sizeof(buf)));
        n_map++;
    }
    const char** shard_names = (const char**)xcalloc((size_t)n_map, sizeof(char*));
    int at = 0;
    for (const cJSON* m = set.map->child; m; m = m->next) shard_names[at++] = m->valuestring;
    qsort(shard_names, (size_t)n_map, sizeof(char*), str_ptr_cmp);
    for (int i = 0; i < n_map; i++)
        if (i == 0 || strcmp(shard_names[i], shard_names[i - 1]) != 0) set.n_files++;
    if (set.n_files > SAFETENSORS_MAX_SHARDS)
        fail("%s: the weight_map names %d shard files (at most %d)", index_path, set.n_files, SAFETENSORS_MAX_SHARDS);
    set.files = (StFile*)xcalloc((size_t)set.n_files, sizeof(StFile));
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", index_path);
    const char* d = dirname(dir);
    at = 0;
    for (int i = 0; i < n_map; i++) {
        if (i > 0 && !strcmp(shard_names[i], shard_names[i - 1])) continue;
        StFile* f = &set.files[at++];   // (in name order, as st_shard_of's search needs)
        f->name = shard_names[i];
        f->path = (char*)xmalloc(strlen(d) + strlen(f->name) + 2);
        sprintf(f->path, "%s/%s", d, f->name);
    }
    free(shard_names);
    uint64_t budget = SAFETENSORS_MAX_HEADER;
    for (int i = 0; i < set.n_files; i++) {
        if (stat(set.files[i].path, &st) != 0) {   // name a tensor it should hold, for the message
            const cJSON* m = set.map->child;
            while (strcmp(m->valuestring, set.files[i].name) != 0) m = m->next;
            fail("%s: cannot open: %s (the weight_map of %s puts tensor %s there)", set.files[i].path, strerror(errno),
                 index_path, m->string);
        }
        st_read_shard(&set.files[i], &budget);
    }

    // No tensor in two shards (nor twice in one header).
    int n_held = 0;
    for (int i = 0; i < set.n_files; i++)
        for (const cJSON* e = set.files[i].header->child; e; e = e->next) n_held += strcmp(e->string, "__metadata__") != 0;
    StName* held = (StName*)xcalloc((size_t)n_held, sizeof(StName));
    at = 0;
    for (int i = 0; i < set.n_files; i++)
        for (const cJSON* e = set.files[i].header->child; e; e = e->next)
            if (strcmp(e->string, "__metadata__") != 0) { held[at].name = e->string; held[at++].file = i; }
    qsort(held, (size_t)n_held, sizeof(StName), st_name_cmp);
    for (int i = 1; i < n_held; i++) {
        if (strcmp(held[i].name, held[i - 1].name) != 0) continue;
        if (held[i].file == held[i - 1].file)
            fail("%s: tensor %s appears twice in the header", set.files[held[i].file].path, held[i].name);
        int a = held[i - 1].file, b = held[i].file;
        if (a > b) { int t = a; a = b; b = t; }   // (qsort leaves equal names in any order)
        fail("%s: tensor %s is in two shards, %s and %s", index_path, held[i].name, set.files[a].name, set.files[b].name);
    }
    free(held);
    // Each shard's tensors are in the map, mapped to that shard...
    for (int i = 0; i < set.n_files; i++)
        for (const cJSON* e = set.files[i].header->child; e; e = e->next) {
            if (!strcmp(e->string, "__metadata__")) continue;
            const cJSON* m = cJSON_GetObjectItemCaseSensitive(set.map, e->string);
            if (!m) fail("%s: holds tensor %s, which the weight_map of %s does not list", set.files[i].path, e->string, index_path);
            if (strcmp(m->valuestring, set.files[i].name) != 0)
                fail("%s: tensor %s is in %s, but the weight_map puts it in %s", index_path, e->string, set.files[i].name,
                     m->valuestring);
        }
    // ... and each tensor of the map is in the shard it names (so the map lists each once when
    // it lists as many as the shards hold).
    for (const cJSON* m = set.map->child; m; m = m->next) {
        int fi = st_shard_of(&set, m->valuestring);
        if (!cJSON_GetObjectItemCaseSensitive(set.files[fi].header, m->string))
            fail("%s: the weight_map puts tensor %s in %s, which does not hold it", index_path, m->string, m->valuestring);
    }
    if (n_map != n_held) fail("%s: a tensor name appears twice in the weight_map", index_path);

    if (!is_hf_llama(set.map))
        fail("%s: no Hugging Face Llama tensor names (model.embed_tokens, model.layers.N) in the weight_map: sharded "
             "safetensors are read for Llama only (a GPT-2 as one file)", index_path);
    load_hf_llama(&set, w, heads);
}

// SRC given as a directory: a shard index there, or else one model.safetensors file.
static void load_source(const char* path, Weights* w, int heads);
static void load_directory(const char* path, Weights* w, int heads) {
    char index_path[PATH_MAX + 40], single[PATH_MAX + 40];
    snprintf(index_path, sizeof(index_path), "%s/model.safetensors.index.json", path);
    snprintf(single, sizeof(single), "%s/model.safetensors", path);
    struct stat st;
    if (stat(index_path, &st) == 0) load_sharded(index_path, w, heads);
    else if (stat(single, &st) == 0) load_source(single, w, heads);
    else fail("%s: a directory without model.safetensors.index.json or model.safetensors", path);
}

// Reads SRC, an llm.c model file or a safetensors file (GPT-2 or Hugging Face Llama), recognised by
// its content; a Hugging Face shard index (a name ending in .json); or a directory holding either
// form.
static void load_source(const char* path, Weights* w, int heads) {
    struct stat st;
    if (stat(path, &st) != 0) fail("%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) { load_directory(path, w, heads); return; }
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file", path);
    const size_t len = strlen(path);
    if (len >= 5 && !strcmp(path + len - 5, ".json")) { load_sharded(path, w, heads); return; }
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", path, strerror(errno));
    unsigned char head[9] = {0};
    ssize_t got = pread(fd, head, 9, 0);
    close(fd);
    if (got < 8) fail("%s: %ld bytes: too short for an llm.c model file or a safetensors file", path, (long)st.st_size);
    int32_t magic;
    memcpy(&magic, head, 4);
    if (magic == MODEL_FILE_MAGIC) { load_llmc(path, w, heads); return; }
    uint64_t hlen = 0;
    for (int b = 0; b < 8; b++) hlen |= (uint64_t)head[b] << (8 * b);
    if (got == 9 && head[8] == '{' && hlen >= 2 && hlen <= SAFETENSORS_MAX_HEADER && 8 + hlen <= (uint64_t)st.st_size) {
        load_safetensors(path, (uint64_t)st.st_size, hlen, w, heads);
        return;
    }
    fail("%s: not an llm.c model file (magic %d, expected %d) nor a safetensors file", path, magic, MODEL_FILE_MAGIC);
}

static int cmd_import(int argc, char** argv) {
    const char *world_s = NULL, *step_s = NULL, *compress = NULL, *heads_s = NULL, *seq_s = NULL, *seed_s = NULL,
               *shuffle_s = NULL;
    Flag flags[] = {{"--world", &world_s}, {"--step", &step_s}, {"--compress", &compress}, {"--heads", &heads_s},
                    {"--seq-len", &seq_s}, {"--seed", &seed_s}, {"--shuffle", &shuffle_s}};
    const char* pos[2];
    if (parse_args("import", argc, argv, 2, flags, 7, pos, 2) != 2) fail("import: expected SRC OUT_ROOT (see ckpt --help)");
    if (!world_s) fail("import: --world W is required (the number of ranks the checkpoint is for)");
    int world = (int)parse_long_arg("--world", world_s, 1, 1 << 20);
    long step = step_s ? parse_long_arg("--step", step_s, 0, INT32_MAX) : 0;   // train_gpt counts steps in an int
    int heads = heads_s ? (int)parse_long_arg("--heads", heads_s, 1, 1 << 16) : 0;
    int seq_len = seq_s ? (int)parse_long_arg("--seq-len", seq_s, 1, 1 << 20) : 0;
    long seed = seed_s ? parse_long_arg("--seed", seed_s, 0, LONG_MAX) : 1337;
    int shuffle = shuffle_s ? (int)parse_long_arg("--shuffle", shuffle_s, 0, 1) : 0;
    CkptOptions opt;
    memset(&opt, 0, sizeof(opt));
    opt.codec = CKPT_CODEC_RAW;
    opt.zstd_level = 3;
    opt.keep = INT_MAX;  // never delete what is already in OUT_ROOT
    if (compress && strcmp(compress, "none") != 0) {
        if (strncmp(compress, "zstd", 4) != 0 || (compress[4] != '\0' && compress[4] != ':'))
            fail("--compress: expected none, zstd or zstd:LEVEL, got '%s'", compress);
        opt.codec = CKPT_CODEC_ZSTD;
        if (compress[4] == ':') opt.zstd_level = (int)parse_long_arg("--compress zstd:LEVEL", compress + 5, 1, 19);
    }
    const char* src = pos[0];
    const char* root = pos[1];
    if (!*root) fail("import: empty OUT_ROOT");
    if (!strcmp(src, root)) fail("import: SRC and OUT_ROOT are the same path");
    char step_dir[PATH_MAX + 32];
    snprintf(step_dir, sizeof(step_dir), "%s/step_%08ld", root, step);
    struct stat st;
    if (stat(step_dir, &st) == 0) fail("%s: already exists (choose another OUT_ROOT or --step)", step_dir);
    if (stat(root, &st) == 0 && !S_ISDIR(st.st_mode)) fail("%s: exists and is not a directory", root);

    Weights w;
    memset(&w, 0, sizeof(w));
    load_source(src, &w, heads);
    const ModelConfig* cfg = &w.cfg;

    // Tensor table, in our unit order.
    ModelLayout m;
    if (build_layout(&m, cfg, 1, world)) fail("%s: cannot lay out the model (%s)", src, model_config_check(cfg) ? model_config_check(cfg) : "out of memory");
    ModelCkptTables table;  // the tensors only: the pieces are every rank's, below
    if (model_checkpoint_tables(&m, NULL, 0, NULL, 0, &table)) fail("out of memory for the checkpoint tables");
    int n_tensors = table.n_tensors;
    size_t max_numel = 0;
    for (int u = 0; u < m.n_units; u++)
        for (int i = 0; i < m.units[u].n_tensors; i++)
            if (m.units[u].tensors[i].numel > max_numel) max_numel = m.units[u].tensors[i].numel;
    float* zeros = (float*)xcalloc(max_numel, sizeof(float));

    // Rank r owns [r*shard, (r+1)*shard) of every unit; what meets each tensor is a piece,
    // saved as parameter, m (zero) and v (zero).
    CkptPiece** pieces = (CkptPiece**)xcalloc((size_t)world, sizeof(CkptPiece*));
    int* n_pieces = (int*)xcalloc((size_t)world, sizeof(int));
    FlatPiece* owned = (FlatPiece*)xcalloc((size_t)n_tensors, sizeof(FlatPiece));
    for (int r = 0; r < world; r++) {
        pieces[r] = (CkptPiece*)xcalloc((size_t)n_tensors * CKPT_KINDS, sizeof(CkptPiece));
        int n_owned = flat_owned_pieces(m.units, m.n_units, r, owned);
        for (int i = 0; i < n_owned; i++) {
            const FlatPiece* fp = &owned[i];
            int kind, layer;
            tensor_kind(&m, fp->unit, fp->tensor, &kind, &layer);
            const float* data = w.params + weights_offset(cfg, kind, layer);
            for (int k = 0; k < CKPT_KINDS; k++) {
                CkptPiece* p = &pieces[r][n_pieces[r]++];
                p->tensor = m.units[fp->unit].tensors[fp->tensor].name;
                p->kind = k;
                p->lo = fp->lo;
                p->hi = fp->hi;
                p->data = k == CKPT_PARAM ? data + fp->lo : zeros;
            }
        }
    }
    free(owned);

    // The state train_gpt --resume reads: a fresh run at `step` with these weights, no data
    // consumed; the loader seed and shuffle default to train_gpt's (--seed 1337, --shuffle 0).
    if (seq_len > cfg->max_seq_len) fail("--seq-len %d exceeds the model's %d positions", seq_len, cfg->max_seq_len);
    // seq_len 0 (no --seq-len): no data position yet, so any --seq-len may resume it.
    cJSON* state = model_checkpoint_state(cfg, step, 0, world, seq_len, 0, 0, (uint64_t)seed, shuffle);
    cJSON_AddStringToObject(state, "imported_from", src);

    char err[ERRLEN];
    int rc = ckpt_write_offline(root, step, world, table.tensors, n_tensors, (const CkptPiece* const*)pieces, n_pieces, state,
                                &opt, err, sizeof(err));
    // Committed, only `latest` not replaced: the checkpoint is usable (and found), so say so
    // and succeed.
    if (rc == CKPT_SAVED_NO_LATEST) fprintf(stderr, "ckpt: warning: %s\n", err);
    else if (rc != 0) fail("%s", err);
    printf("wrote %s: %d ranks, step %ld, %zu parameters, %s\n", step_dir, world, step, w.n,
           opt.codec == CKPT_CODEC_ZSTD ? "zstd (byte-shuffled)" : "raw");
    for (int r = 0; r < world; r++) free(pieces[r]);
    free(pieces);
    free(n_pieces);
    free(zeros);
    model_checkpoint_tables_free(&table);
    free(m.units);
    free(w.params);
    return 0;
}

// ---------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc < 2) { fputs(USAGE, stderr); fail("missing COMMAND (info, verify, export, import)"); }
    const char* cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) { fputs(USAGE, stdout); return 0; }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(USAGE, stdout); return 0; }
    if (!strcmp(cmd, "info")) return cmd_info(argc, argv);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc, argv);
    if (!strcmp(cmd, "export")) return cmd_export(argc, argv);
    if (!strcmp(cmd, "import")) return cmd_import(argc, argv);
    fail("unknown command '%s' (expected info, verify, export or import; see ckpt --help)", cmd);
    return 1;
}
