#!/usr/bin/env python3
"""Schedule-free AdamW (Defazio et al., 2024, "The Road Less Scheduled") on
a time-to-quality task, in PyTorch eager: the update of the authors'
reference implementation (adamw_schedulefree_reference.py: z, x and the
second moment per parameter, the gradient taken at y = beta1 x + (1 - beta1) z,
x the running average of z weighted by lr_max^2, weight decay at y), with
the task's linear warm-up, evaluated at x. An exploration for
docs/benchmarks.md (chars_long: is it faster to the target than --ema?),
not a Kiln recipe.

    /usr/bin/python3 benchmarks/ttq_schedule_free.py [--task chars_long] [--seed 0] [--lr 3e-3] [--steps 4000]

Prints the held-out loss at x at every evaluation of the task's cadence.
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import time_to_quality as ttq  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="chars_long", help="a token task of time_to_quality.py")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW's default, as the task's baseline")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out-dir", default="build/ttq", help="where time_to_quality.py keeps its data")
    a = p.parse_args()
    task = ttq.TASKS[a.task]
    if task.data != "chars":
        sys.exit(f"--task {a.task}: only the token tasks (chars, chars_long) are wired here")
    torch.set_num_threads(a.threads)
    data = ttq.chars_data(a.out_dir, a.seed, task.steps)
    model, _ = ttq.build(task, a.seed)
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    beta2, eps = 0.999, 1e-8
    z = [q.detach().clone() for q in params]
    x = [q.detach().clone() for q in params]
    v = [torch.zeros_like(q) for q in params]
    weight_sum, lr_max = 0.0, -1.0
    evals = [ttq.token_windows(data["eval"], i, ttq.CHAR_BATCH, ttq.CHAR_SEQ) for i in range(ttq.CHAR_EVAL_BATCHES)]

    def loss_of(out, target):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))

    def held_out_loss_at_x() -> float:
        y = [q.detach().clone() for q in params]
        with torch.no_grad():
            for q, xi in zip(params, x):
                q.copy_(xi)
            model.eval()
            loss = sum(float(loss_of(model(b["input0"]), b["target"])) for b in evals) / len(evals)
            model.train()
            for q, yi in zip(params, y):
                q.copy_(yi)
        return loss

    start, curve = time.time(), []
    for k in range(a.steps):
        b = ttq.token_windows(data["train"], k, ttq.CHAR_BATCH, ttq.CHAR_SEQ)
        for q in params:
            q.grad = None
        loss_of(model(b["input0"]), b["target"]).backward()
        with torch.no_grad():
            warm = (k + 1) / task.warmup if k < task.warmup else 1.0
            lr = a.lr * warm * math.sqrt(1 - beta2 ** (k + 1))
            lr_max = max(lr, lr_max)
            weight_sum += lr_max ** 2
            c = lr_max ** 2 / weight_sum
            for q, zi, xi, vi in zip(params, z, x, v):
                zi.sub_(q, alpha=lr * a.weight_decay)
                vi.mul_(beta2).addcmul_(q.grad, q.grad, value=1 - beta2)
                zi.addcdiv_(q.grad, vi.sqrt().add_(eps), value=-lr)
                xi.mul_(1 - c).add_(zi, alpha=c)
                q.copy_(xi * a.beta1 + zi * (1 - a.beta1))
        if (k + 1) % task.eval_every == 0:
            curve.append(f"{k + 1}:{held_out_loss_at_x():.3f}")
            print(f"lr {a.lr:g} seed {a.seed} {time.time() - start:.0f} s  " + " ".join(curve), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
