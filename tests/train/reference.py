#!/usr/bin/python3
"""PyTorch's side of the training-parity tests: what `kiln grad` and
`kiln train` compute, computed with torch.autograd and torch.optim.

    reference.py grad  MODEL.pt --input-file BATCH --loss L --output GRADS.safetensors
    reference.py train MODEL.pt --input-file BATCH --loss L --optimizer sgd|adam|adamw|muon
                       --lr X [--momentum M] [--dampening D] [--nesterov]
                       [--weight-decay W] [--beta1 B1] [--beta2 B2] [--eps E]
                       [--clip-grad-norm C] [--lr-schedule warmup_cosine --warmup-steps K --min-lr M]
                       [--muon-lr ML --muon-momentum MM --muon-weight-decay MW]
                       --steps N --save-weights OUT --log-file LOSSES.jsonl

Same options and output files as kiln's commands, so the two are
interchangeable (tests/train/parity.py runs both and compares):
  grad:  one tensor per trainable parameter under EVERY state_dict key that
         names it (a tied parameter is one entry of named_parameters() but
         several state_dict keys), plus "loss" (0-d f32). A parameter that
         gets no gradient (unused) gets zeros, as Kiln writes them.
  train: the same batch every step; step i is loss = f(w_i); backward;
         [clip_grad_norm_]; optimizer.step(). OUT holds the final
         state_dict() (parameters and buffers, e.g. BatchNorm running stats
         and num_batches_tracked, tied keys under each name); LOSSES.jsonl one
         {"step": i, "loss": x} per step.

MODEL.pt is a TorchScript archive exported in train mode (models/export.py
--format trace --train --no-dropout); it is run as is, in train mode. The
batch holds input0, input1, ... (forward arguments in order) and `target`
(see losses.py for the loss rules). Optimizer defaults are torch.optim's,
except weight decay, whose default is per optimizer like Kiln's (0 for SGD
and Adam, 0.01 for AdamW -- which is also torch's).

--dtype float64 runs the same archive in double precision (parameters,
buffers and float inputs cast): a far more exact answer than float32, which
parity.py uses to tell real gradients from float32 rounding noise.
"""

import argparse
import dataclasses
import fnmatch
import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import losses  # noqa: E402
import st_io  # noqa: E402

OPTIMIZERS = ("sgd", "adam", "adamw", "muon")


@dataclasses.dataclass
class OptConfig:
    """Optimizer settings, named like kiln train's options."""
    optimizer: str = "adamw"
    lr: float = 1e-3
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: Optional[float] = None  # None: 0 for sgd/adam, 0.01 for adamw
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    clip_grad_norm: float = 0.0  # 0: off
    # Learning-rate schedule, as kiln train's --lr-schedule: "constant" or
    # "warmup_cosine" (linear warm-up over warmup_steps, then cosine decay
    # to min_lr at the last step), run with torch.optim.lr_scheduler.
    schedule: str = "constant"
    warmup_steps: int = 0
    min_lr: float = 0.0
    # Muon (optimizer "muon": Muon for the matrices no embedding reads, AdamW
    # with the settings above for the other parameters), kiln's --muon-*.
    muon_lr: float = 0.02
    muon_momentum: float = 0.95
    muon_weight_decay: float = 0.0

    def decay(self) -> float:
        if self.weight_decay is not None:
            return self.weight_decay
        return 0.01 if self.optimizer in ("adamw", "muon") else 0.0

    def cli_args(self) -> List[str]:
        """The same settings as command-line options (kiln's and ours)."""
        a = ["--optimizer", self.optimizer, "--lr", repr(self.lr)]
        if self.optimizer == "sgd":
            a += ["--momentum", repr(self.momentum), "--dampening", repr(self.dampening)]
            if self.nesterov:
                a.append("--nesterov")
        else:
            a += ["--beta1", repr(self.beta1), "--beta2", repr(self.beta2), "--eps", repr(self.eps)]
        if self.weight_decay is not None:
            a += ["--weight-decay", repr(self.weight_decay)]
        if self.clip_grad_norm:
            a += ["--clip-grad-norm", repr(self.clip_grad_norm)]
        if self.schedule != "constant":
            a += ["--lr-schedule", self.schedule, "--min-lr", repr(self.min_lr)]
        if self.warmup_steps:
            a += ["--warmup-steps", str(self.warmup_steps)]
        if self.optimizer == "muon":
            a += ["--muon-lr", repr(self.muon_lr), "--muon-momentum", repr(self.muon_momentum),
                  "--muon-weight-decay", repr(self.muon_weight_decay)]
        return a


