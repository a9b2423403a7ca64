#!/usr/bin/env python3
"""Kiln vs libtorch eager, fp32 training step on the CPU, over the model zoo.

For every model: export it from PyTorch as a train-mode TorchScript trace
(dropout and stochastic depth at p=0, so both sides compute the same
function), then run `kiln bench MODEL --compare torch`, which times Kiln's
compiled step and libtorch's eager step (same module, weights, batches, loss,
optimizer and thread count) alternately in one process. Writes one JSON per
model and a Markdown table with the geometric-mean speedup.

    /usr/bin/python3 benchmarks/cpu_zoo.py --kiln build/kiln --out-dir build/bench \
        [--models a,b] [--batch N] [--steps 20] [--warmup 3] [--threads 0]

The table goes to OUT_DIR/cpu_zoo.md (and stdout); numbers in docs/benchmarks.md come
from this script.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import zoo  # noqa: E402

# Models whose first output is not what cross_entropy expects, or which need
# more than the default options, would go here; every zoo model trains with
# cross_entropy today.
LOSS = {}


def export(model: str, out_dir: str, batch: int) -> str:
    path = os.path.join(out_dir, f"{model}.pt")
    if not os.path.exists(path):
        cmd = [sys.executable, os.path.join(HERE, "..", "models", "export.py"), model, "--format", "trace",
               "--train", "--no-dropout", "--out-dir", out_dir]
        if batch:
            cmd += ["--batch", str(batch)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return path


def zoo_arguments(doc: str) -> argparse.ArgumentParser:
    """The options every zoo benchmark takes: the kiln binary, where to write, which models, the batch."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--models", default="", help="comma-separated subset (default: the whole zoo)")
    p.add_argument("--batch", type=int, default=0, help="examples per batch (default: the zoo's)")
    return p


def main() -> int:
    p = zoo_arguments(__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--optimizer", default="adamw")
    args = p.parse_args()

    models = [m for m in args.models.split(",") if m] or list(zoo.NAMES)
    models = [m for m in models if not m.endswith("_train") or m == "cnn_bn_train"]
    os.makedirs(args.out_dir, exist_ok=True)
    rows = []
    for m in models:
        t0 = time.time()
        pt = export(m, os.path.join(args.out_dir, "models"), args.batch)
        js = os.path.join(args.out_dir, f"{m}.json")
        cmd = [args.kiln, "bench", pt, "--compare", "torch", "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--optimizer", args.optimizer, "--loss", LOSS.get(m, "cross_entropy"),
               "--json", js]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{m}: kiln bench failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}",
                  file=sys.stderr)
            rows.append((m, None))
            continue
        j = json.load(open(js))
        rows.append((m, j))
        print(f"{m:24s} kiln {j['kiln']['median_ms']:9.2f} ms  torch {j['torch']['median_ms']:9.2f} ms  "
              f"speedup {j['speedup']:.2f}x  ({time.time() - t0:.0f} s)", file=sys.stderr)

    ok = [j for _, j in rows if j]
    geo = math.exp(sum(math.log(j["speedup"]) for j in ok) / len(ok)) if ok else float("nan")
    lines = ["| model | batch | Kiln ms | libtorch ms | speedup | Kiln peak MiB | libtorch peak MiB |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for m, j in rows:
        if not j:
            lines.append(f"| `{m}` | — | failed | | | | |")
            continue
        lines.append(f"| `{m}` | {j['batch']} | {j['kiln']['median_ms']:.2f} | {j['torch']['median_ms']:.2f} | "
                     f"{j['speedup']:.2f}x | {j['kiln']['peak_bytes'] / 2**20:.1f} | "
                     f"{j['torch']['peak_bytes'] / 2**20:.1f} |")
    slower = [m for m, j in rows if j and j["speedup"] < 1]
    lines.append("")
    lines.append(f"Geometric-mean speedup over {len(ok)} models: **{geo:.2f}x**; "
                 f"slower than libtorch: {', '.join(slower) if slower else 'none'}.")
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out_dir, "cpu_zoo.md"), "w").write(text)
    print(text)
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
