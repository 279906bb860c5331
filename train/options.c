#include "train/options.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cblas.h>
#include <omp.h>

#include "model/llmc.h"
#include "model/state.h"
#include "train/plan.h"

void print_usage(void) {
    printf(
"usage: train_gpt [options]     (launch several ranks with mpirun -np N or srun)\n"
"\n"
"data\n"
"  -i, --train-data GLOB        training token shards (llm.c format) [" DEFAULT_TRAIN_DATA "]\n"
"  -j, --val-data GLOB          validation shards; \"\" disables validation [" DEFAULT_VAL_DATA " when\n"
"                               -i is not given (or names that default), else none: no validation]\n"
"      --shuffle 0|1            permute shards and sequence windows every epoch (seeded) [0]\n"
"  -o, --output DIR             write DIR/metrics.jsonl (one JSON object per step); the run holds\n"
"                               DIR/train_gpt.lock (and its checkpoint directory's) while it lasts:\n"
"                               a second run on that directory is refused, naming the holder\n"
"      --tensorboard DIR|none   TensorBoard event files of metrics.jsonl's figures (rank 0, a new file\n"
"                               per start); none: no files [OUTPUT/tensorboard with -o, else none]\n"
"model\n"
"  -m, --model NAME             a preset: GPT-2's dN, N layers (d12 = 124M, d24 = 350M, d36 = 774M,\n"
"                               d48 = 1558M), or Llama 3's llama3:tiny (4 layers, 256 channels, GPT-2's\n"
"                               vocabulary), llama3:1b, llama3:3b (Llama 3.2), llama3:8b (Llama 3.1) [d12]\n"
"      --arch gpt2|llama3       the family, for a shape given by the flags below [the preset's]\n"
"      --layers N --channels N --heads N   any other shape (override the preset)\n"
"      --kv-heads N --ffn-dim N --rope-theta F   Llama: k/v heads (grouped-query attention;\n"
"                               divides --heads), the SwiGLU's width, the RoPE base [llama3:tiny's]\n"
"      --rope-factor F          Llama: > 1 turns on Llama 3.1's RoPE frequency scaling by F, with the\n"
"                               three below; 0: plain RoPE [the preset's: tiny 0, 1b/3b 32, 8b 8]\n"
"      --rope-low-freq-factor F --rope-high-freq-factor F --rope-original-max-pos N   Llama, with\n"
"                               --rope-factor > 1: the scaling's bounds (0 < low < high) and the\n"
"                               context it was trained for [1, 4, 8192]\n"
"      --norm-eps F             the norms' epsilon, x / sqrt(var + F): GPT-2's LayerNorm, Llama's\n"
"                               RMSNorm, in [1e-30, 1] [1e-5]\n"
"      --vocab N                vocabulary size (padded to a multiple of 128) [GPT-2's 50257;\n"
"                               llama3:1b/3b/8b: 128256]\n"
"      --max-seq N              GPT-2: learned positions; Llama: longest sequence, up to 2^24 [1024;\n"
"                               llama3 1b-8b: 8192]\n"
"                               With --resume or --init-from the model is the checkpoint's or the\n"
"                               file's: these flags may be left out; one that differs is refused\n"
"                               where the weights fix it (the family, shape, vocabulary, GPT-2's\n"
"                               positions; every conflict named at once), and changes the model\n"
"                               where they do not (RoPE's flags, --norm-eps, Llama's --max-seq)\n"
"  -e, --init-from FILE         start from an llm.c model file (version 3 fp32 or 5 bf16)\n"
"      --save-model FILE        write an llm.c model file (fp32) at the end (its directory is\n"
"                               created and checked writable at startup)\n"
"      --seed N                 initialisation, sampling and shuffling seed [1337]\n"
"training\n"
"  -b, --batch-size N           micro-batch per rank, in sequences; batch x seq-len at most\n"
"                               2^31-1 [4]\n"
"  -t, --seq-len N              sequence length [1024]\n"
"  -d, --total-batch-tokens N   tokens per optimizer step, all ranks; gradient accumulation\n"
"                               makes up the difference: a multiple of batch x seq-len x world, at\n"
"                               most 2^31-1 times it [batch x seq-len x world]\n"
"  -x, --max-steps N            optimizer steps; -1 = one epoch of the training data [-1]\n"
"  -l, --lr F                   peak learning rate [3e-4]\n"
"  -u, --warmup-steps N         linear warmup [0]\n"
"      --lr-decay cosine|linear|constant   decay after warmup [cosine]\n"
"  -q, --final-lr-frac F        the decay ends at F x lr [0.1]\n"
"  -c, --weight-decay F         AdamW weight decay, matrices only [0.1]\n"
"      --beta1 F --beta2 F --eps F   AdamW [0.9, 0.95, 1e-8]\n"
"      --grad-clip F            clip the global gradient norm; 0 disables [1.0]\n"
"evaluation\n"
"  -v, --val-every N            validation loss every N steps and at the end; 0 disables [20]\n"
"      --val-steps N            validation batches (of the training batch size), at most as many\n"
"                               as the validation data holds (more are clamped, said once) [20]\n"
"      --eval-data FILE         a multiple-choice set in llm.c's eval format (HellaSwag: data/prepare.py\n"
"                               --hellaswag): its accuracy (acc_norm) at --eval-every's steps\n"
"      --eval-every N           evaluate --eval-data every N steps and at the end; 0: at the end\n"
"                               only [--val-every's N]\n"
"      --eval-log FILE          every evaluation rewrites FILE: each example's losses and predictions\n"
"                               (JSON Lines)\n"
"      --eval-only              evaluate the model (of --resume, --init-from, or a fresh one) and exit:\n"
"                               --eval-data's accuracy, and the validation loss of -j FILE if given\n"
"  -s, --sample-every N         print a generated sample every N steps; 0 disables [0]\n"
"  -g, --sample-tokens N        tokens per sample [64]\n"
"      --top-k N --temperature F   sampling (--top-k 1: greedy) [40, 1.0]\n"
"      --generate TEXT          print TEXT continued by --sample-tokens tokens (the model reads\n"
"                               <|endoftext|> then TEXT), drawn with --top-k, --temperature and\n"
"                               --seed, and exit: the model of --resume, --init-from, or a fresh one\n"
"      --tokenizer-dir DIR      encoder.json and vocab.bpe for samples and --generate\n"
"                               [data/gpt2, else $FSDP_DATA/gpt2, else ../shared/data/gpt2]\n"
"sharding\n"
"      --fsdp-unit-layers K     transformer blocks per FSDP unit [1]\n"
"      --prefetch N             units all-gathered ahead of the one computing [1]\n"
"      --reshard-after-forward 0|1   1: free gathered blocks after forward (ZeRO-3); 0: keep them until\n"
"                               their backward (ZeRO-2 style, more memory, fewer gathers) [1]\n"
"      --no-grad-sync-until-last   keep unsharded gradients over the micro-steps and reduce-scatter\n"
"                               only on the last (less communication, more memory)\n"
"      --shard-group-size S     HSDP: shard within groups of S data-parallel ranks, replicate across\n"
"                               groups [world / --tp]\n"
"      --tp N                   tensor parallel (Megatron-style, sequence parallel on) over N\n"
"                               consecutive ranks of one node: world = replicas x shards x N, the\n"
"                               data-parallel size world / N [1]\n"
"checkpoints\n"
"      --ckpt-every N           save a sharded checkpoint every N steps and at the end; 0 = never [0]\n"
"      --ckpt-dir DIR           where [OUTPUT/ckpt with -o OUTPUT]\n"
"      --ckpt-keep K            complete checkpoints to keep [3]\n"
"      --ckpt-compress none|zstd[:LEVEL]   compress every chunk [none; zstd level 3]\n"
"      --ckpt-async 0|1         copy the shards to host buffers and write them in a thread [0]\n"
"      --resume auto|PATH       auto: the newest complete checkpoint in the checkpoint directory, or a\n"
"                               fresh start when there is none; PATH: that step directory. Any rank count.\n"
"                               The model is the checkpoint's (see --max-seq); --plan reads it too\n"
"      --stop-at-step N         stop after step N (the schedule still spans --max-steps), saving a\n"
"                               checkpoint first when --ckpt-every is set: splits a run into jobs\n"
"system\n"
"      --device auto|cpu|cuda   [auto: cuda when usable, else cpu]\n"
"      --comm nccl|mpi          cuda collectives: NCCL, or MPI staged through host memory (several ranks\n"
"                               may share a GPU, which NCCL refuses) [nccl when every local rank has\n"
"                               its own GPU, else mpi]\n"
"      --param-dtype bf16|fp16  cuda: dtype of the parameters, activations and gradients the kernels\n"
"                               use (master weights and Adam state stay fp32); fp16, for GPUs without\n"
"                               bf16 (V100, T4), trains with dynamic loss scaling [bf16]\n"
"      --loss-scale F           fp16: the first loss scale, in [1, 2^24] [65536]\n"
"      --loss-scale-window N    fp16: double the scale after N steps in a row without overflow (an\n"
"                               overflow skips the step and halves it); 0 keeps the scale fixed [1000]\n"
"      --reduce-dtype bf16|fp32 cuda: dtype of the gradient reduce-scatter: 16-bit (the --param-dtype's)\n"
"                               or fp32 [bf16]\n"
"      --attention flash|flash-pipelined|cublas|cudnn|auto\n"
"                               cuda: fused flash attention (FlashAttention-2's tiling); flash with\n"
"                               its forward and backward pipelined (128-key tiles, 3-stage cp.async\n"
"                               rings; not yet measured on a GPU, never auto's pick); the cuBLAS\n"
"                               reference path; or cuDNN's fused SDPA (loaded at run time:\n"
"                               FSDP_CUDNN_LIB=FILE, else libcudnn_graph.so.9 on the loader path);\n"
"                               auto: cudnn where it loads and takes the run's shape, else flash where\n"
"                               the head size is 64 or 128, else cublas; the run prints its pick [auto]\n"
"      --gelu-fusion 0|1|2      cuda: the GELU in cuBLASLt's matmul epilogue: 0 never (a kernel of its\n"
"                               own), 1 forward, 2 forward and backward; where cuBLASLt has no such\n"
"                               algorithm, the run says so and uses the kernel [2]\n"
"      --matmul-autotune auto|0|1|2   cuda: how cuBLASLt's algorithm is chosen for each new GEMM shape\n"
"                               (once, in the first step): 0 the heuristic's first; 1 the fastest of\n"
"                               up to 8 candidates that gives the same bits as the first (runs repeat\n"
"                               bit for bit); 2 the fastest (bits may change between runs) [auto: 1,\n"
"                               0 under the CPU emulator]\n"
"      --recompute none|selective|full   activation recompute in the backward: selective rebuilds the\n"
"                               LayerNorm and GELU outputs, full reruns each block's forward from its\n"
"                               input; same results bit for bit, less activation memory (cuda,\n"
"                               selective: the forward's GELU runs as a kernel, not in the epilogue) [none]\n"
"      --offload none|optimizer cuda, optimizer: the fp32 master weights, Adam moments and gradient\n"
"                               shards live in pinned host memory and AdamW runs on host threads\n"
"                               while the GPU goes on (ZeRO-Offload): the GPU keeps 2 bytes per\n"
"                               parameter / shard group instead of 18; the same update and rounding\n"
"                               bits as on the GPU; one host wait per step [none]\n"
"      --threads N              OpenMP/BLAS threads per rank [OMP_NUM_THREADS, else cores / local ranks]\n"
"      --peak-tflops F          the device's peak dense BF16 TFLOP/s for MFU [from the GPU's name; none on cpu]\n"
"      --profile-step N         after step N, print where its time went: matmuls, attention, layernorm,\n"
"                               waits for FSDP communication, optimizer... (cuda: events on the model's\n"
"                               stream, so waits count, and with NCCL the comm stream's own time; the\n"
"                               step's host waits and, through CUPTI, its kernel launches per phase and\n"
"                               per block, then the vector kernels' bytes, time and ratio to their time\n"
"                               at the GPU's copy bandwidth; rank 0's figures; that step is left out of\n"
"                               the average) [0: off]\n"
"operations\n"
"      --rendezvous file:DIR|tcp://HOST:PORT   how ranks meet without an MPI world (srun without\n"
"                               PMI, torchrun-style RANK/WORLD_SIZE): a directory every node sees,\n"
"                               or rank 0's address [MPI when launched by mpirun or srun --mpi=pmix;\n"
"                               tcp://MASTER_ADDR:MASTER_PORT when those are set]\n"
"      --run-id ID              names this launch in the rendezvous directory\n"
"                               [Slurm job.step.restart, or TORCHELASTIC_RUN_ID]\n"
"      --comm-timeout SECONDS   a collective that has not completed (mpi) or made progress (tcp) for\n"
"                               that long ends the job: a stalled or dead rank [600]\n"
"      --max-bad-steps N        a step with a non-finite loss or gradient norm is skipped (no update);\n"
"                               N such steps in a row end the run [10]\n"
"planning (no data, no allocation, no GPU: the run's schedule on a simulated device)\n"
"      --plan                   print the memory budget per rank (the same figures a real run prints),\n"
"                               FLOPs per token, bytes per parameter and time per phase, step time,\n"
"                               tokens/s, MFU and the limiting resource, the vector kernels against the\n"
"                               copy bandwidth, for the other flags as given (-b is still per rank, -d\n"
"                               still all ranks; --attention picks attention's efficiency), then exit\n"
"      --plan-world W[,W...]    world sizes to plan, e.g. 8,64,512 (a scaling table when several;\n"
"                               the first one in detail) [--gpus-per-node: one node]\n"
"      --plan-tp N[,N...]       one row per TP degree at one world size, e.g. 1,2,4,8 (TP x DP = world;\n"
"                               a degree that does not divide the world, the node or the model is\n"
"                               skipped with a note); --plan with --tp N alone plans that run\n"
"      --sim-device NAME|FILE   a100-40, a100-80, h100, h200, b200, cpu, or a KEY=VALUE profile file\n"
"                               (README: Planning a run) [h100]\n"
"      --gpus-per-node N        ranks per node: a group within one node uses NVLink, else the network [8]\n"
"      --calibrate-from LOG     print, instead of the plan, a --sim-device profile file calibrated on a\n"
"                               real run's --profile-step table (LOG: that run's output; give --plan\n"
"                               the run's flags and world size): each kernel group's time scaled to\n"
"                               what was measured (matmuls, vector kernels, optimizer), and the\n"
"                               efficiency of the attention that ran set to what it took\n"
"signals\n"
"      SIGUSR1 or SIGTERM: every rank finishes the current step, a checkpoint is saved (needs -o or\n"
"      --ckpt-dir), and the job exits with status 75; rerun with --resume auto to continue. Before\n"
"      the first step (setup: nothing to save yet) either ends the process at once, with status\n"
"      128 + the signal (143 for SIGTERM, 138 for SIGUSR1). So does a rank that a stop signal finds\n"
"      blocked in a collective, once it has waited there a quarter of --comm-timeout (at most 10 s:\n"
"      its peer is gone). A rank whose launcher (mpirun, srun, launch_local.sh) dies exits at once\n"
"      and commits nothing more.\n"
"  -h, --help                   this text\n");
}