def newton_schulz(u: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """torch.optim.Muon's orthogonalization (PyTorch >= 2.9, written out
    here for older ones): the quintic iteration X <- aX + (bA + cA^2)X,
    A = XX^T, on the wide side of u / (||u||_F + eps), in bfloat16 -- in
    float64 for a float64 u, where kiln's Muon keeps float64 too."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = u if u.dtype == torch.float64 else u.bfloat16()
    tall = u.size(0) > u.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


class Muon(torch.optim.Optimizer):
    """torch.optim.Muon's step (nesterov, adjust_lr_fn "original"):
    buf.lerp_(g, 1 - momentum); u = g.lerp(buf, momentum);
    p *= 1 - lr * weight_decay; p -= lr * sqrt(max(1, rows / cols)) * NS(u)."""

    def __init__(self, params, lr: float, momentum: float, weight_decay: float):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - mu)
                ortho = newton_schulz(p.grad.lerp(buf, mu))
                p.mul_(1 - lr * wd)
                p.add_(ortho, alpha=-lr * math.sqrt(max(1, p.size(0) / p.size(1))))


class MuonAdamW:
    """kiln's --optimizer muon: Muon for the floating-point matrices no
    embedding reads (embedding tables, and an output layer tied to one, are
    excluded), torch.optim.AdamW for every other parameter; two optimizers
    stepped together, each with its own schedule (make_scheduler)."""

    def __init__(self, params, cfg: OptConfig, embedding_weights):
        embedded = {id(w) for w in embedding_weights}
        matrices = [p for p in params if p.dim() == 2 and p.is_floating_point() and id(p) not in embedded]
        chosen = {id(m) for m in matrices}
        rest = [p for p in params if id(p) not in chosen]
        self.parts = []
        if rest:
            self.parts.append(torch.optim.AdamW(rest, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                                                weight_decay=cfg.decay()))
        if matrices:
            self.parts.append(Muon(matrices, cfg.muon_lr, cfg.muon_momentum, cfg.muon_weight_decay))

    @property
    def param_groups(self):
        return [g for o in self.parts for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True):
        for o in self.parts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.parts:
            o.step()


def embedding_weights(model: torch.nn.Module) -> List[torch.Tensor]:
    """The weights of the model's nn.Embedding modules (eager or scripted)."""
    return [m.weight for m in model.modules()
            if getattr(m, "original_name", type(m).__name__) == "Embedding" and hasattr(m, "weight")]


def make_optimizer(params, cfg: OptConfig, model: Optional[torch.nn.Module] = None):
    if cfg.optimizer == "muon":
        if model is None:
            raise ValueError("muon needs the model (which matrices are embeddings)")
        return MuonAdamW(params, cfg, embedding_weights(model))
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, dampening=cfg.dampening,
                               nesterov=cfg.nesterov, weight_decay=cfg.decay())
    betas = (cfg.beta1, cfg.beta2)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=cfg.decay())
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=cfg.decay())
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; use one of {', '.join(OPTIMIZERS)}")


def make_scheduler(opt: torch.optim.Optimizer, cfg: OptConfig, steps: int):
    """PyTorch's schedulers for cfg.schedule over `steps` steps (None for a
    constant rate without warm-up): LinearLR from lr / warmup to lr over the
    warm-up steps, then the rate (constant) or CosineAnnealingLR down to
    min_lr at step `steps` (warmup_cosine)."""
    if cfg.schedule not in ("constant", "warmup_cosine"):
        raise ValueError(f"unknown schedule {cfg.schedule!r}")
    if isinstance(opt, MuonAdamW):
        parts = [s for s in (make_scheduler(o, cfg, steps) for o in opt.parts) if s is not None]
        return Schedulers(parts) if parts else None
    sched = torch.optim.lr_scheduler
    w = cfg.warmup_steps
    # One warm-up step runs at the full rate (lr * 1 / 1): no LinearLR.
    warmup = sched.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1) if w > 1 else None
    if cfg.schedule == "constant":
        return warmup
    cosine = sched.CosineAnnealingLR(opt, T_max=max(1, steps - w), eta_min=cfg.min_lr)
    if w == 0:
        return cosine
    first = warmup if warmup is not None else sched.ConstantLR(opt, factor=1.0, total_iters=1)
    return sched.SequentialLR(opt, [first, cosine], milestones=[w])


