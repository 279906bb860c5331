#!/usr/bin/env bash
# run_tests: cores 1.1, 34 s
# train_gpt --plan (train/plan.h): the memory budget it predicts is the one a real run prints
# (the same function computes both; checked against real cpu runs), the simulated timeline
# honours the schedule's dependencies, communication never beats the alpha-beta bound, bad
# --sim-device / --plan-world values get one clear line and a non-zero exit, and a d48 plan
# takes well under a second without touching model-sized memory.
set -u
source dev/test/lib.sh
out=$TEST_TMP
TG=./train_gpt

# budget_lines LOG: the "memory budget per rank" block up to its total line.
budget_lines() { sed -n '/^memory budget per rank/,/^  total /p' "$1"; }
# field LOG ROW COL: column COL (1-based, after the label) of the "  ROW ..." line of the time table.
row_field() { awk -v row="$2" -v col="$3" '$1 == row && NF >= 5 && $2 ~ /^[0-9.]+$/ { print $(col + 1); exit }' "$1"; }

# 1. The plan's budget = a real cpu run's, for several flag sets (the cpu profile models the
#    cpu device: fp32, host memory). np 1 and 2 (sharded: other shard sizes and padding).
#    The first check uses the built-in cpu profile (which measures the machine, ~2 s); the
#    others a profile file of the same dtype (dtype=fp32), to keep the test quick.
tiny=(--layers 4 --channels 64 --heads 2 --max-seq 64 -t 32)
printf '# the cpu device, nominal rates\ndtype=fp32\ntflops=0.1\nhbm_gbs=20\nmem_gib=16\n' >"$out/fp32.prof"
sim=cpu
check_budget() {
    local name=$1 np=$2; shift 2
    local real="$out/real_$name.log" plan="$out/plan_$name.log"
    if ! run_np "$np" $TG --device cpu "${tiny[@]}" "$@" -x 1 -v 0 --threads 1 -i "$TRAIN_SHARD" >"$real" 2>&1; then
        not_ok "budget $name: the real run failed: $(tail -n 2 "$real" | tr '\n' ' ')"; return
    fi
    if ! $TG --plan --sim-device "$sim" --plan-world "$np" "${tiny[@]}" "$@" >"$plan" 2>&1; then
        not_ok "budget $name: --plan failed: $(tail -n 2 "$plan" | tr '\n' ' ')"; return
    fi
    if [ -z "$(budget_lines "$real")" ]; then not_ok "budget $name: no budget lines in the real run"; return; fi
    if diff <(budget_lines "$real") <(budget_lines "$plan") >"$out/diff_$name" 2>&1; then
        ok "budget $name: --plan prints the real run's budget ($(budget_lines "$plan" | awk '/total/ {print $2, $3}'))"
    else
        not_ok "budget $name: --plan differs from the real run: $(tr '\n' ' ' <"$out/diff_$name" | head -c 300)"
    fi
}
check_budget "recompute-none-prefetch1" 1 -b 2 --recompute none --prefetch 1
sim=$out/fp32.prof
check_budget "recompute-full-prefetch0" 1 -b 2 --recompute full --prefetch 0
check_budget "selective-accum-nosync"   1 -b 1 -d 128 --recompute selective --no-grad-sync-until-last
check_budget "np2-units2-reshard0"      2 -b 2 --fsdp-unit-layers 2 --reshard-after-forward 0
check_budget "np2-hsdp"                 2 -b 2 --shard-group-size 1

# 2. Dependencies. With a link of 1 MB/s the collectives dominate: the step (compute clock)
#    cannot end before the comm stream's total busy time, since every collective is waited for.
printf 'like=h100\nnvlink_gbs=0.001\nib_gbs=0.001\n' >"$out/slow_link.prof"
if $TG --plan -m d4 -b 2 -t 256 --plan-world 8 --sim-device "$out/slow_link.prof" >"$out/slow.log" 2>&1; then
    step=$(row_field "$out/slow.log" step 3); busy=$(row_field "$out/slow.log" step 4); compute=$(row_field "$out/slow.log" step 1)
    if awk -v s="$step" -v b="$busy" -v c="$compute" 'BEGIN { exit !(s >= b && s >= c && b > 0) }'; then
        ok "slow link: step $step ms >= collectives' busy time $busy ms and compute $compute ms"
    else
        not_ok "slow link: step '$step' ms < collectives' busy '$busy' ms or compute '$compute' ms"
    fi
else
    not_ok "slow link: --plan failed: $(tail -n 2 "$out/slow.log" | tr '\n' ' ')"
fi
# Communication comparable to compute: prefetch 0 waits for every gather, prefetch 1 hides
# them behind the previous unit's compute.
printf 'like=h100\nnvlink_gbs=90\n' >"$out/mid_link.prof"
exposed_at() {
    $TG --plan -m d12 -b 4 -t 1024 --plan-world 8 --sim-device "$out/mid_link.prof" --prefetch "$1" >"$out/prefetch$1.log" 2>&1 &&
        row_field "$out/prefetch$1.log" step 2
}
e0=$(exposed_at 0); e1=$(exposed_at 1)
c1=$(row_field "$out/prefetch1.log" step 1); b1=$(row_field "$out/prefetch1.log" step 4)
if [ -n "$e0" ] && [ -n "$e1" ] && awk -v a="$e0" -v b="$e1" 'BEGIN { exit !(a > b) }'; then
    ok "prefetch 0 exposes more communication than prefetch 1 ($e0 ms vs $e1 ms; compute $c1 ms, comm busy $b1 ms)"
else
    not_ok "prefetch 0 vs 1: exposed '$e0' ms vs '$e1' ms"
fi

