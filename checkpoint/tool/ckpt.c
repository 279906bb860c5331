// ckpt: inspect, verify, export and import fsdp.c's sharded checkpoints (the command line; the
// formats are model/'s: llm.c model files model/llmc.h, Hugging Face safetensors model/hf.h and
// model/safetensors.h, the checkpoint itself checkpoint/checkpoint.h).
//
//   ckpt info   PATH
//   ckpt verify PATH [--finite]
//   ckpt export PATH --llmc OUT.bin [--dtype fp32|bf16]
//   ckpt export PATH --safetensors OUT.safetensors
//   ckpt import SRC OUT_ROOT --world W [--step N] [--compress none|zstd[:L]] [--heads N]
//
// SRC: an llm.c model file, a safetensors file, a Hugging Face shard index
// (model.safetensors.index.json) or a directory holding one of the last two; what it is comes
// from its content (the llm.c magic, a safetensors header), a .json name, or the directory's
// files. PATH is a step directory (ROOT/step_00000100), a checkpoint root (RUN/ckpt: its newest
// complete checkpoint) or a run directory holding ckpt/. One process, no MPI: the reader and
// ckpt_write_offline work on files only. Any error ends the tool with one line ("ckpt: ...")
// and exit status 1.
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint/checkpoint.h"
#include "model/hf.h"
#include "model/llmc.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/state.h"
#include "util/regular_file.h"

// Messages name files, some two of them.
#define ERRLEN (2 * PATH_MAX + 1024)

static const char* USAGE =
"usage: ckpt COMMAND ...\n"
"\n"
"  ckpt info PATH                  format, step, tokens, ranks at save, model, sizes, codec\n"
"  ckpt verify PATH [--finite]     check the state as train_gpt --resume does (same messages),\n"
"                                  read every chunk and check its checksum; --finite: and every\n"
"                                  value (parameters, Adam m and v) finite, naming the first\n"
"                                  that is not; exit 1 on damage\n"
"  ckpt export PATH --llmc OUT.bin [--dtype fp32|bf16]\n"
"                                  one llm.c model file (version 3 fp32 [default] or 5 bf16)\n"
"  ckpt export PATH --safetensors OUT.safetensors\n"
"                                  Hugging Face GPT-2 (GPT2Model names, Conv1D layout), F32;\n"
"                                  a Llama 3 checkpoint: Hugging Face LlamaForCausalLM names\n"
"                                  (q/k permuted for rotate_half), F32 (llm.c files hold GPT-2\n"
"                                  only: no --llmc); and a config.json beside OUT, so that\n"
"                                  transformers' from_pretrained(DIR) loads it; one file\n"
"                                  always (export does not write shards)\n"
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
"                                  it; that config.json's fields that change the math must be\n"
"                                  what fsdp.c computes]; --seq-len/--seed/--shuffle: the data\n"
"                                  loader state to record [any T (0), 1337, 0: train_gpt's\n"
"                                  defaults]\n"
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
    const char** value; // where its value goes; NULL: a switch, which takes none
    int* on;            // a switch: set to 1 when given
} Flag;

