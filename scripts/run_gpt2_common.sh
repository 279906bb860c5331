# Sourced by scripts/run_gpt2_*.sh: what the four one-node GPT-2 runs share. Each script sets
# its settings (NP, B, STEPS, OUT, DEVICE, TRAIN, VAL) and then calls these two.

# need_shards DATASET SIZE PRESET: exits with how to make the shards (data/prepare.py --preset
# PRESET into $DATA_DIR) when $TRAIN (or a non-empty $VAL) matches nothing, before anything is built.
need_shards() {
    local dataset=$1 size=$2 preset=$3 missing
    if compgen -G "$TRAIN" >/dev/null && { [ -z "$VAL" ] || compgen -G "$VAL" >/dev/null; }; then return 0; fi
    compgen -G "$TRAIN" >/dev/null && missing=$VAL || missing=$TRAIN
    cat >&2 <<MSG
$(basename "$0"): no token shards match $missing
  This run trains on $dataset in llm.c's token-shard format. To make the shards
  ($size; streamed from Hugging Face, so it needs internet access; 100M tokens per shard,
  the first one val, as llm.c's dev/data/fineweb.py; rerun it to resume after an interruption):
      bash scripts/setup.sh                     # once: .venv with datasets and pyarrow
      .venv/bin/python data/prepare.py --preset $preset --out-dir $DATA_DIR
  or set DATA_DIR=/path/to/shards (or TRAIN=... VAL=... globs). Shards of your own
  JSONL, Parquet or text files (see data/prepare.py --help):
      .venv/bin/python data/prepare.py FILE... -o data/mycorpus/mycorpus
MSG
    exit 1
}

# launch PRESET TRAIN_GPT_ARGS...: builds train_gpt and runs GPT-2 preset PRESET (d12 ...) on
# $NP ranks of this node (MPIRUN_ARGS: more mpirun options), then says how to plot the run.
launch() {
    local preset=$1; shift
    make -j"$(nproc)" train_gpt
    local mpi_flags=() extra_mpi=()
    [ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
    read -ra extra_mpi <<<"${MPIRUN_ARGS:-}"
    mpirun "${mpi_flags[@]}" "${extra_mpi[@]}" -np "$NP" ./train_gpt --device "$DEVICE" -m "$preset" -i "$TRAIN" -j "$VAL" -o "$OUT" "$@"
    echo "$(basename "$0"): done; plot it with: python3 scripts/plot.py $OUT/metrics.jsonl"
}
