"""Reads a run's TensorBoard event files back with TensorBoard's own reader (EventAccumulator,
which purges orphaned data on a SessionLog START as TensorBoard does) and checks them against
the run's metrics.jsonl: every scalar at every step, each step once, the value the last writer
of that step logged (a resumed run's, over what an interrupted run logged past its checkpoint).

usage: tb_check.py TB_DIR METRICS_JSONL [--files N] [--truncated]
  --files N     the directory holds exactly N event files
  --truncated   cut the newest file's last record short first (a kill mid-write): the reader
                must skip it and keep every earlier event
Prints one line; exits 1 on a mismatch.
"""
import glob
import json
import os
import shutil
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# metrics.jsonl key -> (tag, absolute tolerance of the JSON's own rounding)
TAGS = {
    "loss": ("train/loss", 5e-10),
    "lr": ("train/lr", 0.0),           # %.6e: relative, below
    "grad_norm": ("train/grad_norm", 5e-7),
    "ms": ("train/step_ms", 5e-4),
    "data_ms": ("train/data_ms", 5e-4),
    "tokens_per_s": ("train/tokens_per_s", 0.05),
    "mem_mib": ("train/mem_mib", 0.05),
    "mfu": ("train/mfu", 5e-6),
    "loss_scale": ("train/loss_scale", 0.0),
    "val_loss": ("val/loss", 5e-10),
    "eval_acc_norm": ("eval/acc_norm", 5e-7),
    "eval_acc": ("eval/acc", 5e-7),
}


def main():
    args = sys.argv[1:]
    tb_dir, jsonl = args[0], args[1]
    want_files = int(args[args.index("--files") + 1]) if "--files" in args else None
    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    if want_files is not None and len(files) != want_files:
        print(f"{len(files)} event file(s) in {tb_dir}, expected {want_files}: {files}")
        return 1
    truncated = "--truncated" in args
    if truncated:  # on a copy: the run's own files stay as written
        tmp = tempfile.mkdtemp()
        for f in files:
            shutil.copy(f, tmp)
        newest = os.path.join(tmp, os.path.basename(files[-1]))
        size = os.path.getsize(newest)
        with open(newest, "r+b") as fh:
            fh.truncate(size - 5)
        tb_dir = tmp

    # The last value logged for every (key, step): a resumed run appends to metrics.jsonl.
    want = {}
    with open(jsonl) as fh:
        for line in fh:
            rec = json.loads(line)
            for k, v in rec.items():
                if k in TAGS and v is not None:
                    want.setdefault(TAGS[k][0], {})[rec["step"]] = (k, v)

    ea = EventAccumulator(tb_dir, size_guidance={"scalars": 0}, purge_orphaned_data=True)
    ea.Reload()
    got_tags = set(ea.Tags()["scalars"])
    if truncated:
        # The cut record was the run's last event: the final validation (val/loss at the last step).
        last_step = max(want["val/loss"])
        del want["val/loss"][last_step]
    if got_tags != set(want):
        print(f"tags {sorted(got_tags)} != metrics.jsonl's {sorted(want)}")
        return 1
    n = 0
    for tag, by_step in want.items():
        events = ea.Scalars(tag)
        steps = [e.step for e in events]
        if steps != sorted(by_step):
            print(f"{tag}: steps {steps}, metrics.jsonl has {sorted(by_step)} (each once, in order)")
            return 1
        for e in events:
            k, v = by_step[e.step]
            tol = TAGS[k][1] + 1e-7 * abs(v) + (1e-6 * abs(v) if k == "lr" else 0.0)  # float32, %.6e
            if abs(e.value - v) > tol:
                print(f"{tag} step {e.step}: event file {e.value!r}, metrics.jsonl {v!r}")
                return 1
            n += 1
    print(f"{n} scalars over {len(want)} tags in {len(files)} file(s) equal metrics.jsonl's, each step once"
          + (" (truncated last record skipped)" if truncated else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
