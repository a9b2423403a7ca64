#!/usr/bin/env python3
"""Independent nodes side by side (the default) against one node at a time
(`--serial-nodes`), over the zoo, on the same pool of threads.

For each model: the stages of its step (`kiln compile --report`: nodes that
run beside others, widest stage), then the median step time of `kiln bench`
with and without `--serial-nodes`, run alternately R times each (A B A B ...,
so a busier moment of the machine hits both) keeping each side's best
median, and the losses of 3 steps of `kiln train` either way, compared for
exact equality.

    /usr/bin/python3 benchmarks/threads_zoo.py --kiln build/kiln --out-dir build/bench \\
        [--models gpt2_mini,mlp] [--steps 30] [--rounds 3] [--threads 0]

Writes OUT_DIR/threads_zoo.md (and stdout).
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from cpu_zoo import export, zoo_arguments  # noqa: E402
import zoo  # noqa: E402


def kiln(args, *cmd):
    full = [args.kiln, *cmd, "--no-cache"]
    if args.threads:
        full += ["--threads", str(args.threads)]
    r = subprocess.run(full, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(full) + ": " + ((r.stderr.strip().splitlines() or [""])[-1]))


def stages(args, pt):
    out = os.path.join(args.out_dir, "threads_report.json")
    kiln(args, "compile", pt, "--report", out)
    return json.load(open(out))["execution"]


def step_ms(args, pt, serial):
    out = os.path.join(args.out_dir, "threads_bench.json")
    kiln(args, "bench", pt, "--steps", str(args.steps), "--warmup", "3", "--json", out,
         *(["--serial-nodes"] if serial else []))
    return json.load(open(out))["kiln"]["median_ms"]


def losses(args, pt, serial):
    out = os.path.join(args.out_dir, "threads_train.json")
    kiln(args, "train", pt, "--steps", "3", "--report", out, *(["--serial-nodes"] if serial else []))
    return [s["loss"] for s in json.load(open(out))["steps"]]


def main() -> int:
    p = zoo_arguments(__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m] or list(zoo.NAMES)
    models = [m for m in models if not m.endswith("_train") or m == "cnn_bn_train"]
    os.makedirs(args.out_dir, exist_ok=True)
    lines = ["| model | nodes | beside others | widest stage | serial ms | staged ms | speedup | same losses |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    print("\n".join(lines), flush=True)
    speedups = []
    for m in models:
        pt = export(m, os.path.join(args.out_dir, "models"), args.batch)
        ex = stages(args, pt)
        serial, staged = [], []
        for _ in range(args.rounds):
            serial.append(step_ms(args, pt, True))
            staged.append(step_ms(args, pt, False))
        s, c = min(serial), min(staged)
        same = losses(args, pt, True) == losses(args, pt, False)
        speedups.append(s / c)
        row = (f"| {m} | {ex['stages'] + ex['nodes_in_shared_stages'] - ex['shared_stages']} | "
               f"{ex['nodes_in_shared_stages']} | {ex['widest_stage']} | {s:.2f} | {c:.2f} | {s / c:.2f}x | "
               f"{'yes' if same else 'NO'} |")
        lines.append(row)
        print(row, flush=True)
    geo = 1.0
    for x in speedups:
        geo *= x
    geo **= 1.0 / max(1, len(speedups))
    lines += ["", f"geometric mean speedup of side-by-side stages: {geo:.2f}x over {len(speedups)} models"]
    print(lines[-1])
    with open(os.path.join(args.out_dir, "threads_zoo.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