# --offload optimizer: the device keeps only the bf16 shards (2 of the 18 bytes per parameter
# and rank), and the step waits for the host: with a slow host (1 GB/s) a step takes at least
# AdamW's 30 bytes per shard element at that rate; with an unlimited host and link it costs
# what the step on the GPU costs (within 5%).
printf 'like=h100\nhost_mem_gbs=1\n' >"$out/slow_host.prof"
printf 'like=h100\nhost_mem_gbs=1000000\nhost_link_gbs=1000000\n' >"$out/fast_host.prof"
off=(-m d12 -b 4 -t 1024 --plan-world 8)
if $TG --plan "${off[@]}" --sim-device h100 >"$out/on_gpu.log" 2>&1 &&
   $TG --plan "${off[@]}" --sim-device "$out/slow_host.prof" --offload optimizer >"$out/slow_host.log" 2>&1 &&
   $TG --plan "${off[@]}" --sim-device "$out/fast_host.prof" --offload optimizer >"$out/fast_host.log" 2>&1; then
    n=$(awk '/^model:/ {print $(NF-1)}' "$out/on_gpu.log")
    dev=$(awk '/^  sharded params/ {print $(NF-1)}' "$out/on_gpu.log"); odev=$(awk '/^  sharded bf16 params/ {print $(NF-1)}' "$out/slow_host.log")
    s0=$(row_field "$out/on_gpu.log" step 3); ss=$(row_field "$out/slow_host.log" step 3); sf=$(row_field "$out/fast_host.log" step 3)
    if awk -v n="$n" -v d="$dev" -v o="$odev" -v s0="$s0" -v ss="$ss" -v sf="$sf" 'BEGIN {
            exit !(n > 0 && (o / d - 2 / 18) ^ 2 < 1e-4 && ss >= 30 * n / 8 / 1e9 * 1e3 && (sf / s0 - 1) ^ 2 < 0.0025) }'; then
        ok "--offload optimizer plan: device shards $odev of $dev MiB; step $ss ms with a 1 GB/s host (AdamW alone: $(awk -v n="$n" 'BEGIN {printf "%.0f", 30 * n / 8 / 1e6}') ms), $sf ms with an unlimited one vs $s0 ms on the GPU"
    else
        not_ok "--offload optimizer plan: shards '$odev' vs '$dev' MiB, steps slow '$ss' fast '$sf' on GPU '$s0' ms (N $n)"
    fi
else
    not_ok "--offload optimizer plan failed: $(tail -n 2 "$out/slow_host.log" "$out/fast_host.log" | tr '\n' ' ')"
fi

# --param-dtype fp16: the same bytes and rates as bf16 on a GPU profile (its loss scale is one
# multiply in the cross-entropy and one in the decision), so the same plan; the cpu profile,
# which models the fp32 cpu device, refuses it in one line.
if $TG --plan "${off[@]}" --sim-device h100 --param-dtype fp16 >"$out/fp16.log" 2>&1 && diff -q "$out/on_gpu.log" "$out/fp16.log" >/dev/null; then
    ok "--param-dtype fp16 plan: identical to bf16's (budget $(awk '/^  total/ {print $2, $3}' "$out/fp16.log"), step $(row_field "$out/fp16.log" step 3) ms)"
else
    not_ok "--param-dtype fp16 plan differs from bf16's or failed: $(diff "$out/on_gpu.log" "$out/fp16.log" | head -n 4 | tr '\n' ' ')"
