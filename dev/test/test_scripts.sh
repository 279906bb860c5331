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
    for want in --nodes= --ntasks-per-node=8 --cpus-per-task= --signal=B:USR1@ \
                --requeue --open-mode=append --output= --time=; do
        grep -q -- "^#SBATCH $want" <<<"$header" || missing+="$want "
    done
    # GPUs: the model wrappers ask for 8 per node; the generic script asks for none, so that
    # sbatch takes it on a cluster without GPU GRES (it refuses any GPU request there).
    gpus=$(grep -c -- "^#SBATCH --gpus-per-node=8\|^#SBATCH --gres\|^#SBATCH --gpus" <<<"$header")
    if [ "$f" = scripts/slurm/train_gpt2.sbatch ]; then want_gpus=0; else want_gpus=1; fi
    if [ -n "$late" ]; then not_ok "$f: #SBATCH after the first command, ignored by sbatch: $late"
    elif [ -n "$missing" ]; then not_ok "$f: #SBATCH lines missing: $missing"
    elif [ "$gpus" != "$want_gpus" ]; then not_ok "$f: $gpus GPU request line(s) in the #SBATCH header, want $want_gpus"
    else ok "$f: #SBATCH header complete ($(wc -l <<<"$header") lines; GPU request: $([ $want_gpus = 1 ] && echo "--gpus-per-node=8" || echo none))"; fi
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
# 3. The sbatch scripts, through the fake srun, with a stand-in train_gpt: it writes its arguments
#    (one per line) to args.RANK and its pid to pid.RANK, and then, by TASK_END: exits 0 (ok); rank
#    1 exits 3 (fail); waits for SIGUSR1/SIGTERM, then rank 0 commits checkpoint step 5 in
#    --ckpt-dir's directory and both exit 75 a second later, as train_gpt does (preempt); the
#    same, but exiting 137 (killed: as real srun reports a rank that --kill-on-bad-exit killed
#    after another's 75); exits 128 + signal with nothing saved, as train_gpt does during setup
#    (setup). scontrol is a stand-in: `show job` prints PreemptTime=$PREEMPT_TIME (None unless set),
#    anything else (requeue) is logged to scontrol.log and exits $SCONTROL_STATUS.
#    The signals are sent as Slurm 22.05 sends them (measured on a real one, README: Slurm):
#    scancel, the time limit and a preemption without GraceTime: SIGTERM to the tasks and the
#    batch shell; a preemption with GraceTime: to the tasks only (PreemptTime set), then to both
#    when the grace ends; --signal=B:USR1: SIGUSR1 to the batch shell only.
mkdir -p "$T/bin"
cat >"$T/bin/train_gpt" <<'EOF'
#!/bin/bash
d=$STUB_DIR
printf '%s\n' "$@" >"$d/args.$SLURM_PROCID"
echo $$ >"$d/pid.$SLURM_PROCID"
ckpt=$(awk 'p { print; exit } $0 == "--ckpt-dir" { p = 1 }' "$d/args.$SLURM_PROCID")
commit() {   # rank 0 commits step 5 as checkpoint/ does: step_N.tmp, its manifest, the rename
    [ "$SLURM_PROCID" = 0 ] || return 0
    mkdir -p "$ckpt/step_00000005.tmp" && echo '{}' >"$ckpt/step_00000005.tmp/manifest.json" &&
        mv "$ckpt/step_00000005.tmp" "$ckpt/step_00000005"
}
case "$TASK_END" in
    ok) exit 0 ;;
    fail) [ "$SLURM_PROCID" = 1 ] && exit 3; sleep 20; exit 0 ;;
    preempt|killed)
        [ "$TASK_END" = killed ] && status=137 || status=75
        trap 'echo USR1 >>"$d/signal.$SLURM_PROCID"; commit; sleep 1; exit $status' USR1
        trap 'echo TERM >>"$d/signal.$SLURM_PROCID"; commit; sleep 1; exit $status' TERM
        touch "$d/ready.$SLURM_PROCID"
        sleep 30 & wait; exit 0 ;;
    setup)
        trap 'exit 138' USR1
        trap 'exit 143' TERM
        touch "$d/ready.$SLURM_PROCID"
        sleep 30 & wait; exit 0 ;;
esac
EOF
cat >"$T/bin/scontrol" <<'EOF'
#!/bin/bash
if [ "$1" = show ]; then
    echo "JobId=${4:-?} JobName=test JobState=RUNNING Requeue=1 Restarts=0 PreemptEligibleTime=2026-12-06T08:40:00 PreemptTime=${PREEMPT_TIME:-None} SuspendTime=None"
    exit 0
