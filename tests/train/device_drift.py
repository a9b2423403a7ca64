#!/usr/bin/python3
"""PyTorch against itself across devices: a zoo model's gradients and its
weights after N AdamW steps, computed by PyTorch on the CPU and on CUDA from
the same eager module and batch, compared with parity.py's measure (each
tensor's largest difference over its largest element).

    device_drift.py NAME [NAME ...] [--dtype float64|float32] [--steps N] [--work-dir DIR]

Where `parity.py --device cuda` finds Kiln's GPU run away from PyTorch's CPU
run, this says how far PyTorch's own GPU run is: the part of the difference
that the device's kernels (summation orders, cuDNN's algorithms) make on
their own. Needs a GPU; prints one line per model and mode, exits 2 without
one.
"""

import argparse
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import losses  # noqa: E402
import parity  # noqa: E402
import reference as ref  # noqa: E402


def run_on(device: str, name: str, batch: str, loss: str, dtype: torch.dtype, steps: int):
    """(gradients, state after `steps` AdamW steps) of PyTorch on `device`."""
    inputs, target = ref.load_batch(batch, dtype)
    inputs = [x.to(device) for x in inputs]
    target = target.to(device) if target is not None else None
    _, grads = ref.grads(parity.eager_model(name, dtype).to(device), inputs, target, loss)
    res = ref.train(parity.eager_model(name, dtype).to(device), inputs, target, loss, parity.MODES["adamw"], steps)
    return ({k: v.cpu() for k, v in grads.items()}, {k: v.cpu() for k, v in res.state.items()}, res.losses)


def worst(a, b):
    rows = [(compare.rel_max(a[k], b[k]), k) for k in a if a[k].is_floating_point() and a[k].numel()]
    return max(rows, default=(0.0, "-"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="+", help="zoo models")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    p.add_argument("--steps", type=int, default=parity.STEPS)
    p.add_argument("--work-dir", help="where the batches go (default: a temp dir)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("device_drift: no CUDA device")
        return 2
    dtype = getattr(torch, args.dtype)
    work = args.work_dir or tempfile.mkdtemp(prefix="kiln-drift-")
    for name in args.names:
        loss = parity.default_loss(name)
        _, batch = parity.prepare(name, loss, work, args.dtype)
        g_cpu, s_cpu, l_cpu = run_on("cpu", name, batch, loss, dtype, args.steps)
        g_gpu, s_gpu, l_gpu = run_on("cuda", name, batch, loss, dtype, args.steps)
        ge, gk = worst(g_gpu, g_cpu)
        se, sk = worst(s_gpu, s_cpu)
        le = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(l_gpu, l_cpu))
        over = sum(1 for k in s_cpu if s_cpu[k].is_floating_point() and s_cpu[k].numel()
                   and compare.rel_max(s_gpu[k], s_cpu[k]) > parity.EXACT_TOL["adamw"])
        print(f"{name} [{loss}, {args.dtype}] PyTorch cuda vs cpu: gradients worst {ge:.3g} ({gk}); "
              f"after {args.steps} adamw steps worst {se:.3g} ({sk}), {over} tensors over "
              f"{parity.EXACT_TOL['adamw']:g}; losses worst {le:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