// Splits argv[first..] into positional arguments and the given --flags (each takes a value,
// as "--flag V" or "--flag=V", except switches). Unknown flags and missing values are errors.
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
                if (!flags[f].value) {
                    if (eq) fail("%s: %s takes no value", cmd, flags[f].name);
                    *flags[f].on = 1;
                } else if (eq) *flags[f].value = eq + 1;
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
    print_state_number(c.state, "tp", "tp at save");   // only a tensor-parallel save records it
    if (c.boxed) {
        int boxes = 0;
        for (int i = 0; i < c.n_chunks; i++) boxes += c.chunks[i].box.rows > 0;
        printf("%-16s %d of %d chunks (boxes of the global tensors)\n", "boxes", boxes, c.n_chunks);
    }
    ModelConfig cfg;
    char err[ERRLEN];
    const int have_cfg = model_checkpoint_config(&c, &cfg, err, sizeof(err)) == 0;
    if (have_cfg) {
        const ModelFamily* f = model_family(&cfg);
        char text[512];
        printf("%-16s %s (%s)\n", "family", f->name, f->title);
        model_describe(&cfg, 1, text, sizeof(text));
        printf("%-16s %s\n", "model", text);
        if (family_has_config(f, offsetof(ModelConfig, num_kv_heads)))
            printf("%-16s %d (%d query heads per kv head)\n", "kv heads", cfg.num_kv_heads, cfg.num_heads / cfg.num_kv_heads);
        if (f->mlp == MLP_SWIGLU) printf("%-16s %d (SwiGLU hidden width F)\n", "ffn dim", cfg.ffn_dim);
        if (f->rope) {
            model_rope_text(&cfg, text, sizeof(text));
            printf("%-16s %s\n", "rope", text);
        }
    } else {
        printf("%-16s (%s)\n", "model", err);
    }
    uint64_t n_params = 0;
    for (int i = 0; i < c.n_tensors; i++) n_params += c.tensors[i].rows * c.tensors[i].cols;
    // The padded vocabulary rows: of the embedding, and of the head when it is untied (Llama).
    const ModelFamily* f = have_cfg ? model_family(&cfg) : NULL;
    const CkptTensor* emb = f ? ckpt_tensor(&c, family_root_role(f, ROOT_WTE)->name) : NULL;
    const int untied = f && family_root_role(f, ROOT_HEAD);
    if (emb && cfg.padded_vocab_size > cfg.vocab_size)
        printf("%-16s %" PRIu64 " (%.2fM; %" PRIu64 " without the %d padded vocabulary rows%s)\n", "parameters", n_params,
               n_params / 1e6, n_params - (uint64_t)(1 + untied) * (uint64_t)(cfg.padded_vocab_size - cfg.vocab_size) * emb->cols,
               cfg.padded_vocab_size - cfg.vocab_size, untied ? " of the embedding and of the head" : "");
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
        print_state_number(scaler, "window", "loss scale window");
    }

    uint64_t stored[CKPT_KINDS] = {0}, raw[CKPT_KINDS] = {0};
    int per_codec[CKPT_CODECS] = {0}, per_kind_chunks[CKPT_KINDS] = {0};
    for (int i = 0; i < c.n_chunks; i++) {
        const CkptChunk* ch = &c.chunks[i];
        int k = ch->kind >= 0 && ch->kind < CKPT_KINDS ? ch->kind : 0;
        stored[k] += ch->bytes;
        raw[k] += ckpt_chunk_elems(ch) * sizeof(float);
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

// The manifest (ckpt_open), the state as train_gpt --resume checks it (model_checkpoint_read_state:
// the same messages), then every chunk's checksum, and with --finite every value.
static int cmd_verify(int argc, char** argv) {
    int finite = 0;
    Flag flags[] = {{"--finite", NULL, &finite}};
    const char* pos[1];
    if (parse_args("verify", argc, argv, 2, flags, 1, pos, 1) != 1) fail("verify: expected PATH (see ckpt --help)");
    Ckpt c;
    open_ckpt(pos[0], &c);
    char err[ERRLEN];
    ModelConfig cfg;
    RunState rs;
    int rc = model_checkpoint_read_state(&c, &cfg, &rs, err, sizeof(err)) ||
             (finite ? ckpt_verify_finite : ckpt_verify)(&c, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "ckpt: verify failed: %s\n", err);
        ckpt_close(&c);
        return 1;
    }
    uint64_t stored = 0, raw = 0;
    ckpt_sizes(&c, &stored, &raw);
    printf("ok: %s: %d chunks in %d rank files, %" PRIu64 " bytes, checksums match, state valid%s\n", c.dir, c.n_chunks,
           c.world, stored, finite ? ", every value finite" : "");
    ckpt_close(&c);
    return 0;
}

// ---------------------------------------------------------------------------------------
// export