fi
echo "$*" >>"$STUB_DIR/scontrol.log"
exit "${SCONTROL_STATUS:-0}"
EOF
chmod +x "$T/bin/train_gpt" "$T/bin/scontrol"
TINY_ARGS="--device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 64 -x 5"
# sbatch_run NAME SCRIPT [VAR=VALUE...]: runs the batch script as Slurm would start it (one job
# of 2 tasks), in the background; its pid in $job_pid, its output in $T/NAME/log. With
# seed_step=N set, checkpoint step N is there before the job starts (an earlier attempt's).
sbatch_run() {
    local name=$1 script=$2; shift 2
    rm -rf "${T:?}/$name"; mkdir -p "$T/$name"
    if [ -n "${seed_step:-}" ]; then
        mkdir -p "$T/$name/run/ckpt/step_0000000$seed_step" && echo '{}' >"$T/$name/run/ckpt/step_0000000$seed_step/manifest.json"
    fi
    env SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_JOB_NAME=test SRUN="$SRUN" TRAIN_GPT="$T/bin/train_gpt" \
        SCONTROL="$T/bin/scontrol" STUB_DIR="$T/$name" TASK_END=ok RUN_DIR="$T/$name/run" \
        TRAIN="$TRAIN_SHARD" VAL="$VAL_SHARD" "$@" bash "$script" >"$T/$name/log" 2>&1 &
    job_pid=$!
}
sbatch_wait() { wait "$job_pid"; }
requeues() { tr '\n' ' ' <"$T/$1/scontrol.log" 2>/dev/null; }   # what the job asked scontrol to do
logtail() { tail -n 3 "$T/$1/log" | tr '\n' ' '; }
G=scripts/slurm/train_gpt2.sbatch

sbatch_run mpi $G MODEL_ARGS="$TINY_ARGS"; sbatch_wait; rc=$?
if [ $rc = 0 ] && has_seq "$T/mpi/args.1" --device cpu --layers 2 && has_seq "$T/mpi/args.1" -x 5 -i "$TRAIN_SHARD" -j "$VAL_SHARD" \
        -o "$T/mpi/run" --ckpt-every 500 --resume auto --ckpt-dir "$T/mpi/run/ckpt" && ! grep -q -- --rendezvous "$T/mpi/args.1" \
        && grep -q -- "--kill-on-bad-exit=1 --mpi=pmix" "$T/mpi/log" && [ ! -e "$T/mpi/scontrol.log" ]; then
    ok "sbatch (RENDEZVOUS=mpi): srun --kill-on-bad-exit=1 --mpi=pmix train_gpt MODEL_ARGS -i -j -o --ckpt-every --resume auto --ckpt-dir RUN_DIR/ckpt; status 0, no requeue"
else not_ok "sbatch (mpi): status $rc, args: $(tr '\n' ' ' <"$T/mpi/args.1" 2>&1), log: $(logtail mpi)"; fi

sbatch_run file $G MODEL_ARGS="$TINY_ARGS" RENDEZVOUS=file EXTRA_ARGS="--comm-timeout 30"; sbatch_wait; rc=$?
if [ $rc = 0 ] && has_seq "$T/file/args.0" --rendezvous "file:$T/file/run/rendezvous" --comm-timeout 30 \
        && [ -d "$T/file/run/rendezvous" ] && grep -q -- "--mpi=none" "$T/file/log"; then
    ok "sbatch (RENDEZVOUS=file): srun --mpi=none, train_gpt --rendezvous file:RUN_DIR/rendezvous (made), EXTRA_ARGS last"
else not_ok "sbatch (file): status $rc, args: $(tr '\n' ' ' <"$T/file/args.0" 2>&1), log: $(logtail file)"; fi

sbatch_run fail $G MODEL_ARGS="$TINY_ARGS" TASK_END=fail; sbatch_wait; rc=$?
[ $rc = 3 ] && [ ! -e "$T/fail/scontrol.log" ] && ok "sbatch: a rank exiting 3 ends the job with status 3 (the others killed), no requeue" \
    || not_ok "sbatch with a failing rank: status $rc (want 3), scontrol: $(requeues fail)"

# stop_case NAME TASK_END WHO SIGNAL [VAR=VALUE...]: starts the job, waits for both tasks, sends
# SIGNAL to WHO (batch: the batch shell; tasks: both tasks, not the shell; both) and leaves
# the job running (pid in $job_pid). Status 1 when the tasks did not start.
stop_case() {
    local name=$1 task_end=$2 who=$3 sig=$4; shift 4
    sbatch_run "$name" $G MODEL_ARGS="$TINY_ARGS" TASK_END="$task_end" "$@"
    if ! wait_for 2 "$T/$name/ready.*"; then
        kill $job_pid; not_ok "sbatch $name: the tasks did not start: $(logtail "$name")"; return 1
    fi
    [ "$who" = batch ] || kill -s "$sig" "$(cat "$T/$name/pid.0")" "$(cat "$T/$name/pid.1")"
    [ "$who" = tasks ] || kill -s "$sig" $job_pid
    return 0
}
signals_got() { cat "$T/$1"/signal.* 2>/dev/null | sort | uniq -c | awk '{ printf "%s x%s ", $2, $1 }'; }

