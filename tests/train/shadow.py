"""PyTorch's answer in float32, plus the other answers parity.py's
tolerance rule needs (compare.py): a float64 "shadow" run in lockstep, and
a float32 run with other kernels.

    run(pt, batch, loss, cfg, steps) -> Reference

For grad mode (cfg None): the loss and the gradients, in float32, float64
and float32 with other kernels (oneDNN off, one thread: convolutions via
im2col + GEMM, other reduction splits -- a stand-in for another float32
implementation). For the optimizer modes the float32 and float64 models
train side by side on the same batch, and after every backward the elements
whose gradient is at float32's noise level are marked:

    noise-driven:  |g64| <= MASK_FACTOR * max(max|g32 - g64|, max|galt - g64|)
                   (noise per tensor; galt: float32 with other kernels)

Adam divides by sqrt(v), so such an element moves by about +-lr per step
whichever way float32's rounding happened to point its gradient; any two
float32 implementations disagree there by up to ~2 lr per step. SGD does
not amplify noise, so it gets no masks.
"""

import contextlib
import dataclasses
from typing import Dict, List, Optional

import torch

import losses
import reference as ref

MASK_FACTOR = 10.0


@contextlib.contextmanager
def other_float32_kernels():
    """PyTorch with other float32 kernels: no oneDNN and one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.backends.mkldnn.flags(enabled=False):
            yield
    finally:
        torch.set_num_threads(threads)


@dataclasses.dataclass
class Reference:
    losses32: List[float]
    tensors32: Dict[str, torch.Tensor]  # gradients or final state_dict
    losses64: List[float]
    tensors64: Dict[str, torch.Tensor]
    masks: Dict[str, torch.Tensor]  # state_dict key -> noise-driven elements
    max_grad_norm: float = 0.0  # largest pre-clipping global gradient norm (float32)
    losses_alt: List[float] = dataclasses.field(default_factory=list)  # float32, other kernels
    tensors_alt: Dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    initial: Dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # state before training
    lrs: List[float] = dataclasses.field(default_factory=list)  # the learning rate of each step
    param_keys: List[str] = dataclasses.field(default_factory=list)  # state_dict keys of parameters

    def others(self):
        """PyTorch's other answers: (tensor maps, loss lists)."""
        return [self.tensors64, self.tensors_alt], [self.losses64, self.losses_alt]


def _grads(model, inputs, target, loss_kind):
    for p in model.parameters():
        p.grad = None
    loss = losses.loss(loss_kind, model(*inputs), target)
    loss.backward()
    return float(loss.detach())


def run(pt: str, batch: str, loss_kind: str, cfg: Optional[ref.OptConfig], steps: int,
        mask_factor: float = MASK_FACTOR) -> Reference:
    # Three runs side by side: float32, float64, float32 with other kernels.
    kinds = [(torch.float32, contextlib.nullcontext), (torch.float64, contextlib.nullcontext),
             (torch.float32, other_float32_kernels)]
    models = [ref.load_model(pt, d) for d, _ in kinds]
    data = [ref.load_batch(batch, d) for d, _ in kinds]
    if cfg is None:
        out = []
        for m, (inputs, target), (_, ctx) in zip(models, data, kinds):
            with ctx():
                torch.manual_seed(0)
                out.append(ref.grads(m, inputs, target, loss_kind))
        (l32, g32), (l64, g64), (lalt, galt) = out
        return Reference([l32], g32, [l64], g64, {}, 0.0, [lalt], galt)

    named = [list(m.named_parameters()) for m in models]
    opts = [ref.make_optimizer([p for _, p in nps], cfg) for nps in named]
    schedulers = [ref.make_scheduler(opt, cfg, steps) for opt in opts]
    adam = cfg.optimizer in ("adam", "adamw")
    masks = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in named[0]}
    res = Reference([], {}, [], {}, {})
    res.initial = ref.state_dict(models[0])
    res.param_keys = list(ref.param_names(models[0]))
    for _ in range(steps):
        step_losses = []
        for m, (inputs, target), (_, ctx) in zip(models, data, kinds):
            with ctx():
                torch.manual_seed(0)
                step_losses.append(_grads(m, inputs, target, loss_kind))
        res.losses32.append(step_losses[0])
        res.losses64.append(step_losses[1])
        res.losses_alt.append(step_losses[2])
        sq = 0.0
        for (n, p32), (_, p64), (_, palt) in zip(*named):
            if p32.grad is None:
                continue
            sq += float(p32.grad.double().pow(2).sum())
            if adam:
                g64 = p64.grad
                noise = max((p32.grad.double() - g64).abs().max(), (palt.grad.double() - g64).abs().max())
                masks[n] |= g64.abs() <= mask_factor * noise
        res.max_grad_norm = max(res.max_grad_norm, sq ** 0.5)
        res.lrs.append(float(opts[0].param_groups[0]["lr"]))
        for nps, opt, sched, (_, ctx) in zip(named, opts, schedulers, kinds):
            with ctx():
                if cfg.clip_grad_norm:
                    torch.nn.utils.clip_grad_norm_([p for _, p in nps], cfg.clip_grad_norm)
                opt.step()
                if sched is not None:
                    sched.step()
    res.tensors32, res.tensors64, res.tensors_alt = (ref.state_dict(m) for m in models)
    if adam:
        res.masks = {key: masks[n] for key, n in ref.param_names(models[0]).items() if masks[n].any()}
    return res
