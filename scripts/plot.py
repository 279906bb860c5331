"""
Plots a training run from its metrics.jsonl (what train_gpt -o DIR writes) into one PNG:
  top:    training loss and validation loss vs step, and the evaluation's accuracy (acc_norm,
          --eval-data: HellaSwag) on a second axis when the run logged it
  bottom: throughput (tokens/s) vs step, and MFU on a second axis when the run logged it

    python3 scripts/plot.py out/gpt2_124M/metrics.jsonl            # -> out/gpt2_124M/metrics.png
    python3 scripts/plot.py runs/a/metrics.jsonl runs/b -o cmp.png  # several runs, overlaid

An argument may also be a run directory (its metrics.jsonl is read). A resumed run appends
to the same file, so a step logged before the interruption is logged again after the resume:
the last occurrence of each step wins. Steps logged with "skipped" (the update was skipped
because the loss or gradient norm was not finite) are marked on the loss plot.
"""
import argparse
import json
import math
import os
import sys


def fail(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(1)


def number(x):
    # null (or anything not a number) -> nan, so that a non-finite loss leaves a gap
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def load_run(path):
    """Reads one metrics.jsonl. Returns {"train": {step: record}, "val": {step: val_loss},
    "eval": {step: acc_norm}},
    keeping the last record of each step. Calls fail() with the line number on bad input."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: no such file")
    train, val, evals = {}, {}, {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}: line {lineno}: invalid JSON ({e.msg})")
            if not isinstance(rec, dict):
                fail(f"{path}: line {lineno}: not a JSON object")
            step = rec.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                continue  # a record of another kind: nothing to plot
            if "val_loss" in rec:
                val[step] = number(rec["val_loss"])
            elif "eval_acc_norm" in rec:
                evals[step] = number(rec["eval_acc_norm"])
            elif "loss" in rec:
                train[step] = rec
    if not train and not val and not evals:
        fail(f"{path}: no data (no training, validation or evaluation records)")
    return {"path": path, "train": train, "val": val, "eval": evals}


def run_name(path):
    # DIR/metrics.jsonl is named after DIR; any other file after itself, less ".jsonl".
    base = os.path.basename(path)
    if base == "metrics.jsonl":
        return os.path.basename(os.path.dirname(os.path.abspath(path)))
    return base[:-len(".jsonl")] if base.endswith(".jsonl") else base


def run_label(path, all_paths):
    # The run's name, unless two runs share it: then the whole path.
    name = run_name(path)
    return name if [run_name(p) for p in all_paths].count(name) == 1 else path


def plot(runs, out):
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (Debian: apt-get install python3-matplotlib; else pip install matplotlib)")

    fig, (ax_loss, ax_tps) = plt.subplots(2, 1, figsize=(10, 8), sharex=True,
                                          gridspec_kw={"height_ratios": [2, 1]})
    ax_mfu = ax_acc = None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    paths = [r["path"] for r in runs]
    for i, run in enumerate(runs):
        color = colors[i % len(colors)]
        label = run_label(run["path"], paths)
        prefix = f"{label}: " if len(runs) > 1 else ""
        steps = sorted(run["train"])
        recs = [run["train"][s] for s in steps]
        if steps:
            ax_loss.plot(steps, [number(r.get("loss")) for r in recs], color=color, lw=1,
                         label=f"{prefix}train loss")
            skipped = [s for s, r in zip(steps, recs) if r.get("skipped")]
            for j, s in enumerate(skipped):
                ax_loss.axvline(s, color=color, ls=":", lw=0.8,
                                label=f"{prefix}skipped step" if j == 0 else None)
            ax_tps.plot(steps, [number(r.get("tokens_per_s")) for r in recs], color=color, lw=1,
                        label=f"{prefix}tokens/s")
            if any("mfu" in r for r in recs):
                if ax_mfu is None:
                    ax_mfu = ax_tps.twinx()
                    ax_mfu.set_ylabel("MFU (%)")
                # train_gpt logs MFU as a fraction of the device's peak
                ax_mfu.plot(steps, [100 * number(r.get("mfu")) for r in recs], color=color, lw=1, ls="--",
                            label=f"{prefix}MFU")
        if run["val"]:
            vsteps = sorted(run["val"])
            ax_loss.plot(vsteps, [run["val"][s] for s in vsteps], color=color, lw=1.5, ls="--",
                         marker="o", ms=3, label=f"{prefix}val loss")
        if run["eval"]:
            if ax_acc is None:
                ax_acc = ax_loss.twinx()
                ax_acc.set_ylabel("eval acc_norm (%)")
            esteps = sorted(run["eval"])
            ax_acc.plot(esteps, [100 * run["eval"][s] for s in esteps], color=color, lw=1.5, ls=":",
                        marker="s", ms=3, label=f"{prefix}eval acc_norm")

    ax_loss.set_ylabel("loss")
    ax_loss.grid(alpha=0.3)
    handles, labels = ax_loss.get_legend_handles_labels()
    if ax_acc is not None:
        h2, l2 = ax_acc.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax_loss.legend(handles, labels, loc="upper right", fontsize="small")
    ax_loss.set_title(", ".join(run_label(p, paths) for p in paths))
    ax_tps.set_xlabel("step")
    ax_tps.set_ylabel("tokens/s")
    ax_tps.grid(alpha=0.3)
    handles, labels = ax_tps.get_legend_handles_labels()
    if ax_mfu is not None:
        h2, l2 = ax_mfu.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        ax_tps.legend(handles, labels, loc="lower right", fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        fail(f"{out}: cannot write ({e.strerror})")
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="Plot loss, val loss and throughput from train_gpt's metrics.jsonl.")
    ap.add_argument("metrics", nargs="+", help="metrics.jsonl files (or run directories); several are overlaid")
    ap.add_argument("-o", "--output", help="PNG to write [metrics.png next to the first file]")
    args = ap.parse_args()
    runs = [load_run(p) for p in args.metrics]
    out = args.output or os.path.join(os.path.dirname(runs[0]["path"]), "metrics.png")
    plot(runs, out)
    for r in runs:
        n, v = len(r["train"]), len(r["val"])
        last = f", last val loss {r['val'][max(r['val'])]:.4f}" if v else ""
        e = r["eval"]
        evals = f", {len(e)} evaluations (last acc_norm {e[max(e)]:.4f})" if e else ""
        print(f"plot.py: {r['path']}: {n} training steps, {v} validation points{last}{evals}")
    print(f"plot.py: wrote {out}")


if __name__ == "__main__":
    main()