fi
msg=$($TG --plan -m d4 -b 2 -t 64 --sim-device cpu --param-dtype fp16 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -q -- '--param-dtype fp16: loss scaling needs the optimizer on a GPU' <<<"$msg"; then
    ok "--param-dtype fp16 on the cpu profile: refused in one line ($msg)"
else
    not_ok "--param-dtype fp16 on the cpu profile: status $rc, '$msg'"
fi

# The cpu profile measures this machine with the threads a rank of the planned run gets, as a
# run would have them: the node's cores shared by its ranks (not every core per rank), or
# --threads; each world of a scaling table at its own count, its MFU against its own peak.
cores=$(nproc); per2=$((cores / 2)); [ $per2 -lt 1 ] && per2=1
cpuplan=(--plan --layers 2 --channels 64 --heads 2 --max-seq 64 -b 2 -t 64 --sim-device cpu --gpus-per-node 2)
if env -u OMP_NUM_THREADS $TG "${cpuplan[@]}" --plan-world 2 >"$out/threads2.log" 2>&1 &&
   grep -q "^plan: rank 0 of 2 on cpu (simulated, measured with $per2 thread(s) per rank)" "$out/threads2.log" &&
   $TG "${cpuplan[@]}" --plan-world 2 --threads 3 >"$out/threads3.log" 2>&1 &&
   grep -q "^plan: rank 0 of 2 on cpu (simulated, measured with 3 thread(s) per rank)" "$out/threads3.log"; then
    ok "--sim-device cpu at 2 ranks per node: measured with $per2 thread(s) per rank ($cores cores), with --threads 3: 3"
else
    not_ok "--sim-device cpu threads: $(grep -h '^plan: rank\|^error' "$out/threads2.log" "$out/threads3.log" 2>/dev/null | cut -c1-120 | tr '\n' ' ')"
fi
if env -u OMP_NUM_THREADS $TG "${cpuplan[@]}" --plan-world 1,2 >"$out/threads12.log" 2>&1; then
    detail=$(awk '/^step / {print $NF; exit}' "$out/threads12.log")
    row1=$(awk '$1 == 1 && $2 == 1 && NF > 12 {print $11; exit}' "$out/threads12.log")
    [ -n "$detail" ] && [ "$detail" = "$row1" ] && ok "--sim-device cpu --plan-world 1,2: the world-1 row's MFU is the detail's ($detail), against its own measured peak" \
        || not_ok "--sim-device cpu --plan-world 1,2: detail MFU '$detail', world-1 row '$row1'"
else
    not_ok "--sim-device cpu --plan-world 1,2 failed: $(tail -n 2 "$out/threads12.log" | tr '\n' ' ')"
fi

# 3. Scaling: every world's communication is at least the bandwidth bound (its bytes over
#    the fastest link), and a larger world never predicts less communication per rank.
if $TG --plan -m d12 -b 8 -t 1024 --plan-world 8,16,64,512 --sim-device h100 >"$out/scale.log" 2>&1; then
    if awk '/^  +world +shard/ { t = 1; next }
            t && NF >= 13 { n++; busy = $8; lb = $9
                           if (busy + 1e-9 < lb) { print "world " $1 ": comm " busy " ms < bound " lb " ms"; bad = 1 }
                           if (n > 1 && busy + 1e-9 < prev) { print "world " $1 ": comm " busy " ms < " prev " ms at a smaller world"; bad = 1 }
                           prev = busy }
            END { if (n != 4) { print "expected 4 rows, got " n; bad = 1 }; exit bad }' "$out/scale.log" >"$out/scale.why"; then
        ok "scaling 8..512: comm per rank >= the alpha-beta bandwidth bound and non-decreasing in W ($(awk '/^  +world/ {t=1; next} t && NF >= 13 {printf "%s:%s ", $1, $8}' "$out/scale.log")ms)"
    else
        not_ok "scaling: $(tr '\n' ' ' <"$out/scale.why")"
    fi
else
    not_ok "scaling: --plan failed: $(tail -n 2 "$out/scale.log" | tr '\n' ' ')"
fi
# HSDP: replicas across nodes add an all-reduce; the shard group stays on NVLink.
if $TG --plan -m d12 -b 8 -t 1024 --plan-world 64 --shard-group-size 8 --sim-device h100 >"$out/hsdp.log" 2>&1 &&
   grep -q "shard group 8 x 8 replica(s)" "$out/hsdp.log"; then
    ok "HSDP plan: shard group 8 x 8 replicas"
else
    not_ok "HSDP plan: $(tail -n 2 "$out/hsdp.log" | tr '\n' ' ')"
fi

# 4. Bad values: one line naming the flag (and file:line), non-zero exit.
one_line_error() {
    local name=$1 pattern=$2; shift 2
    local o rc
    o=$("$@" 2>&1); rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <<<"$o")" -eq 1 ] && grep -qE -- "$pattern" <<<"$o"; then
        ok "$name ($o)"
    else
        not_ok "$name: exit $rc, output: $(head -c 300 <<<"$o" | tr '\n' '|')"
    fi
}
printf 'like=h100\nbogus_key=3\n' >"$out/bad_key.prof"
printf 'tflops=100\nhbm_gbs=fast\nmem_gib=80\n' >"$out/bad_value.prof"
printf 'tflops 100\n' >"$out/no_equals.prof"
printf 'tflops=100\n' >"$out/incomplete.prof"
printf 'like=h100\nmatmul_eff=1.5\n' >"$out/bad_eff.prof"
one_line_error "unknown --sim-device name"  "^error: --sim-device 'h300': not a built-in device" $TG --plan --sim-device h300
one_line_error "profile: unknown key"       "bad_key.prof:2: unknown key 'bogus_key'" $TG --plan --sim-device "$out/bad_key.prof"
one_line_error "profile: bad value"         "bad_value.prof:2: hbm_gbs: expected a number in \\[0.01, 1e\\+06\\] \\(GB/s\\), got 'fast'" $TG --plan --sim-device "$out/bad_value.prof"
one_line_error "profile: no KEY=VALUE"      "no_equals.prof:1: expected KEY=VALUE" $TG --plan --sim-device "$out/no_equals.prof"
one_line_error "profile: missing keys"      "incomplete.prof: needs tflops, hbm_gbs and mem_gib" $TG --plan --sim-device "$out/incomplete.prof"
one_line_error "profile: efficiency > 1"    "bad_eff.prof:2: matmul_eff: expected a number in \\[0.0001, 1\\] \\(a fraction of the peak\\), got '1.5'" \
    $TG --plan --sim-device "$out/bad_eff.prof"
# Values far outside a device's range (they planned steps of 300 digits), and files that are
# not a profile's: a FIFO or /dev/zero (they blocked or never ended: timeout makes a hang a
# failure), a directory, a file over 1 MiB, a NUL byte.
printf 'like=h100\ntflops=1e300\n' >"$out/huge.prof"
printf 'like=h100\nnvlink_latency_us=1e-300\n' >"$out/tiny.prof"
printf 'like=h100\nlaunch_us=inf\n' >"$out/inf.prof"
printf 'like=h100\n\0tflops=1\n' >"$out/nul.prof"
truncate -s 2M "$out/big.prof"
rm -f "$out/fifo.prof"; mkfifo "$out/fifo.prof"
one_line_error "profile: tflops=1e300"      "huge.prof:2: tflops: expected a number in \\[0.0001, 100000\\] \\(TFLOP/s\\), got '1e300'" \
    $TG --plan --sim-device "$out/huge.prof"
one_line_error "profile: a latency of 1e-300" "tiny.prof:2: nvlink_latency_us: expected a number in \\[0.001, 1e\\+07\\] \\(us\\), got '1e-300'" \
    $TG --plan --sim-device "$out/tiny.prof"
one_line_error "profile: inf"               "inf.prof:2: launch_us: expected a number in .*, got 'inf'" $TG --plan --sim-device "$out/inf.prof"
one_line_error "profile: a NUL byte"        "nul.prof: not a text file \\(a NUL byte at offset 10\\)" $TG --plan --sim-device "$out/nul.prof"
one_line_error "profile: over 1 MiB"        "big.prof: 2097152 bytes, more than the 1048576 read here" $TG --plan --sim-device "$out/big.prof"
one_line_error "profile: a FIFO"            "fifo.prof: not a regular file \\(a FIFO\\)" timeout 20 $TG --plan --sim-device "$out/fifo.prof"
one_line_error "profile: /dev/zero"         "/dev/zero: not a regular file \\(a character device\\)" timeout 20 $TG --plan --sim-device /dev/zero
one_line_error "profile: a directory"       "'$out': not a built-in device .*not a regular file \\(a directory\\)" $TG --plan --sim-device "$out"
# B x T over an int: the kernels' N overflowed (the plan printed "matmul 0.00 ms" and an MFU).
one_line_error "--plan: B x T over 2^31"    "^error: --batch-size 65536 x --seq-len 65536 = 4294967296 tokens per micro-batch, more than 2147483647" \
    $TG --plan --layers 1 --channels 64 --heads 1 --max-seq 65536 -b 65536 -t 65536
