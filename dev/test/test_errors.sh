#!/usr/bin/env bash
# run_tests: cores 0.7, 57 s
# Bad input gets a clear one-line error naming the file or flag and a non-zero exit: never a
# crash, a hang or a silently wrong run. Also: shards that are FIFOs or shrink while training,
# batch splits beyond an int of accumulation steps, -j's default, the run-directory lock, and
# stop signals during setup (they end the process at once) and training (a checkpoint, 75).
# TRAIN_GPT names the binary (dev/test/test_asan.sh reruns this file with the sanitizer build).
set -u
source dev/test/lib.sh
out=$TEST_TMP
TRAIN_GPT=${TRAIN_GPT:-./train_gpt}
REPO=$(pwd)
case "$TRAIN_GPT" in /*) ;; *) TRAIN_GPT=$REPO/${TRAIN_GPT#./} ;; esac   # also from another cwd
tiny=(--device cpu --layers 1 --channels 32 --heads 2 --max-seq 32 -b 2 -t 16 -x 1 -v 0 --threads 1)
T=("$TRAIN_GPT" "${tiny[@]}")

# Malformed token shards, made on the spot.
$PYTHON - "$out" "$TRAIN_SHARD" <<'PY'
import struct, sys
d, good = sys.argv[1], sys.argv[2]
def shard(name, magic=20240520, version=1, count=None, tokens=range(100), token_fmt="H", extra=b""):
    toks = list(tokens)
    hdr = [0] * 256
    hdr[0], hdr[1], hdr[2] = magic, version, len(toks) if count is None else count
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack(f"<{len(toks)}{token_fmt}", *toks))
        f.write(extra)
shard("bad_magic.bin", magic=12345)
shard("bad_version.bin", version=2)
shard("count_too_big.bin", count=1000)
shard("trailing_bytes.bin", extra=b"\0\0\0\0")
shard("token_out_of_range.bin", tokens=[1, 2, 3] + [60000] * 50)
shard("too_short.bin", tokens=range(5))
shard("tail_out_of_range.bin", tokens=list(range(1000)) + [50257])  # past the last window
shard("short_val.bin", tokens=range(40))
with open(f"{d}/truncated_header.bin", "wb") as f:
    f.write(struct.pack("<10i", 20240520, 1, 5, *([0] * 7)))
# llm.c model files
hdr = [0] * 256
hdr[:8] = [20240326, 3, 32, 50257, 1, 2, 32, 50304]
with open(f"{d}/model_bad_magic.bin", "wb") as f:
    f.write(struct.pack("<256i", 1, *hdr[1:]))
with open(f"{d}/model_truncated.bin", "wb") as f:
    f.write(struct.pack("<256i", *hdr)); f.write(b"\0" * 4000)
hdr5 = list(hdr); hdr5[1] = 4
with open(f"{d}/model_bad_version.bin", "wb") as f:
    f.write(struct.pack("<256i", *hdr5))
# a whole model of zeros (the tiny shape: L 1, C 32, maxT 32, Vp 50304; GPT-2's tensor sizes)
L, C, maxT, Vp = 1, 32, 32, 50304
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
with open(f"{d}/model_ok.bin", "wb") as f:
    f.write(struct.pack("<256i", *hdr)); f.write(b"\0" * 4 * n)
PY

expect_error "missing training data"     "no files match '$out/nothing\*.bin'" "${T[@]}" -i "$out/nothing*.bin"
expect_error "bad shard magic"           "bad_magic.bin: bad magic 12345"      "${T[@]}" -i "$out/bad_magic.bin"
expect_error "bad shard version"         "bad_version.bin: unsupported version 2" "${T[@]}" -i "$out/bad_version.bin"
expect_error "shard count > file"        "count_too_big.bin: header says 1000 tokens" "${T[@]}" -i "$out/count_too_big.bin"
expect_error "shard with trailing bytes" "trailing_bytes.bin: .* more than"     "${T[@]}" -i "$out/trailing_bytes.bin"
expect_error "truncated shard header"    "truncated_header.bin: truncated header" "${T[@]}" -i "$out/truncated_header.bin"
expect_error "token out of vocabulary"   "token_out_of_range.bin: token 60000 at position 3 \(byte offset 1030\) is outside the vocabulary" "${T[@]}" -i "$out/token_out_of_range.bin"
# Every token is checked when the shard is opened, not when a batch reaches it: this one is
# the shard's last, which no window of 16+1 reads, and its validation shard is refused at
# startup too (before step 1).
expect_error "token out of vocabulary, where no batch reads" "tail_out_of_range.bin: token 50257 at position 1000 \(byte offset 3024\)" \
    "${T[@]}" -i "$out/tail_out_of_range.bin"
o=$("${T[@]}" -i "$TRAIN_SHARD" -j "$out/tail_out_of_range.bin" -v 1 2>&1); rc=$?
if [ $rc = 1 ] && grep -q -- "--val-data: .*tail_out_of_range.bin: token 50257 at position 1000" <<<"$o" && ! grep -q "^step" <<<"$o"; then
    ok "a validation shard's bad token stops the run before step 1"
else not_ok "a validation shard's bad token: status $rc: $(tail -n 2 <<<"$o" | tr '\n' ' ')"; fi
expect_error "shard shorter than T+1"    "no shard holds 17 tokens"             "${T[@]}" -i "$out/too_short.bin"
mkdir -p "$out/unreadable.bin"
expect_error "a directory as a shard"    "unreadable.bin: not a regular file \(a directory\)" "${T[@]}" -i "$out/unreadable.bin"
# A FIFO nobody writes: opening it for reading would block forever (timeout: a hang fails).
mkfifo "$out/fifo.bin"
expect_error "a FIFO as a shard"         "fifo.bin: not a regular file \(a FIFO\)" timeout 30 "${T[@]}" -i "$out/fifo.bin"
expect_error "a FIFO as a validation shard" "--val-data: .*fifo.bin: not a regular file \(a FIFO\)" \
    timeout 30 "${T[@]}" -i "$TRAIN_SHARD" -j "$out/fifo.bin" -v 1
expect_error "bad validation shard"      "--val-data: .*bad_magic.bin: bad magic" "${T[@]}" -i "$TRAIN_SHARD" -j "$out/bad_magic.bin" -v 1

init=("$TRAIN_GPT" --device cpu -b 2 -t 16 -x 1 -v 0 --threads 1 -i "$TRAIN_SHARD")
expect_error "missing model file"        "nope.bin: cannot open"               "${init[@]}" --init-from "$out/nope.bin"
# --init-from: the model is the file's; flags that agree are fine, others are refused, every one
# named in one line; --norm-eps (not in the weights, nor in llm.c's header) changes it.
if "${T[@]}" -i "$TRAIN_SHARD" --init-from "$out/model_ok.bin" > "$out/init_ok.log" 2>&1; then
    ok "--init-from with model flags that agree with the file trains"
else
    not_ok "--init-from with agreeing model flags: $(tail -n 2 "$out/init_ok.log" | tr '\n' ' ')"
fi
expect_error "--init-from with two conflicting flags: both named" \
    "--init-from .*model_ok\.bin: the file's model has --layers 1 \(given 2\), --channels 32 \(given 64\)" \
    "${init[@]}" --init-from "$out/model_ok.bin" --layers 2 --channels 64
if "${init[@]}" --init-from "$out/model_ok.bin" --norm-eps 1e-6 > "$out/init_eps.log" 2>&1 &&
   grep -q -- "model_ok.bin: --norm-eps 1e-06 replaces the file's 1e-05" "$out/init_eps.log" &&
   grep -q "^model: GPT-2, 1 layers, 2 heads, 32 channels, norm eps 1e-06" "$out/init_eps.log"; then
    ok "--init-from with --norm-eps 1e-6: the run says it replaces the file's 1e-5, and trains with it"
else
    not_ok "--init-from with --norm-eps 1e-6: $(grep -E 'replaces|^model|error' "$out/init_eps.log" | tr '\n' ' ')"
fi
expect_error "--save-model of a model with --norm-eps 1e-6 (llm.c's header has no field for it)" \
    "--save-model writes llm.c's GPT-2 model file, which has no field for the norm epsilon, and this model's is 1e-06" \
    "${T[@]}" -i "$TRAIN_SHARD" --norm-eps 1e-6 --save-model "$out/eps_model.bin"
[ -e "$out/eps_model.bin" ] && not_ok "--save-model refused, yet $out/eps_model.bin was written"
expect_error "model file bad magic"      "model_bad_magic.bin: bad magic 1"    "${init[@]}" --init-from "$out/model_bad_magic.bin"
expect_error "model file bad version"    "model_bad_version.bin: unsupported version 4" "${init[@]}" --init-from "$out/model_bad_version.bin"
expect_error "model file truncated"      "model_truncated.bin: .* bytes, but its header's model needs" "${init[@]}" --init-from "$out/model_truncated.bin"

expect_error "unknown flag"              "unknown option '--bogus'"            "${T[@]}" -i "$TRAIN_SHARD" --bogus
expect_error "flag without value"        "-b needs a value|--batch-size needs a value" "$TRAIN_GPT" --batch-size
expect_error "non-numeric value"         "--batch-size: expected an integer, got 'abc'" "${T[@]}" --batch-size abc
expect_error "out-of-range value"        "--batch-size: 0 is out of range"     "${T[@]}" -b 0
expect_error "bad float"                 "--lr: expected a number, got '1e-3x'" "${T[@]}" --lr 1e-3x
expect_error "--norm-eps 0"              "--norm-eps: 0 is out of range \[1e-30, 1\]" "${T[@]}" --norm-eps 0
expect_error "--norm-eps not a number"   "--norm-eps: expected a number, got 'small'" "${T[@]}" --norm-eps small
expect_error "--max-seq above 2^24"      "--max-seq: 16777217 is out of range \[1, 16777216\]" "${T[@]}" --max-seq 16777217
expect_error "--rope-original-max-pos 0" "--rope-original-max-pos: 0 is out of range" "${T[@]}" --rope-original-max-pos 0
expect_error "unknown preset"            "--model: unknown preset 'gpt5'"      "$TRAIN_GPT" --device cpu -m gpt5
expect_error "heads do not divide"       "--channels 30 is not a multiple of --heads 4" "$TRAIN_GPT" --device cpu --layers 1 --channels 30 --heads 4
expect_error "seq-len above max-seq"     "--seq-len 64 exceeds the model's 32 positions" "${T[@]}" -t 64
expect_error "batch does not divide"     "--total-batch-tokens 100 is not a multiple of batch-size x seq-len x world size \(2 x 16 x 1 = 32\)" "${T[@]}" -d 100
expect_error "bad device"                "--device: expected auto, cpu or cuda, got 'tpu'" "${T[@]}" --device tpu
expect_error "cuda device absent"        "--device cuda: "                     "${T[@]}" --device cuda
expect_error "bad lr decay"              "--lr-decay: expected cosine, linear or constant" "${T[@]}" --lr-decay step
expect_error "stray argument"            "unexpected argument 'extra'"         "${T[@]}" extra
expect_error "output dir not creatable"  "-o /proc/nope: cannot create"        "${T[@]}" -i "$TRAIN_SHARD" -o /proc/nope
# --val-steps beyond the validation data: clamped to the micro-batches it holds, said once
# (2^20 read 2^20 batches before step 1); fewer than one micro-batch is refused. The
# timeout only catches that old behaviour (hours): 300 s leaves room for test_asan's
# sanitized binary on a loaded machine (it ran past 120 s there).
o=$(timeout 300 "${T[@]}" -b 8 -t 32 -i "$TRAIN_SHARD" -j "$VAL_SHARD" -v 1 --val-steps 1048576 2>&1); rc=$?
if [ $rc = 0 ] && grep -qE -- "^--val-steps 1048576: the validation data holds [0-9]+ sequences of 32\+1 tokens, [0-9]+ micro-batch\(es\) of 8 x 1 rank\(s\): validating on those" <<<"$o" &&
   [ "$(grep -c '^val loss' <<<"$o")" = 2 ]; then
    ok "--val-steps 2^20: clamped to the validation data ($(grep -m1 -o 'holds .* of 8' <<<"$o"))"
else not_ok "--val-steps 2^20: status $rc: $(grep -m1 -- --val-steps <<<"$o") $(tail -n 2 <<<"$o" | tr '\n' ' ')"; fi
expect_error "validation data under one micro-batch" \
    "--val-data $out/short_val.bin: 2 sequence\(s\) of 16\+1 tokens, fewer than one micro-batch on every rank \(--batch-size 8 x 1 rank\(s\)\)" \
    "${T[@]}" -b 8 -i "$TRAIN_SHARD" -j "$out/short_val.bin" -v 1
# Outputs checked writable at startup, before any step (--save-model to an unwritable path
# failed after training): /sys refuses new files even to root.
for flag in --save-model -o; do
    case $flag in --save-model) path=/sys/fsdp_model.bin; want="--save-model /sys/fsdp_model.bin: cannot be written .*(Permission denied|Read-only)";;
                  -o) path=/proc/fsdp_out; want="-o /proc/fsdp_out: cannot create";; esac
    o=$("${T[@]}" -x 1000 -i "$TRAIN_SHARD" $flag "$path" 2>&1); rc=$?
    if [ $rc = 1 ] && grep -qE -- "$want" <<<"$o" && ! grep -q "^step" <<<"$o"; then ok "$flag $path: refused before step 1 ($(grep -m1 -oE -- "$want" <<<"$o"))"
    else not_ok "$flag $path: status $rc: $(tail -n 2 <<<"$o" | tr '\n' ' ')"; fi
done
expect_error "--save-model in a directory that cannot be created" "--save-model /proc/nope/m.bin: cannot create its directory /proc/nope" \
    "${T[@]}" -i "$TRAIN_SHARD" --save-model /proc/nope/m.bin
mkdir -p "$out/save_dir"
expect_error "--save-model naming a directory" "--save-model $out/save_dir: cannot be written" "${T[@]}" -i "$TRAIN_SHARD" --save-model "$out/save_dir"
# A run directory whose lock file (an earlier run's) can be opened but where no new file can be
# created: refused at startup. Needs a user other than root (root may write anywhere).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    chmod 711 "$out"  # mktemp's 0700 would keep that user out of the test's directory
    mkdir -p "$out/ro_run" && chmod 755 "$out/ro_run" && : >"$out/ro_run/train_gpt.lock" && chmod 666 "$out/ro_run/train_gpt.lock"
    as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    if "${as_nobody[@]}" test -r "$TRAIN_SHARD" -a -x "$TRAIN_GPT" -a -w "$out/ro_run/train_gpt.lock" 2>/dev/null; then
        expect_error "-o DIR with an earlier lock file but no room for new files" "-o $out/ro_run: cannot be written .*Permission denied" \
            "${as_nobody[@]}" "${T[@]}" -i "$TRAIN_SHARD" -o "$out/ro_run"
    else ok "-o unwritable beside an earlier lock file # skip user nobody cannot read the test's files"; fi
else ok "-o unwritable beside an earlier lock file # skip needs root and setpriv to run as another user"; fi
touch "$out/plain_file"
expect_error "output dir is a file"      "-o $out/plain_file: cannot create: Not a directory" "${T[@]}" -i "$TRAIN_SHARD" -o "$out/plain_file"
expect_error "checkpoint dir is a file"  "$out/plain_file: cannot create: Not a directory" \
    "${T[@]}" -i "$TRAIN_SHARD" --ckpt-dir "$out/plain_file" --ckpt-every 1
expect_error "world does not divide the batch" "not a multiple of batch-size x seq-len x world size \(2 x 16 x 3 = 96\)" \
    run_np 3 "${T[@]}" -i "$TRAIN_SHARD" -d 64
expect_error "shard group does not divide" "--shard-group-size 2 does not divide the world size 3" \
    run_np 3 "${T[@]}" -i "$TRAIN_SHARD" --shard-group-size 2
expect_error "torchrun env without a rendezvous" "the torchrun environment says rank 0 of 2 but there is no MPI world.*--rendezvous" \
    env RANK=0 WORLD_SIZE=2 "${T[@]}" -i "$TRAIN_SHARD"
if "$TRAIN_GPT" --help | grep -q -- "--total-batch-tokens"; then ok "--help lists the options"; else not_ok "--help"; fi

# Launcher detection: the launcher's variables are read; several ranks need an MPI world or
# a rendezvous.
launch=("${T[@]}" -i "$TRAIN_SHARD" -x 0)
if env SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 "${launch[@]}" 2>&1 | grep -q "1 rank(s) via slurm"; then ok "Slurm environment detected"
else not_ok "Slurm environment not detected"; fi
if env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "${launch[@]}" 2>&1 | grep -q "1 rank(s) via torchrun"; then ok "torchrun environment detected"
else not_ok "torchrun environment not detected"; fi
if run_np 2 "${launch[@]}" -d 64 2>&1 | grep -q "2 rank(s) via openmpi"; then ok "Open MPI environment detected (np=2)"
else not_ok "Open MPI environment not detected"; fi
expect_error "Slurm env without PMI and without a rendezvous" "the slurm environment says rank 0 of 4 but there is no MPI world" \
    env SLURM_PROCID=0 SLURM_NTASKS=4 "${launch[@]}"
expect_error "Slurm batch step: the step's task count wins" "the slurm environment says rank 0 of 2 but there is no MPI world" \
    env SLURM_PROCID=0 SLURM_NTASKS=16 SLURM_STEP_NUM_TASKS=2 "${launch[@]}"
if env SLURM_PROCID=0 SLURM_NTASKS=16 SLURM_STEP_NUM_TASKS=1 "${launch[@]}" 2>&1 | grep -q "1 rank(s) via slurm"; then
    ok "one task in a 16-task allocation runs as a single rank"
else not_ok "SLURM_STEP_NUM_TASKS=1 not honoured"; fi
expect_error "--rendezvous file: outside a launcher needs --run-id" "--rendezvous file:.* needs --run-id" \
    env RANK=0 WORLD_SIZE=1 "${launch[@]}" --rendezvous "file:$TEST_TMP/rdv"
expect_error "--rendezvous with a bad scheme" "--rendezvous: expected file:DIR or tcp://HOST:PORT" "${launch[@]}" --rendezvous "nfs:/x"
expect_error "--rendezvous without launcher variables" "no launcher variables say which rank" "${launch[@]}" --rendezvous "tcp://127.0.0.1:1"
expect_error "--comm-timeout out of range" "--comm-timeout: 0 is out of range" "${launch[@]}" --comm-timeout 0
expect_error "--max-bad-steps out of range" "--max-bad-steps: 0 is out of range" "${launch[@]}" --max-bad-steps 0
expect_error "--profile-step out of range" "--profile-step: -1 is out of range" "${launch[@]}" --profile-step -1
expect_error "--comm-timeout not a number" "--comm-timeout: expected a number, got 'x'" "${launch[@]}" --comm-timeout x
expect_error "--run-id with a slash" "--run-id: 'a/b' must be non-empty and without '/'" "${launch[@]}" --run-id a/b
expect_error "--rendezvous file: without a directory" "--rendezvous file:: the directory is missing" "${launch[@]}" --rendezvous file:
expect_error "--peak-tflops out of range" "--peak-tflops: 0 is out of range" "${launch[@]}" --peak-tflops 0
expect_error "--comm unknown" "--comm: expected nccl or mpi, got 'gloo'" "${launch[@]}" --comm gloo
expect_error "--reduce-dtype unknown" "--reduce-dtype: expected bf16 or fp32, got 'fp16'" "${launch[@]}" --reduce-dtype fp16
expect_error "--attention unknown" "--attention: expected flash, flash-pipelined, cublas, cudnn or auto, got 'xformers'" "${launch[@]}" --attention xformers
expect_error "--attention flash1 (removed)" "--attention: expected flash, flash-pipelined, cublas, cudnn or auto, got 'flash1'" "${launch[@]}" --attention flash1
expect_error "--comm on the cpu device" "--comm applies to the cuda device only, and this run is on the cpu device" \
    "${launch[@]}" --device cpu --comm nccl
expect_error "--attention on the cpu device" "--attention applies to the cuda device only" "${launch[@]}" --device cpu --attention cublas
expect_error "--attention cudnn on the cpu device" "--attention applies to the cuda device only" "${launch[@]}" --device cpu --attention cudnn
expect_error "--gelu-fusion out of range" "--gelu-fusion: 3 is out of range" "${launch[@]}" --gelu-fusion 3
expect_error "--gelu-fusion on the cpu device" "--gelu-fusion applies to the cuda device only" "${launch[@]}" --device cpu --gelu-fusion 0
expect_error "--matmul-autotune out of range" "--matmul-autotune: expected auto, 0, 1 or 2, got '3'" "${launch[@]}" --matmul-autotune 3
expect_error "--matmul-autotune not a mode" "--matmul-autotune: expected auto, 0, 1 or 2, got 'fast'" "${launch[@]}" --matmul-autotune fast
expect_error "--matmul-autotune on the cpu device" "--matmul-autotune applies to the cuda device only" "${launch[@]}" --device cpu --matmul-autotune 1
expect_error "--offload not a choice" "--offload: expected none or optimizer, got 'gpu'" "${launch[@]}" --offload gpu
expect_error "--offload optimizer on the cpu device" "--offload optimizer applies to the cuda device only" "${launch[@]}" --device cpu --offload optimizer
expect_error "--param-dtype unknown" "--param-dtype: expected bf16 or fp16, got 'fp32'" "${launch[@]}" --param-dtype fp32
expect_error "--param-dtype fp16 on the cpu device" "--param-dtype fp16 applies to the cuda device only" "${launch[@]}" --device cpu --param-dtype fp16
expect_error "--loss-scale without fp16" "--loss-scale applies to --param-dtype fp16 only" "${launch[@]}" --loss-scale 1024
expect_error "--loss-scale-window without fp16" "--loss-scale-window applies to --param-dtype fp16 only" "${launch[@]}" --loss-scale-window 10
expect_error "--loss-scale out of range" "--loss-scale: 0.5 is out of range" "${launch[@]}" --param-dtype fp16 --loss-scale 0.5
expect_error "--loss-scale-window negative" "--loss-scale-window: -1 is out of range" "${launch[@]}" --param-dtype fp16 --loss-scale-window -1
expect_error "--param-dtype fp16 with --offload optimizer" "--param-dtype fp16 with --offload optimizer is not supported yet" \
    "${launch[@]}" --param-dtype fp16 --offload optimizer

# --- Shards changing under a run, batch splits, -j's default, the run lock, stop signals ---

# wait_for FILE PATTERN: up to 20 s for a line matching PATTERN (grep -E) in FILE.
wait_for() { for _ in $(seq 400); do grep -qE -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
# status_of PID: waits for it (at most 30 s, then kills it) and sets RC to its exit status,
# or "hung".
status_of() {
    local pid=$1
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; wait "$pid" 2>/dev/null; RC=hung; return; fi
    wait "$pid"; RC=$?
}

# A shard truncated while the run reads it: reads are pread()s, so the next read past the new
# end is an error naming the shard, where a memory mapping of it would kill the rank (SIGBUS).
cp "$TRAIN_SHARD" "$out/shrinking.bin"
"${T[@]}" -i "$out/shrinking.bin" -x 100000 > "$out/shrink.log" 2>&1 &
pid=$!
wait_for "$out/shrink.log" "^step +3/"
truncate -s 4096 "$out/shrinking.bin"
status_of $pid; rc=$RC
if [ "$rc" = 1 ] && grep -qE "shrinking.bin: (truncated|changed) while training" "$out/shrink.log"; then
    ok "a shard truncated while training is named (status 1): $(grep -m1 -oE "shrinking.bin: .*" "$out/shrink.log" | head -c 150)"
else
    not_ok "a shard truncated while training: status $rc: $(tail -n 2 "$out/shrink.log" | tr '\n' ' ')"
fi

# -d beyond an int of accumulation steps: refused (it used to train 0 micro-steps, loss 0).
expect_error "-d 2^62: too many accumulation steps" \
    "--total-batch-tokens 4611686018427387904 needs 144115188075855872 accumulation steps of batch-size x seq-len x world size \(2 x 16 x 1 = 32\), more than 2147483647" \
    "${T[@]}" -i "$TRAIN_SHARD" -d 4611686018427387904
expect_error "-d 96 x 2^55 over 3 ranks" "needs 36028797018963968 accumulation steps of batch-size x seq-len x world size \(2 x 16 x 3 = 96\)" \
    run_np 3 "${T[@]}" -i "$TRAIN_SHARD" -d 3458764513820540928

# -j unset with -i naming other data: no validation. From a directory without data/, where
# the default validation shard would not exist (it used to fail on that flag never given).
mkdir -p "$out/elsewhere"
log="$out/no_j.log"
if (cd "$out/elsewhere" && "${T[@]}" -i "$TRAIN_SHARD" -v 1 > "$log" 2>&1) && ! grep -q "val loss\|val-data" "$log"; then
    ok "-i without -j: no validation (and no error about -j)"
else
    not_ok "-i without -j: $(tail -n 2 "$log" | tr '\n' ' ')"
fi
if "$TRAIN_GPT" --help | grep -q -- "-i is not given (or names that default), else none: no validation"; then
    ok "--help says when -j defaults to Tiny Shakespeare's validation shard"
else not_ok "--help does not document -j's default"; fi

# The run lock: a second launch on a directory in use is refused, naming the holder (pid,
# host); the holder then stops on SIGTERM in training as before (checkpoint, status 75).
run_dir="$out/locked_run"
"${T[@]}" -i "$TRAIN_SHARD" -x 100000 -o "$run_dir" > "$out/holder.log" 2>&1 &
holder=$!
if wait_for "$out/holder.log" "^step +2/"; then
    expect_error "a second launch on a run directory in use" \
        "-o $run_dir: the run directory is in use by another job \(pid $holder host $(hostname)" "${T[@]}" -i "$TRAIN_SHARD" -o "$run_dir"
    expect_error "a second launch on its checkpoint directory (--ckpt-dir)" \
        "checkpoint directory $run_dir/ckpt: the run directory is in use by another job \(pid $holder " "${T[@]}" -i "$TRAIN_SHARD" --ckpt-dir "$run_dir/ckpt"
    expect_error "a second launch of 2 ranks on a run directory in use" \
        "-o $run_dir: the run directory is in use by another job \(pid $holder " run_np 2 "${T[@]}" -i "$TRAIN_SHARD" -o "$run_dir"
else
    not_ok "run lock: the first run did not start: $(tail -n 2 "$out/holder.log" | tr '\n' ' ')"
fi
kill -TERM $holder
status_of $holder; rc=$RC
if [ "$rc" = 75 ] && grep -q "stop signal received: saving a checkpoint" "$out/holder.log"; then
    ok "SIGTERM in training: checkpoint and status 75"
else not_ok "SIGTERM in training: status $rc: $(tail -n 2 "$out/holder.log" | tr '\n' ' ')"; fi
if "${T[@]}" -i "$TRAIN_SHARD" -o "$run_dir" > "$out/after.log" 2>&1; then ok "the run directory is free once its job has ended"
else not_ok "relaunch after the holder ended: $(tail -n 2 "$out/after.log" | tr '\n' ' ')"; fi

# A stop signal during setup ends the process at once, with status 128 + signal and a line
# saying so: here rank 0 of 2 waits in the rendezvous for a rank 1 that never comes.
port=$($PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for sig in TERM USR1; do
    log="$out/setup_$sig.log"
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "${T[@]}" -i "$TRAIN_SHARD" --comm-timeout 120 > "$log" 2>&1 &
    pid=$!
    sleep 1
    t0=$(date +%s.%N)
    kill -$sig $pid
    status_of $pid; rc=$RC
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    want=$((128 + $(kill -l $sig)))
    if [ "$rc" = "$want" ] && grep -q "stopped by SIG$sig during setup" "$log" && [ "$(echo "$secs < 5" | bc)" = 1 ]; then
        ok "SIG$sig during setup (blocked in the rendezvous) ends the process in $(printf %.1f "$secs") s with status $rc"
    else
        not_ok "SIG$sig during setup: status $rc after $secs s: $(tail -n 2 "$log" | tr '\n' ' ')"
    fi
done
# Blocked opening a file after the world has formed (a FIFO as the tokenizer's encoder.json):
# SIGTERM ends it at once (it used to be noted for a first step never reached). A tokenizer
# that refuses the FIFO by itself is fine too; a run still there 5 s after the signal is not.
mkdir -p "$out/fifo_tok"
mkfifo "$out/fifo_tok/encoder.json"
touch "$out/fifo_tok/vocab.bpe"
log="$out/setup_fifo.log"
"${T[@]}" -i "$TRAIN_SHARD" -s 1 --tokenizer-dir "$out/fifo_tok" > "$log" 2>&1 &
pid=$!
sleep 1.5
if ! kill -0 $pid 2>/dev/null; then
    status_of $pid; rc=$RC
    if [ "$rc" != 0 ] && grep -q "encoder.json" "$log"; then ok "a FIFO as encoder.json is refused (status $rc)"
    else not_ok "a FIFO as encoder.json: status $rc: $(tail -n 2 "$log" | tr '\n' ' ')"; fi
else
    kill -TERM $pid
    status_of $pid; rc=$RC
    if [ "$rc" = 143 ] && grep -q "stopped by SIGTERM during setup" "$log"; then
        ok "SIGTERM while blocked opening a FIFO during setup ends the process (status 143)"
    else not_ok "SIGTERM while blocked opening a FIFO during setup: status $rc: $(tail -n 2 "$log" | tr '\n' ' ')"; fi
fi

# --top-k 50257 (every token): the selection is O(V log k); it took ~4.5 s per token.
log="$out/topk.log"
t0=$(date +%s.%N)
if timeout 60 "${T[@]}" -i "$TRAIN_SHARD" -s 1 -g 12 --top-k 50257 > "$log" 2>&1 && grep -q "^sample (step 1)" "$log"; then
    ok "--top-k 50257: a 12-token sample in $(printf %.1f "$(echo "$(date +%s.%N) - $t0" | bc)") s (the whole run)"
else not_ok "--top-k 50257: $(tail -n 2 "$log" | tr '\n' ' ')"; fi