static int parse_long(const char* flag, const char* s, long lo, long hi, long* out, ParseError* e) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0') { snprintf(e->msg, sizeof(e->msg), "%s: expected an integer, got '%s'", flag, s); return 1; }
    if (v < lo || v > hi) { snprintf(e->msg, sizeof(e->msg), "%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi); return 1; }
    *out = v;
    return 0;
}

static int parse_int(const char* flag, const char* s, long lo, long hi, int* out, ParseError* e) {
    long v;
    if (parse_long(flag, s, lo, hi, &v, e)) return 1;
    *out = (int)v;
    return 0;
}

static int parse_float(const char* flag, const char* s, double lo, double hi, float* out, ParseError* e) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v)) { snprintf(e->msg, sizeof(e->msg), "%s: expected a number, got '%s'", flag, s); return 1; }
    if (v < lo || v > hi) { snprintf(e->msg, sizeof(e->msg), "%s: %.9g is out of range [%.9g, %.9g]", flag, v, lo, hi); return 1; }
    *out = (float)v;
    return 0;
}

enum {
    OPT_LAYERS = 1000, OPT_CHANNELS, OPT_HEADS, OPT_MAX_SEQ, OPT_SAVE_MODEL, OPT_SEED, OPT_LR_DECAY,
    OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_GRAD_CLIP, OPT_VAL_STEPS, OPT_TOP_K, OPT_TEMPERATURE,
    OPT_TOKENIZER_DIR, OPT_SHUFFLE, OPT_DEVICE, OPT_THREADS, OPT_UNIT_LAYERS, OPT_PREFETCH,
    OPT_RESHARD, OPT_NO_SYNC, OPT_SHARD_GROUP, OPT_CKPT_EVERY, OPT_CKPT_DIR, OPT_CKPT_KEEP,
    OPT_CKPT_COMPRESS, OPT_CKPT_ASYNC, OPT_RESUME, OPT_STOP_AT, OPT_RENDEZVOUS, OPT_RUN_ID,
    OPT_COMM_TIMEOUT, OPT_MAX_BAD_STEPS, OPT_PEAK_TFLOPS, OPT_COMM, OPT_REDUCE_DTYPE, OPT_ATTENTION,
    OPT_PROFILE_STEP, OPT_GELU_FUSION, OPT_RECOMPUTE, OPT_OFFLOAD, OPT_MATMUL_AUTOTUNE,
    OPT_PARAM_DTYPE, OPT_LOSS_SCALE, OPT_LOSS_SCALE_WINDOW,
    OPT_PLAN, OPT_PLAN_WORLD, OPT_SIM_DEVICE, OPT_GPUS_PER_NODE, OPT_CALIBRATE_FROM, OPT_TP, OPT_PLAN_TP,
    OPT_ARCH, OPT_KV_HEADS, OPT_FFN_DIM, OPT_ROPE_THETA, OPT_VOCAB, OPT_ROPE_FACTOR, OPT_ROPE_LOW, OPT_ROPE_HIGH,
    OPT_ROPE_ORIGINAL, OPT_NORM_EPS, OPT_TENSORBOARD, OPT_EVAL_DATA, OPT_EVAL_EVERY, OPT_EVAL_LOG, OPT_EVAL_ONLY,
    OPT_GENERATE,
};