# SIGUSR1 (--signal=B:USR1@120): forwarded to every task, a new checkpoint, requeue.
if stop_case usr1 preempt batch USR1; then
    sbatch_wait; rc=$?
    if [ $rc = 0 ] && [ "$(signals_got usr1)" = "USR1 x2 " ] && [ "$(requeues usr1)" = "requeue 4242 " ] &&
       grep -q "train_gpt stopped on SIGUSR1 (srun status 75, checkpoint step 5 committed by this attempt): requeueing job 4242 (restart 0)" "$T/usr1/log"; then
        ok "sbatch: SIGUSR1 to the batch shell reaches both tasks via srun; a new checkpoint (step 5), status 75 -> scontrol requeue 4242, status 0"
    else not_ok "sbatch SIGUSR1: status $rc (want 0), tasks got '$(signals_got usr1)', scontrol: $(requeues usr1), log: $(logtail usr1)"; fi
fi
# scancel JOBID: SIGTERM to the tasks and to the batch shell (which forwards it too); the tasks
# still checkpoint, but the job is not requeued and ends as cancelled.
if stop_case scancel preempt both TERM; then
    sbatch_wait; rc=$?
    if [ $rc = 143 ] && [ ! -e "$T/scancel/scontrol.log" ] && [ -d "$T/scancel/run/ckpt/step_00000005" ] &&
       grep -q "job 4242 (restart 0) stopped on SIGTERM (srun status 75, checkpoint step 5 committed by this attempt): not requeueing" "$T/scancel/log"; then
        ok "sbatch: scancel (SIGTERM to the tasks and the batch shell): the checkpoint is saved, no requeue, status 143 (cancelled)"
    else not_ok "sbatch scancel: status $rc (want 143), scontrol: $(requeues scancel), log: $(logtail scancel)"; fi
fi
# A SIGTERM after the SIGUSR1 (scancel while the pre-timeout checkpoint is being written): cancelled.
if stop_case usr1_term preempt batch USR1; then
    sleep 0.3; kill -TERM $job_pid; sbatch_wait; rc=$?
    [ $rc = 143 ] && [ ! -e "$T/usr1_term/scontrol.log" ] && ok "sbatch: SIGUSR1 then SIGTERM before the tasks end: no requeue, status 143" \
        || not_ok "sbatch SIGUSR1 then SIGTERM: status $rc (want 143), scontrol: $(requeues usr1_term), log: $(logtail usr1_term)"
fi
# No requeue without progress: SIGUSR1 during setup (the tasks exit 138, nothing saved; the
# newest checkpoint is still the earlier attempt's step 3).
if seed_step=3 stop_case setup setup batch USR1; then
    sbatch_wait; rc=$?
    if [ $rc = 138 ] && [ ! -e "$T/setup/scontrol.log" ] &&
       grep -q "job 4242 (restart 0) got SIGUSR1 but no checkpoint committed by this attempt (the newest is still step 3) (srun status 138): not requeueing" "$T/setup/log"; then
        ok "sbatch: SIGUSR1 during setup (nothing saved since the start): no requeue, status 138, the line says why"
    else not_ok "sbatch SIGUSR1 during setup: status $rc (want 138), scontrol: $(requeues setup), log: $(logtail setup)"; fi
fi
if stop_case killed killed batch USR1; then
    sbatch_wait; rc=$?
    [ $rc = 0 ] && [ "$(requeues killed)" = "requeue 4242 " ] \
        && ok "sbatch: after a forwarded SIGUSR1 and a new checkpoint, srun status 137 (a rank killed on its way out) also requeues" \
        || not_ok "sbatch SIGUSR1 then status 137: status $rc (want 0), scontrol: $(requeues killed), log: $(logtail killed)"
fi
if stop_case requeue_fails preempt batch USR1 SCONTROL_STATUS=1; then
    sbatch_wait; rc=$?
    [ $rc = 75 ] && ok "sbatch: when scontrol requeue fails the job ends with status 75" \
        || not_ok "sbatch with a failing requeue: status $rc (want 75), log: $(logtail requeue_fails)"
