#!/usr/bin/env bash
# The user-facing scripts, without GPUs, Slurm or FineWeb:
#   - every shell script under scripts/ parses (bash -n); the sbatch files carry the #SBATCH
#     lines the launch needs, all before the first command (sbatch ignores any after it);
#   - dev/test/fake_slurm/srun (the tests' stand-in for srun): task variables, no MPI
#     variables, exit status, --kill-on-bad-exit, signal forwarding;
#   - scripts/slurm/*.sbatch, through the fake srun with a stub train_gpt: the launch line
#     (MPI or file rendezvous); a failing rank ends the job with its status and no requeue;
#     SIGUSR1/SIGTERM to the batch shell reach every task, and status 75 (or any failure after
#     such a signal) requeues the job; the per-model wrappers pass their settings (every flag
#     one that train_gpt --help lists);
#   - scripts/run_gpt2_*.sh with a stub mpirun: without shards they say how to get them and
#     launch nothing; with shards they launch the expected command (the glob unexpanded);
#   - scripts/plot.py: a PNG from a real metrics.jsonl (tiny CPU run, every line valid JSON),
#     several runs overlaid, resumed runs' repeated steps (the last wins), and the errors
#     (missing file, invalid JSON naming the line, no data) as one line with status 1.
set -u
source dev/test/lib.sh
# When the tests themselves run inside a Slurm job, its variables must not leak into the
# scripts under test (SLURM_SUBMIT_DIR, SLURM_CPUS_PER_TASK, ...): each check sets its own.
for v in $(compgen -e); do [[ "$v" == SLURM_* ]] && unset "$v"; done
T=$TEST_TMP
SRUN=$(pwd)/dev/test/fake_slurm/srun
HELP=$(./train_gpt --help 2>&1) || HELP=""

