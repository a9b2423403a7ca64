#!/usr/bin/python3
"""Data-parallel training against single-process training, on one zoo model.

    dp_parity.py NAME --kiln PATH/TO/kiln --nproc N --work-dir DIR [--cache-dir DIR]
                 [--batch B] [--steps 5] [--variants a,b,...]

`kiln train --nproc N` gives each rank its 1/N of the batch and averages
the gradients over the ranks (DDP's semantics), so on a model whose forward
does not mix the rows of a batch (no BatchNorm) the weights after every
step must equal single-process training on the whole batch. Each variant
trains NAME for --steps steps both ways from the same export and batch and
compares every parameter and buffer (max |dp - single| / max |single| per
tensor) and every logged loss:

  f64_adamw     float64, AdamW: the default buckets (25 MiB)      tol 1e-9
  f32_sgd       float32, SGD with momentum, Nesterov, clipping   tol 1e-5
  plain_sgd     float32, SGD without momentum: embeddings stay row-sparse
                to the update (sgd_update_rows touches the batch's rows only)
  plain_sgd_clip  the same with clipping (the embedding leaves the one
                multi-tensor update; the norm reads the dense gradient)
  tiny_buckets  float64, AdamW, --bucket-size 1KiB (a bucket per gradient or two)
  huge_buckets  float64, AdamW, --bucket-size 1GiB (one bucket)
  all_sparse    float64, AdamW, --sparse-grads '*': every gradient through
                the block-sparse allreduce (dense fallback where it pays)
  zero_adamw    float64, AdamW, --zero 1: optimizer state sharded, gradients
                reduce-scattered, parameters all-gathered
  zero_sgd      float32, SGD with momentum and clipping, --zero 1 with 1KiB
                buckets (the clipping norm summed from the ranks' parts)
  zero_resume   float64, AdamW, --zero 1: 3 steps with --checkpoint (rank 0
                writes every rank's optimizer state), then --resume to the end

(AdamW in float32 is not a variant: it turns gradients that are zero up to
rounding, like an attention key bias's, into +-lr steps whose sign the
summation order decides; float64 leaves them at noise level. SGD does not
amplify them.)

Exits 1 on a mismatch, 2 when something could not run. A passing run
deletes kiln's outputs (parity.tidy_outputs).
"""

import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import parity  # noqa: E402  (prepare, tidy_outputs)
import reference as ref  # noqa: E402
import st_io  # noqa: E402
from dist_compare import compare_run, finish, summary  # noqa: E402

ADAMW = ["--optimizer", "adamw", "--lr", "1e-3"]
SGD = ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--nesterov", "--clip-grad-norm", "1.0"]
PLAIN_SGD = ["--optimizer", "sgd", "--lr", "0.05"]
VARIANTS = {  # name: (dtype, optimizer args, data-parallel args, tolerance)
    "f64_adamw": ("float64", ADAMW, [], 1e-9),
    "f32_sgd": ("float32", SGD, [], 1e-5),
    "plain_sgd": ("float32", PLAIN_SGD, [], 1e-5),
    "plain_sgd_clip": ("float32", PLAIN_SGD + ["--clip-grad-norm", "0.5"], [], 1e-5),
    "tiny_buckets": ("float64", ADAMW, ["--bucket-size", "1KiB"], 1e-9),
    "huge_buckets": ("float64", ADAMW, ["--bucket-size", "1GiB"], 1e-9),
    "all_sparse": ("float64", ADAMW, ["--sparse-grads", "*"], 1e-9),
    "zero_adamw": ("float64", ADAMW, ["--zero", "1"], 1e-9),
    "zero_sgd": ("float32", SGD, ["--zero", "1", "--bucket-size", "1KiB"], 1e-5),
    "zero_resume": ("float64", ADAMW, ["--zero", "1"], 1e-9),
}
RESUMED = {"zero_resume"}  # variants whose data-parallel run stops at a checkpoint and resumes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cache-dir")
    ap.add_argument("--batch", type=int, default=0, help="batch size (default: 2 x nproc)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args(argv)
    os.makedirs(a.work_dir, exist_ok=True)
    loss = parity.default_loss(a.name)
    batch = a.batch or 2 * a.nproc
    bad = []
    # The single-process reference depends only on the dtype and the
    # optimizer's arguments: variants that differ only in data-parallel
    # options (buckets, sparse gradients, ZeRO, resuming) share one run.
    singles = {}
    try:
        for variant in a.variants.split(","):
            if variant not in VARIANTS:
                raise parity.Failure(f"unknown variant {variant} (choose from {', '.join(VARIANTS)})")
            dtype, opt, dp, tol = VARIANTS[variant]
            pt, data = parity.prepare(a.name, loss, a.cache_dir or a.work_dir, dtype, batch_size=batch)
            base = ["train", pt, "--input-file", data, "--loss", loss, "--steps", str(a.steps),
                    "--no-cache"] + opt
            out = {}
            t0 = time.time()
            single_key = (dtype, tuple(opt))
            if single_key in singles:
                out["single"] = singles[single_key]
            for label, extra in (("single", []), ("dp", ["--nproc", str(a.nproc)] + dp)):
                if label in out:
                    continue
                w = os.path.join(a.work_dir, f"{variant}.{label}.safetensors")
                log = os.path.join(a.work_dir, f"{variant}.{label}.jsonl")
                if label == "dp" and variant in RESUMED:  # stop after 3 steps, resume from the checkpoint
                    ckpt = os.path.join(a.work_dir, f"{variant}.checkpoint")
                    shutil.rmtree(ckpt, ignore_errors=True)  # --resume takes the latest step in it
                    first = [x if x != str(a.steps) else str(min(3, a.steps)) for x in base]
                    parity.run_kiln(a.kiln, first + extra + ["--checkpoint", ckpt, "--log-file", log])
                    extra = extra + ["--resume", ckpt]
                parity.run_kiln(a.kiln, base + extra + ["--save-weights", w, "--log-file", log])
                out[label] = (st_io.load(w), ref.read_log(log))
                if label == "single":
                    singles[single_key] = out[label]
                if label == "dp" and variant in RESUMED:
                    shutil.rmtree(ckpt, ignore_errors=True)
            (ws, ls), (wd, ld) = out["single"], out["dp"]
            worst, where = compare_run(variant, wd, ws, ld, ls, tol, bad, "single-process")
            print(summary(a.name, a.nproc, variant, worst, where, tol, ld, time.time() - t0))
    except parity.Failure as e:
        return finish(a.name, a.nproc, a.work_dir, bad, str(e))
    return finish(a.name, a.nproc, a.work_dir, bad)


if __name__ == "__main__":
    sys.exit(main())
