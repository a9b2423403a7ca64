#!/usr/bin/python3
"""Numerical equivalence of Kiln's optimizing pipeline, on one zoo model.

    equivalence.py NAME --kiln PATH/TO/kiln --work-dir DIR [--cache-dir DIR]
                   [--steps 2] [--tol 1e-5] [--grad-tol 1e-4] [--passes P,Q,...]

The suite runs it as the last mode of a model's float32 parity process
(tests/train/parity.py --mode ...,equiv, through check()), which hands over
the default pipeline's gradients its grad mode has already computed.

Compares Kiln's default pipeline of `kiln train` (or --passes) with only the
passes a training step cannot do without (loss, autodiff, optimizer), i.e.
the graph no optimization has touched, on NAME (train-mode TorchScript
trace, dropout at p=0, the parity harness's export and batch, float32):

- `kiln grad`: every gradient, over every element;
- `kiln train` with AdamW, one step at a time: the unoptimized run trains
  every step in one process with a checkpoint after each; the optimized run
  takes each step from the unoptimized run's state before it (--resume), so every
  step is compared from identical weights and moments (later steps run on
  nonzero moments and bias corrections). Every parameter, buffer and the
  step's loss.

Every weight, buffer and loss must agree within --tol relative to its max (the passes are
meant to be exact; the tolerance leaves room for reassociating rewrites:
fused attention, a GEMM that reads an operand transposed). One allowance,
for what rounding noise becomes under Adam: where a gradient is zero up to
rounding (attention's key bias) or a near-cancelling float32 sum over
thousands of tokens, |g| ~ eps = 1e-8, the step g / (|g| + eps) is decided
by the noise, so two exact pipelines move such an element apart by up to
lr. Each parameter element gets a slack of twice the difference between
the steps the two runs' own moments give (~0 where they agree), as the fx
export test does; their count is printed and the worst error covers the
others. Gradients are compared at --grad-tol (1e-4, the float32 gradient
tolerance of the PyTorch parity harness, tests/train/parity.py) and at
the scale of the largest gradient among the parameters of the same module:
channels_last runs convolutions with oneDNN's NHWC kernels, which sum in
another order, and where a gradient is zero up to rounding (a
convolution's bias before a training batch norm: 6e-8 against 0.5 for the
weight in VGG) or a near-cancelling sum (a batch norm's weight gradient,
sum g * x_hat), that noise is all of the tensor. A loss is compared
relative to at least the first step's: once the batch is memorized it is
log-sum-exp minus the target logit, a difference of terms of that size.

The torchvision models PyTorch itself cannot reproduce at the zoo's batch
(parity.ILL_CONDITIONED: BatchNorm over 2x2 maps, ReLU6 kinks) have
gradients that depend on the order a convolution sums in. There PyTorch's
own float32 gradients with channels-last tensors differ from its NCHW ones
by as much as the channels_last pass moves Kiln's (tv_mobilenet_v2 on an
AVX2-only CPU: 15.6% of features.16.conv.0.1.bias's scale for both, while
Kiln's NCHW float32 gradients are within 1.7e-4 of PyTorch's float64
ones). For those models a gradient may also differ by up to twice
PyTorch's own channels-last spread for that tensor, a running statistic
and the loss by twice the spread of those PyTorch's forward gives; a
wrong rule is O(1) where that spread is small and still fails.

Exits 1 on a mismatch, 2 when something could not run.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import parity  # noqa: E402  (prepare: the shared export + batch cache)
import st_io  # noqa: E402
from compare import rel_max  # noqa: E402

UNOPTIMIZED = {"train": "loss,autodiff,optimizer", "grad": "loss,autodiff"}
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8  # the run's AdamW (torch's defaults)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n" + "\n".join(p.stdout.splitlines()[-5:]))


def losses_of(path):
    return [json.loads(line)["loss"] for line in open(path)]


def optimizer_state(ckpt):
    """Optimizer state of Kiln's latest checkpoint in `ckpt`."""
    with open(os.path.join(ckpt, "latest")) as f:
        return st_io.load(os.path.join(ckpt, f.read().strip(), "optimizer.safetensors"))


def adam_step(m, v, step):
    """The step AdamW takes from its moments after `step` updates."""
    return LR * (m.double() / (1 - BETA1 ** step)) / ((v.double() / (1 - BETA2 ** step)).sqrt() + EPS)


def adam_slack(name, step, opt_state, ref_state):
    """Per element of parameter `name`: twice the difference of the steps the
    two runs' moments give (None for tensors without moments)."""
    m, v = f"exp_avg.{name}", f"exp_avg_sq.{name}"
    if m not in opt_state or m not in ref_state:
        return None
    return 2 * (adam_step(opt_state[m], opt_state[v], step) - adam_step(ref_state[m], ref_state[v], step)).abs()


