#!/usr/bin/env python3
"""FLOPs of one training step, counted from what PyTorch executes.

Independent of Kiln's own cost model: the model's eager forward, loss and
backward run once under a TorchDispatchMode that sees every aten op with its
real shapes (forward and the autograd engine's backward alike) and adds up
the floating-point operations of the GEMM-class ops -- matrix products and
convolutions, 2 per multiply-add -- which are what a step's share of the
machine's GEMM rate is about. Elementwise ops, normalizations, softmax and
the optimizer update are not counted (a few percent of a step's flops at
these sizes); a first layer's input gradient, which autograd does not
compute, is not counted either.

    step_flops(model, inputs, loss_fn) -> {"total": F, "by_op": {...}}
"""

from typing import Callable, Dict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _conv_flops(x_shape, w_shape, out_shape, transposed: bool) -> int:
    # Every output element of a (non-transposed) convolution is a dot
    # product over C_in/groups x kernel taps = w's numel / C_out.
    taps = _prod(w_shape[1:])  # C_in/groups * kh * kw (weight is [C_out, C_in/g, ...])
    if transposed:  # weight [C_in, C_out/g, ...]: each input element scatters over C_out/g x taps
        return 2 * _prod(x_shape) * _prod(w_shape[1:])
    return 2 * _prod(out_shape) * taps


def _mm(args, out) -> int:
    a, b = args[0], args[1]
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def _addmm(args, out) -> int:
    return _mm(args[1:], out)


def _bmm(args, out) -> int:
    a, b = args[0], args[1]
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


def _baddbmm(args, out) -> int:
    return _bmm(args[1:], out)


def _convolution(args, out) -> int:
    x, w = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    return _conv_flops(x.shape, w.shape, out.shape, transposed)


def _convolution_backward(args, out) -> int:
    grad_out, x, w = args[0], args[1], args[2]
    transposed = bool(args[7])
    mask = args[10]
    one = _conv_flops(x.shape, w.shape, grad_out.shape, transposed)
    return one * (int(bool(mask[0])) + int(bool(mask[1])))


_FLOPS: Dict[object, Callable] = {
    aten.mm.default: _mm,
    aten.addmm.default: _addmm,
    aten.bmm.default: _bmm,
    aten.baddbmm.default: _baddbmm,
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
}


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.by_op: Dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        f = _FLOPS.get(func)
        if f is not None:
            name = str(func.overloadpacket).replace("aten.", "")
            self.by_op[name] = self.by_op.get(name, 0) + f(args, out)
        return out


def step_flops(model: torch.nn.Module, inputs: tuple, loss_fn: Callable) -> Dict[str, object]:
    """GEMM and convolution FLOPs of forward + loss + backward on `inputs`.
    loss_fn(output) -> scalar tensor."""
    counter = _Counter()
    with counter:
        out = model(*inputs)
        loss = loss_fn(out)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return {"total": sum(counter.by_op.values()), "by_op": counter.by_op}