fi
# A preemption with GraceTime: SIGTERM to the tasks only, PreemptTime set. The tasks stop with
# a checkpoint; the script must not end the job itself (Slurm would then not requeue it): it
# waits for Slurm's SIGTERM at the end of the grace, and does not requeue.
if stop_case grace preempt tasks TERM PREEMPT_TIME=2026-12-06T08:42:59; then
    wait_for 2 "$T/grace/signal.*"; sleep 1.5
    if kill -0 $job_pid 2>/dev/null && grep -q "job 4242 (restart 0) is being preempted (PreemptTime 2026-12-06T08:42:59; srun status 75, checkpoint step 5 committed by this attempt): waiting for Slurm to end it" "$T/grace/log"; then
        kill -TERM $job_pid; sbatch_wait; rc=$?
        [ $rc = 143 ] && [ ! -e "$T/grace/scontrol.log" ] \
            && ok "sbatch: preemption with GraceTime (tasks stopped, PreemptTime set): the job waits for Slurm's SIGTERM, then status 143, no requeue by the script" \
            || not_ok "sbatch preemption with grace: status $rc (want 143), scontrol: $(requeues grace), log: $(logtail grace)"
    else kill -9 $job_pid; not_ok "sbatch preemption with grace: the job did not wait for Slurm: $(logtail grace)"; fi
fi
if stop_case grace_bound preempt tasks TERM PREEMPT_TIME=2026-12-06T08:42:59 PREEMPT_WAIT=1; then
    sbatch_wait; rc=$?
    [ $rc = 75 ] && grep -q "Slurm did not end the preempted job within 1 s: exiting with status 75" "$T/grace_bound/log" \
        && ok "sbatch: preemption with GraceTime, Slurm silent for PREEMPT_WAIT (1 s): the job ends with status 75" \
        || not_ok "sbatch preemption, PREEMPT_WAIT=1: status $rc (want 75), log: $(logtail grace_bound)"
fi
# A signal to the tasks only, no preemption (scancel --signal=TERM JOBID, without --batch): the
# tasks checkpoint and exit 75, the job ends with 75 and a hint, no requeue.
if stop_case tasks_only preempt tasks TERM; then
    sbatch_wait; rc=$?
    [ $rc = 75 ] && [ ! -e "$T/tasks_only/scontrol.log" ] && grep -q "to checkpoint and requeue a running job: scancel --batch --signal=USR1 4242" "$T/tasks_only/log" \
        && ok "sbatch: SIGTERM to the tasks only, no preemption: status 75, no requeue, the line says how to requeue" \
        || not_ok "sbatch tasks-only SIGTERM: status $rc (want 75), scontrol: $(requeues tasks_only), log: $(logtail tasks_only)"
fi

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
sbatch_run ckpt_dir $G MODEL_ARGS="$TINY_ARGS" EXTRA_ARGS="--ckpt-dir /elsewhere"; sbatch_wait; rc=$?
[ $rc = 1 ] && grep -q "set CKPT_DIR instead of passing --ckpt-dir" "$T/ckpt_dir/log" && [ ! -e "$T/ckpt_dir/args.0" ] \
    && ok "sbatch with --ckpt-dir in EXTRA_ARGS: refused (set CKPT_DIR, where the script looks for new checkpoints)" \
    || not_ok "sbatch with --ckpt-dir in EXTRA_ARGS: status $rc, $(head -n 2 "$T/ckpt_dir/log" | tr '\n' ' ')"

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
        if s % 4 == 0: w(step=s, eval_acc_norm=0.25 + 0.01 * s, eval_acc=0.25, eval_examples=40)
PY
out=$("$PYTHON" - "$T/resumed.jsonl" <<'PY' 2>&1
import sys
sys.path.insert(0, "scripts")
import plot
r = plot.load_run(sys.argv[1])
t = r["train"]
ok = sorted(t) == list(range(1, 11)) and t[3]["loss"] == 9.0 - 0.3 and t[4]["tokens_per_s"] == 2004 and t[2]["loss"] == 10.0 - 0.2
ok = ok and r["val"] == {0: 11.0, 4: 9.5 - 0.4, 8: 9.5 - 0.8} and r["eval"] == {4: 0.25 + 0.04, 8: 0.25 + 0.08}
print("ok" if ok else "train %s val %s eval %s" % ([(s, t[s]["loss"]) for s in sorted(t)], r["val"], r["eval"]))
PY
)
[ "$out" = ok ] && ok "plot.py: a step logged twice (resumed run) keeps its last record; evaluation records read" || not_ok "plot.py repeated steps: $out"
# (over a copy of itself if the tiny run failed above, so that this check still tells something)
first=$run_dir/metrics.jsonl; [ -f "$first" ] || { first=$T/copy.jsonl; cp "$T/resumed.jsonl" "$first"; }
out=$("$PYTHON" scripts/plot.py "$first" "$T/resumed.jsonl" -o "$T/both.png" 2>&1); rc=$?
png_ok "$T/both.png" && [ $rc = 0 ] && grep -q "resumed.jsonl: 10 training steps, 3 validation points, last val loss 8.7000, 2 evaluations (last acc_norm 0.3300)" <<<"$out" \
    && ok "plot.py: two runs overlaid (one with MFU, a skipped step and evaluation accuracy) in one PNG" \
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
