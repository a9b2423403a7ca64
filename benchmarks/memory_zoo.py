#!/usr/bin/env python3
"""Kiln's planned training-step memory vs running the same step op by op.

For every zoo model (exported as in cpu_zoo.py), `kiln memory --json` twice:
  - the default pipeline: split_updates, schedule and the memory plan, the
    step as `kiln train` runs it (planned peak: weights, optimizer state and
    batch, plus the arena of intermediates, updates written in place);
  - the same step as autodiff and the optimizer emit it (--passes without
    split_updates and schedule), whose `op_by_op_peak_bytes` is the baseline:
    each tensor its own fresh buffer, freed after its last reader, updates
    into new buffers, nodes in the emitted order (what an eager runtime with a
    perfect caching allocator holds at its peak).
The issue's target is planned peak <= 0.6x the baseline. The table also shows
the intermediates alone (the arena vs the baseline's peak less the inputs).

    /usr/bin/python3 benchmarks/memory_zoo.py --kiln build/kiln --out-dir build/bench \
        [--models a,b] [--batch N]

Writes OUT_DIR/memory_zoo.md (and stdout).
"""

import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import zoo  # noqa: E402
from cpu_zoo import export, zoo_arguments  # noqa: E402

EMITTED = "loss,amp,autodiff,optimizer,freeze,simplify,fuse"


def memory(kiln, pt, out, extra):
    r = subprocess.run([kiln, "memory", pt, "--json", out] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    return json.load(open(out))


def mib(b):
    return f"{b / 2**20:.1f}"


def main() -> int:
    p = zoo_arguments(__doc__)
    args = p.parse_args()

    models = [m for m in args.models.split(",") if m] or list(zoo.NAMES)
    models = [m for m in models if not m.endswith("_train") or m == "cnn_bn_train"]
    os.makedirs(args.out_dir, exist_ok=True)
    extra = ["--batch", str(args.batch)] if args.batch else []
    lines = ["| model | planned peak MiB | op by op MiB | ratio | arena MiB | op-by-op intermediates MiB | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    ratios, failed = [], []
    for m in models:
        pt = export(m, os.path.join(args.out_dir, "models"), args.batch)
        try:
            plan = memory(args.kiln, pt, os.path.join(args.out_dir, f"{m}.memory.json"), extra)
            base = memory(args.kiln, pt, os.path.join(args.out_dir, f"{m}.memory_emitted.json"),
                          extra + ["--passes", EMITTED])
        except RuntimeError as e:
            print(f"{m}: kiln memory failed: {e}", file=sys.stderr)
            failed.append(m)
            continue
        peak, baseline = plan["peak_bytes"], base["op_by_op_peak_bytes"]
        inter = baseline - base["input_bytes"]
        r, ri = peak / baseline, plan["arena_bytes"] / max(inter, 1)
        ratios.append(r)
        row = (f"| {m} | {mib(peak)} | {mib(baseline)} | {r:.2f}x | {mib(plan['arena_bytes'])} | {mib(inter)} | "
               f"{ri:.2f}x |")
        lines.append(row)
        print(row, flush=True)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    worst = max(ratios) if ratios else float("nan")
    lines.append("")
    lines.append(f"planned peak / op-by-op peak: geomean {geo:.2f}x, worst {worst:.2f}x over {len(ratios)} models; "
                 f"{sum(r <= 0.6 for r in ratios)} at or under the 0.6x target")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out_dir, "memory_zoo.md"), "w") as f:
        f.write(text)
    print(lines[-1])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