# has_seq FILE ARG...: FILE (one argument per line) holds ARG... as consecutive arguments.
has_seq() {
    local file=$1; shift
    local sep=$'\x1f' want="" a
    for a in "$@"; do want+="$a$sep"; done
    [[ "$sep$(paste -sd "$sep" "$file")$sep" == *"$sep$want"* ]]
}
# unknown_flags FILE: the options in FILE (one argument per line) that train_gpt --help lacks.
unknown_flags() {
    local a opt
    if ! grep -q -- "--resume" <<<"$HELP"; then echo "(./train_gpt --help failed: is it built?)"; return; fi
    while IFS= read -r a; do
        [[ "$a" =~ ^--?[a-zA-Z] ]] || continue
        opt=${a%%=*}
        grep -qE -- "(^|[ ,])$opt([ ,=]|$)" <<<"$HELP" || echo -n "$opt "
    done <"$1"
}
# wait_for N GLOB: up to 10 s for N files matching GLOB.
wait_for() {
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(compgen -G "$2" | wc -l)" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------------------------------
# 1. Syntax, and the #SBATCH headers.
bad=0; n=0
while IFS= read -r f; do
    n=$((n + 1))
    if ! err=$(bash -n "$f" 2>&1); then not_ok "bash -n $f: $(head -n 2 <<<"$err" | tr '\n' ' ')"; bad=1; fi
done < <(find scripts -type f \( -name '*.sh' -o -name '*.sbatch' \); echo dev/test/fake_slurm/srun)
[ $bad = 0 ] && ok "bash -n: all $n shell scripts under scripts/ (and the fake srun) parse"
for f in scripts/slurm/*.sbatch; do
    # The #SBATCH lines sbatch reads: those before the first line that is not a comment.
    header=$(awk '/^[ \t]*$/ || /^#/ { if (/^#SBATCH/) print; next } { exit }' "$f")
    late=$(awk 'seen && /^#SBATCH/ { print FILENAME ":" FNR } !/^[ \t]*$/ && !/^#/ { seen = 1 }' "$f")
    missing=""
    for want in --nodes= --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task= --signal=B:USR1@ \
                --requeue --open-mode=append --output= --time=; do
        grep -q -- "^#SBATCH $want" <<<"$header" || missing+="$want "
    done
    if [ -n "$late" ]; then not_ok "$f: #SBATCH after the first command, ignored by sbatch: $late"
    elif [ -n "$missing" ]; then not_ok "$f: #SBATCH lines missing: $missing"
    else ok "$f: #SBATCH header complete ($(wc -l <<<"$header") lines)"; fi
done

# ---------------------------------------------------------------------------------------
# 2. The fake srun.
out=$(OMPI_COMM_WORLD_RANK=7 OMPI_COMM_WORLD_SIZE=9 PMI_RANK=7 PMIX_RANK=7 SLURM_JOB_ID=77 \
      "$SRUN" -n 3 --kill-on-bad-exit=1 --mpi=pmix --cpu-bind=none -N 1 --ntasks-per-node 3 \
      bash -c 'echo "$SLURM_PROCID $SLURM_LOCALID $SLURM_NTASKS $SLURM_NNODES $SLURM_NODEID $SLURM_JOB_ID $SLURM_STEP_ID ${OMPI_COMM_WORLD_RANK-}${OMPI_COMM_WORLD_SIZE-}${PMI_RANK-}${PMIX_RANK-}."' 2>&1)
rc=$?
want=$'0 0 3 1 0 77 0 .\n1 1 3 1 0 77 0 .\n2 2 3 1 0 77 0 .'
if [ $rc -eq 0 ] && [ "$(sort <<<"$out")" = "$want" ]; then
    ok "fake srun -n 3: distinct SLURM_PROCID/LOCALID 0..2, NTASKS/NNODES/NODEID/JOB_ID/STEP_ID set, no MPI variables"
else not_ok "fake srun -n 3 (rc $rc): $(tr '\n' '|' <<<"$out")"; fi
out=$(SLURM_NTASKS=2 "$SRUN" bash -c 'echo $SLURM_PROCID' 2>&1 | sort | tr '\n' ' ')
[ "$out" = "0 1 " ] && ok "fake srun: the task count from SLURM_NTASKS" || not_ok "fake srun with SLURM_NTASKS=2: '$out'"
"$SRUN" -n 3 bash -c 'exit $((SLURM_PROCID == 1 ? 3 : 0))' 2>/dev/null; rc1=$?
"$SRUN" -n 2 true; rc0=$?
[ $rc1 = 3 ] && [ $rc0 = 0 ] && ok "fake srun: exits with the failing task's status (3), else 0" \
    || not_ok "fake srun exit status: $rc1 (want 3) and $rc0 (want 0)"
start=$(date +%s)
"$SRUN" -n 3 --kill-on-bad-exit=1 bash -c '[ $SLURM_PROCID = 0 ] && exit 5; exec sleep 30' 2>/dev/null; rc=$?
took=$(( $(date +%s) - start ))
[ $rc = 5 ] && [ $took -lt 10 ] && ok "fake srun --kill-on-bad-exit: one task exits 5, the others are killed (${took}s), status 5" \
    || not_ok "fake srun --kill-on-bad-exit: status $rc (want 5) after ${took}s (want < 10)"
rm -f "$T"/late.*
"$SRUN" -n 3 bash -c "[ \$SLURM_PROCID = 0 ] && exit 5; sleep 1; touch $T/late.\$SLURM_PROCID" 2>/dev/null; rc=$?
[ $rc = 5 ] && [ -f "$T/late.1" ] && [ -f "$T/late.2" ] && ok "fake srun without --kill-on-bad-exit: the other tasks run to their end" \
    || not_ok "fake srun without --kill-on-bad-exit: status $rc (want 5), finished: $(ls "$T" | grep late. | tr '\n' ' ')"
rm -f "$T"/ready.* "$T"/got.*
"$SRUN" -n 2 bash -c "trap 'echo > $T/got.\$SLURM_PROCID; exit 75' USR1; touch $T/ready.\$SLURM_PROCID; sleep 20 & wait" 2>/dev/null &
pid=$!
if wait_for 2 "$T/ready.*"; then
    kill -USR1 $pid; wait $pid; rc=$?
    [ $rc = 75 ] && [ -f "$T/got.0" ] && [ -f "$T/got.1" ] && ok "fake srun forwards SIGUSR1 to every task (status 75 back)" \
        || not_ok "fake srun SIGUSR1: status $rc (want 75), tasks signalled: $(ls "$T" | grep got. | tr '\n' ' ')"
else kill $pid; not_ok "fake srun SIGUSR1: the tasks did not start"; fi

# ---------------------------------------------------------------------------------------
# 3. The sbatch scripts, through the fake srun, with a stub train_gpt: it writes its arguments
#    (one per line) to args.RANK and then, by STUB: exits 0 (ok); rank 1 exits 3 (fail); waits
#    for SIGUSR1/SIGTERM and exits 75 a second later, as train_gpt does after its checkpoint
#    (preempt); exits 137 on SIGUSR1 (killed). scontrol is a stub that logs its arguments.
mkdir -p "$T/bin"
cat >"$T/bin/train_gpt" <<'EOF'
#!/bin/bash
d=$STUB_DIR
printf '%s\n' "$@" >"$d/args.$SLURM_PROCID"
case "$STUB" in
    ok) exit 0 ;;
    fail) [ "$SLURM_PROCID" = 1 ] && exit 3; sleep 20; exit 0 ;;
    preempt)
        trap 'echo USR1 >"$d/signal.$SLURM_PROCID"; sleep 1; exit 75' USR1
        trap 'echo TERM >"$d/signal.$SLURM_PROCID"; sleep 1; exit 75' TERM
        touch "$d/ready.$SLURM_PROCID"
        sleep 30 & wait; exit 0 ;;
    killed)   # as real srun reports a rank killed by --kill-on-bad-exit after another's 75
        trap 'exit 137' USR1
        touch "$d/ready.$SLURM_PROCID"
        sleep 30 & wait; exit 0 ;;
esac
EOF
cat >"$T/bin/scontrol" <<'EOF'
#!/bin/bash
echo "$*" >>"$STUB_DIR/scontrol.log"
exit "${SCONTROL_STATUS:-0}"
EOF
chmod +x "$T/bin/train_gpt" "$T/bin/scontrol"
TINY_ARGS="--device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 64 -x 5"
# sbatch_run NAME SCRIPT [VAR=VALUE...]: runs the batch script as Slurm would start it (one job
# of 2 tasks), in the background; its pid in $job_pid, its output in $T/NAME/log.
sbatch_run() {
    local name=$1 script=$2; shift 2
    rm -rf "${T:?}/$name"; mkdir -p "$T/$name"
    env SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_JOB_NAME=test SRUN="$SRUN" TRAIN_GPT="$T/bin/train_gpt" \
        SCONTROL="$T/bin/scontrol" STUB_DIR="$T/$name" STUB=ok RUN_DIR="$T/$name/run" \
        TRAIN="$TRAIN_SHARD" VAL="$VAL_SHARD" "$@" bash "$script" >"$T/$name/log" 2>&1 &
    job_pid=$!
}
sbatch_wait() { wait "$job_pid"; }
G=scripts/slurm/train_gpt2.sbatch

sbatch_run mpi $G MODEL_ARGS="$TINY_ARGS"; sbatch_wait; rc=$?
if [ $rc = 0 ] && has_seq "$T/mpi/args.1" --device cpu --layers 2 && has_seq "$T/mpi/args.1" -x 5 -i "$TRAIN_SHARD" -j "$VAL_SHARD" \
        -o "$T/mpi/run" --ckpt-every 500 --resume auto && ! grep -q -- --rendezvous "$T/mpi/args.1" \
        && grep -q -- "--kill-on-bad-exit=1 --mpi=pmix" "$T/mpi/log" && [ ! -e "$T/mpi/scontrol.log" ]; then
    ok "sbatch (RENDEZVOUS=mpi): srun --kill-on-bad-exit=1 --mpi=pmix train_gpt MODEL_ARGS -i -j -o --ckpt-every --resume auto; status 0, no requeue"
else not_ok "sbatch (mpi): status $rc, args: $(tr '\n' ' ' <"$T/mpi/args.1" 2>&1), log: $(tail -n 3 "$T/mpi/log" | tr '\n' ' ')"; fi

sbatch_run file $G MODEL_ARGS="$TINY_ARGS" RENDEZVOUS=file EXTRA_ARGS="--comm-timeout 30"; sbatch_wait; rc=$?
if [ $rc = 0 ] && has_seq "$T/file/args.0" --rendezvous "file:$T/file/run/rendezvous" --comm-timeout 30 \
        && [ -d "$T/file/run/rendezvous" ] && grep -q -- "--mpi=none" "$T/file/log"; then
    ok "sbatch (RENDEZVOUS=file): srun --mpi=none, train_gpt --rendezvous file:RUN_DIR/rendezvous (made), EXTRA_ARGS last"
else not_ok "sbatch (file): status $rc, args: $(tr '\n' ' ' <"$T/file/args.0" 2>&1), log: $(tail -n 3 "$T/file/log" | tr '\n' ' ')"; fi

sbatch_run fail $G MODEL_ARGS="$TINY_ARGS" STUB=fail; sbatch_wait; rc=$?
[ $rc = 3 ] && [ ! -e "$T/fail/scontrol.log" ] && ok "sbatch: a rank exiting 3 ends the job with status 3 (the others killed), no requeue" \
    || not_ok "sbatch with a failing rank: status $rc (want 3), scontrol: $(cat "$T/fail/scontrol.log" 2>&1)"

for sig in USR1 TERM; do
    sbatch_run preempt_$sig $G MODEL_ARGS="$TINY_ARGS" STUB=preempt
    if wait_for 2 "$T/preempt_$sig/ready.*"; then
        kill -s $sig $job_pid; sbatch_wait; rc=$?
        got=$(cat "$T/preempt_$sig"/signal.* 2>/dev/null | tr '\n' ' ')
        if [ $rc = 0 ] && [ "$got" = "$sig $sig " ] && [ "$(cat "$T/preempt_$sig/scontrol.log" 2>&1)" = "requeue 4242" ]; then
            ok "sbatch: SIG$sig to the batch shell reaches both tasks via srun; their status 75 -> scontrol requeue 4242, status 0"
        else not_ok "sbatch SIG$sig: status $rc (want 0), tasks got '$got', scontrol: $(cat "$T/preempt_$sig/scontrol.log" 2>&1), log: $(tail -n 3 "$T/preempt_$sig/log" | tr '\n' ' ')"; fi
    else kill $job_pid; not_ok "sbatch SIG$sig: the tasks did not start: $(tail -n 3 "$T/preempt_$sig/log" | tr '\n' ' ')"; fi
done
sbatch_run killed $G MODEL_ARGS="$TINY_ARGS" STUB=killed
if wait_for 2 "$T/killed/ready.*"; then
    kill -USR1 $job_pid; sbatch_wait; rc=$?
    [ $rc = 0 ] && [ "$(cat "$T/killed/scontrol.log" 2>&1)" = "requeue 4242" ] \
        && ok "sbatch: after a forwarded SIGUSR1, srun status 137 (a rank killed on its way out) also requeues" \
        || not_ok "sbatch SIGUSR1 then status 137: status $rc (want 0), scontrol: $(cat "$T/killed/scontrol.log" 2>&1)"
else kill $job_pid; not_ok "sbatch SIGUSR1 then 137: the tasks did not start"; fi
sbatch_run requeue_fails $G MODEL_ARGS="$TINY_ARGS" STUB=preempt SCONTROL_STATUS=1
if wait_for 2 "$T/requeue_fails/ready.*"; then
    kill -USR1 $job_pid; sbatch_wait; rc=$?
    [ $rc = 75 ] && ok "sbatch: when scontrol requeue fails the job ends with status 75" \
        || not_ok "sbatch with a failing requeue: status $rc (want 75)"
else kill $job_pid; not_ok "sbatch requeue failure: the tasks did not start"; fi

# Refusals before anything is launched.
sbatch_run no_model $G MODEL_ARGS=; sbatch_wait; rc=$?
[ $rc = 1 ] && grep -q "MODEL_ARGS" "$T/no_model/log" && [ ! -e "$T/no_model/args.0" ] && ok "sbatch without MODEL_ARGS: refused, names it" \
    || not_ok "sbatch without MODEL_ARGS: status $rc, $(head -n 2 "$T/no_model/log" | tr '\n' ' ')"
sbatch_run no_data $G MODEL_ARGS="$TINY_ARGS" TRAIN="$T/none/fineweb_train_*.bin"; sbatch_wait; rc=$?
[ $rc = 1 ] && grep -q "no token shards match $T/none/fineweb_train_\*.bin" "$T/no_data/log" && [ ! -e "$T/no_data/args.0" ] \
    && ok "sbatch without shards: refused before srun, names the glob" \
    || not_ok "sbatch without shards: status $rc, $(head -n 2 "$T/no_data/log" | tr '\n' ' ')"
sbatch_run bad_rdv $G MODEL_ARGS="$TINY_ARGS" RENDEZVOUS=tcp; sbatch_wait; rc=$?
[ $rc = 1 ] && grep -q "RENDEZVOUS must be" "$T/bad_rdv/log" && ok "sbatch with RENDEZVOUS=tcp: refused" \
    || not_ok "sbatch with RENDEZVOUS=tcp: status $rc, $(head -n 2 "$T/bad_rdv/log" | tr '\n' ' ')"

# The wrappers: their model settings reach train_gpt; the micro-batch follows the rank count.
check_wrapper() {
    local name=$1 script=$2 ntasks=$3; shift 3
    sbatch_run "$name" "$script" SLURM_NTASKS="$ntasks" MODEL_ARGS= B=
    sbatch_wait; local rc=$?
    local bad_flags
    bad_flags=$(unknown_flags "$T/$name/args.0" 2>&1)
    if [ $rc != 0 ]; then not_ok "$script: status $rc: $(tail -n 3 "$T/$name/log" | tr '\n' ' ')"
    elif ! has_seq "$T/$name/args.0" "$@"; then not_ok "$script ($ntasks tasks): train_gpt got $(tr '\n' ' ' <"$T/$name/args.0"), want $* in it"
    elif [ -n "$bad_flags" ]; then not_ok "$script: flags train_gpt --help does not list: $bad_flags"
    else ok "$script ($ntasks tasks): train_gpt gets $* ... --resume auto (every flag in --help)"; fi
}
check_wrapper w124_16 scripts/slurm/train_gpt2_124M.sbatch 16 -m d12 -b 32 -t 1024 -d 524288 -x 18865 -l 6e-4 -u 700
check_wrapper w124_8 scripts/slurm/train_gpt2_124M.sbatch 8 -m d12 -b 64 -t 1024 -d 524288
check_wrapper w1558_32 scripts/slurm/train_gpt2_1558M.sbatch 32 -m d48 -b 16 -t 1024 -d 1048576 -x 32000 -l 6e-4 -u 700
check_wrapper w1558_128 scripts/slurm/train_gpt2_1558M.sbatch 128 -m d48 -b 8 -t 1024 -d 1048576

# ---------------------------------------------------------------------------------------
# 4. run_gpt2_*.sh with stubs for make and mpirun (each logs its call; mpirun its arguments).
mkdir -p "$T/fakebin" "$T/shards"
cat >"$T/fakebin/mpirun" <<'EOF'
#!/bin/bash
printf '%s\n' "$@" >"$STUB_DIR/mpirun.args"
EOF
cat >"$T/fakebin/make" <<'EOF'
#!/bin/bash
echo "make $*" >>"$STUB_DIR/make.log"
EOF
chmod +x "$T/fakebin/mpirun" "$T/fakebin/make"
for kind in fineweb edu_fineweb; do
    cp "$TRAIN_SHARD" "$T/shards/${kind}_train_000001.bin"; cp "$TRAIN_SHARD" "$T/shards/${kind}_train_000002.bin"
    cp "$VAL_SHARD" "$T/shards/${kind}_val_000000.bin"
done
for model in 124M:d12:524288 350M:d24:524288 774M:d36:524288 1558M:d48:1048576; do
    IFS=: read -r size preset tokens <<<"$model"
    s=scripts/run_gpt2_$size.sh
    kind=fineweb; [ $size = 1558M ] && kind=edu_fineweb
    # the dataset each run trains on, as llm.c's scripts: data/prepare.py's preset for it
    data=fineweb100B; [ $size = 124M ] && data=fineweb10B; [ $size = 1558M ] && data=edu_fineweb100B
    d=$T/run_$size; mkdir -p "$d"
    # No shards: the message, and nothing built or launched.
    out=$(PATH="$T/fakebin:$PATH" STUB_DIR=$d DATA_DIR="$T/nodata" bash $s 2>&1); rc=$?
    if [ $rc != 0 ] && grep -q "no token shards match $T/nodata/${kind}_train_\*.bin" <<<"$out" \
            && grep -qF "data/prepare.py --preset $data --out-dir $T/nodata" <<<"$out" && [ ! -e "$d/make.log" ] && [ ! -e "$d/mpirun.args" ]; then
        ok "$s without shards: exits $rc, gives the command that makes them (data/prepare.py --preset $data), launches nothing"
    else not_ok "$s without shards: status $rc, launched: $(ls "$d"), output: $(head -n 3 <<<"$out" | tr '\n' ' ')"; fi
    # With shards (a glob matching two), 4 ranks, a run directory and an extra argument.
    out=$(PATH="$T/fakebin:$PATH" STUB_DIR=$d DATA_DIR="$T/shards" NP=4 OUT="$T/out_$size" bash $s -s 0 2>&1); rc=$?
    a=$d/mpirun.args
    sed -n '/^\.\/train_gpt$/,$p' "$a" 2>/dev/null | tail -n +2 >"$d/train_gpt.args"
    bad_flags=$(unknown_flags "$d/train_gpt.args" 2>&1)
    if [ $rc = 0 ] && has_seq "$a" -np 4 ./train_gpt && has_seq "$a" -m $preset -i "$T/shards/${kind}_train_*.bin" -j "$T/shards/${kind}_val_*.bin" -o "$T/out_$size" \
            && has_seq "$a" -t 1024 -d $tokens && grep -qx -- --ckpt-every "$a" && has_seq "$a" --resume auto -s 0 \
            && [ -z "$bad_flags" ] && grep -q "make .*train_gpt" "$d/make.log"; then
        ok "$s: builds, mpirun -np \$NP ./train_gpt -m $preset (glob passed unexpanded) -o \$OUT -d $tokens ... --resume auto, extra args last (every flag in --help)"
    else not_ok "$s with shards: status $rc, unknown flags: '$bad_flags', mpirun got: $(tr '\n' ' ' <"$a" 2>&1) $(tail -n 2 <<<"$out" | tr '\n' ' ')"; fi
done
if [ "$(id -u)" = 0 ]; then
    grep -qx -- --allow-run-as-root "$T/run_124M/mpirun.args" && ok "run_gpt2_124M.sh as root: mpirun --allow-run-as-root" \
        || not_ok "run_gpt2_124M.sh as root: no --allow-run-as-root"
fi

# ---------------------------------------------------------------------------------------
# 5. plot.py on a real run: 8 steps of a tiny GPT-2 at np=2 on the cpu, validation every 4.
png_ok() {   # png_ok FILE: a PNG signature and more than 10 kB
    [ -f "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$1")" -gt 10000 ]
}
run_dir=$T/tiny
if ! timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 ./train_gpt --device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 \
        -b 2 -t 64 -x 8 -v 4 --val-steps 2 -i "$TRAIN_SHARD" -j "$VAL_SHARD" -o "$run_dir" --threads 1 >"$T/tiny.log" 2>&1; then
    not_ok "tiny training run for plot.py failed: $(tail -n 3 "$T/tiny.log" | tr '\n' ' ')"
else
    check=$("$PYTHON" - "$run_dir/metrics.jsonl" <<'PY'
import json, sys
train = val = 0
for i, line in enumerate(open(sys.argv[1]), 1):
    try:
        r = json.loads(line)
    except ValueError as e:
        print(f"line {i} is not JSON ({e}): {line.strip()[:80]}"); sys.exit()
    if "val_loss" in r: val += 1
    elif "loss" in r: train += 1
print("ok" if train == 8 and val >= 2 else f"{train} training and {val} validation records")
PY
)
    [ "$check" = ok ] && ok "metrics.jsonl of a tiny run: every line valid JSON, 8 training and the validation records" \
        || not_ok "metrics.jsonl: $check"
    out=$("$PYTHON" scripts/plot.py "$run_dir/metrics.jsonl" -o "$T/tiny.png" 2>&1); rc=$?
    png_ok "$T/tiny.png" && [ $rc = 0 ] && ok "plot.py: a PNG ($(stat -c %s "$T/tiny.png") bytes) from the run's metrics.jsonl ($(head -n 1 <<<"$out"))" \
        || not_ok "plot.py on the tiny run: status $rc: $out"
    out=$("$PYTHON" scripts/plot.py "$run_dir" 2>&1); rc=$?
    png_ok "$run_dir/metrics.png" && [ $rc = 0 ] && ok "plot.py RUN_DIR: writes RUN_DIR/metrics.png by default" \
        || not_ok "plot.py RUN_DIR: status $rc: $out"
fi

# A resumed run (steps 3 and 4 logged twice: the second time wins), with MFU and a skipped
# step, overlaid on the real run.
"$PYTHON" - "$T/resumed.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    def w(**r): f.write(json.dumps(r) + "\n")
    w(step=0, val_loss=11.0)
    for s in range(1, 5): w(step=s, loss=10.0 - 0.1 * s, lr=1e-3, grad_norm=1.0, ms=100, tokens_per_s=1000 + s, tokens=256 * s, mfu=0.4)
    for s in range(3, 11):   # resumed from step 2's checkpoint
        w(step=s, loss=9.0 - 0.1 * s, lr=1e-3, grad_norm=1.0, ms=100, tokens_per_s=2000 + s, tokens=256 * s, mfu=0.5, **({"skipped": True} if s == 6 else {}))
        if s % 4 == 0: w(step=s, val_loss=9.5 - 0.1 * s)
PY
out=$("$PYTHON" - "$T/resumed.jsonl" <<'PY' 2>&1
import sys
sys.path.insert(0, "scripts")
import plot
r = plot.load_run(sys.argv[1])
t = r["train"]
ok = sorted(t) == list(range(1, 11)) and t[3]["loss"] == 9.0 - 0.3 and t[4]["tokens_per_s"] == 2004 and t[2]["loss"] == 10.0 - 0.2
ok = ok and r["val"] == {0: 11.0, 4: 9.5 - 0.4, 8: 9.5 - 0.8}
print("ok" if ok else "train %s val %s" % ([(s, t[s]["loss"]) for s in sorted(t)], r["val"]))
PY
)
[ "$out" = ok ] && ok "plot.py: a step logged twice (resumed run) keeps its last record" || not_ok "plot.py repeated steps: $out"
# (over a copy of itself if the tiny run failed above, so that this check still tells something)
first=$run_dir/metrics.jsonl; [ -f "$first" ] || { first=$T/copy.jsonl; cp "$T/resumed.jsonl" "$first"; }
out=$("$PYTHON" scripts/plot.py "$first" "$T/resumed.jsonl" -o "$T/both.png" 2>&1); rc=$?
png_ok "$T/both.png" && [ $rc = 0 ] && grep -q "resumed.jsonl: 10 training steps, 3 validation points" <<<"$out" \
    && ok "plot.py: two runs overlaid (one with MFU and a skipped step) in one PNG" \
    || not_ok "plot.py with two runs: status $rc: $(tr '\n' ' ' <<<"$out")"

# Errors: one line naming the problem, status 1, no traceback.
plot_error() {
    local name=$1 pattern=$2; shift 2
    local out rc
    out=$("$PYTHON" scripts/plot.py "$@" -o "$T/err.png" 2>&1); rc=$?
    if [ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qE -- "$pattern" <<<"$out"; then ok "plot.py $name: $out"
    else not_ok "plot.py $name: status $rc (want 1), output (want one line /$pattern/): $(tr '\n' '|' <<<"$out" | head -c 300)"; fi
}
plot_error "missing file" "$T/absent.jsonl: no such file" "$T/absent.jsonl"
printf '{"step":1,"loss":10.0}\n{"step":2,"loss":9.9}\n{"step":3,"loss":\n' >"$T/broken.jsonl"
plot_error "invalid JSON" "broken.jsonl: line 3: invalid JSON" "$T/broken.jsonl"
printf '[1, 2]\n' >"$T/array.jsonl"
plot_error "a line that is not an object" "array.jsonl: line 1: not a JSON object" "$T/array.jsonl"
: >"$T/empty.jsonl"
plot_error "empty file" "empty.jsonl: no data" "$T/empty.jsonl"
printf '{"event":"start"}\n\n' >"$T/nodata.jsonl"
plot_error "no step records" "nodata.jsonl: no data" "$T/nodata.jsonl"
plot_error "a bad file among good ones" "broken.jsonl: line 3" "$T/resumed.jsonl" "$T/broken.jsonl"
