"""Compares the per-step training losses (and optionally val losses) of metrics.jsonl files.

usage: compare_losses.py NAME REFERENCE.jsonl CANDIDATE.jsonl [--rtol R] [--exact] [--from-step S]
                          [--closer-than OTHER.jsonl]
--closer-than: the candidate's largest relative difference from the reference must also be at
most OTHER's (over the same losses), e.g. an fp16 run against a bf16 one, both against fp32.
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
    rtol, exact, from_step, other_path = 1e-5, False, 0, None
    i = 3
    while i < len(args):
        if args[i] == "--rtol":
            rtol = float(args[i + 1]); i += 2
        elif args[i] == "--exact":
            exact = True; i += 1
        elif args[i] == "--from-step":
            from_step = int(args[i + 1]); i += 2
        elif args[i] == "--closer-than":
            other_path = args[i + 1]; i += 2
        else:
            raise SystemExit(f"compare_losses.py: unknown option {args[i]}")
    worst, worst_step, problems, other_worst = 0.0, None, [], 0.0
    for key in ("loss", "val_loss"):
        ref, cand = losses(ref_path, key), losses(cand_path, key)
        other = losses(other_path, key) if other_path else {}
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
            if other_path:
                if s not in other:
                    problems.append(f"{key} at step {s} missing from {other_path}")
                    continue
                other_worst = max(other_worst, abs(a - other[s]) / max(abs(a), 1e-12))
            if rel > worst:
                worst, worst_step = rel, (key, s)
            if rel > rtol:
                problems.append(f"{key} at step {s}: {b:.6f} vs {a:.6f} (relative {rel:.2e} > {rtol:.0e})")
    if other_path and not problems and worst > other_worst:
        problems.append(f"max relative difference {worst:.2e} at {worst_step} exceeds {other_path}'s {other_worst:.2e}")
    if problems:
        print(f"not ok - {name}: {problems[0]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
        return 1
    detail = "bitwise identical" if exact else f"max relative difference {worst:.1e} at {worst_step}"
    if other_path:
        detail += f"; the other run's {other_worst:.1e}"
    print(f"ok - {name} ({detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