class Schedulers:
    """One scheduler per optimizer of a MuonAdamW, stepped together."""

    def __init__(self, parts):
        self.parts = parts

    def step(self):
        for s in self.parts:
            s.step()


# --------------------------------------------------------------------------
# Model and batch
# --------------------------------------------------------------------------

def load_model(path: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The TorchScript archive, in train mode, optionally cast to `dtype`."""
    model = torch.jit.load(path, map_location="cpu")
    model.train()
    if dtype != torch.float32:
        model.to(dtype)
    return model


def load_batch(path: str, dtype: torch.dtype = torch.float32) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
    """(inputs in argument order, target or None) from a batch file; float
    tensors cast to `dtype` (class-index targets stay int64)."""
    t = st_io.load(path)
    cast = lambda x: x.to(dtype) if x.is_floating_point() else x  # noqa: E731
    inputs = []
    while f"input{len(inputs)}" in t:
        inputs.append(cast(t[f"input{len(inputs)}"]))
    if not inputs:
        raise ValueError(f"{path}: holds no tensor named input0")
    target = t.get("target")
    return inputs, (cast(target) if target is not None else None)


def param_names(model: torch.nn.Module) -> Dict[str, str]:
    """state_dict key -> named_parameters() name of the parameter it holds,
    for every key that holds a parameter (tied parameters: several keys, one
    name). Keys missing here are buffers."""
    by_id = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for k, v in model.state_dict(keep_vars=True).items():
        if id(v) in by_id:
            out[k] = by_id[id(v)]
    return out


def freeze(model: torch.nn.Module, patterns: List[str]) -> List[str]:
    """requires_grad=False on the parameters kiln's --freeze PATTERN selects
    (passes/freeze.h): a glob on state_dict keys, or without * ? [ the key
    itself or a module prefix. Returns every state_dict key frozen (tied
    parameters under each name); a pattern selecting nothing is an error."""
    keys = param_names(model)
    params = dict(model.named_parameters())
    names = set()
    for pat in patterns:
        if any(c in pat for c in "*?["):
            hit = [k for k in keys if fnmatch.fnmatchcase(k, pat)]
        else:
            hit = [k for k in keys if k == pat or k.startswith(pat + ".")]
        if not hit:
            raise ValueError(f"--freeze {pat!r} matches no parameter")
        names.update(keys[k] for k in hit)
    for n in names:
        params[n].requires_grad_(False)
    return sorted(k for k, n in keys.items() if n in names)


def state_dict(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """Every state_dict entry (tied keys under each name), detached copies."""
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


# --------------------------------------------------------------------------
# grad and train
# --------------------------------------------------------------------------

def grads(model: torch.nn.Module, inputs, target, loss_kind: str) -> Tuple[float, Dict[str, torch.Tensor]]:
    """(loss, gradient per state_dict key that holds a parameter) at the
    model's weights, without updating anything but BatchNorm-style buffers
    (a train-mode forward updates them, in Kiln too)."""
    params = dict(model.named_parameters())
    for p in params.values():
        p.grad = None
    loss = losses.loss(loss_kind, model(*inputs), target)
    loss.backward()
    out = {}
    for key, name in param_names(model).items():
        p = params[name]
        out[key] = (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
    for p in params.values():
        p.grad = None
    return float(loss.detach()), out


@dataclasses.dataclass
class TrainResult:
    losses: List[float]
    state: Dict[str, torch.Tensor]  # final state_dict
    # Per step, the gradient of every parameter (by named_parameters name)
    # before clipping: parity.py uses them to find float32 noise.
    step_grads: List[Dict[str, torch.Tensor]]
    lrs: List[float] = dataclasses.field(default_factory=list)  # the rate each step used
    ema_state: Dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # with ema: the averaged state_dict


def select_hardest(model: torch.nn.Module, inputs, target, loss_kind: str, fraction: float):
    """The rows of the batch with the k = max(1, round(fraction x N)) highest
    per-example losses (the training loss with reduction none, averaged over
    each example's other dims), scored without changing the model's buffers."""
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    with torch.no_grad():
        pred = losses.prediction(model(*inputs))
        if loss_kind == "mse":
            per = (pred - target) ** 2
        elif loss_kind == "cross_entropy":
            opts = {k: v for k, v in losses.CROSS_ENTROPY.items() if k != "weight"}
            if losses.classes_last(pred.shape, target.shape):
                per = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), reduction="none",
                                      **opts).reshape(target.shape)
            else:
                per = F.cross_entropy(pred, target, reduction="none", **opts)
        else:
            raise ValueError(f"selective backprop scores with cross_entropy or mse, not {loss_kind}")
        per = per.reshape(per.shape[0], -1).mean(1)
    for n, b in model.named_buffers():
        b.copy_(buffers[n])
    k = max(1, int(math.floor(fraction * per.shape[0] + 0.5)))
    idx = torch.topk(per, k).indices
    return [x[idx] for x in inputs], target[idx]


def train(model: torch.nn.Module, inputs, target, loss_kind: str, cfg: OptConfig, steps: int,
          keep_grads: bool = False, freeze_at: Optional[Dict[int, List[str]]] = None,
          ema: float = 0.0, selective: float = 0.0) -> TrainResult:
    """`steps` optimizer steps on the same batch, like a PyTorch training loop.
    `freeze_at`: step -> patterns frozen (requires_grad_(False)) from that step
    on, kiln's --freeze-schedule; their .grad is None from then on (zero_grad
    sets it so), so the optimizer skips them and keeps their state.
    `ema`: a moving average of every parameter and floating-point buffer
    after each opt.step(), as torch.optim.swa_utils.AveragedModel
    (use_buffers=True) with the EMA avg_fn
    `decay * averaged + (1 - decay) * current` updates it (a copy at its first
    update_parameters); kiln's --ema.
    `selective`: selective backprop (kiln's --selective-backprop): each step
    scores the batch with a forward under no_grad whose BatchNorm statistics
    are put back afterwards, keeps the round(selective x N) examples with the
    highest loss (torch.topk) and trains on those rows alone."""
    named = list(model.named_parameters())
    opt = make_optimizer([p for _, p in named], cfg, model)
    scheduler = make_scheduler(opt, cfg, steps)
    res = TrainResult([], {}, [])
    avg: Dict[str, torch.Tensor] = {}
    for i in range(steps):
        if freeze_at and i in freeze_at:
            freeze(model, freeze_at[i])
        opt.zero_grad(set_to_none=True)
        step_inputs, step_target = select_hardest(model, inputs, target, loss_kind, selective) if selective else \
            (inputs, target)
        loss = losses.loss(loss_kind, model(*step_inputs), step_target)
        loss.backward()
        if keep_grads:
            res.step_grads.append({n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
                                   for n, p in named})
        if cfg.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_([p for _, p in named], cfg.clip_grad_norm)
        res.lrs.append(float(opt.param_groups[0]["lr"]))
        opt.step()
        if ema:
            with torch.no_grad():
                averaged = named + [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
                for n, p in averaged:
                    avg[n] = p.detach().clone() if i == 0 else ema * avg[n] + (1 - ema) * p.detach()
        if scheduler is not None:
            scheduler.step()
        res.losses.append(float(loss.detach()))
    res.state = state_dict(model)
    if ema:
        res.ema_state = dict(res.state)
        for key, name in param_names(model).items():
            res.ema_state[key] = avg[name].contiguous()
        for name, b in model.named_buffers():
            if name in avg:
                res.ema_state[name] = avg[name].contiguous()
    return res


def evaluate(model: torch.nn.Module, batches, loss_kind: str) -> Dict[str, float]:
    """The evaluation kiln train --eval-data runs, as a PyTorch loop: model.eval()
    (an eager module: a trace keeps its train-mode BatchNorm), no_grad, per
    batch the plain loss (cross_entropy without smoothing or class weights,
    ignore_index kept) and the accuracy (argmax over the classes == target,
    over the targets not ignored); each the mean over the batches."""
    model.eval()
    ce = {k: v for k, v in losses.CROSS_ENTROPY.items() if k == "ignore_index"}
    saved = dict(losses.CROSS_ENTROPY)
    losses.CROSS_ENTROPY.clear()
    losses.CROSS_ENTROPY.update(ce)
    total, acc = 0.0, 0.0
    try:
        with torch.no_grad():
            for inputs, target in batches:
                out = model(*inputs)
                total += float(losses.loss(loss_kind, out, target))
                if loss_kind == "cross_entropy":
                    pred = losses.prediction(out)
                    dim = pred.dim() - 1 if losses.classes_last(pred.shape, target.shape) else min(1, pred.dim() - 1)
                    hit = (pred.argmax(dim) == target).double()
                    kept = (target != ce.get("ignore_index", -100)).double()
                    acc += float((hit * kept).sum() / kept.sum().clamp(min=1))
    finally:
        losses.CROSS_ENTROPY.clear()
        losses.CROSS_ENTROPY.update(saved)
    n = len(batches)
    out = {"loss": total / n}
    if loss_kind == "cross_entropy":
        out["accuracy"] = acc / n
        out["perplexity"] = math.exp(total / n)
    return out


# --------------------------------------------------------------------------
# Files in kiln's formats
# --------------------------------------------------------------------------

def save_grads(path: str, loss: float, g: Dict[str, torch.Tensor]) -> None:
    st_io.save(path, {**{k: v.float() for k, v in g.items()}, "loss": torch.tensor(loss, dtype=torch.float32)})


def save_train(weights_path: Optional[str], log_path: Optional[str], res: TrainResult) -> None:
    if weights_path:
        st_io.save(weights_path, {k: (v.float() if v.is_floating_point() else v) for k, v in res.state.items()})
    if log_path:
        with open(log_path, "w") as f:
            for i, x in enumerate(res.losses):
                f.write(json.dumps({"step": i, "loss": x, "lr": res.lrs[i]}) + "\n")


def read_log(path: str, key: str = "loss") -> List[float]:
    """Per-step `key` ("loss", "lr") of a LOSSES.jsonl (kiln's or ours),
    indexed by step."""
    by_step = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                j = json.loads(line)
                if key in j:  # evaluation lines (eval_loss, ...) hold no training loss
                    by_step[int(j["step"])] = float(j[key])
    return [by_step[i] for i in sorted(by_step)]


def add_opt_args(p: argparse.ArgumentParser) -> None:
    d = OptConfig()
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=d.optimizer)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--momentum", type=float, default=d.momentum)
    p.add_argument("--dampening", type=float, default=d.dampening)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="default: 0 for sgd/adam, 0.01 for adamw")
    p.add_argument("--beta1", type=float, default=d.beta1)
    p.add_argument("--beta2", type=float, default=d.beta2)
    p.add_argument("--eps", type=float, default=d.eps)
    p.add_argument("--clip-grad-norm", type=float, default=d.clip_grad_norm, help="0: off")
    p.add_argument("--lr-schedule", choices=("constant", "warmup_cosine"), default=d.schedule)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--min-lr", type=float, default=d.min_lr)
    p.add_argument("--muon-lr", type=float, default=d.muon_lr)
    p.add_argument("--muon-momentum", type=float, default=d.muon_momentum)
    p.add_argument("--muon-weight-decay", type=float, default=d.muon_weight_decay)


def opt_config(args) -> OptConfig:
    return OptConfig(args.optimizer, args.lr, args.momentum, args.dampening, args.nesterov,
                     args.weight_decay, args.beta1, args.beta2, args.eps, args.clip_grad_norm,
                     args.lr_schedule, args.warmup_steps, args.min_lr, args.muon_lr, args.muon_momentum,
                     args.muon_weight_decay)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("grad", "train"):
        s = sub.add_parser(name)
        s.add_argument("model", help="TorchScript archive exported in train mode")
        s.add_argument("--input-file", required=True, help="batch: input0, input1, ..., target")
        s.add_argument("--loss", choices=losses.KINDS, default="cross_entropy")
        s.add_argument("--dtype", choices=("float32", "float64"), default="float32")
        s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
        if name == "grad":
            s.add_argument("--output", "-o", required=True)
        else:
            add_opt_args(s)
            s.add_argument("--steps", type=int, default=10)
            s.add_argument("--save-weights")
            s.add_argument("--log-file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model = load_model(args.model, dtype)
    inputs, target = load_batch(args.input_file, dtype)
    torch.manual_seed(0)
    if args.cmd == "grad":
        loss, g = grads(model, inputs, target, args.loss)
        save_grads(args.output, loss, g)
        print(f"loss {loss:.6g}; wrote {len(g)} gradients to {args.output}")
    else:
        res = train(model, inputs, target, args.loss, opt_config(args), args.steps)
        save_train(args.save_weights, args.log_file, res)
        print(f"trained {args.steps} steps; final loss {res.losses[-1] if res.losses else float('nan'):.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
