"""Compares the per-step training losses (and optionally val losses) of metrics.jsonl files.

usage: compare_losses.py NAME REFERENCE.jsonl CANDIDATE.jsonl [--rtol R] [--exact] [--from-step S]
Prints one 'ok - NAME' or 'not ok - NAME: ...' line; exits 1 on a mismatch.
"""
import json
import sys


def losses(path, key):
    out = {}
    with open(path) as f:
        for line in f:
            obj = json.loads(line)
            if key in obj:
                out[obj["step"]] = obj[key]
    return out


def main():
    args = sys.argv[1:]
    name, ref_path, cand_path = args[:3]
    rtol, exact, from_step = 1e-5, False, 0
    i = 3
    while i < len(args):
        if args[i] == "--rtol":
            rtol = float(args[i + 1]); i += 2
        elif args[i] == "--exact":
            exact = True; i += 1
        elif args[i] == "--from-step":
            from_step = int(args[i + 1]); i += 2
        else:
            raise SystemExit(f"compare_losses.py: unknown option {args[i]}")
    worst, worst_step, problems = 0.0, None, []
    for key in ("loss", "val_loss"):
        ref, cand = losses(ref_path, key), losses(cand_path, key)
        steps = [s for s in sorted(cand) if s >= from_step]
        if key == "loss" and not steps:
            problems.append(f"no training losses in {cand_path}")
        for s in steps:
            if s not in ref:
                problems.append(f"step {s} missing from the reference")
                continue
            a, b = ref[s], cand[s]
            if exact:
                if a != b:
                    problems.append(f"{key} at step {s}: {b!r} != {a!r}")
                continue
            rel = abs(a - b) / max(abs(a), 1e-12)
            if rel > worst:
                worst, worst_step = rel, (key, s)
            if rel > rtol:
                problems.append(f"{key} at step {s}: {b:.6f} vs {a:.6f} (relative {rel:.2e} > {rtol:.0e})")
    if problems:
        print(f"not ok - {name}: {problems[0]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
        return 1
    detail = "bitwise identical" if exact else f"max relative difference {worst:.1e} at {worst_step}"
    print(f"ok - {name} ({detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