static void export_llmc(Ckpt* c, const ModelConfig* cfg, const char* out, int bf16) {
    const ModelFamily* f = model_family(cfg);
    size_t max_n = 0, total = 0, rows, cols;
    const TensorSpec* s;
    int is_block;
    for (int k = 0; (s = llmc_kind_spec(cfg, k, &is_block)); k++) {
        spec_shape(cfg, s, &rows, &cols);
        if (rows * cols > max_n) max_n = rows * cols;
    }
    float* buf = (float*)xmalloc(max_n * sizeof(float));
    char err[ERRLEN];
    LlmcFileWriter w;
    if (llmc_file_create(&w, out, cfg, bf16 ? 5 : 3, err, sizeof(err))) fail("%s", err);
    // Each llm.c kind, stacked over the layers (llmc_offset places it).
    for (int k = 0; (s = llmc_kind_spec(cfg, k, &is_block)); k++) {
        spec_shape(cfg, s, &rows, &cols);
        for (int l = 0; l < (is_block ? cfg->num_layers : 1); l++) {
            char name[CKPT_NAME_LEN];
            spec_name(f, s, is_block, l, name, sizeof(name));
            if (ckpt_read(c, name, CKPT_PARAM, 0, rows * cols, buf, err, sizeof(err)) != 0 ||
                llmc_file_put(&w, k, l, 0, buf, rows * cols, err, sizeof(err)) != 0) {
                llmc_file_abort(&w);
                fail("%s", err);
            }
            total += rows * cols;
        }
    }
    if (llmc_file_commit(&w, err, sizeof(err))) fail("%s", err);
    free(buf);
    char desc[256];
    model_describe(cfg, 1, desc, sizeof(desc));
    printf("wrote %s: llm.c model file version %d (%s), %s, %zu parameters, step %ld\n", out, bf16 ? 5 : 3,
           bf16 ? "bf16" : "fp32", desc, total, c->step);
}

// Where the Hugging Face export reads each tensor: the checkpoint's parameters.
static int read_param(void* ckpt, const char* name, size_t lo, size_t hi, float* dst, char* err, size_t errlen) {
    return ckpt_read((Ckpt*)ckpt, name, CKPT_PARAM, lo, hi, dst, err, errlen);
}

static void export_safetensors(Ckpt* c, const ModelConfig* cfg, const char* out) {
    const ModelFamily* f = model_family(cfg);
    char err[ERRLEN], json[PATH_MAX + 16], desc[256];
    int n;
    if (hf_export(cfg, read_param, c, out, &n, json, sizeof(json), err, sizeof(err))) fail("%s", err);
    model_describe(cfg, 1, desc, sizeof(desc));
    printf("wrote %s: safetensors (%s), %s, %d tensors, step %ld\n", out, f->hf_export_what, desc, n, c->step);
    if (json[0]) {   // (what it holds that the tensors do not: a RoPE family's positions)
        model_rope_text(cfg, desc, sizeof(desc));
        printf("wrote %s%s%s\n", json, f->rope ? ": " : "", f->rope ? desc : "");
    }
}

static int cmd_export(int argc, char** argv) {
    const char *llmc = NULL, *st = NULL, *dtype = NULL;
    Flag flags[] = {{"--llmc", &llmc, NULL}, {"--safetensors", &st, NULL}, {"--dtype", &dtype, NULL}};
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
    const char* no = llmc && !llmc_has_layout(&cfg) ? "llm.c model files hold GPT-2 only (use --safetensors)"
                     : st && !model_family(&cfg)->hf_config ? "it has no Hugging Face form" : NULL;
    if (no) {
        ckpt_close(&c);
        fail("export: %s is a %s checkpoint: %s", pos[0], model_family(&cfg)->title, no);
    }
    if (llmc) export_llmc(&c, &cfg, out, bf16);
    else export_safetensors(&c, &cfg, out);
    ckpt_close(&c);
    return 0;
}

// ---------------------------------------------------------------------------------------
// import

// The whole model in one buffer, fp32: tensor i of model_tensor_at's order at
// model_tensor_offset(i) (every unit's tensors back to back, as build_layout lays them out).
typedef struct {
    ModelConfig cfg;
    float* params;
    size_t n;
} Weights;

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
    if (llmc_read_model(path, &w->cfg, version, w->params, err, sizeof(err))) fail("%s", err);
    char desc[256];
    model_describe(&w->cfg, 1, desc, sizeof(desc));
    printf("read %s: llm.c model file version %d (%s), %s\n", path, version, version == 3 ? "fp32" : "bf16", desc);
}

