#!/usr/bin/env python3
"""Mixed precision (kiln --amp) against PyTorch.

    amp_parity.py MODEL --mode grad --amp bf16 --kiln PATH [--work-dir D] [--cache-dir C]
        `kiln grad --amp bf16` against torch.autocast(device_type="cpu",
        dtype=torch.bfloat16) forward + backward of the same zoo module and
        batch. Both sides round at op boundaries but follow slightly different
        policies (torch's CPU bf16 lists keep softmax and layer_norm in bf16,
        Kiln keeps them in f32, as torch's CUDA lists do), so the check is
        loose: per tensor, max|kiln - torch| / max|torch| <= --tol (2e-2).
        Also printed: each side's distance to the float32 gradients, the
        scale of bf16's own rounding. fp16 (torch has no CPU fp16 autocast)
        compares against the float32 gradients.
    amp_parity.py gpt2_mini --mode train --amp bf16|fp16 --kiln PATH
        `kiln train` on the demo task (models/task.py: next-token prediction
        of a hidden permutation) with and without --amp: the loss must fall
        like float32's (final loss within --train-tol of it, and below a
        quarter of the first step's).

Exit 0 when the check holds, 1 when it does not, 2 when something could not run."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))

import losses  # noqa: E402
import parity  # noqa: E402
import reference as ref  # noqa: E402
from compare import rel_max  # noqa: E402
import st_io  # noqa: E402


def torch_grads(name: str, batch: str, loss_kind: str, amp_dtype) -> dict:
    """Gradients (f32 master weights) of the eager zoo module, under CPU
    autocast to `amp_dtype` or in plain float32 (None), plus the loss."""
    model = parity.eager_model(name, torch.float32)
    inputs, target = ref.load_batch(batch)
    names, params = zip(*model.named_parameters())
    with torch.autocast(device_type="cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        loss = losses.loss(loss_kind, model(*inputs), target)
    gs = torch.autograd.grad(loss, params, allow_unused=True)
    by_name = {n: (g if g is not None else torch.zeros_like(p)) for n, p, g in zip(names, params, gs)}
    out = {k: by_name[n].detach().float() for k, n in ref.param_names(model).items()}
    out["loss"] = loss.detach().float()
    return out


def run_grad(args, work: str) -> int:
    loss = parity.DEFAULT_LOSS.get(args.name, "cross_entropy")
    if args.batch:  # its own cache: parity.py's exports keep the zoo batch
        parity.PARITY_BATCH[args.name] = args.batch
    cache = os.path.join(args.cache_dir or work, f"amp_batch{args.batch}" if args.batch else "")
    pt, batch = parity.prepare(args.name, loss, cache)
    out = os.path.join(work, f"kiln.{args.amp}.grads.safetensors")
    parity.run_kiln(args.kiln, ["grad", pt, "--input-file", batch, "--loss", loss, "--amp", args.amp, "-o", out])
    kiln = st_io.load(out)
    f32 = torch_grads(args.name, batch, loss, None)
    # torch 1.13 autocasts CPU ops to bfloat16 only: fp16 is compared with float32.
    want = torch_grads(args.name, batch, loss, torch.bfloat16) if args.amp == "bf16" else f32
    against = "torch.autocast(cpu, bf16)" if args.amp == "bf16" else "torch float32"
    worst, worst_name, worst_ref = 0.0, "-", 0.0
    rows = []
    for k, w in want.items():
        if k == "loss" or k not in kiln:
            continue
        e = rel_max(kiln[k], w)
        e_ref = rel_max(want[k], f32[k]) if args.amp == "bf16" else 0.0
        e_kiln_f32 = rel_max(kiln[k], f32[k])
        rows.append((k, e, e_ref, e_kiln_f32))
        if e > worst:
            worst, worst_name, worst_ref = e, k, e_ref
    missing = [k for k in want if k != "loss" and k not in kiln]
    if missing:
        print(f"{args.name} grad --amp {args.amp}: FAIL: kiln gave no gradient for {missing[:3]}")
        return 1
    if args.verbose:
        print(f"{'tensor':40s} {'kiln vs ref':>12s} {'torch-amp vs f32':>17s} {'kiln vs f32':>12s}")
        for k, e, e_ref, e_k in rows:
            print(f"{k:40s} {e:12.3e} {e_ref:17.3e} {e_k:12.3e}")
    mean = sum(r[1] for r in rows) / max(1, len(rows))
    kl = kiln.get("loss")
    print(f"{args.name} grad --amp {args.amp} vs {against}: worst {worst:.3e} ({worst_name}; "
          f"torch-amp vs f32 there {worst_ref:.3e}), mean {mean:.3e} over {len(rows)} tensors; "
          f"kiln vs float32: worst {max(r[3] for r in rows):.3e}"
          + (f"; loss kiln {kl.item():.6f} torch {want['loss'].item():.6f}" if kl is not None else ""))
    # Where bf16's own rounding moves a gradient by more than the tolerance
    # (BatchNorm over few images: torch's bf16 differs from its f32 by 20%),
    # Kiln must be no further from torch's bf16 than twice that.
    bad = [(k, e, e_ref) for k, e, e_ref, _ in rows if e > max(args.tol, 2 * e_ref)]
    for k, e, e_ref in bad:
        print(f"  {k}: {e:.3e} > max(tol, 2 x torch-amp vs f32 = {2 * e_ref:.3e})")
    ok = not bad
    print(f"{args.name} grad --amp {args.amp}: {'ok' if ok else 'FAIL'} (per tensor: max(tol {args.tol:g}, "
          f"2x torch's own bf16 error))")
    return 0 if ok else 1


def kiln_losses(args, pt: str, tokens: str, work: str, amp: str) -> list:
    log = os.path.join(work, f"log.{amp}.jsonl")
    parity.run_kiln(args.kiln, ["train", pt, "--data", tokens, "--batch", "16", "--loss", "cross_entropy",
                                "--optimizer", "adamw", "--lr", "1e-2", "--lr-schedule", "warmup_cosine",
                                "--warmup-steps", "10", "--clip-grad-norm", "1.0", "--steps", str(args.steps),
                                "--amp", amp, "--log-file", log, "--log-every", "1"])
    rows = [json.loads(line) for line in open(log) if line.strip()]
    return [float(r["loss"]) for r in rows], rows[-1]


def run_train(args, work: str) -> int:
    import export  # models/export.py
    d = os.path.join(args.cache_dir or work, f"{args.name}.amp_train")
    os.makedirs(d, exist_ok=True)
    pt = os.path.join(d, args.name + ".pt")
    if not os.path.exists(pt):
        export.export(args.name, ["trace"], d, train=True)
    tokens = os.path.join(d, "tokens.bin")
    if not os.path.exists(tokens):
        subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "models", "task.py"), "make",
                        "--out", tokens], check=True, stdout=subprocess.DEVNULL)
    f32, _ = kiln_losses(args, pt, tokens, work, "none")
    amp, last = kiln_losses(args, pt, tokens, work, args.amp)
    every = max(1, len(f32) // 8)
    print("step   f32 loss   " + args.amp + " loss")
    for i in list(range(0, len(f32), every)) + [len(f32) - 1]:
        print(f"{i + 1:5d}  {f32[i]:9.4f}  {amp[i]:9.4f}")
    tail = lambda xs: sum(xs[-5:]) / len(xs[-5:])  # noqa: E731
    fell = tail(amp) < 0.25 * amp[0]
    close = tail(amp) <= tail(f32) * (1 + args.train_tol) + 0.05
    scale = f", final loss_scale {last['loss_scale']:g}" if "loss_scale" in last else ""
    print(f"{args.name} train --amp {args.amp}: first {amp[0]:.4f}, last-5 mean {tail(amp):.4f} "
          f"(float32 {tail(f32):.4f}){scale}: {'ok' if fell and close else 'FAIL'}")
    return 0 if fell and close else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="zoo model (models/export.py --list)")
    p.add_argument("--mode", choices=("grad", "train"), default="grad")
    p.add_argument("--amp", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--kiln", required=True, help="path to the kiln binary")
    p.add_argument("--work-dir", help="where kiln's outputs go (default: a new temp dir)")
    p.add_argument("--cache-dir", help="where the export and batch go (shared with parity.py)")
    p.add_argument("--tol", type=float, default=2e-2, help="grad: max|kiln - ref| / max|ref| per tensor")
    p.add_argument("--batch", type=int, default=0,
                   help="grad: batch size (default: the zoo's); BatchNorm over 2 images is ill-conditioned")
    p.add_argument("--steps", type=int, default=120, help="train: steps")
    p.add_argument("--train-tol", type=float, default=0.5, help="train: final loss at most this much above f32's")
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix=f"kiln-amp-{args.name}-")
    os.makedirs(work, exist_ok=True)
    try:
        rc = run_grad(args, work) if args.mode == "grad" else run_train(args, work)
    except parity.Failure as e:
        print(f"{args.name} {args.mode} --amp {args.amp}: ERROR: {e}")
        rc = 2
    return parity.tidy_outputs(work, rc, not args.work_dir)


if __name__ == "__main__":
    sys.exit(main())