one_line_error "--plan-world not a number"  "^error: --plan-world: expected a comma-separated list" $TG --plan --plan-world 8,x
one_line_error "--plan-world 0"             "^error: --plan-world: expected a comma-separated list" $TG --plan --plan-world 0
one_line_error "--plan-world trailing comma" "^error: --plan-world: a trailing comma" $TG --plan --plan-world 8,
one_line_error "--plan-world without --plan" "^error: --plan-world applies to --plan only" $TG --plan-world 8
one_line_error "--plan: batch split at W"   "^error: --plan at world size 64: --total-batch-tokens 131072 is not a multiple" \
    $TG --plan -m d4 -b 4 -t 1024 -d 131072 --plan-world 8,64

printf 'like=h100\ndtype=fp32\n' >"$out/fp32.prof"
one_line_error "--offload on an fp32 profile" "offload optimizer: this device's state is in host memory already" \
    $TG --plan --sim-device "$out/fp32.prof" --offload optimizer
one_line_error "--calibrate-from no table"  "no --profile-step table in it" $TG --plan --calibrate-from "$out/bad_eff.prof"
one_line_error "--calibrate-from missing"   "^error: --calibrate-from $out/none.log: cannot open: No such file" $TG --plan --calibrate-from "$out/none.log"
one_line_error "--calibrate-from a FIFO"    "^error: --calibrate-from $out/fifo.prof: not a regular file \\(a FIFO\\)" \
    timeout 20 $TG --plan --calibrate-from "$out/fifo.prof"
one_line_error "--calibrate-from /dev/zero" "^error: --calibrate-from /dev/zero: not a regular file \\(a character device\\)" \
    timeout 20 $TG --plan --calibrate-from /dev/zero
{ echo "profile of step 2 (rank 0, cpu device; the stream's time between marks): 1.00 ms, 1.00 ms on the host clock"
  printf '  %-30s %-8s 1%0300d.000 ms 100.0%%      1 interval(s)\n' "attention" "forward" 0; } >"$out/huge.log"
one_line_error "--calibrate-from: a time of 301 digits" "huge.log:2: attention: expected a time in \\[0, 86400000\\] ms" \
    $TG --plan --calibrate-from "$out/huge.log"
# A time that would scale the profile below what it reads back (a log of other flags).
{ echo "profile of step 2 (rank 0, cpu device; the stream's time between marks): 1.00 ms, 1.00 ms on the host clock"
  printf '  %-30s %-8s 0.0000001 ms 100.0%%      1 interval(s)\n' "attention" "forward"; } >"$out/tiny.log"
one_line_error "--calibrate-from: a time scale outside a profile's range" \
    "tiny.log: attention measured 1e-07 ms against .* ms planned: a time scale of .*, outside \\[0.0001, 10000\\]" \
    $TG --plan --calibrate-from "$out/tiny.log"

# 4b. Attention per implementation and head size. A profile's attention_eff_IMPL_HS keys
#     are bounded like every efficiency; an older profile's single attention_eff still reads,
#     applies to every implementation and head size not given its own, and says so in one
#     line. With the bytes made free (hbm 1e6 GB/s, launches 1 ns), the planned attention time
#     of each --attention is its FLOPs over its own efficiency: the times' ratios are the
#     efficiencies' inverse ratios.
printf 'like=h200\nattention_eff_cudnn_128=1.5\n' >"$out/bad_att.prof"
printf 'like=h200\nattention_eff_flash_64=0\n' >"$out/zero_att.prof"
printf 'like=h200\nvector_mem_eff=2\n' >"$out/bad_vec.prof"
one_line_error "profile: attention_eff_cudnn_128 > 1" "bad_att.prof:2: attention_eff_cudnn_128: expected a number in \\[0.0001, 1\\] \\(a fraction of the peak\\), got '1.5'" \
    $TG --plan --sim-device "$out/bad_att.prof"
one_line_error "profile: attention_eff_flash_64 = 0" "zero_att.prof:2: attention_eff_flash_64: expected a number in \\[0.0001, 1\\]" \
    $TG --plan --sim-device "$out/zero_att.prof"
one_line_error "profile: vector_mem_eff > 1" "bad_vec.prof:2: vector_mem_eff: expected a number in \\[0.0001, 1\\]" \
    $TG --plan --sim-device "$out/bad_vec.prof"
# attention_time NAME LOG: the plan's attention group time (ms); att_line LOG: its attention line.
attention_ms() { sed -nE 's/^kernel time by group \(ms\):.* attention ([0-9.]+),.*/\1/p' "$1"; }
small=(-m d12 -b 4 -t 1024 --plan-world 1)
printf '# an older profile\nlike=h200\nattention_eff=0.25\nattention_eff_cublas_64=0.05\n' >"$out/old.prof"
if $TG --plan "${small[@]}" --sim-device "$out/old.prof" >"$out/old_flash.log" 2>"$out/old_flash.err" &&
   $TG --plan "${small[@]}" --sim-device "$out/old.prof" --attention cublas >"$out/old_cublas.log" 2>/dev/null &&
   [ "$(wc -l <"$out/old_flash.err")" = 1 ] &&
   grep -q "^note: --sim-device $out/old.prof:3: attention_eff=0.25 (an older profile's one attention efficiency) applies to every implementation and head size not given its own" "$out/old_flash.err" &&
   grep -q "^attention: flash at head size 64, 0.25 of the peak" "$out/old_flash.log" &&
   grep -q "^attention: cublas at head size 64, 0.05 of the peak" "$out/old_cublas.log"; then
    ok "an older profile's attention_eff: read, applied to flash (0.25) but not to cublas, given its own (0.05), said in one line ($(cat "$out/old_flash.err"))"
