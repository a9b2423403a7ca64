#!/usr/bin/python3
"""Numerical equivalence of Kiln's optimizing pipeline, on one zoo model.

    equivalence.py NAME --kiln PATH/TO/kiln --work-dir DIR [--cache-dir DIR]
                   [--steps 3] [--tol 1e-5] [--passes P,Q,...]

Trains NAME (train-mode TorchScript trace, dropout at p=0, the parity
harness's export and batch, float32) for a few AdamW steps twice: with the
default pipeline of `kiln train` (or --passes), and with only the passes a
training step cannot do without (loss, autodiff, optimizer), i.e. the graph
no optimization has touched. Every parameter, buffer and per-step loss must
agree within --tol relative to the tensor's max (the passes are meant to be
exact; the tolerance leaves room for a reassociating rewrite such as fused
attention's). Before that the same for `kiln grad` (gradients, default
pipeline against loss,autodiff), over every element. The weight comparison
then leaves out the elements whose gradient is rounding noise (below
NOISE times its tensor's largest, e.g. attention's key bias, whose exact
gradient is 0): Adam turns any noise into a +-lr step, so two exact
pipelines that round differently move them apart by design; their count
is printed.

Exits 1 on a mismatch, 2 when something could not run.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import parity  # noqa: E402  (prepare: the shared export + batch cache)
import st_io  # noqa: E402
from compare import rel_max  # noqa: E402

UNOPTIMIZED = {"train": "loss,autodiff,optimizer", "grad": "loss,autodiff"}
NOISE = 1e-6


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n" + "\n".join(p.stdout.splitlines()[-5:]))


def losses_of(path):
    import json
    return [json.loads(line)["loss"] for line in open(path)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cache-dir")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--passes", help="the optimized pipeline (default: kiln's default pipeline)")
    a = ap.parse_args()
    os.makedirs(a.work_dir, exist_ok=True)
    loss = "mse" if a.name in ("nn_mha", "nn_transformer") else "cross_entropy"
    try:
        pt, batch = parity.prepare(a.name, loss, a.cache_dir or a.work_dir)
        worst, bad = 0.0, []
        noise = {}  # per gradient: the elements that are rounding noise
        skipped = 0
        for cmd in ("grad", "train"):
            outs = {}
            for label, passes in (("optimized", a.passes), ("unoptimized", UNOPTIMIZED[cmd])):
                w = os.path.join(a.work_dir, f"{cmd}.{label}.safetensors")
                log = os.path.join(a.work_dir, f"{cmd}.{label}.jsonl")
                args = [a.kiln, cmd, pt, "--input-file", batch, "--loss", loss]
                if cmd == "train":
                    args += ["--optimizer", "adamw", "--lr", "1e-3", "--steps", str(a.steps), "--save-weights", w,
                             "--log-file", log]
                else:
                    args += ["--output", w]
                if passes and not (cmd == "grad" and label == "optimized" and a.passes):
                    args += ["--passes", passes]
                run(args)
                outs[label] = (st_io.load(w), losses_of(log) if cmd == "train" else [])
            opt, ref = outs["optimized"], outs["unoptimized"]
            if set(opt[0]) != set(ref[0]):
                bad.append(f"{cmd}: tensor names differ: {sorted(set(opt[0]) ^ set(ref[0]))}")
            for k in sorted(set(opt[0]) & set(ref[0])):
                x, y = opt[0][k], ref[0][k]
                if cmd == "grad" and y.is_floating_point() and y.numel():
                    noise[k] = y.abs() <= NOISE * y.abs().max()
                if cmd == "train" and k in noise and noise[k].shape == y.shape and noise[k].any():
                    skipped += int(noise[k].sum())
                    x, y = x[~noise[k]], y[~noise[k]]
                e = rel_max(x, y) if y.numel() else 0.0
                worst = max(worst, e)
                if e > a.tol:
                    bad.append(f"{cmd}: {k}: relative error {e:.3g} > {a.tol:g}")
            for i, (x, y) in enumerate(zip(opt[1], ref[1])):
                e = abs(x - y) / max(abs(y), 1e-30)
                worst = max(worst, e)
                if e > a.tol:
                    bad.append(f"{cmd}: loss of step {i}: {x} vs {y}")
    except Exception as e:  # noqa: BLE001 - any failure to run is exit 2 with its message
        print(f"{a.name}: ERROR: {e}")
        return parity.tidy_outputs(a.work_dir, 2, False)
    for line in bad:
        print(f"{a.name}: FAIL {line}")
    print(f"{a.name}: optimized vs unoptimized pipeline, train ({a.steps} AdamW steps) and grad: "
          f"worst relative error {worst:.3g} (tol {a.tol:g}; {skipped} weights with noise-level gradients "
          f"not compared after training){'' if not bad else ' -- FAILED'}")
    return parity.tidy_outputs(a.work_dir, 1 if bad else 0, False)


if __name__ == "__main__":
    sys.exit(main())
