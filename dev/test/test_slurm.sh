#!/usr/bin/env bash
# scripts/slurm/train_gpt2.sbatch and train_gpt under a real Slurm: slurmctld and slurmd
# (Debian's 22.05) on this node, started for this test in a private directory (their own
# ports, munge socket, state and logs; nothing of a system Slurm is used or changed), running
# the real train_gpt (a tiny cpu model, 2 tasks) with Slurm's own signals:
#   - sbatch takes the generic script on this cluster, which has no GPU GRES, refuses the
#     model wrappers' --gpus-per-node=8 here, and takes them with --gpus-per-node=0;
#   - scancel of a running job: the tasks commit a checkpoint, the script does not requeue,
#     and the job ends CANCELLED with no restart;
#   - scancel --batch --signal=USR1 (what --signal=B:USR1@120 sends before the time limit): a
#     checkpoint and `scontrol requeue`: the job is PENDING, its BeginTime about 2 minutes
#     ahead, restart count 1 (the requeued job is then cancelled: the resume itself is
#     test_ops's);
#   - SIGUSR1 during setup (TRAIN_GPT is a wrapper that sleeps before train_gpt, as a slow
#     start would): nothing saved, so no requeue; the job ends FAILED, saying why;
#   - a preemption (a job in a higher-priority partition; PreemptMode=REQUEUE, no GraceTime):
#     Slurm requeues the job once, and the script does not requeue it again;
#   - srun --mpi=pmix (one MPI world, when this Slurm and MPI support it) with a rank killed
#     by SIGKILL: srun ends the step with SIGTERM to the other rank, which is blocked in a
#     collective with the dead one; it exits within seconds, naming the signal and the
#     operation, not at Slurm's SIGKILL after KillWait (30 s here, the default).
# Not here: a preemption with GraceTime (Slurm sends its second SIGTERM at a periodic check,
# 20-30 s late) and a real time limit (minutes): test_scripts.sh drives the script with
# those signals through a stand-in. Skipped, with the reason, where Slurm cannot run: not
# root (slurmd must be, to start jobs), Slurm or munge not installed (apt-get install
# slurmctld slurmd slurm-client munge), or the daemons not up within 30 s.
set -u
source dev/test/lib.sh
skip() { ok "real Slurm # skip $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root: slurmd must run as root to start jobs"
for c in slurmctld slurmd munged sbatch srun scontrol scancel sinfo; do
    command -v "$c" > /dev/null || skip "$c is not installed (apt-get install slurmctld slurmd slurm-client munge)"
done
[ -x ./train_gpt ] || { not_ok "./train_gpt is not built"; exit 1; }

D=$TEST_TMP/slurm
mkdir -p "$D/state" "$D/spool" "$D/tmp"
chmod 755 "$TEST_TMP" "$D"   # munged wants its socket's directories searchable by all
read -r ctld_port d_port < <("$PYTHON" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s)
head -c 1024 /dev/urandom > "$D/munge.key"; chmod 600 "$D/munge.key"
cat > "$D/slurm.conf" <<EOF
ClusterName=fsdptest
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
# PMIx makes its per-step directories here, not in /tmp: job ids start again at 1 with each
# fresh state directory, and an earlier run's leftover directory would fail the step
TmpFS=$D/tmp
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=30
MpiDefault=none
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$host CPUs=2 State=UNKNOWN
PartitionName=low Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
export SLURM_CONF=$D/slurm.conf
# The daemons' pids, read once they are up: slurmd removes its pid file when it starts to shut
# down, before it has exited (and may not finish once the test's directory is gone).
daemon_pids=""
cleanup() {
    scancel --full --quiet --partition=low,high 2> /dev/null
    scontrol shutdown > /dev/null 2>&1
    local pid
    for pid in ${daemon_pids:-$(cat "$D/slurmctld.pid" "$D/slurmd.pid" "$D/munged.pid" 2> /dev/null)}; do
        for _ in $(seq 1 30); do kill -0 "$pid" 2> /dev/null || break; kill "$pid" 2> /dev/null; sleep 0.1; done
        kill -9 "$pid" 2> /dev/null
    done
}
trap cleanup EXIT
munged -f --socket="$D/munge.sock" --key-file="$D/munge.key" --pid-file="$D/munged.pid" \
    --log-file="$D/munged.log" --seed-file="$D/munged.seed" || skip "munged does not start: $(tail -n 1 "$D/munged.log" 2>&1)"
slurmctld -i -f "$D/slurm.conf" || skip "slurmctld does not start: $(tail -n 1 "$D/slurmctld.log" 2>&1)"
slurmd -f "$D/slurm.conf" || skip "slurmd does not start: $(tail -n 1 "$D/slurmd.log" 2>&1)"
for _ in $(seq 1 300); do [ "$(sinfo -h -p low -o %t 2> /dev/null)" = idle ] && break; sleep 0.1; done
[ "$(sinfo -h -p low -o %t 2> /dev/null)" = idle ] || skip "the node did not come up within 30 s: $(tail -n 2 "$D/slurmd.log" 2>&1 | tr '\n' ' ')"
daemon_pids=$(cat "$D/slurmctld.pid" "$D/slurmd.pid" "$D/munged.pid" 2> /dev/null)
ok "slurmctld and slurmd $(slurmctld -V | awk '{ print $2 }') up on $host (private ports $ctld_port, $d_port)"

G=scripts/slurm/train_gpt2.sbatch
# field JOB NAME: a field of `scontrol show job`.
field() { scontrol show job -o "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
# wait_until SECONDS COMMAND...: polls COMMAND every 0.1 s; its status.
wait_until() {
    local n=$(($1 * 10)); shift
    for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.1; done
    return 1
}
state_is() { [ "$(field "$1" JobState)" = "$2" ]; }
# no_jobs: nothing in the queue (every job, and its steps' cleanup, gone), the next case's start.
no_jobs() { [ -z "$(squeue -h -o %i 2> /dev/null)" ]; }
ended() { [[ "$(field "$1" JobState)" =~ ^(CANCELLED|COMPLETED|FAILED|PENDING|TIMEOUT)$ ]]; }
log_has() { grep -q -- "$2" "$D/$1.out" 2> /dev/null; }
outtail() { grep -v '^step' "$D/$1.out" 2> /dev/null | tail -n "${2:-3}" | tr '\n' ' '; }
# submit NAME [VAR=VALUE... --] [SBATCH OPTIONS...]: the generic script with a tiny model on
# 2 tasks of this node (file rendezvous); prints the job id.
submit() {
    local name=$1; shift
    local vars=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    env MODEL_ARGS="--device cpu --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 64 -v 0 -x 2000" \
        TRAIN="$TRAIN_SHARD" VAL= RUN_DIR="$D/run_$name" RENDEZVOUS=file CKPT_EVERY=1000 "${vars[@]}" \
        sbatch --parsable -N 1 -n 2 --ntasks-per-node=2 -c 1 --time=10 -o "$D/$name.out" "$@" "$G"
}
committed() { ls "$D/run_$1/ckpt" 2> /dev/null | grep -E '^step_[0-9]+$' | tr '\n' ' '; }

# GPUs: this cluster has no GPU GRES.
out=$(sbatch --test-only -N 1 -n 2 --ntasks-per-node=2 -c 1 "$G" 2>&1); rc=$?
out124=$(sbatch --test-only -N 1 -n 2 --ntasks-per-node=2 -c 1 scripts/slurm/train_gpt2_124M.sbatch 2>&1); rc124=$?
out0=$(sbatch --test-only -N 1 -n 2 --ntasks-per-node=2 -c 1 --gpus-per-node=0 scripts/slurm/train_gpt2_124M.sbatch 2>&1); rc0=$?
if [ $rc = 0 ] && [ $rc124 != 0 ] && grep -q "Invalid generic resource" <<<"$out124" && [ $rc0 = 0 ]; then
    ok "sbatch on a cluster without GPU GRES: takes train_gpt2.sbatch; refuses train_gpt2_124M.sbatch's --gpus-per-node=8 ($out124), takes it with --gpus-per-node=0"
else not_ok "sbatch GPU requests: generic $rc ($out), 124M $rc124 ($out124), 124M --gpus-per-node=0 $rc0 ($out0)"; fi

# scancel: a checkpoint, no requeue, CANCELLED.
j=$(submit scancel)
if wait_until 60 log_has scancel "step    3/"; then
    scancel "$j"
    wait_until 40 ended "$j"
    st=$(field "$j" JobState); restarts=$(field "$j" Restarts)
    if [ "$st" = CANCELLED ] && [ "$restarts" = 0 ] && [ -n "$(committed scancel)" ] && ! log_has scancel "): requeueing job" &&
       log_has scancel "stopped on SIGTERM (srun status [0-9]*, checkpoint step [0-9]* committed by this attempt): not requeueing"; then
        ok "scancel of a running job: $(committed scancel)committed, not requeued, JobState=$st Restarts=$restarts: $(grep -o 'stopped on SIGTERM.*not requeueing' "$D/scancel.out")"
    else not_ok "scancel: JobState=$st Restarts=$restarts, committed: '$(committed scancel)', output: $(outtail scancel 4)"; fi
else not_ok "scancel: the job did not train: state $(field "$j" JobState), $(outtail scancel)"; fi
scancel "$j" 2> /dev/null
wait_until 40 no_jobs

# SIGUSR1 to the batch shell: a checkpoint and a requeue, held about 2 minutes.
j=$(submit usr1)
if wait_until 60 log_has usr1 "step    3/"; then
    requeued_at=$(date +%s)
    scancel --batch --signal=USR1 "$j"
    wait_until 40 state_is "$j" PENDING
    st=$(field "$j" JobState); restarts=$(field "$j" Restarts); begin=$(date -d "$(field "$j" EligibleTime)" +%s 2> /dev/null || echo 0)
    delay=$((begin - requeued_at))
    if [ "$st" = PENDING ] && [ "$restarts" = 1 ] && [ "$delay" -ge 100 ] && [ "$delay" -le 200 ] &&
       log_has usr1 "train_gpt stopped on SIGUSR1 (srun status [0-9]*, checkpoint step [0-9]* committed by this attempt): requeueing job $j (restart 0)"; then
        ok "scancel --batch --signal=USR1: $(committed usr1)committed, scontrol requeue: JobState=PENDING Restarts=1, eligible again ${delay} s later"
    else not_ok "SIGUSR1: JobState=$st Restarts=$restarts, eligible after ${delay} s, output: $(outtail usr1 4)"; fi
else not_ok "SIGUSR1: the job did not train: state $(field "$j" JobState), $(outtail usr1)"; fi
scancel "$j" 2> /dev/null
wait_until 40 no_jobs

# SIGUSR1 during setup: nothing saved, no requeue.
printf '#!/bin/bash\n# a start slower than the warning: 20 s before train_gpt\nsleep 20 & wait\nexec %s "$@"\n' "$(pwd)/train_gpt" > "$D/slow_start"
chmod +x "$D/slow_start"
j=$(submit setup TRAIN_GPT="$D/slow_start" --)
if wait_until 30 state_is "$j" RUNNING && wait_until 30 log_has setup "train_gpt2.sbatch: srun"; then
    sleep 1
    scancel --batch --signal=USR1 "$j"
    wait_until 40 ended "$j"
    st=$(field "$j" JobState); restarts=$(field "$j" Restarts)
    if [ "$st" = FAILED ] && [ "$restarts" = 0 ] && [ -z "$(committed setup)" ] &&
       log_has setup "got SIGUSR1 but no checkpoint in .* (srun status [0-9]*): not requeueing"; then
        ok "SIGUSR1 during setup: nothing saved, not requeued, JobState=$st Restarts=$restarts"
    else not_ok "SIGUSR1 during setup: JobState=$st Restarts=$restarts, output: $(outtail setup 4)"; fi
else not_ok "SIGUSR1 during setup: the job did not start: state $(field "$j" JobState), $(outtail setup)"; fi
scancel "$j" 2> /dev/null
wait_until 40 no_jobs

# Preemption by a job in the higher-priority partition: Slurm requeues, the script does not.
j=$(submit preempt)
if wait_until 60 log_has preempt "step    3/"; then
    hj=$(sbatch --parsable -p high -N 1 -n 2 -c 1 -o /dev/null --wrap "sleep 1")
    wait_until 40 state_is "$j" PENDING
    st=$(field "$j" JobState); restarts=$(field "$j" Restarts)
    sleep 1   # a requeue by the script would come after Slurm's
    if [ "$st" = PENDING ] && [ "$(field "$j" Restarts)" = 1 ] && ! log_has preempt "requeueing job" &&
       log_has preempt "stopped on SIGTERM .*: not requeueing"; then
        ok "preemption (PreemptMode=REQUEUE): Slurm requeued the job once (JobState=PENDING Restarts=1), the script did not"
    else not_ok "preemption: JobState=$st Restarts=$(field "$j" Restarts), output: $(outtail preempt 4)"; fi
    scancel "$hj" 2> /dev/null
else not_ok "preemption: the job did not train: state $(field "$j" JobState), $(outtail preempt)"; fi
scancel "$j" 2> /dev/null
wait_until 40 no_jobs

# srun --mpi=pmix, a rank killed: the other leaves within seconds of srun's SIGTERM.
if ! srun --mpi=list 2>&1 | grep -qw pmix; then
    ok "srun --mpi=pmix: a killed rank # skip this Slurm has no pmix plugin"
else
    out=$D/mpi
    wait_until 40 no_jobs
    timeout 120 srun --mpi=pmix --kill-on-bad-exit=1 -p low -N 1 -n 2 -c 1 ./train_gpt --device cpu --layers 2 --channels 64 \
        --heads 2 --max-seq 64 -b 2 -t 64 -v 0 --threads 1 -i "$TRAIN_SHARD" -x 2000 -o "$out" > "$out.log" 2>&1 &
    pid=$!
    if wait_until 60 grep -q "step    3/" "$out.log" && grep -q "2 rank(s) via slurm (mpi)" "$out.log"; then
        # (srun starts the ranks by their full path: the first word ends in train_gpt; srun's is srun)
        victim=$(pgrep -n -f "^[^ ]*train_gpt .*$out")
        t0=$(date +%s.%N)
        [ -n "$victim" ] && kill -9 "$victim"
        wait $pid; rc=$?; secs=$(echo "$(date +%s.%N) - $t0" | bc)
        line=$(grep -m1 -o "stop signal (SIGTERM) while blocked in .*" "$out.log")
        if [ -z "$victim" ]; then not_ok "srun --mpi=pmix, a rank killed: no rank process found to kill"
        elif [ -n "$line" ] && [ "$(echo "$secs < 20" | bc)" = 1 ]; then
            ok "srun --mpi=pmix, a rank killed: the other rank left $(printf %.1f "$secs") s later (KillWait 30 s): $line"
        else not_ok "srun --mpi=pmix, a rank killed: srun status $rc after $secs s: $(grep -v '^step' "$out.log" | tail -n 4 | tr '\n' ' ')"; fi
    else
        kill $pid 2> /dev/null; wait $pid
        ok "srun --mpi=pmix: a killed rank # skip train_gpt does not form an MPI world under srun --mpi=pmix here: $(grep -v '^step' "$out.log" | tail -n 2 | tr '\n' ' ')$(grep -i error "$D/slurmd.log" | tail -n 2 | tr '\n' ' ')"
    fi
fi