else
    not_ok "older profile's attention_eff: $(cat "$out/old_flash.err" | head -c 300) | $(grep -h '^attention:\|^error' "$out/old_flash.log" "$out/old_cublas.log" | tr '\n' ' ')"
fi
printf 'like=h200\nhbm_gbs=1000000\nlaunch_us=0.001\nattention_eff_flash_64=0.2\nattention_eff_cublas_64=0.05\nattention_eff_cudnn_64=0.5\nattention_eff_flash_128=0.1\nattention_eff_flash-pipelined_64=0.4\n' \
    >"$out/att.prof"
plan_att() { $TG --plan "${small[@]}" --sim-device "$out/att.prof" "$@"; }
# ratio_ok A B WANT: A / B within 0.2% of WANT (the times are printed to 0.001 ms: at 0.58 ms
# their rounding alone moves a ratio by up to 0.1%; the implementations' launches, 1 ns each
# here, by 1e-5).
ratio_ok() { awk -v a="$1" -v b="$2" -v w="$3" 'BEGIN { exit !(a > 0 && b > 0 && (a / b / w - 1) ^ 2 < 4e-6) }'; }
if plan_att >"$out/att_auto.log" 2>&1 && plan_att --attention flash >"$out/att_flash.log" 2>&1 &&
   plan_att --attention cublas >"$out/att_cublas.log" 2>&1; then
    ta=$(attention_ms "$out/att_auto.log"); tf=$(attention_ms "$out/att_flash.log"); tc=$(attention_ms "$out/att_cublas.log")
    if [ "$ta" = "$tf" ] && ratio_ok "$tc" "$tf" 4 && grep -q "^attention: cublas at head size 64, 0.05 of the peak" "$out/att_cublas.log"; then
        ok "--attention in --plan: cublas $tc ms = 4 x flash $tf ms (efficiencies 0.05 and 0.2); auto plans flash at head size 64"
    else
        not_ok "--attention in --plan: auto '$ta', flash '$tf', cublas '$tc' ms (cublas should be 4x flash)"
    fi
else
    not_ok "--attention in --plan failed: $(tail -n 1 "$out/att_auto.log" "$out/att_flash.log" "$out/att_cublas.log" | tr '\n' ' ')"
fi
# cudnn: the option parser learns the name in #32's cudnn slice; until then the plan cannot be asked for it.
if plan_att --attention cudnn >"$out/att_cudnn.log" 2>&1; then
    td=$(attention_ms "$out/att_cudnn.log")
    ratio_ok "$tf" "$td" 2.5 && grep -q "^attention: cudnn at head size 64, 0.5 of the peak" "$out/att_cudnn.log" &&
        ok "--attention cudnn in --plan: $td ms, flash's $tf ms / 2.5 (efficiencies 0.5 and 0.2)" ||
        not_ok "--attention cudnn in --plan: $td ms against flash's $tf ms (want flash / 2.5)"
elif grep -q -- "--attention: expected flash or cublas, got 'cudnn'" "$out/att_cudnn.log"; then
    ok "--attention cudnn in --plan # skip this build's option parser has no cudnn yet ($(head -n 1 "$out/att_cudnn.log"))"
else
    not_ok "--attention cudnn in --plan failed: $(head -c 300 "$out/att_cudnn.log")"
fi
# flash-pipelined: its own key (a hyphen in it) and its own tiles' pairs (128-key tiles, a warp
# per 16 queries: a few more masked pairs than flash's), so at twice flash's efficiency its
# attention takes between 0.5 and 0.6 of flash's time.
if plan_att --attention flash-pipelined >"$out/att_pl.log" 2>&1; then
    tp=$(attention_ms "$out/att_pl.log")
    if grep -q "^attention: flash-pipelined at head size 64, 0.4 of the peak (the profile's attention_eff_flash-pipelined_64)" "$out/att_pl.log" &&
       awk -v a="$tp" -v b="$tf" 'BEGIN { exit !(b > 0 && a / b >= 0.5 && a / b < 0.6) }'; then
        ok "--attention flash-pipelined in --plan: attention_eff_flash-pipelined_64 (0.4), $tp ms against flash's $tf ms (0.2)"
    else
        not_ok "--attention flash-pipelined in --plan: '$tp' ms against flash's '$tf' ms: $(grep '^attention:' "$out/att_pl.log")"
    fi
else
    not_ok "--attention flash-pipelined in --plan failed: $(head -c 300 "$out/att_pl.log")"
fi
# Head size 128 (2 heads of 128) takes the 128 column.
if $TG --plan --layers 2 --channels 256 --heads 2 --max-seq 256 -b 2 -t 256 --plan-world 1 --sim-device "$out/att.prof" >"$out/att128.log" 2>&1 &&
   grep -q "^attention: flash at head size 128, 0.1 of the peak (the profile's attention_eff_flash_128)" "$out/att128.log"; then
    ok "head size 128: the plan takes attention_eff_flash_128 (0.1)"
else
    not_ok "head size 128: $(grep -h '^attention:\|^error' "$out/att128.log" | head -c 300)"