int parse_options(int argc, char** argv, Options* o, ParseError* e) {
    memset(o, 0, sizeof(*o));
    o->train_data = DEFAULT_TRAIN_DATA;
    o->val_data = DEFAULT_VAL_DATA;
    o->model = NULL;
    o->batch_size = 4; o->seq_len = 1024; o->total_batch_tokens = -1; o->max_steps = -1;
    o->lr = 3e-4f; o->final_lr_frac = 0.1f; o->weight_decay = 0.1f;
    o->beta1 = 0.9f; o->beta2 = 0.95f; o->eps = 1e-8f; o->grad_clip = 1.0f;
    o->lr_decay = DECAY_COSINE;
    o->val_every = 20; o->val_steps = 20; o->eval_every = -1;
    o->sample_tokens = 64; o->top_k = 40; o->temperature = 1.0f;
    o->tokenizer_dir = NULL;
    o->seed = 1337;
    o->device = "auto";
    o->comm = "auto";
    o->attention = "auto";
    o->gelu_fusion = 2;
    o->matmul_autotune = -1;
    o->unit_layers = 1; o->prefetch = 1; o->reshard_after_forward = 1; o->tp = 1;
    o->ckpt.codec = CKPT_CODEC_RAW; o->ckpt.zstd_level = 3; o->ckpt.keep = 3;
    o->comm_timeout = 600.0f; o->max_bad_steps = 10;
    o->loss_scale = 65536.0f; o->loss_scale_window = 1000;
    o->sim_device = "h100"; o->gpus_per_node = 8;
    o->rope_theta = o->rope_factor = o->rope_low_freq_factor = o->rope_high_freq_factor = o->norm_eps = -1.0f;

    static const struct option longopts[] = {
        {"train-data", required_argument, 0, 'i'}, {"val-data", required_argument, 0, 'j'},
        {"output", required_argument, 0, 'o'}, {"model", required_argument, 0, 'm'},
        {"layers", required_argument, 0, OPT_LAYERS}, {"channels", required_argument, 0, OPT_CHANNELS},
        {"heads", required_argument, 0, OPT_HEADS}, {"max-seq", required_argument, 0, OPT_MAX_SEQ},
        {"arch", required_argument, 0, OPT_ARCH}, {"kv-heads", required_argument, 0, OPT_KV_HEADS},
        {"ffn-dim", required_argument, 0, OPT_FFN_DIM}, {"rope-theta", required_argument, 0, OPT_ROPE_THETA},
        {"vocab", required_argument, 0, OPT_VOCAB}, {"rope-factor", required_argument, 0, OPT_ROPE_FACTOR},
        {"rope-low-freq-factor", required_argument, 0, OPT_ROPE_LOW},
        {"rope-high-freq-factor", required_argument, 0, OPT_ROPE_HIGH},
        {"rope-original-max-pos", required_argument, 0, OPT_ROPE_ORIGINAL},
        {"norm-eps", required_argument, 0, OPT_NORM_EPS},
        {"init-from", required_argument, 0, 'e'}, {"save-model", required_argument, 0, OPT_SAVE_MODEL},
        {"seed", required_argument, 0, OPT_SEED}, {"tensorboard", required_argument, 0, OPT_TENSORBOARD},
        {"batch-size", required_argument, 0, 'b'}, {"seq-len", required_argument, 0, 't'},
        {"total-batch-tokens", required_argument, 0, 'd'}, {"max-steps", required_argument, 0, 'x'},
        {"lr", required_argument, 0, 'l'}, {"warmup-steps", required_argument, 0, 'u'},
        {"lr-decay", required_argument, 0, OPT_LR_DECAY}, {"final-lr-frac", required_argument, 0, 'q'},
        {"weight-decay", required_argument, 0, 'c'}, {"beta1", required_argument, 0, OPT_BETA1},
        {"beta2", required_argument, 0, OPT_BETA2}, {"eps", required_argument, 0, OPT_EPS},
        {"grad-clip", required_argument, 0, OPT_GRAD_CLIP},
        {"val-every", required_argument, 0, 'v'}, {"val-steps", required_argument, 0, OPT_VAL_STEPS},
        {"sample-every", required_argument, 0, 's'}, {"sample-tokens", required_argument, 0, 'g'},
        {"top-k", required_argument, 0, OPT_TOP_K}, {"temperature", required_argument, 0, OPT_TEMPERATURE},
        {"tokenizer-dir", required_argument, 0, OPT_TOKENIZER_DIR},
        {"eval-data", required_argument, 0, OPT_EVAL_DATA}, {"eval-every", required_argument, 0, OPT_EVAL_EVERY},
        {"eval-log", required_argument, 0, OPT_EVAL_LOG}, {"eval-only", no_argument, 0, OPT_EVAL_ONLY},
        {"generate", required_argument, 0, OPT_GENERATE},
        {"shuffle", required_argument, 0, OPT_SHUFFLE}, {"device", required_argument, 0, OPT_DEVICE},
        {"threads", required_argument, 0, OPT_THREADS},
        {"fsdp-unit-layers", required_argument, 0, OPT_UNIT_LAYERS},
        {"prefetch", required_argument, 0, OPT_PREFETCH},
        {"reshard-after-forward", required_argument, 0, OPT_RESHARD},
        {"no-grad-sync-until-last", no_argument, 0, OPT_NO_SYNC},
        {"shard-group-size", required_argument, 0, OPT_SHARD_GROUP}, {"tp", required_argument, 0, OPT_TP},
        {"ckpt-every", required_argument, 0, OPT_CKPT_EVERY}, {"ckpt-dir", required_argument, 0, OPT_CKPT_DIR},
        {"ckpt-keep", required_argument, 0, OPT_CKPT_KEEP}, {"ckpt-compress", required_argument, 0, OPT_CKPT_COMPRESS},
        {"ckpt-async", required_argument, 0, OPT_CKPT_ASYNC}, {"resume", required_argument, 0, OPT_RESUME},
        {"stop-at-step", required_argument, 0, OPT_STOP_AT},
        {"rendezvous", required_argument, 0, OPT_RENDEZVOUS}, {"run-id", required_argument, 0, OPT_RUN_ID},
        {"comm-timeout", required_argument, 0, OPT_COMM_TIMEOUT},
        {"max-bad-steps", required_argument, 0, OPT_MAX_BAD_STEPS},
        {"profile-step", required_argument, 0, OPT_PROFILE_STEP},
        {"peak-tflops", required_argument, 0, OPT_PEAK_TFLOPS},
        {"comm", required_argument, 0, OPT_COMM}, {"reduce-dtype", required_argument, 0, OPT_REDUCE_DTYPE},
        {"param-dtype", required_argument, 0, OPT_PARAM_DTYPE}, {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
        {"loss-scale-window", required_argument, 0, OPT_LOSS_SCALE_WINDOW},
        {"attention", required_argument, 0, OPT_ATTENTION},
        {"gelu-fusion", required_argument, 0, OPT_GELU_FUSION},
        {"matmul-autotune", required_argument, 0, OPT_MATMUL_AUTOTUNE},
        {"recompute", required_argument, 0, OPT_RECOMPUTE}, {"offload", required_argument, 0, OPT_OFFLOAD},
        {"plan", no_argument, 0, OPT_PLAN}, {"plan-world", required_argument, 0, OPT_PLAN_WORLD},
        {"sim-device", required_argument, 0, OPT_SIM_DEVICE}, {"gpus-per-node", required_argument, 0, OPT_GPUS_PER_NODE},
        {"calibrate-from", required_argument, 0, OPT_CALIBRATE_FROM}, {"plan-tp", required_argument, 0, OPT_PLAN_TP},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    opterr = 0;
    optind = 1;
    int ch, r = 0, val_given = 0;
    const char* plan_only = NULL;  // the first --plan-only flag given
    const char* scaler_flag = NULL;  // the first loss-scaling flag given (fp16 only)
    long seed = 0;
    while ((ch = getopt_long(argc, argv, ":i:j:o:m:e:b:t:d:x:l:u:q:c:v:s:g:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'i': o->train_data = optarg; break;
        case 'j': o->val_data = optarg; val_given = 1; break;
        case 'o': o->output_dir = optarg; break;
        case OPT_TENSORBOARD:
            o->tensorboard = optarg;
            if (!optarg[0]) { snprintf(e->msg, sizeof(e->msg), "--tensorboard: a directory, or none"); r = 1; }
            break;
        case 'm': o->model = optarg; break;
        case OPT_LAYERS: r = parse_int("--layers", optarg, 1, 1000, &o->layers, e); break;
        case OPT_CHANNELS: r = parse_int("--channels", optarg, 1, 1 << 16, &o->channels, e); break;
        case OPT_HEADS: r = parse_int("--heads", optarg, 1, 1024, &o->heads, e); break;
        case OPT_MAX_SEQ: r = parse_int("--max-seq", optarg, 1, MODEL_MAX_SEQ, &o->max_seq, e); break;
        case OPT_ARCH:
            if (!model_family_named(optarg)) {
                char names[128];
                model_family_names(0, names, sizeof(names));
                snprintf(e->msg, sizeof(e->msg), "--arch: unknown family '%s' (expected %s)", optarg, names);
                r = 1;
            }
            o->arch = optarg;
            break;
        case OPT_KV_HEADS: r = parse_int("--kv-heads", optarg, 1, 1024, &o->kv_heads, e); break;
        case OPT_FFN_DIM: r = parse_int("--ffn-dim", optarg, 1, LLAMA_MAX_FFN, &o->ffn_dim, e); break;
        case OPT_ROPE_THETA: r = parse_float("--rope-theta", optarg, 1.0001, 1e12, &o->rope_theta, e); break;
        case OPT_ROPE_FACTOR: r = parse_float("--rope-factor", optarg, 0.0, 1e5, &o->rope_factor, e); break;
        case OPT_ROPE_LOW: r = parse_float("--rope-low-freq-factor", optarg, 1e-6, 1e5, &o->rope_low_freq_factor, e); break;
        case OPT_ROPE_HIGH: r = parse_float("--rope-high-freq-factor", optarg, 1e-6, 1e5, &o->rope_high_freq_factor, e); break;
        case OPT_ROPE_ORIGINAL:
            r = parse_int("--rope-original-max-pos", optarg, 1, MODEL_MAX_SEQ, &o->rope_original_max_pos, e);
            break;
        case OPT_NORM_EPS:
            r = parse_float("--norm-eps", optarg, MODEL_MIN_NORM_EPS, MODEL_MAX_NORM_EPS, &o->norm_eps, e);
            break;
        case OPT_VOCAB: r = parse_int("--vocab", optarg, 1, MODEL_MAX_VOCAB - VOCAB_PAD_MULTIPLE, &o->vocab, e); break;
        case 'e': o->init_from = optarg; break;
        case OPT_SAVE_MODEL: o->save_model = optarg; break;
        case OPT_SEED: r = parse_long("--seed", optarg, 0, LONG_MAX, &seed, e); o->seed = (uint64_t)seed; break;
        case 'b': r = parse_int("--batch-size", optarg, 1, 1 << 20, &o->batch_size, e); break;
        case 't': r = parse_int("--seq-len", optarg, 1, 1 << 20, &o->seq_len, e); break;
        case 'd': r = parse_long("--total-batch-tokens", optarg, 1, LONG_MAX, &o->total_batch_tokens, e); break;
        case 'x': r = parse_int("--max-steps", optarg, -1, INT32_MAX, &o->max_steps, e); break;
        case 'l': r = parse_float("--lr", optarg, 0.0, 10.0, &o->lr, e); break;
        case 'u': r = parse_int("--warmup-steps", optarg, 0, INT32_MAX, &o->warmup_steps, e); break;
        case OPT_LR_DECAY:
            if (!strcmp(optarg, "cosine")) o->lr_decay = DECAY_COSINE;
            else if (!strcmp(optarg, "linear")) o->lr_decay = DECAY_LINEAR;
            else if (!strcmp(optarg, "constant")) o->lr_decay = DECAY_CONSTANT;
            else { snprintf(e->msg, sizeof(e->msg), "--lr-decay: expected cosine, linear or constant, got '%s'", optarg); r = 1; }
            break;
        case 'q': r = parse_float("--final-lr-frac", optarg, 0.0, 1.0, &o->final_lr_frac, e); break;
        case 'c': r = parse_float("--weight-decay", optarg, 0.0, 10.0, &o->weight_decay, e); break;
        case OPT_BETA1: r = parse_float("--beta1", optarg, 0.0, 0.999999, &o->beta1, e); break;
        case OPT_BETA2: r = parse_float("--beta2", optarg, 0.0, 0.999999, &o->beta2, e); break;
        case OPT_EPS: r = parse_float("--eps", optarg, 1e-30, 1.0, &o->eps, e); break;
        case OPT_GRAD_CLIP: r = parse_float("--grad-clip", optarg, 0.0, 1e9, &o->grad_clip, e); break;
        case 'v': r = parse_int("--val-every", optarg, 0, INT32_MAX, &o->val_every, e); break;
        case OPT_VAL_STEPS: r = parse_int("--val-steps", optarg, 1, 1 << 20, &o->val_steps, e); break;
        case 's': r = parse_int("--sample-every", optarg, 0, INT32_MAX, &o->sample_every, e); break;
        case 'g': r = parse_int("--sample-tokens", optarg, 1, 1 << 20, &o->sample_tokens, e); break;
        case OPT_TOP_K: r = parse_int("--top-k", optarg, 1, 1 << 20, &o->top_k, e); break;
        case OPT_EVAL_DATA: o->eval_data = optarg; break;
        case OPT_EVAL_EVERY: r = parse_int("--eval-every", optarg, 0, INT32_MAX, &o->eval_every, e); break;
        case OPT_EVAL_LOG: o->eval_log = optarg; break;
        case OPT_EVAL_ONLY: o->eval_only = 1; break;
        case OPT_GENERATE: o->generate = optarg; break;
        case OPT_TEMPERATURE: r = parse_float("--temperature", optarg, 1e-3, 100.0, &o->temperature, e); break;
        case OPT_TOKENIZER_DIR: o->tokenizer_dir = optarg; break;
        case OPT_SHUFFLE: r = parse_int("--shuffle", optarg, 0, 1, &o->shuffle, e); break;
        case OPT_DEVICE:
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                snprintf(e->msg, sizeof(e->msg), "--device: expected auto, cpu or cuda, got '%s'", optarg); r = 1;
            }
            o->device = optarg;
            break;
        case OPT_THREADS: r = parse_int("--threads", optarg, 1, 4096, &o->threads, e); break;
        case OPT_UNIT_LAYERS: r = parse_int("--fsdp-unit-layers", optarg, 1, 1000, &o->unit_layers, e); break;
        case OPT_PREFETCH: r = parse_int("--prefetch", optarg, 0, 1000, &o->prefetch, e); break;
        case OPT_RESHARD: r = parse_int("--reshard-after-forward", optarg, 0, 1, &o->reshard_after_forward, e); break;
        case OPT_NO_SYNC: o->no_grad_sync_until_last = 1; break;
        case OPT_SHARD_GROUP: r = parse_int("--shard-group-size", optarg, 1, 1 << 20, &o->shard_group_size, e); break;
        case OPT_TP: r = parse_int("--tp", optarg, 1, PLAN_MAX_TP, &o->tp, e); break;
        case OPT_CKPT_EVERY: r = parse_int("--ckpt-every", optarg, 0, INT32_MAX, &o->ckpt_every, e); break;
        case OPT_CKPT_DIR: o->ckpt_dir = optarg; break;
        case OPT_CKPT_KEEP: r = parse_int("--ckpt-keep", optarg, 1, 1 << 20, &o->ckpt.keep, e); break;
        case OPT_CKPT_COMPRESS:
            if (!strcmp(optarg, "none")) o->ckpt.codec = CKPT_CODEC_RAW;
            else if (!strcmp(optarg, "zstd")) o->ckpt.codec = CKPT_CODEC_ZSTD;
            else if (!strncmp(optarg, "zstd:", 5)) {
                o->ckpt.codec = CKPT_CODEC_ZSTD;
                r = parse_int("--ckpt-compress zstd:LEVEL", optarg + 5, 1, 19, &o->ckpt.zstd_level, e);
            } else { snprintf(e->msg, sizeof(e->msg), "--ckpt-compress: expected none, zstd or zstd:LEVEL, got '%s'", optarg); r = 1; }
            break;
        case OPT_CKPT_ASYNC: r = parse_int("--ckpt-async", optarg, 0, 1, &o->ckpt.async, e); break;
        case OPT_RESUME: o->resume = optarg; break;
        case OPT_STOP_AT: r = parse_int("--stop-at-step", optarg, 1, INT32_MAX, &o->stop_at_step, e); break;
        case OPT_RENDEZVOUS:
            if (strncmp(optarg, "file:", 5) && strncmp(optarg, "tcp://", 6)) {
                snprintf(e->msg, sizeof(e->msg), "--rendezvous: expected file:DIR or tcp://HOST:PORT, got '%s'", optarg); r = 1;
            } else if (!optarg[optarg[0] == 'f' ? 5 : 6]) {
                snprintf(e->msg, sizeof(e->msg), "--rendezvous %s: the %s is missing", optarg, optarg[0] == 'f' ? "directory" : "address"); r = 1;
            }
            o->rendezvous = optarg;
            break;
        case OPT_RUN_ID:
            if (!*optarg || strchr(optarg, '/')) { snprintf(e->msg, sizeof(e->msg), "--run-id: '%s' must be non-empty and without '/'", optarg); r = 1; }
            o->run_id = optarg;
            break;
        case OPT_COMM_TIMEOUT: r = parse_float("--comm-timeout", optarg, 1.0, 1e7, &o->comm_timeout, e); break;
        case OPT_MAX_BAD_STEPS: r = parse_int("--max-bad-steps", optarg, 1, INT32_MAX, &o->max_bad_steps, e); break;
        case OPT_PROFILE_STEP: r = parse_int("--profile-step", optarg, 0, INT32_MAX, &o->profile_step, e); break;
        case OPT_PEAK_TFLOPS: r = parse_float("--peak-tflops", optarg, 1e-6, 1e7, &o->peak_tflops, e); break;
        case OPT_COMM:
            if (strcmp(optarg, "nccl") && strcmp(optarg, "mpi")) {
                snprintf(e->msg, sizeof(e->msg), "--comm: expected nccl or mpi, got '%s'", optarg); r = 1;
            }
            o->comm = optarg;
            if (!o->cuda_only_flag) o->cuda_only_flag = "--comm";
            break;
        case OPT_REDUCE_DTYPE:
            if (!o->cuda_only_flag) o->cuda_only_flag = "--reduce-dtype";
            if (!strcmp(optarg, "fp32")) o->reduce_fp32 = 1;
            else if (!strcmp(optarg, "bf16")) o->reduce_fp32 = 0;
            else { snprintf(e->msg, sizeof(e->msg), "--reduce-dtype: expected bf16 or fp32, got '%s'", optarg); r = 1; }
            break;
        case OPT_PARAM_DTYPE:
            if (!strcmp(optarg, "fp16")) o->param_fp16 = 1;
            else if (!strcmp(optarg, "bf16")) o->param_fp16 = 0;
            else { snprintf(e->msg, sizeof(e->msg), "--param-dtype: expected bf16 or fp16, got '%s'", optarg); r = 1; }
            if (o->param_fp16 && !o->cuda_only_flag) o->cuda_only_flag = "--param-dtype fp16";
            break;
        case OPT_LOSS_SCALE:
            r = parse_float("--loss-scale", optarg, 1.0, 16777216.0, &o->loss_scale, e);
            if (!scaler_flag) scaler_flag = "--loss-scale";
            break;
        case OPT_LOSS_SCALE_WINDOW:
            r = parse_int("--loss-scale-window", optarg, 0, INT_MAX, &o->loss_scale_window, e);
            if (!scaler_flag) scaler_flag = "--loss-scale-window";
            break;
        case OPT_ATTENTION:
            if (strcmp(optarg, "flash") && strcmp(optarg, "flash-pipelined") && strcmp(optarg, "cublas") &&
                strcmp(optarg, "cudnn") && strcmp(optarg, "auto")) {
                snprintf(e->msg, sizeof(e->msg), "--attention: expected flash, flash-pipelined, cublas, cudnn or auto, got '%s'",
                         optarg);
                r = 1;
            }
            o->attention = optarg;
            // auto is the default, the cpu device's too: only a choice of implementation is cuda's.
            if (strcmp(optarg, "auto") && !o->cuda_only_flag) o->cuda_only_flag = "--attention";
            break;
        case OPT_RECOMPUTE:
            if (!strcmp(optarg, "none")) o->recompute = 0;
            else if (!strcmp(optarg, "selective")) o->recompute = 1;
            else if (!strcmp(optarg, "full")) o->recompute = 2;
            else { snprintf(e->msg, sizeof(e->msg), "--recompute: expected none, selective or full, got '%s'", optarg); r = 1; }
            break;
        case OPT_OFFLOAD:
            if (!strcmp(optarg, "none")) o->offload = 0;
            else if (!strcmp(optarg, "optimizer")) o->offload = 1;
            else { snprintf(e->msg, sizeof(e->msg), "--offload: expected none or optimizer, got '%s'", optarg); r = 1; }
            if (o->offload && !o->cuda_only_flag) o->cuda_only_flag = "--offload optimizer";
            break;
        case OPT_GELU_FUSION:
            r = parse_int("--gelu-fusion", optarg, 0, 2, &o->gelu_fusion, e);
            if (!o->cuda_only_flag) o->cuda_only_flag = "--gelu-fusion";
            break;
        case OPT_MATMUL_AUTOTUNE:
            if (!strcmp(optarg, "auto")) o->matmul_autotune = -1;
            else if (strlen(optarg) == 1 && optarg[0] >= '0' && optarg[0] <= '2') o->matmul_autotune = optarg[0] - '0';
            else { snprintf(e->msg, sizeof(e->msg), "--matmul-autotune: expected auto, 0, 1 or 2, got '%s'", optarg); r = 1; }
            if (!o->cuda_only_flag) o->cuda_only_flag = "--matmul-autotune";
            break;
        // --plan
        case OPT_PLAN: o->plan = 1; break;
        case OPT_PLAN_WORLD: {
            int worlds[PLAN_MAX_WORLDS], n;
            r = plan_parse_world(optarg, worlds, &n, e->msg, sizeof(e->msg));
            o->plan_world = optarg;
            if (!plan_only) plan_only = "--plan-world";
            break;
        }
        case OPT_SIM_DEVICE: o->sim_device = optarg; if (!plan_only) plan_only = "--sim-device"; break;
        case OPT_GPUS_PER_NODE:
            r = parse_int("--gpus-per-node", optarg, 1, 4096, &o->gpus_per_node, e);
            if (!plan_only) plan_only = "--gpus-per-node";
            break;
        case OPT_CALIBRATE_FROM: o->calibrate_from = optarg; if (!plan_only) plan_only = "--calibrate-from"; break;
        case OPT_PLAN_TP: {
            int tps[PLAN_MAX_WORLDS], n;
            r = plan_parse_tp(optarg, tps, &n, e->msg, sizeof(e->msg));
            o->plan_tp = optarg;
            if (!plan_only) plan_only = "--plan-tp";
            break;
        }
        case 'h': return 2;
        case ':': snprintf(e->msg, sizeof(e->msg), "%s needs a value", argv[optind - 1]); return 1;
        default: snprintf(e->msg, sizeof(e->msg), "unknown option '%s'", argv[optind - 1]); return 1;
        }
        if (r) return 1;
    }
    if (optind < argc) { snprintf(e->msg, sizeof(e->msg), "unexpected argument '%s'", argv[optind]); return 1; }
    if (plan_only && !o->plan) { snprintf(e->msg, sizeof(e->msg), "%s applies to --plan only", plan_only); return 1; }
    if (scaler_flag && !o->param_fp16) {
        snprintf(e->msg, sizeof(e->msg), "%s applies to --param-dtype fp16 only (bf16 needs no loss scaling)", scaler_flag);
        return 1;
    }
    if (o->plan_tp && o->tp > 1) {
        snprintf(e->msg, sizeof(e->msg), "--plan-tp with --tp %d: --plan-tp plans each degree it lists; give one of them", o->tp);
        return 1;
    }
    if (o->plan_tp && o->calibrate_from) {
        snprintf(e->msg, sizeof(e->msg), "--plan-tp with --calibrate-from: a calibration reads one run's table; give that run's --tp");
        return 1;
    }
    if (o->param_fp16 && o->offload) {
        snprintf(e->msg, sizeof(e->msg), "--param-dtype fp16 with --offload optimizer is not supported yet (the loss "
                 "scaler runs with the GPU's optimizer): use one of them");
        return 1;
    }
    // The default validation shard belongs to the default training data: with other data
    // and no -j it would validate on Tiny Shakespeare (or fail on a file the user never named).
    // A run that does not train validates only on a -j it was given.
    if (!val_given && (strcmp(o->train_data, DEFAULT_TRAIN_DATA) != 0 || o->eval_only || o->generate)) o->val_data = NULL;
    const char* eval_flag = o->eval_every >= 0 ? "--eval-every" : o->eval_log ? "--eval-log" : NULL;
    if (eval_flag && !o->eval_data) {
        snprintf(e->msg, sizeof(e->msg), "%s applies with --eval-data FILE (a set in llm.c's eval format)", eval_flag);
        return 1;
    }
    if (o->eval_every < 0) o->eval_every = o->val_every;
    if (o->eval_only && !o->eval_data && !o->val_data) {
        snprintf(e->msg, sizeof(e->msg), "--eval-only: nothing to evaluate: give --eval-data FILE and/or -j FILE");
        return 1;
    }
    if (o->plan && (o->eval_only || o->generate)) {
        snprintf(e->msg, sizeof(e->msg), "--plan plans a training run: %s does not apply", o->eval_only ? "--eval-only" : "--generate");
        return 1;
    }
    const char* train_flag = o->ckpt_every ? "--ckpt-every" : o->save_model ? "--save-model" : o->stop_at_step ? "--stop-at-step"
                             : o->sample_every ? "--sample-every" : NULL;
    if ((o->eval_only || o->generate) && train_flag) {
        snprintf(e->msg, sizeof(e->msg), "%s trains nothing: %s does not apply", o->eval_only ? "--eval-only" : "--generate",
                 train_flag);
        return 1;
    }
    return 0;
}

int check_batch_split(const Options* o, int world, ParseError* e) {
    // B, T <= 2^20 (parse_options) and world >= 1: B x T fits; x world may not.
    long bt = (long)o->batch_size * o->seq_len;
    if (world < 1 || bt > LONG_MAX / world) {
        snprintf(e->msg, sizeof(e->msg), "--batch-size %d x --seq-len %d x world size %d overflows the token count",
                 o->batch_size, o->seq_len, world);
        return 1;
    }
    long local = bt * world;
    long total = o->total_batch_tokens > 0 ? o->total_batch_tokens : local;
    if (total % local != 0) {
        snprintf(e->msg, sizeof(e->msg), "--total-batch-tokens %ld is not a multiple of batch-size x seq-len x world size (%d x %d x %d = %ld)",
                 total, o->batch_size, o->seq_len, world, local);
        return 1;
    }
    // The accumulation count is an int (and the loop runs it): more would wrap around.
    if (total / local > INT_MAX) {
        snprintf(e->msg, sizeof(e->msg), "--total-batch-tokens %ld needs %ld accumulation steps of batch-size x seq-len x world size "
                 "(%d x %d x %d = %ld), more than %d", total, total / local, o->batch_size, o->seq_len, world, local, INT_MAX);
        return 1;
    }
    return 0;
}

void batch_split(const Options* o, int world, long* total_tokens, int* grad_accum) {
    long local = (long)o->batch_size * o->seq_len * world;
    *total_tokens = o->total_batch_tokens > 0 ? o->total_batch_tokens : local;
    *grad_accum = (int)(*total_tokens / local);
}

// Tensor parallelism against the model (the flags alone: parse_options): the model splits evenly
// (model_tp_check), and so does the sequence (a sampled row is padded within T). Non-zero with
// the message in m.
static int check_tp_flags(const Options* o, const ModelConfig* c, char* m, size_t n) {
    if (model_tp_check(c, o->tp, m, n)) return 1;
    if (o->seq_len % o->tp == 0) return 0;
    snprintf(m, n, "--tp %d does not divide -t %d (sequence parallel splits each micro-batch's positions)", o->tp, o->seq_len);
    return 1;
}

int check_run_flags(const Options* o, const ModelConfig* c, int world, const char* device, const char* why, ParseError* e) {
    char* m = e->msg;
    const size_t n = sizeof(e->msg);
    const int plan = device && !strcmp(device, "sim");
    ParseError split;
    // The data-parallel size: what the batch split and the shard groups count (tp divides the
    // world first). --plan-tp's rows check their own degree (plan.c) and pass o with it.
    const int tp = o->tp > 0 ? o->tp : 1, dp = world / tp;
    const long micro_tokens = (long)o->batch_size * o->seq_len;  // each at most 2^20 (parse_options)
    if (micro_tokens > INT_MAX) {  // a micro-batch's positions are counted in an int (the kernels' N)
        snprintf(m, n, "--batch-size %d x --seq-len %d = %ld tokens per micro-batch, more than %d (the kernels count a "
                 "micro-batch's tokens in an int): use a smaller -b and more accumulation steps (-d)", o->batch_size,
                 o->seq_len, micro_tokens, INT_MAX);
    } else if (world > 0 && world % tp != 0) {
        if (plan) snprintf(m, n, "--plan at world size %d: --tp %d does not divide it", world, tp);
        else snprintf(m, n, "--tp %d does not divide the world size %d", tp, world);
    } else if (world > 0 && check_batch_split(o, dp, &split)) {  // the batch split: before anything divides by it
        char dp_note[64] = "";  // check_batch_split's "world size" is the data-parallel size
        if (tp > 1) snprintf(dp_note, sizeof(dp_note), " (the data-parallel size: world / --tp %d)", tp);
        if (plan) snprintf(m, n, "--plan at world size %d: %s%s", world, split.msg, dp_note);
        else snprintf(m, n, "%s%s", split.msg, dp_note);
    } else if (o->seq_len > c->max_seq_len) {
        snprintf(m, n, "--seq-len %d exceeds the model's %d positions (--max-seq)", o->seq_len, c->max_seq_len);
    } else if (world > 0 && o->shard_group_size && dp % o->shard_group_size != 0) {
        char size[96];  // what it counts: the world, or with --tp its data-parallel ranks
        if (tp > 1) snprintf(size, sizeof(size), "the data-parallel size %d (world %d / --tp %d)", dp, world, tp);
        else snprintf(size, sizeof(size), "the world size %d", world);
        if (plan) snprintf(m, n, "--plan at world size %d: --shard-group-size %d does not divide %s", world, o->shard_group_size,
                           tp > 1 ? size : "it");
        else snprintf(m, n, "--shard-group-size %d does not divide %s", o->shard_group_size, size);
    } else if (plan) {
        return 0;
    } else if (!device) {
        snprintf(m, n, "--device cuda: %s; use --device cpu", why);
    } else if (strcmp(device, "cuda") && o->cuda_only_flag) {
        snprintf(m, n, "%s applies to the cuda device only, and this run is on the cpu device (%s)", o->cuda_only_flag, why);
    } else if (!strcmp(device, "cuda") && c->channels % 8 != 0) {  // 128-bit row kernels
        snprintf(m, n, "--device cuda needs --channels to be a multiple of 8, got %d", c->channels);
    } else if (o->save_model && !llmc_has_layout(c)) {  // refused before training, not after it
        snprintf(m, n, "--save-model writes llm.c's GPT-2 model file, which has no %s layout: keep a %s "
                 "model with --ckpt-every and -o or --ckpt-dir (sharded checkpoints)", model_family(c)->title,
                 model_family(c)->title);
    } else if (o->tp > 1 && check_tp_flags(o, c, m, n)) {
        return 1;
    } else if (o->save_model && c->norm_eps != MODEL_DEFAULT_NORM_EPS) {
        snprintf(m, n, "--save-model writes llm.c's GPT-2 model file, which has no field for the norm epsilon, and this "
                 "model's is %g (not 1e-5): keep it with --ckpt-every and -o or --ckpt-dir (sharded checkpoints)",
                 (double)c->norm_eps);
    } else {
        return 0;
    }
    return 1;
}

FsdpConfig run_fsdp_config(const Options* o) {
    FsdpConfig c = {o->prefetch, o->reshard_after_forward, !o->no_grad_sync_until_last, o->offload,
                    o->param_fp16 ? o->loss_scale : 0.0f, o->param_fp16 ? o->loss_scale_window : 0};
    return c;
}

DeviceOptions run_device_options(const Options* o, int cuda) {
    DeviceOptions d = {cuda, o->comm, o->reduce_fp32, o->attention, o->gelu_fusion, o->seed, (Recompute)o->recompute,
                       o->matmul_autotune, o->param_fp16, NULL, NULL, 0};
    return d;
}

int set_threads(const Options* o, int local_world) {
    int threads = o->threads;
    if (!threads) {
        const char* env = getenv("OMP_NUM_THREADS");
        threads = env && atoi(env) > 0 ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN) / local_world;
        if (threads < 1) threads = 1;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    return threads;
}

// ---- the model: the flags', or that of what a run loads (a checkpoint, an --init-from file)

// The model flags: each sets one field of the config (its place in Options and in ModelConfig).
// A whole number not given is 0, a float not given < 0 (parse_options' defaults). In the order
// messages name them.
typedef struct {
    const char* flag;
    size_t opt, cfg;
    int is_float;
} ModelFlag;
static const ModelFlag model_flags[] = {
    {"--layers", offsetof(Options, layers), offsetof(ModelConfig, num_layers), 0},
    {"--channels", offsetof(Options, channels), offsetof(ModelConfig, channels), 0},
    {"--heads", offsetof(Options, heads), offsetof(ModelConfig, num_heads), 0},
    {"--kv-heads", offsetof(Options, kv_heads), offsetof(ModelConfig, num_kv_heads), 0},
    {"--ffn-dim", offsetof(Options, ffn_dim), offsetof(ModelConfig, ffn_dim), 0},
    {"--vocab", offsetof(Options, vocab), offsetof(ModelConfig, vocab_size), 0},
    {"--max-seq", offsetof(Options, max_seq), offsetof(ModelConfig, max_seq_len), 0},
    {"--rope-theta", offsetof(Options, rope_theta), offsetof(ModelConfig, rope_theta), 1},
    {"--rope-factor", offsetof(Options, rope_factor), offsetof(ModelConfig, rope_factor), 1},
    {"--rope-low-freq-factor", offsetof(Options, rope_low_freq_factor), offsetof(ModelConfig, rope_low_freq_factor), 1},
    {"--rope-high-freq-factor", offsetof(Options, rope_high_freq_factor), offsetof(ModelConfig, rope_high_freq_factor), 1},
    {"--rope-original-max-pos", offsetof(Options, rope_original_max_pos), offsetof(ModelConfig, rope_original_max_pos), 0},
    {"--norm-eps", offsetof(Options, norm_eps), offsetof(ModelConfig, norm_eps), 1},
};
#define N_MODEL_FLAGS ((int)(sizeof(model_flags) / sizeof(model_flags[0])))

// Whether flag f was given, and its value (a double holds every int and float exactly).
static int flag_given(const Options* o, const ModelFlag* f, double* v) {
    const char* p = (const char*)o + f->opt;
    *v = f->is_float ? (double)*(const float*)p : (double)*(const int*)p;
    return f->is_float ? *v >= 0.0 : *v != 0.0;
}
static double config_get(const ModelConfig* c, const ModelFlag* f) {
    const char* p = (const char*)c + f->cfg;
    return f->is_float ? (double)*(const float*)p : (double)*(const int*)p;
}
static void config_set(ModelConfig* c, const ModelFlag* f, double v) {
    char* p = (char*)c + f->cfg;
    if (f->is_float) *(float*)p = (float)v;
    else *(int*)p = (int)v;
}
// A field's value as a message shows it.
static void value_text(const ModelFlag* f, double v, char* out, size_t n) {
    if (f->is_float) snprintf(out, n, "%g", v);
    else snprintf(out, n, "%.0f", v);
}
// Whether a family's model has the field: the common ones, or one of its config keys.
static int family_has_field(const ModelFamily* fam, size_t cfg) {
    return cfg == offsetof(ModelConfig, num_layers) || cfg == offsetof(ModelConfig, channels) ||
           cfg == offsetof(ModelConfig, num_heads) || cfg == offsetof(ModelConfig, vocab_size) ||
           cfg == offsetof(ModelConfig, max_seq_len) || family_has_config(fam, cfg);
}

// A preset by name (-m), or an error naming the presets.
static int flag_preset(const char* name, ModelConfig* c, ParseError* e) {
    if (!preset_config(name, c)) return 0;
    snprintf(e->msg, sizeof(e->msg), "--model: unknown preset '%s' (expected d1 ... d48, e.g. d12, or llama3:tiny, "
             "llama3:1b, llama3:3b, llama3:8b)", name);
    return 1;
}

// What the flags say of a config that do not fit each other (the same checks whatever the
// model came from): heads, kv heads, RoPE's pairs, the RoPE scaling flags (which mean nothing
// without --rope-factor > 1: `scaling_given` says whether one of them set c), then
// model_config_check. 0, or 1 with the error in e.
static int check_model(const Options* o, const ModelConfig* c, int scaling_given, const char* what, ParseError* e) {
    const ModelFamily* fam = model_family(c);
    char* m = e->msg;
    const size_t n = sizeof(e->msg);
    const char* bad;
    if (c->channels % c->num_heads != 0)
        snprintf(m, n, "--channels %d is not a multiple of --heads %d", c->channels, c->num_heads);
    else if (c->num_kv_heads && c->num_heads % c->num_kv_heads != 0)
        snprintf(m, n, "--kv-heads %d does not divide --heads %d", c->num_kv_heads, c->num_heads);
    else if (fam->rope && (c->channels / c->num_heads) % 2 != 0)
        snprintf(m, n, "--channels %d / --heads %d is an odd head size: RoPE rotates pairs", c->channels, c->num_heads);
    else if (scaling_given && !(c->rope_factor > 1.0f))
        snprintf(m, n, "--rope-low-freq-factor, --rope-high-freq-factor and --rope-original-max-pos apply to RoPE scaling "
                 "(--rope-factor > 1), and this model's factor is %g", (double)c->rope_factor);
    else if (c->rope_factor > 1.0f && !(c->rope_low_freq_factor < c->rope_high_freq_factor))
        snprintf(m, n, "RoPE scaling needs --rope-low-freq-factor %g below --rope-high-freq-factor %g",
                 (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor);
    else if ((bad = model_config_check(c)) != NULL)
        snprintf(m, n, "%s: %s", what, bad);
    else
        return 0;
    return 1;
}

static int is_scaling_flag(const ModelFlag* f) {
    return f->cfg == offsetof(ModelConfig, rope_low_freq_factor) || f->cfg == offsetof(ModelConfig, rope_high_freq_factor) ||
           f->cfg == offsetof(ModelConfig, rope_original_max_pos);
}

int resolve_config(const Options* o, ModelConfig* c, int* file_version, char* notes, size_t notes_len, ParseError* e) {
    memset(c, 0, sizeof(*c));
    notes[0] = '\0';
    if (o->init_from) {
        ModelConfig file;
        if (read_model_header(o->init_from, &file, file_version, e->msg, sizeof(e->msg))) return 1;
        char source[PATH_MAX + 16];
        snprintf(source, sizeof(source), "--init-from %s", o->init_from);
        return merge_loaded_config(o, &file, source, "the file's", c, notes, notes_len, e);
    }
    // --arch without -m starts from the family's default preset.
    const char* preset = o->model ? o->model : model_family_named(o->arch ? o->arch : "gpt2")->default_preset;
    if (flag_preset(preset, c, e)) return 1;
    const ModelFamily* fam = model_family(c);
    if (o->arch && model_family_named(o->arch) != fam) {
        snprintf(e->msg, sizeof(e->msg), "--arch %s contradicts --model %s (a %s preset)", o->arch, preset, fam->name);
        return 1;
    }
    int scaling_given = 0;
    for (int i = 0; i < N_MODEL_FLAGS; i++) {
        const ModelFlag* f = &model_flags[i];
        double v;
        if (!flag_given(o, f, &v)) continue;
        if (!family_has_field(fam, f->cfg)) {  // a flag of another family's field
            const ModelFamily* owner = NULL;
            for (int a = 0; a < NUM_ARCHS && !owner; a++)
                if (family_has_field(model_family_at(a), f->cfg)) owner = model_family_at(a);
            snprintf(e->msg, sizeof(e->msg), "%s is not a %s setting: give --arch %s or a %s preset", f->flag, fam->title,
                     owner->name, owner->name);
            return 1;
        }
        config_set(c, f, v);
        scaling_given |= is_scaling_flag(f);
    }
    // Other heads than the preset's, without --kv-heads: plain attention where the preset's
    // kv heads no longer divide them.
    if (!o->kv_heads && c->num_kv_heads && o->heads && c->num_heads % c->num_kv_heads != 0) c->num_kv_heads = c->num_heads;
    c->padded_vocab_size = pad_vocab(c->vocab_size);
    return check_model(o, c, scaling_given, "the model shape", e);
}

int merge_loaded_config(const Options* o, const ModelConfig* loaded, const char* source, const char* whose, ModelConfig* c,
                        char* notes, size_t notes_len, ParseError* e) {
    *c = *loaded;
    notes[0] = '\0';
    const ModelFamily* fam = model_family(loaded);
    // -m names a whole model: its family and, where the loaded model's weights fix a field, the
    // preset's value, which must be loaded's as a flag's must (a flag given beside it wins).
    ModelConfig preset;
    const ModelFamily* preset_fam = NULL;
    if (o->model) {
        if (flag_preset(o->model, &preset, e)) return 1;
        preset_fam = model_family(&preset);
        if (o->arch && model_family_named(o->arch) != preset_fam) {
            snprintf(e->msg, sizeof(e->msg), "--arch %s contradicts --model %s (a %s preset)", o->arch, o->model,
                     preset_fam->name);
            return 1;
        }
    }
    char conflicts[sizeof(e->msg)] = "", by_preset[128] = "";
    if (o->model) snprintf(by_preset, sizeof(by_preset), " by -m %s", o->model);
    size_t at = 0;
    const ModelFamily* given_fam = o->arch ? model_family_named(o->arch) : preset_fam;
    if (given_fam && given_fam != fam)
        at += (size_t)snprintf(conflicts + at, sizeof(conflicts) - at, "--arch %s (given %s%s)", fam->name, given_fam->name,
                               o->arch ? "" : by_preset);
    int scaling_changed = 0;
    for (int i = 0; i < N_MODEL_FLAGS && at < sizeof(conflicts); i++) {
        const ModelFlag* f = &model_flags[i];
        double v;
        const char* by = "";
        if (!flag_given(o, f, &v)) {
            if (!preset_fam || !family_has_field(preset_fam, f->cfg) || !family_has_field(fam, f->cfg) ||
                !model_config_fixed(fam, f->cfg))
                continue;
            v = config_get(&preset, f);
            by = by_preset;
        }
        const char* sep = at ? ", " : "";
        char have[48], want[48];
        value_text(f, v, want, sizeof(want));
        if (!family_has_field(fam, f->cfg)) {
            at += (size_t)snprintf(conflicts + at, sizeof(conflicts) - at, "%s%s %s (not a %s setting)", sep, f->flag, want,
                                   fam->title);
            continue;
        }
        const double was = config_get(loaded, f);
        if ((f->is_float ? (double)(float)v : v) == was) continue;   // agrees
        value_text(f, was, have, sizeof(have));
        if (model_config_fixed(fam, f->cfg)) {
            at += (size_t)snprintf(conflicts + at, sizeof(conflicts) - at, "%s%s %s (given %s%s)", sep, f->flag, have, want, by);
            continue;
        }
        // A setting the weights do not fix: the flag changes it, and says so.
        config_set(c, f, v);
        scaling_changed |= is_scaling_flag(f);
        const size_t nat = strlen(notes);
        snprintf(notes + nat, notes_len - nat, "%s: %s %s replaces %s %s\n", source, f->flag, want, whose, have);
    }
    if (conflicts[0]) {
        snprintf(e->msg, sizeof(e->msg), "%s: %s model has %s", source, whose, conflicts);
        return 1;
    }
    char what[PATH_MAX + 64];
    snprintf(what, sizeof(what), "%s: %s model with the flags given", source, whose);
    return check_model(o, c, scaling_changed, what, e);
}

const char* run_tensorboard_dir(const Options* o, char* dir, size_t n) {
    if (o->tensorboard) snprintf(dir, n, "%s", strcmp(o->tensorboard, "none") ? o->tensorboard : "");
    else if (o->output_dir) snprintf(dir, n, "%s/tensorboard", o->output_dir);
    else dir[0] = '\0';
    return dir[0] ? dir : NULL;
}

void run_ckpt_root(const Options* o, char* root, size_t n) {
    if (o->ckpt_dir) snprintf(root, n, "%s", o->ckpt_dir);
    else if (o->output_dir) snprintf(root, n, "%s/ckpt", o->output_dir);
    else root[0] = '\0';
}

int find_resume_checkpoint(const Options* o, const char* root, char* path, size_t path_len, ModelConfig* saved,
                           ParseError* e) {
    char err[sizeof(e->msg) - 16];
    if (strcmp(o->resume, "auto") != 0) {
        if (ckpt_resolve(o->resume, path, path_len, err, sizeof(err))) {
            snprintf(e->msg, sizeof(e->msg), "--resume: %s", err);
            return -1;
        }
    } else if (!root[0]) {
        snprintf(e->msg, sizeof(e->msg), "--resume auto needs -o DIR or --ckpt-dir DIR");
        return -1;
    } else if (!ckpt_find_latest(root, path, path_len)) {
        return 0;
    }
    Ckpt c;
    int rc = ckpt_open(&c, path, err, sizeof(err));
    if (!rc) {
        rc = model_checkpoint_config(&c, saved, err, sizeof(err));
        ckpt_close(&c);
    }
    if (rc) {
        snprintf(e->msg, sizeof(e->msg), "--resume: %s", err);
        return -1;
    }
    return 1;
}

// Whether a and b are the same weights: the same family, and every field the weights fix equal.
static int same_weights(const ModelConfig* a, const ModelConfig* b) {
    const ModelFamily* fam = model_family(a);
    if (a->arch != b->arch || a->padded_vocab_size != b->padded_vocab_size) return 0;
    for (int i = 0; i < N_MODEL_FLAGS; i++) {
        const ModelFlag* f = &model_flags[i];
        if (family_has_field(fam, f->cfg) && model_config_fixed(fam, f->cfg) && config_get(a, f) != config_get(b, f)) return 0;
    }
    return 1;
}

int resume_config(const Options* o, char* path, size_t path_len, ModelConfig* c, int* file_version, char* notes,
                  size_t notes_len, ParseError* e) {
    char root[PATH_MAX];
    run_ckpt_root(o, root, sizeof(root));
    ModelConfig saved;
    const int found = find_resume_checkpoint(o, root, path, path_len, &saved, e);
    if (found < 0) return 1;
    if (!found) {
        path[0] = '\0';
        return resolve_config(o, c, file_version, notes, notes_len, e);
    }
    char source[PATH_MAX + 16];
    snprintf(source, sizeof(source), "--resume %s", path);
    if (merge_loaded_config(o, &saved, source, "the checkpoint's", c, notes, notes_len, e)) return 1;
    // The run an --init-from file started, resumed: the checkpoint's weights replace the file's,
    // which must be the same model.
    ModelConfig file;
    if (o->init_from && read_model_header(o->init_from, &file, file_version, e->msg, sizeof(e->msg))) return 1;
    if (o->init_from && !same_weights(&file, c)) {
        char a[256], b[256];
        model_describe(&file, 1, a, sizeof(a));
        model_describe(c, 1, b, sizeof(b));
        snprintf(e->msg, sizeof(e->msg), "--init-from %s holds %s, not the model of the checkpoint %s (%s) this run resumes",
                 o->init_from, a, path, b);
        return 1;
    }
    return 0;
}
