"""The loss rules of `kiln train` / `kiln grad`, written with PyTorch.

    prediction(outputs)                  -> the tensor a loss is computed from
    loss(kind, outputs, target)          -> 0-d loss tensor
    classes_last(logits_shape, target_shape) -> which cross_entropy layout

Kinds (the `--loss` option):
  cross_entropy  target: int64 class indices. If target.shape equals the
                 logits' shape without its LAST dim, the classes are the last
                 dim and both are flattened like GPT training code:
                 F.cross_entropy(logits.reshape(-1, V), target.reshape(-1)).
                 Otherwise PyTorch's layout: logits [N, C, d...], target
                 [N, d...] (or [N, C] with [N]).
  mse            target: float, the prediction's shape; F.mse_loss (mean).
  l1, smooth_l1, huber
                 the same target; F.l1_loss, F.smooth_l1_loss, F.huber_loss (mean).
  bce            target: floats in [0, 1], the prediction's shape;
                 F.binary_cross_entropy_with_logits (mean).
  kl_div         target: a distribution over the prediction's last dim (a
                 teacher's softmax); F.kl_div(F.log_softmax(pred, -1),
                 target, reduction="batchmean") (distillation).
  model          no target; the model's first output is the 0-d loss.

The prediction is the model's first output (outputs flattened in pytree
order, like models/export.py's output0, output1, ...). Both tests/train
scripts import this file, so the batch maker and the reference agree on the
layout by construction.
"""

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

KINDS = ("cross_entropy", "mse", "model", "l1", "smooth_l1", "huber", "bce", "kl_div")

# F.cross_entropy's options for `kiln train --label-smoothing / --ignore-index
# / --class-weights` (label_smoothing, ignore_index, weight); the parity
# harness sets them for a run.
CROSS_ENTROPY: dict = {}


def flatten(out) -> List[torch.Tensor]:
    """A model's outputs as a flat list of tensors, in pytree order."""
    leaves, _ = tree_flatten(out)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def prediction(out) -> torch.Tensor:
    """The output every loss is computed from: the first one."""
    leaves = flatten(out)
    if not leaves:
        raise ValueError("the model returned no tensor")
    return leaves[0]


def classes_last(logits_shape: Sequence[int], target_shape: Sequence[int]) -> bool:
    """True if cross_entropy's classes are the logits' last dim (language
    models: logits [N, T, V], target [N, T]); the rule of the CLI contract."""
    return len(logits_shape) >= 2 and list(target_shape) == list(logits_shape[:-1])


def loss(kind: str, out, target: Optional[torch.Tensor]) -> torch.Tensor:
    """The training loss of `kind` for model outputs `out` (see module doc)."""
    pred = prediction(out)
    if kind == "model":
        if pred.dim() != 0:
            raise ValueError(f"--loss model needs a 0-d first output, got shape {list(pred.shape)}")
        return pred
    if target is None:
        raise ValueError(f"--loss {kind} needs a target in the batch")
    if kind == "mse":
        return F.mse_loss(pred, target)
    if kind == "l1":
        return F.l1_loss(pred, target)
    if kind == "smooth_l1":
        return F.smooth_l1_loss(pred, target)
    if kind == "huber":
        return F.huber_loss(pred, target)
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(pred, target)
    if kind == "kl_div":
        return F.kl_div(F.log_softmax(pred, -1), target, reduction="batchmean")
    if kind == "cross_entropy":
        opts = dict(CROSS_ENTROPY)
        if opts.get("weight") is not None:
            opts["weight"] = opts["weight"].to(pred.dtype)
        if classes_last(pred.shape, target.shape):
            return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), **opts)
        return F.cross_entropy(pred, target, **opts)
    raise ValueError(f"unknown loss {kind!r}; use one of {', '.join(KINDS)}")


def make_target(kind: str, pred: torch.Tensor, seed: int = 0) -> Optional[torch.Tensor]:
    """A random target for prediction `pred` (fixed seed): class indices for
    cross_entropy (rank-3 predictions are [N, T, V] language-model logits:
    target [N, T]; otherwise the classes are dim 1), N(0, 1) floats of the
    prediction's shape for mse / l1 / smooth_l1 / huber, U(0, 1) for bce,
    none for model."""
    g = torch.Generator().manual_seed(seed)
    if kind == "model":
        return None
    if kind in ("mse", "l1", "smooth_l1", "huber"):
        return torch.randn(pred.shape, generator=g, dtype=torch.float32).to(pred.dtype)
    if kind == "bce":
        return torch.rand(pred.shape, generator=g, dtype=torch.float32).to(pred.dtype)
    if kind == "kl_div":  # a teacher's distribution over the last dim
        return torch.softmax(2 * torch.randn(pred.shape, generator=g, dtype=torch.float32), -1).to(pred.dtype)
    if kind == "cross_entropy":
        shape = list(pred.shape)
        if len(shape) < 2:
            raise ValueError(f"cross_entropy needs logits [N, C, ...], the model outputs {shape}")
        if len(shape) == 3:
            classes, tshape = shape[-1], shape[:-1]
        else:
            classes, tshape = shape[1], shape[:1] + shape[2:]
        return torch.randint(0, classes, tshape, generator=g, dtype=torch.int64)
    raise ValueError(f"unknown loss {kind!r}; use one of {', '.join(KINDS)}")
