// train_gpt's command line: every flag, its default and range, --help, and the model shape
// it asks for. Parsing is the same on every rank and needs no other rank: errors are found
// before the ranks meet.
#ifndef FSDP_TRAIN_OPTIONS_H
#define FSDP_TRAIN_OPTIONS_H

#include <stdint.h>
#include "checkpoint/checkpoint.h"
#include "fsdp/fsdp.h"
#include "model/model.h"
#include "train/device.h"
#include "train/schedulers.h"

#ifdef __cplusplus
extern "C" {
#endif

// The data used when -i is not given; -j defaults to DEFAULT_VAL_DATA only then.
#define DEFAULT_TRAIN_DATA "data/tinyshakespeare/tiny_shakespeare_train.bin"
#define DEFAULT_VAL_DATA "data/tinyshakespeare/tiny_shakespeare_val.bin"

typedef struct {
    const char* train_data;
    const char* val_data;        // NULL or "": no validation
    const char* output_dir;
    const char* tensorboard;     // --tensorboard DIR or "none"; NULL: OUTPUT/tensorboard with -o
    const char* model;
    // The model flags (options.c's model_flags): a whole number not given is 0, a float < 0.
    int layers, channels, heads, max_seq;
    const char* arch;            // --arch: "gpt2" or "llama3" (NULL: the preset's)
    int kv_heads, ffn_dim, vocab, rope_original_max_pos;
    float rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, norm_eps;
    const char* init_from;
    const char* save_model;
    int batch_size, seq_len;
    long total_batch_tokens;
    int max_steps;
    float lr, final_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    int warmup_steps;
    LrDecay lr_decay;
    int val_every, val_steps;
    const char* eval_data;       // --eval-data: a multiple-choice set (HellaSwag), or NULL
    int eval_every;              // every N steps and at the end (0: at the end only)
    const char* eval_log;        // --eval-log FILE: every example's losses and predictions
    int eval_only;               // --eval-only: evaluate the model and exit
    const char* generate;        // --generate TEXT: continue TEXT and exit (NULL: no)
    int sample_every, sample_tokens, top_k;
    float temperature;
    const char* tokenizer_dir;
    uint64_t seed;
    int shuffle;
    const char* device;
    const char* comm;            // cuda: "auto", "nccl" or "mpi"
    int reduce_fp32;             // cuda: --reduce-dtype fp32
    int param_fp16;              // cuda: --param-dtype fp16
    float loss_scale;            // fp16: --loss-scale, the first scale
    int loss_scale_window;       // fp16: --loss-scale-window (0: a fixed scale)
    const char* cuda_only_flag;  // the first cuda-only flag given (--comm, --attention, ...)
    const char* attention;       // cuda: "auto", "flash", "flash-pipelined", "cublas" or "cudnn"
    int recompute;               // --recompute: 0 none, 1 selective, 2 full (train/device.h's Recompute)
    int offload;                 // cuda: --offload optimizer
    int gelu_fusion;             // cuda: --gelu-fusion
    int matmul_autotune;         // cuda: --matmul-autotune, -1 auto (cuda_matmul.cuh's MatmulTuneMode)
    int threads;
    int unit_layers, prefetch, reshard_after_forward, no_grad_sync_until_last, shard_group_size;
    // --tp N: the tensor-parallel degree, the mesh's innermost dimension (world = replicas x
    // shards x tp; consecutive ranks, one node); shard_group_size counts data-parallel ranks [1]
    int tp;
    int ckpt_every, ckpt_keep, ckpt_async, stop_at_step;
    const char* ckpt_dir;
    const char* resume;
    CkptOptions ckpt;
    const char* rendezvous;
    const char* run_id;
    float comm_timeout;
    int max_bad_steps;
    float peak_tflops;
    int profile_step;            // 0: off
    // --plan (train/plan.h): print what the run would need and do, on a simulated device
    int plan;
    const char* plan_world;      // NULL: one node (--gpus-per-node ranks)
    const char* sim_device;      // a built-in profile or a profile file [h100]
    int gpus_per_node;           // [8]
    const char* calibrate_from;  // --calibrate-from: a real run's output with a --profile-step table
    const char* plan_tp;         // --plan-tp "1,2,4,8": one row per TP degree at one world (NULL: --tp's plan)
} Options;

typedef struct { char msg[1024]; } ParseError;

void print_usage(void);
// Returns 0 to run, 1 on an error (message in e), 2 for --help.
int parse_options(int argc, char** argv, Options* o, ParseError* e);
// The batch split at `world` ranks: --total-batch-tokens must be a multiple of batch x
// seq-len x world, and the quotient (gradient accumulation steps) must fit an int. 0, or 1
// with the message in e. Call once the world size is known, before dividing.
int check_batch_split(const Options* o, int world, ParseError* e);
// The split itself (after check_batch_split): tokens per optimizer step over all ranks, and
// the accumulation steps of batch x seq-len per rank that make it up.
void batch_split(const Options* o, int world, long* total_tokens, int* grad_accum);
// The model of a run that does not resume a checkpoint: the --init-from file's (whose version, 3
// or 5, it returns) or the flags' (a preset, changed by the shape flags). 0, or 1 with the error
// in e. notes: what the flags changed of the file's model (merge_loaded_config), or "".
int resolve_config(const Options* o, ModelConfig* c, int* file_version, char* notes, size_t notes_len, ParseError* e);
// The model of a run that loads one (`source`: "--resume DIR", "--init-from FILE"; `whose`: "the
// checkpoint's", "the file's"): loaded's config, the model flags given checked against it. A
// flag (or -m's preset) that agrees is fine; one that differs is an error where the weights fix
// the field (model_config_fixed: the family, layers, widths, heads, vocabulary, learned
// positions) and a change where they do not (RoPE's flags, --norm-eps, a RoPE family's
// --max-seq; each said in notes, one line apiece). Every conflict is named in one message: "the
// checkpoint's model has --layers 4 (given 6), --channels 256 (given 128)". 0, or 1 with the
// error in e.
int merge_loaded_config(const Options* o, const ModelConfig* loaded, const char* source, const char* whose, ModelConfig* c,
                        char* notes, size_t notes_len, ParseError* e);
// Where rank 0 writes TensorBoard event files, into dir: --tensorboard DIR, "" for --tensorboard
// none, else OUTPUT/tensorboard with -o, else "" (none). Returns dir, or NULL for none.
const char* run_tensorboard_dir(const Options* o, char* dir, size_t n);
// The checkpoint root of a run: --ckpt-dir, else OUTPUT/ckpt with -o, else "" (none).
void run_ckpt_root(const Options* o, char* root, size_t n);
// --resume's checkpoint: PATH's step (ckpt_resolve), or with auto the newest complete one under
// root (none: a fresh start), and its model config (model_checkpoint_config). 1 with the step
// directory in path and its config, 0 for auto without a checkpoint, -1 with the error in e.
int find_resume_checkpoint(const Options* o, const char* root, char* path, size_t path_len, ModelConfig* saved,
                           ParseError* e);
// The model of a run with --resume: the checkpoint's (find_resume_checkpoint, then
// merge_loaded_config; with --init-from too, the file must hold the same model, whose weights the
// checkpoint's replace), or with auto and no checkpoint yet resolve_config's (path then ""). 0,
// or 1 with the error in e.
int resume_config(const Options* o, char* path, size_t path_len, ModelConfig* c, int* file_version, char* notes,
                  size_t notes_len, ParseError* e);
// The flags checked against the model, the world size and the device: once the ranks of a run
// have met (device: choose_device's "cpu" or "cuda", or NULL when cuda was asked for and is
// not usable, why saying why), and by --plan (device "sim") first with world 0 (what does not
// depend on it, before --plan-world is read), then at each world it plans. One function, so
// that the plan refuses what the run of its flags would; the sim models any device, so the
// device checks are a run's only, and the plan's messages name the world. 0, or 1 with the
// message in e (the error line after "error: ").
int check_run_flags(const Options* o, const ModelConfig* c, int world, const char* device, const char* why, ParseError* e);
// The engine's configuration and the device's options from the flags (a run's, and --plan's,
// which then points the device options at its sim). cuda: 0 for the cpu device.
FsdpConfig run_fsdp_config(const Options* o);
DeviceOptions run_device_options(const Options* o, int cuda);
// OpenMP/BLAS threads per rank, set and returned: --threads, else OMP_NUM_THREADS, else the
// cores of this node shared by its local_world ranks.
int set_threads(const Options* o, int local_world);

#ifdef __cplusplus
}
#endif
#endif