def torch_layout_spread(pt, batch):
    """Per parameter: the largest difference between PyTorch's own float32
    gradients of the traced model `pt` on `batch` (cross-entropy) with
    channels-last tensors and with NCHW ones; per buffer, between the
    running statistics that forward leaves; "__loss__": between the losses."""
    import torch
    b = st_io.load(batch)
    grads = []
    for channels_last in (False, True):
        m = torch.jit.load(pt)
        m.train()
        x = b["input0"]
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        out = m(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        loss = torch.nn.functional.cross_entropy(out, b["target"])
        loss.backward()
        grads.append({**{n: p.grad.double() for n, p in m.named_parameters() if p.grad is not None},
                      **{n: t.double() for n, t in m.named_buffers() if t.is_floating_point()},
                      "__loss__": loss.detach().double()})
    return {n: (grads[1][n] - grads[0][n]).abs().max().item() for n in grads[0] if n in grads[1]}


class Comparison:
    def __init__(self, tol):
        self.tol, self.worst, self.slacked, self.bad = tol, 0.0, 0, []
        self.layout_noise = 0  # tensors beyond tol within PyTorch's own channels-last spread

    def tensors(self, what, got, want, slack_of=None, scale_of=None, tol=None, tol_of=None):
        base_tol = self.tol if tol is None else tol
        if set(got) != set(want):
            self.bad.append(f"{what}: tensor names differ: {sorted(set(got) ^ set(want))}")
        for k in sorted(set(got) & set(want)):
            x, y = got[k], want[k]
            tol = max(base_tol, tol_of(k)) if tol_of else base_tol
            slack = slack_of(k) if slack_of and y.is_floating_point() and y.numel() else None
            floor = scale_of(k) if scale_of else 0.0
            if slack is None and floor > 0:
                scale = max(y.double().abs().max().item(), floor) if y.numel() else floor
                e = (x.double() - y.double()).abs().max().item() / scale if y.numel() else 0.0
                ok = e <= tol
                self.layout_noise += int(base_tol < e <= tol)
            elif slack is None:
                e = rel_max(x, y) if y.numel() else 0.0
                ok = e <= tol
            else:
                diff, scale = (x.double() - y.double()).abs(), y.double().abs().max().item()
                plain = tol * scale
                clean = slack <= plain
                e = (diff[clean].max().item() / scale) if clean.any() and scale > 0 else 0.0
                ok = bool((diff <= plain + slack).all())
                self.slacked += int((diff > plain).sum())
            self.worst = max(self.worst, e)
            if not ok:
                self.bad.append(f"{what}: {k}: relative error {e:.3g} > {tol:g}"
                                + ("" if slack is None else " (or beyond Adam's noise slack)"))

    def loss(self, what, got, want, first, tol=None):
        e = abs(got - want) / max(abs(want), abs(first), 1e-30)
        self.worst = max(self.worst, e)
        if e > max(self.tol, tol or 0.0):
            self.bad.append(f"{what}: loss {got} vs {want}")


def step_checkpoints(ckpt):
    """Steps done -> step directory, of every checkpoint kiln saved in `ckpt`."""
    out = {}
    for d in os.listdir(ckpt):
        meta = os.path.join(ckpt, d, "trainer.json")
        if os.path.isfile(meta):
            out[json.load(open(meta))["steps_done"]] = os.path.join(ckpt, d)
    return out


def check(name, kiln, work_dir, cache_dir=None, steps=2, tol=1e-5, grad_tol=1e-4, passes=None,
          optimized_grads=None) -> int:
    """The comparison on zoo model `name`; 0 when it passes, 1 on a mismatch,
    2 when something could not run. optimized_grads: the `kiln grad` output
    of the default pipeline on the same export and batch, when the caller
    (tests/train/parity.py's float32 grad mode) already has it."""
    os.makedirs(work_dir, exist_ok=True)
    loss = parity.default_loss(name)
    c = Comparison(tol)
    try:
        pt, batch = parity.prepare(name, loss, cache_dir or work_dir)
        base = [pt, "--input-file", batch, "--loss", loss]
        optimized = ["--passes", passes] if passes else []

        grads = {"optimized": optimized_grads} if optimized_grads is not None and not passes else {}
        for label in ("optimized", "unoptimized"):
            if label in grads:
                continue
            out = os.path.join(work_dir, f"grad.{label}.safetensors")
            run([kiln, "grad"] + base + ["--output", out]
                + (["--passes", UNOPTIMIZED["grad"]] if label == "unoptimized" else optimized))
            grads[label] = st_io.load(out)
        ref = grads["unoptimized"]

        def module_scale(k):
            module = k.rsplit(".", 1)[0] + "." if "." in k else None
            sib = [t for n, t in ref.items() if module and n.startswith(module) and "." not in n[len(module):]]
            return max((t.double().abs().max().item() for t in sib if t.numel() and t.is_floating_point()),
                       default=0.0)

        tol_of = None
        if name in parity.ILL_CONDITIONED and loss == "cross_entropy":
            spread = torch_layout_spread(pt, batch)

            def tol_of(k):
                scale = max(ref[k].double().abs().max().item() if ref[k].numel() else 0.0, module_scale(k))
                return 2 * spread.get(k, 0.0) / scale if scale > 0 else 0.0

        c.tensors("grad", grads["optimized"], ref, scale_of=module_scale, tol=grad_tol, tol_of=tol_of)

        adamw = ["--optimizer", "adamw", "--lr", str(LR)]
        # The unoptimized run: every step in one process, a checkpoint after each.
        u_ckpt, u_log = os.path.join(work_dir, "train.unoptimized.ckpt"), os.path.join(work_dir, "train.unoptimized.jsonl")
        run([kiln, "train"] + base + adamw + ["--steps", str(steps), "--log-file", u_log, "--checkpoint", u_ckpt,
                                              "--checkpoint-every", "1", "--keep-checkpoints", str(steps),
                                              "--passes", UNOPTIMIZED["train"]])
        u_steps, u_losses = step_checkpoints(u_ckpt), losses_of(u_log)
        if sorted(u_steps) != list(range(1, steps + 1)) or len(u_losses) != steps:
            raise RuntimeError(f"the unoptimized run left checkpoints of steps {sorted(u_steps)} and "
                               f"{len(u_losses)} losses, not {steps} of each")
        for step in range(1, steps + 1):
            # The optimized pipeline takes step `step` from the unoptimized run's state before it.
            tag = os.path.join(work_dir, f"train.optimized.{step}")
            args = [kiln, "train"] + base + adamw + ["--steps", str(step), "--log-file", tag + ".jsonl",
                                                     "--checkpoint", tag + ".ckpt"] + optimized
            if step > 1:
                with open(os.path.join(u_ckpt, "latest"), "w") as f:  # resume reads the checkpoint `latest` names
                    f.write(os.path.basename(u_steps[step - 1]))
                args += ["--resume", u_ckpt]
            run(args)
            o_dir = step_checkpoints(tag + ".ckpt")[step]
            w_opt, s_opt = (st_io.load(os.path.join(o_dir, f)) for f in ("model.safetensors", "optimizer.safetensors"))
            w_ref, s_ref = (st_io.load(os.path.join(u_steps[step], f))
                            for f in ("model.safetensors", "optimizer.safetensors"))
            l_opt, l_ref = losses_of(tag + ".jsonl")[-1], u_losses[step - 1]
            # Checkpoints are whole models with their moments (a torchvision
            # model's are hundreds of MB): keep only what a later step reads.
            shutil.rmtree(tag + ".ckpt", ignore_errors=True)
            first_loss = u_losses[0]
            # Buffers (running statistics) of ill-conditioned models: up to twice PyTorch's own spread.
            buffer_tol = None
            if tol_of:
                def buffer_tol(k, w=w_ref, s=s_ref):
                    scale = w[k].double().abs().max().item() if w[k].numel() else 0.0
                    return 2 * spread.get(k, 0.0) / scale if scale > 0 and f"exp_avg.{k}" not in s else 0.0
            c.tensors(f"train step {step}", w_opt, w_ref, lambda k: adam_slack(k, step, s_opt, s_ref),
                      tol_of=buffer_tol)
            c.loss(f"train step {step}", l_opt, l_ref, first_loss,
                   2 * spread["__loss__"] / max(abs(l_ref), abs(first_loss)) if tol_of else None)
    except Exception as e:  # noqa: BLE001 - any failure to run is exit 2 with its message
        print(f"{name}: ERROR: {e}")
        return parity.tidy_outputs(work_dir, 2, False)
    finally:
        for f in os.listdir(work_dir):
            if f.endswith(".ckpt"):
                shutil.rmtree(os.path.join(work_dir, f), ignore_errors=True)
    for line in c.bad:
        print(f"{name}: FAIL {line}")
    print(f"{name}: optimized vs unoptimized pipeline, grad and {steps} AdamW steps (each from the same state): "
          f"worst relative error {c.worst:.3g} (tol {tol:g}, gradients {grad_tol:g}; {c.slacked} weight elements "
          f"within Adam's noise slack"
          + (f"; {c.layout_noise} gradients within PyTorch's own channels-last spread" if c.layout_noise else "")
          + f"){'' if not c.bad else ' -- FAILED'}")
    return parity.tidy_outputs(work_dir, 1 if c.bad else 0, False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cache-dir")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--passes", help="the optimized pipeline (default: kiln's default pipeline)")
    a = ap.parse_args()
    return check(a.name, a.kiln, a.work_dir, a.cache_dir, a.steps, a.tol, a.grad_tol, a.passes)


if __name__ == "__main__":
    sys.exit(main())
