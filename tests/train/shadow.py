"""PyTorch's answer in float32 together with a float64 "shadow" run in
lockstep, for parity.py's tolerance rule (compare.py).

    run(pt, batch, loss, cfg, steps) -> Reference

For grad mode (cfg None): the loss and the gradients, once in float32, once
in float64. For the optimizer modes: the float32 and float64 models train
side by side on the same batch, and after every backward the elements whose
gradient is at float32's noise level are marked:

    noise-driven:  |g64| <= MASK_FACTOR * max|g32 - g64|   (per tensor)

Adam divides by sqrt(v), so such an element moves by about +-lr per step
whichever way float32's rounding happened to point its gradient; any two
float32 implementations disagree there by up to ~2 lr per step. SGD does
not amplify noise, so it gets no masks.
"""

import dataclasses
from typing import Dict, List, Optional

import torch

import losses
import reference as ref

MASK_FACTOR = 10.0


@dataclasses.dataclass
class Reference:
    losses32: List[float]
    tensors32: Dict[str, torch.Tensor]  # gradients or final state_dict
    losses64: List[float]
    tensors64: Dict[str, torch.Tensor]
    masks: Dict[str, torch.Tensor]  # state_dict key -> noise-driven elements
    max_grad_norm: float = 0.0  # largest pre-clipping global gradient norm (float32)


def _grads(model, inputs, target, loss_kind):
    for p in model.parameters():
        p.grad = None
    loss = losses.loss(loss_kind, model(*inputs), target)
    loss.backward()
    return float(loss.detach())


def run(pt: str, batch: str, loss_kind: str, cfg: Optional[ref.OptConfig], steps: int) -> Reference:
    dtypes = (torch.float32, torch.float64)
    models = [ref.load_model(pt, d) for d in dtypes]
    data = [ref.load_batch(batch, d) for d in dtypes]
    if cfg is None:
        out = []
        for m, (inputs, target) in zip(models, data):
            torch.manual_seed(0)
            out.append(ref.grads(m, inputs, target, loss_kind))
        (l32, g32), (l64, g64) = out
        return Reference([l32], g32, [l64], g64, {})

    named = [list(m.named_parameters()) for m in models]
    opts = [ref.make_optimizer([p for _, p in nps], cfg) for nps in named]
    adam = cfg.optimizer in ("adam", "adamw")
    masks = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in named[0]}
    res = Reference([], {}, [], {}, {})
    for _ in range(steps):
        step_losses = []
        for m, (inputs, target) in zip(models, data):
            torch.manual_seed(0)
            step_losses.append(_grads(m, inputs, target, loss_kind))
        res.losses32.append(step_losses[0])
        res.losses64.append(step_losses[1])
        sq = 0.0
        for (n, p32), (_, p64) in zip(*named):
            if p32.grad is None:
                continue
            sq += float(p32.grad.double().pow(2).sum())
            if adam:
                g64 = p64.grad
                noise = (p32.grad.double() - g64).abs().max()
                masks[n] |= g64.abs() <= MASK_FACTOR * noise
        res.max_grad_norm = max(res.max_grad_norm, sq ** 0.5)
        for (nps, opt) in zip(named, opts):
            if cfg.clip_grad_norm:
                torch.nn.utils.clip_grad_norm_([p for _, p in nps], cfg.clip_grad_norm)
            opt.step()
    res.tensors32 = ref.state_dict(models[0])
    res.tensors64 = ref.state_dict(models[1])
    if adam:
        res.masks = {key: masks[n] for key, n in ref.param_names(models[0]).items() if masks[n].any()}
    return res