fi
# --calibrate-from updates the efficiency of the implementation that ran (the run's device
# line names it), at the plan's head size, instead of a time scale: a profile table whose
# attention took 3x flash's planned time, from a run that names cublas, gives cublas the
# efficiency that plans exactly that time, and leaves flash's and the others as they were.
$TG --plan "${small[@]}" --sim-device h200 >"$out/cal_att_plan.log" 2>&1
pa=$(attention_ms "$out/cal_att_plan.log")
{ echo "GPU 0 of 1: NVIDIA H200, 139.8 GiB, sm_90 | bf16 | collectives none (nccl), reduce bf16 | attention cublas, gelu fusion 0"
  echo "profile of step 2 (rank 0, cuda device; the stream's time between marks): 1.00 ms, 1.00 ms on the host clock"
  awk -v p="$pa" 'BEGIN { printf "  %-30s %-8s %10.3f ms  50.0%%      1 interval(s)\n", "attention", "forward", p }'
  awk -v p="$pa" 'BEGIN { printf "  %-30s %-8s %10.3f ms  50.0%%      1 interval(s)\n", "attention", "backward", 2 * p }'; } >"$out/cal_att.log"
if [ -n "$pa" ] && $TG --plan "${small[@]}" --sim-device h200 --calibrate-from "$out/cal_att.log" >"$out/cal_att.prof" 2>"$out/cal_att.err" &&
   $TG --plan "${small[@]}" --sim-device "$out/cal_att.prof" --attention cublas >"$out/cal_att_cublas.log" 2>&1; then
    got=$(attention_ms "$out/cal_att_cublas.log")
    if ratio_ok "$got" "$pa" 3 && grep -q '^attention_eff_flash_64=0.138$' "$out/cal_att.prof" && grep -q '^attention_time_scale=1$' "$out/cal_att.prof" &&
       ! grep -q '^attention_eff_cublas_64=0.032$' "$out/cal_att.prof"; then
        ok "--calibrate-from: the run's implementation (cublas) gets $(grep '^attention_eff_cublas_64' "$out/cal_att.prof"): planned $got ms = the measured 3 x $pa ms; flash's 0.138 kept"
    else
        not_ok "--calibrate-from attention: cublas planned '$got' ms for a measured 3 x '$pa' ms; $(grep '^attention_' "$out/cal_att.prof" | tr '\n' ' ')"
    fi
else
    not_ok "--calibrate-from attention failed: $(cat "$out/cal_att.err" | head -c 300)"
fi

# 4c. The roofline table (as --profile-step prints it on a GPU, there measured): a row per
#     vector-kernel family and direction and the optimizer's, each with its bytes, its planned
#     time, the bytes' time at the profile's copy bandwidth (HBM x mem_eff: 4800 x 0.80 GB/s
#     on h200) and the ratio of the two.
if $TG --plan -m d12 -b 32 -t 1024 --plan-world 1 --sim-device h200 >"$out/roofline.log" 2>&1; then
    table=$(sed -n '/^vector kernels against the copy bandwidth (3840 GB\/s: the h200 profile.s HBM 4800 GB\/s x mem_eff 0.80)/,/^[^ ]/p' "$out/roofline.log")
    if awk -F'  +' '$2 != "" && $2 != "family" && /^  / {
            mb = $(NF-3); planned = $(NF-2) + 0; at = $(NF-1) + 0; ratio = $NF; n++
            if (!(mb > 0 && at > 0)) { print "row " $2 " " $3 ": bytes " mb ", at copy bw " at; bad = 1 }
            if ((at / (mb * 1e6 / 3840e9 * 1e3) - 1) ^ 2 > 1e-4) { print $2 ": " at " ms is not " mb " MB at 3840 GB/s"; bad = 1 }
            if ((ratio / (planned / at) - 1) ^ 2 > 1e-4) { print $2 ": ratio " ratio " is not " planned " / " at; bad = 1 }
            rows = rows $2 " " $3 ", " }
         END { if (n != 6) { print "expected 6 rows, got " n ": " rows; bad = 1 }; exit bad }' <<<"$table" >"$out/roofline.why"; then
        ok "--plan's roofline table: 6 rows (embedding, layernorm forward and backward, cross-entropy, optimizer), at copy bw = bytes / 3840 GB/s, ratio = planned / that ($(grep 'cross-entropy' <<<"$table" | tr -s ' '))"
    else
        not_ok "--plan's roofline table: $(tr '\n' ' ' <"$out/roofline.why") $(head -c 300 <<<"$table")"
    fi
else
    not_ok "--plan roofline: $(tail -n 1 "$out/roofline.log")"
fi

# 5. Calibration: a real cpu run's --profile-step table, turned into a profile file by
#    --calibrate-from, makes the plan of the same flags reproduce the measured kernel groups
#    (matmul, attention, vector, optimizer) within 1% (the factors are measured / planned).
cal=(--layers 4 --channels 128 --heads 2 --max-seq 64 -t 64 -b 4 --threads 1)
if run_np 1 $TG --device cpu "${cal[@]}" -x 3 -v 0 --profile-step 2 -i "$TRAIN_SHARD" -o "$out/cal_run" >"$out/cal_real.log" 2>&1 &&
   $TG --plan "${cal[@]}" --plan-world 1 --sim-device "$out/fp32.prof" --calibrate-from "$out/cal_real.log" >"$out/cal.prof" 2>"$out/cal.err" &&
   $TG --plan "${cal[@]}" --plan-world 1 --sim-device "$out/cal.prof" >"$out/cal_plan.log" 2>&1; then
    got=$(grep -m1 '^kernel time by group' "$out/cal_plan.log")
    if awk -v got="$got" '
        /^#   [a-z]+ +measured/ { want[$2] = $4 }
        END {
            n = split(got, w, /[ ,]+/)
            for (i = 1; i < n; i++) if (w[i] in want) { g = w[i]; v = w[i + 1]; seen++
                if (!(v >= 0.99 * want[g] && v <= 1.01 * want[g])) { print g ": planned " v ", measured " want[g]; bad = 1 } }
            exit bad || seen != 4 }' "$out/cal.prof"; then
        ok "--calibrate-from: the calibrated plan reproduces the profiled kernel groups ($(grep -c '_time_scale=' "$out/cal.prof") factors; ${got#kernel time by group })"
    else
        not_ok "--calibrate-from: calibrated plan '$got' vs $(grep '^#   ' "$out/cal.prof" | tr '\n' ' ')"
    fi