// A Hugging Face safetensors file, or (sharded) a model.safetensors.index.json.
static void load_hf(const char* path, int sharded, Weights* w, int heads) {
    char err[ERRLEN];
    HfModel m;
    if ((sharded ? hf_import_index : hf_import_file)(path, heads, &m, err, sizeof(err))) fail("%s", err);
    w->cfg = m.config;
    w->params = m.params;
    w->n = m.n;
    printf("read %s: %s\n", path, m.line);
    if (m.note[0]) printf("%s\n", m.note);
}

// SRC given as a directory: a shard index there, or else one model.safetensors file.
static void load_source(const char* path, Weights* w, int heads);
static void load_directory(const char* path, Weights* w, int heads) {
    char index_path[PATH_MAX + 40], single[PATH_MAX + 40];
    snprintf(index_path, sizeof(index_path), "%s/model.safetensors.index.json", path);
    snprintf(single, sizeof(single), "%s/model.safetensors", path);
    struct stat st;
    if (stat(index_path, &st) == 0) { load_hf(index_path, 1, w, heads); return; }
    if (errno != ENOENT) fail("%s: cannot open: %s", index_path, path_error(errno));
    if (stat(single, &st) != 0) {
        if (errno != ENOENT) fail("%s: cannot open: %s", single, path_error(errno));
        fail("%s: a directory without model.safetensors.index.json or model.safetensors", path);
    }
    // One level only: a model.safetensors that is a directory (a symlink to "." would send
    // load_source back here until the path loops) is refused, not looked into.
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file (%s)", single, file_kind(st.st_mode));
    load_source(single, w, heads);
}

// Reads SRC, an llm.c model file or a safetensors file (GPT-2 or Hugging Face Llama), recognised by
// its content; a Hugging Face shard index (a name ending in .json); or a directory holding either
// form.
static void load_source(const char* path, Weights* w, int heads) {
    struct stat st;
    if (stat(path, &st) != 0) fail("%s: cannot open: %s", path, path_error(errno));
    if (S_ISDIR(st.st_mode)) { load_directory(path, w, heads); return; }
    if (!S_ISREG(st.st_mode)) fail("%s: not a regular file (%s)", path, file_kind(st.st_mode));
    const size_t len = strlen(path);
    if (len >= 5 && !strcmp(path + len - 5, ".json")) { load_hf(path, 1, w, heads); return; }
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", path, strerror(errno));
    unsigned char head[9] = {0};
    ssize_t got = pread(fd, head, 9, 0);
    close(fd);
    if (got < 8) fail("%s: %ld bytes: too short for an llm.c model file or a safetensors file", path, (long)st.st_size);
    int32_t magic;
    memcpy(&magic, head, 4);
    if (magic == MODEL_FILE_MAGIC) { load_llmc(path, w, heads); return; }
    uint64_t hlen;
    if (st_probe(head, (long)got, (uint64_t)st.st_size, &hlen)) { load_hf(path, 0, w, heads); return; }
    fail("%s: not an llm.c model file (magic %d, expected %d) nor a safetensors file", path, magic, MODEL_FILE_MAGIC);
}

static int cmd_import(int argc, char** argv) {
    const char *world_s = NULL, *step_s = NULL, *compress = NULL, *heads_s = NULL, *seq_s = NULL, *seed_s = NULL,
               *shuffle_s = NULL;
    Flag flags[] = {{"--world", &world_s, NULL}, {"--step", &step_s, NULL}, {"--compress", &compress, NULL},
                    {"--heads", &heads_s, NULL}, {"--seq-len", &seq_s, NULL}, {"--seed", &seed_s, NULL},
                    {"--shuffle", &shuffle_s, NULL}};
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
            const float* data = w.params + model_tensor_offset(cfg, unit_tensor_index(&m, fp->unit, fp->tensor));
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
    cJSON* state = model_checkpoint_state(cfg, step, 0, world, 1, seq_len, 0, 0, (uint64_t)seed, shuffle);
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