else
    not_ok "--calibrate-from: a step failed: $(tail -n 2 "$out/cal_real.log" "$out/cal.err" "$out/cal_plan.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
fi

# 6. d48 on h200 at 8, 64, 512 ranks: timed (printed; the bound is loose for a shared machine),
#    and the process stays small (the model's 18 GB of state is never allocated): its peak
#    RSS is within 64 MiB of a d1 plan's (the CUDA build's libraries alone take ~200 MiB).
/usr/bin/time -f "%M" -o "$out/d1.rss" $TG --plan -m d1 -b 1 -t 64 >/dev/null 2>&1
base_kib=$(tail -n 1 "$out/d1.rss")
start=$(date +%s%N)
if /usr/bin/time -f "%M" -o "$out/d48.rss" $TG --plan -m d48 -b 16 -t 1024 --plan-world 8,64,512 --sim-device h200 >"$out/d48.log" 2>&1; then
    ms=$(( ($(date +%s%N) - start) / 1000000 )); rss_kib=$(tail -n 1 "$out/d48.rss")
    if [ "$ms" -lt 5000 ] && [ "$rss_kib" -lt $((base_kib + 65536)) ] && grep -q "^limited by: " "$out/d48.log"; then
        ok "d48 --plan at 8,64,512 ranks: $ms ms, peak RSS $((rss_kib / 1024)) MiB (a d1 plan: $((base_kib / 1024)) MiB) ($(grep -m1 '^limited by' "$out/d48.log"))"
    else
        not_ok "d48 --plan: $ms ms (bound 5000), peak RSS $rss_kib KiB (bound: a d1 plan's $base_kib KiB + 65536)"
    fi
else
    not_ok "d48 --plan failed: $(tail -n 2 "$out/d48.log" | tr '\n' ' ')"
fi

# 7. Tensor parallel (--tp, --plan-tp). The TP bytes a plan prints are the sequence-parallel
#    schedule's, computed here from the model's shape alone: per micro-step, each layer's
#    forward 2 all-gathers + 2 reduce-scatters, backward 4 + 2 (full recompute: 2 + 1 more),
#    the root's forward and backward 1 + 1, each moving (tp - 1) / tp of [N, C] at e bytes;
#    the cross-entropy's all-reduces of 3N fp32; per gradient sync an all-reduce of the
#    replicated parameters' gradients (2 (tp - 1) / tp of them, e bytes each). Replicated:
#    GPT-2's LayerNorms, the row-parallel biases (attn.c_proj, mlp.c_proj) and wpe; Llama's norms.
# tp_bytes_expected L C N E TP ACCUM SYNCS FULL REPLICATED
tp_bytes_expected() {
    awk -v L="$1" -v C="$2" -v N="$3" -v e="$4" -v t="$5" -v a="$6" -v s="$7" -v full="$8" -v R="$9" 'BEGIN {
        p = (t - 1) / t; n = (4 * L + 2) + (6 * L + 2) + (full ? 3 * L : 0)
        printf "%.0f\n", a * (n * p * N * C * e + 2 * p * 3 * N * 4) + s * 2 * p * R * e }'
}
tp_bytes_printed() { sed -nE 's/^tensor parallel: TP bytes per step ([0-9]+) .*/\1/p' "$1"; }
# check_tp_bytes NAME L C N E TP ACCUM SYNCS FULL REPLICATED -- FLAGS...
check_tp_bytes() {
    local name=$1 want; want=$(tp_bytes_expected "${@:2:9}"); shift 11
    if ! $TG --plan "$@" >"$out/tp_$name.log" 2>&1; then not_ok "TP bytes $name: --plan failed: $(tail -n 2 "$out/tp_$name.log" | tr '\n' ' ')"; return; fi
    local got; got=$(tp_bytes_printed "$out/tp_$name.log")
    if [ -n "$got" ] && awk -v g="$got" -v w="$want" 'BEGIN { exit !(g - w <= 1 && w - g <= 1) }'; then
        ok "TP bytes $name: $got per step, the schedule's formula"
    else
        not_ok "TP bytes $name: printed '$got', the formula gives $want"
    fi
}
gpt=(--layers 4 --channels 64 --heads 4 --max-seq 64 -t 32)
gpt_R=$((4 * 6 * 64 + 64 * 64 + 2 * 64))
check_tp_bytes bf16-tp2       4 64 64 2 2 1 1 0 $gpt_R -- "${gpt[@]}" -b 2 --tp 2
check_tp_bytes fp32-tp4-accum 4 64 32 4 4 4 4 0 $gpt_R -- "${gpt[@]}" -b 1 -d 256 --tp 4 --sim-device "$out/fp32.prof" --plan-world 8
check_tp_bytes full-nosync    4 64 64 2 2 8 1 1 $gpt_R -- "${gpt[@]}" -b 2 -d 2048 --tp 2 --recompute full --no-grad-sync-until-last --fsdp-unit-layers 3
llama=(--arch llama3 --layers 3 --channels 64 --heads 4 --kv-heads 2 --ffn-dim 96 --vocab 384 --max-seq 64 -t 32)
check_tp_bytes llama-tp2      3 64 64 2 2 1 1 0 $((3 * 2 * 64 + 64)) -- "${llama[@]}" -b 2 --tp 2

# --plan-tp: one row per degree at one world (TP x DP = world), the TP bytes of a --tp plan's
# row, less activation memory per rank as TP grows; a degree that cannot run is skipped with
# its reason, and none at all is an error.
if $TG --plan "${gpt[@]}" -b 2 --plan-tp 1,2,4 >"$out/plan_tp.log" 2>&1; then
    rows=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF == 16 { print $1 "x" $2 ":" $9 ":" $11 }' "$out/plan_tp.log" | tr '\n' ' ')
    tp2_gb=$(awk '$1 == 2 && $2 == 4 && NF == 16 { print $11 }' "$out/plan_tp.log")
    want_gb=$(awk -v b="$(tp_bytes_printed "$out/tp_bf16-tp2.log")" 'BEGIN { printf "%.4g", b / 1e9 }')
    if [ "$(wc -w <<<"$rows")" -eq 3 ] && [[ "$rows" == "1x8:"*" 2x4:"*" 4x2:"* ]] && [ "$tp2_gb" = "$want_gb" ] &&
       awk '$1 ~ /^[0-9]+$/ && NF == 16 { if (n++ && $9 >= last) bad = 1; last = $9 } END { exit bad || n != 3 }' "$out/plan_tp.log"; then
        ok "--plan-tp 1,2,4: rows TPxDP:acts GiB:TP GB $rows(TP 2's TP bytes = --tp 2's)"
    else
        not_ok "--plan-tp 1,2,4: rows '$rows', TP 2's TP GB '$tp2_gb' (--tp 2's: $want_gb): $(head -c 600 "$out/plan_tp.log" | tr '\n' '|')"
    fi
else
    not_ok "--plan-tp 1,2,4 failed: $(tail -n 2 "$out/plan_tp.log" | tr '\n' ' ')"
fi
if $TG --plan "${gpt[@]}" -b 2 --plan-tp 3,2,8 >"$out/plan_tp_skip.log" 2>&1 &&
   grep -q "^  TP 3 skipped: does not divide the world size 8$" "$out/plan_tp_skip.log" &&
   grep -q "^  TP 8 skipped: --tp 8 does not divide the 4 heads$" "$out/plan_tp_skip.log" &&
   [ "$(awk '$1 ~ /^[0-9]+$/ && NF == 16' "$out/plan_tp_skip.log" | wc -l)" -eq 1 ]; then
    ok "--plan-tp 3,2,8: TP 2 planned, 3 and 8 skipped with their reasons"
else
    not_ok "--plan-tp 3,2,8: $(tr '\n' '|' <"$out/plan_tp_skip.log" | head -c 600)"
fi
# --offload optimizer at TP: a row per degree, no optimizer state on the device (the host's),
# the device's parameter shards shrinking with the degree (each TP rank holds its part).
if $TG --plan "${gpt[@]}" -b 2 --plan-tp 1,2 --offload optimizer >"$out/plan_tp_offload.log" 2>&1; then
    rows=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF == 16 { print $1 ":" $6 ":" $8 }' "$out/plan_tp_offload.log" | tr '\n' ' ')
    if [[ "$rows" =~ ^1:([0-9.e-]+):0\ 2:([0-9.e-]+):0\ $ ]] &&
       awk -v a="${BASH_REMATCH[1]}" -v b="${BASH_REMATCH[2]}" 'BEGIN { exit !(b > 0 && b < a) }'; then
        ok "--plan-tp 1,2 --offload optimizer: rows TP:params GiB:optim GiB $rows"
    else
        not_ok "--plan-tp 1,2 --offload optimizer: rows '$rows': $(head -c 600 "$out/plan_tp_offload.log" | tr '\n' '|')"
    fi
else
    not_ok "--plan-tp 1,2 --offload optimizer failed: $(tail -n 2 "$out/plan_tp_offload.log" | tr '\n' ' ')"
fi
expect_error "--plan-tp: no degree plans" "^error: --plan-tp 3,8: no degree plans at world size 8" $TG --plan "${gpt[@]}" --plan-tp 3,8

# Refusals: one line naming the flag, exit status 1.
refused() {
    local name=$1 pattern=$2; shift 2
    local o rc
    o=$("$@" 2>&1); rc=$?
    if [ "$rc" -eq 1 ] && [ "$(wc -l <<<"$o")" -eq 1 ] && grep -qE -- "$pattern" <<<"$o"; then ok "$name ($o)"
    else not_ok "$name: exit $rc, output: $(head -c 300 <<<"$o" | tr '\n' '|')"; fi
}
refused "--tp 0"                     "^error: --tp: 0 is out of range \\[1, 1024\\]" $TG --tp 0
refused "--tp x"                     "^error: --tp: expected an integer, got 'x'" $TG --tp x
refused "--plan-tp without --plan"   "^error: --plan-tp applies to --plan only" $TG --plan-tp 1,2
refused "--plan-tp 2,"               "^error: --plan-tp: a trailing comma in '2,'" $TG --plan --plan-tp 2,
refused "--plan-tp 0"                "^error: --plan-tp: expected a comma-separated list of TP degrees in \\[1, 1024\\]" $TG --plan --plan-tp 0
refused "--plan-tp with --tp"        "^error: --plan-tp with --tp 2: " $TG --plan --plan-tp 1,2 --tp 2
refused "--plan-tp at two worlds"    "^error: --plan-tp plans one world size: give --plan-world one size, got '8,16'" \
    $TG --plan "${gpt[@]}" --plan-tp 1,2 --plan-world 8,16
refused "--plan --tp beyond a node"  "^error: --plan with --tp 16: it does not divide --gpus-per-node 8" $TG --plan "${gpt[@]}" --tp 16 --plan-world 16
refused "--plan --tp vs the heads"   "^error: --plan: --tp 8 does not divide the 4 heads" $TG --plan "${gpt[@]}" --tp 8
refused "--plan --tp vs kv heads"    "^error: --plan: --tp 4 does not divide the 2 kv heads" $TG --plan "${llama[@]}" --tp 4
refused "--plan --tp vs the world"   "^error: --plan at world size 6: --tp 4 does not divide it" $TG --plan "${gpt[@]}" --tp 4 --plan-world 6
refused "--tp: shard groups count DP" "^error: --plan at world size 8: --shard-group-size 4 does not divide the data-parallel size 2 \\(world 8 / --tp 4\\)" \
    $TG --plan "${gpt[@]}" --tp 4 --shard-group-size 4
