#!/usr/bin/python3
"""Tiny TorchScript archives for the TorchScript importer tests.

    gen_ts_cases.py --out DIR [--only NAME ...]
    gen_ts_cases.py --list | --list-fx

One case per aten op family (and per importer feature: shape arithmetic in
traces, scripted if/loop over constants, in-place ops and views, BatchNorm in
train mode, tied weights, module scopes, data-dependent control flow, an
unsupported op). For every case NAME it writes into DIR:

    NAME.pt                    torch.jit.trace or torch.jit.script archive, with
                               kiln_inputs.json (input dtypes and shapes) as
                               models/export.py writes it
    NAME.input.safetensors     input0, input1, ...
    NAME.expected.safetensors  output0, ... (flattened outputs); for train-mode
                               cases also "buffer:<key>" after the forward
    NAME_fx.fx.json            the same module as an FX dump (models/fx_dump.py),
    NAME_fx.safetensors        for each function case and each module's trace variant
and cases.json: [{"name", "format", "run", "train", "expect_error", "fx_error"}, ...]
(fx_error: absent without an FX form, "" when the dump worked, else why not),
plus not_torchscript.zip and no_inputs_json.pt for the error tests.

Run with /usr/bin/python3 (Debian's python3-torch). Nothing here is committed
output: the C++ test runs this into its build directory.
"""

import argparse
import json
import math
import os
import sys
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "..", "models"))
try:
    import st_io  # the project's safetensors writer

    def save_st(path: str, tensors: Dict[str, torch.Tensor]) -> None:
        st_io.save(path, tensors)
except ImportError:  # pragma: no cover - fallback when models/ is absent
    import struct

    _ST = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
           torch.bool: "BOOL", torch.float16: "F16", torch.bfloat16: "BF16", torch.uint8: "U8"}

    def save_st(path: str, tensors: Dict[str, torch.Tensor]) -> None:
        header, chunks, off = {}, [], 0
        for k in sorted(tensors):
            t = tensors[k].detach().contiguous()
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            header[k] = {"dtype": _ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
            chunks.append(data)
            off += len(data)
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))

_DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
                torch.bool: "bool", torch.float16: "f16", torch.bfloat16: "bf16", torch.uint8: "u8"}


class Case:
    def __init__(self, name: str, make: Callable[[], nn.Module], inputs: Callable[[], tuple],
                 fmt: str, run: bool = True, train: bool = False, expect_error: str = "", no_grad: bool = False):
        self.name, self.make, self.inputs, self.fmt = name, make, inputs, fmt
        self.run, self.train, self.expect_error = run, train, expect_error
        # Traced as users trace for inference: under torch.no_grad(), where
        # nn.MultiheadAttention / nn.TransformerEncoderLayer take their fused fast path.
        self.no_grad = no_grad


CASES: List[Case] = []


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(7)


def randn(*shape) -> Callable[[], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g)


def randint(high, *shape) -> Callable[[], torch.Tensor]:
    return lambda g: torch.randint(0, high, shape, generator=g)


def inputs_of(*makers) -> Callable[[], tuple]:
    def build():
        g = gen()
        return tuple(m(g) for m in makers)
    return build


class Fn(nn.Module):
    """Wraps a function for tracing (the tracer runs Python, so lambdas are fine)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def traced(name: str, fn, *makers, run: bool = True, expect_error: str = ""):
    """A traced case of a function of the inputs."""
    CASES.append(Case(name, lambda: Fn(fn), inputs_of(*makers), "trace", run=run, expect_error=expect_error))


def module(name: str, make, *makers, fmts=("trace", "script"), run: bool = True, train: bool = False,
           expect_error: str = "", no_grad: bool = False):
    """A module case, traced and/or scripted (one archive each: NAME_trace / NAME_script)."""
    for fmt in fmts:
        CASES.append(Case(f"{name}_{fmt}", make, inputs_of(*makers), fmt, run=run, train=train,
                          expect_error=expect_error, no_grad=no_grad))


class SelfAttention(nn.Module):
    """nn.MultiheadAttention as self-attention (the form its inference fast path takes)."""

    def __init__(self, need_weights: bool, average: bool = True):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.need_weights, self.average = need_weights, average

    def forward(self, x, pad=None):
        out, w = self.mha(x, x, x, key_padding_mask=pad, need_weights=self.need_weights,
                          average_attn_weights=self.average)
        return (out, w) if self.need_weights else out


X = randn(2, 3, 4)      # a small 3-d float input
IMG = randn(2, 4, 8, 8)  # NCHW

# ---- Elementwise -------------------------------------------------------------------
traced("add_sub_alpha", lambda x, y: (x + y, x - y, torch.add(x, y, alpha=2), torch.sub(x, y, alpha=0.5)), X, X)
traced("scalar_arith", lambda x: (x + 2, x - 1.5, 3 - x, x * 2, x / 4, 2 / (x.abs() + 1), -x), X)
traced("div_modes", lambda x, y: (x / y, torch.div(x, y, rounding_mode="floor"),
                                   torch.div(x, y, rounding_mode="trunc"), x // y, x % y),
       randn(3, 4), lambda g: torch.rand(3, 4, generator=g) + 0.5)
traced("int_arith", lambda i, j: (i + 2, i * j, i // 3, i % 3, i * 1.5, i / 2, torch.div(i, 3, rounding_mode="trunc")),
       lambda g: torch.randint(-9, 9, (3, 4), generator=g), lambda g: torch.randint(1, 5, (3, 4), generator=g))
traced("dtype_promotion", lambda i, x, d: (i * 1.5, i * torch.tensor(1.5, dtype=torch.float64), x * torch.tensor(2.0, dtype=torch.float64),
                                            d * 2.5, i + True, (x > 0) + 1, x * x.size(1), i * x.shape[0]),
       randint(5, 3, 4), randn(3, 4), lambda g: torch.randn(3, 4, generator=g, dtype=torch.float64))
traced("pow", lambda x: (x.abs() ** 2, x ** 3, 2 ** x, x.abs().pow(0.5)), X)
traced("unary_math", lambda x: (x.exp(), (x.abs() + 1).log(), x.abs().sqrt(), (x.abs() + 1).rsqrt(), x.abs().log1p(),
                                x.sin(), x.cos(), torch.erf(x), x.reciprocal(), x.abs(), x.sign(), x.floor(), x.ceil(),
                                x.round(), x.trunc(), torch.square(x)), X)
traced("activations", lambda x: (F.relu(x), F.relu6(x * 4), F.hardtanh(x, -0.5, 0.5), F.gelu(x),
                                 F.gelu(x, approximate="tanh"), F.silu(x), F.hardswish(x), F.hardsigmoid(x),
                                 F.leaky_relu(x, 0.2), F.elu(x), F.softplus(x), F.mish(x), torch.sigmoid(x),
                                 torch.tanh(x), F.selu(x), F.celu(x, 0.5), F.logsigmoid(x)), X)
module("prelu", lambda: nn.PReLU(3), randn(2, 3, 4))
traced("shrink_glu", lambda x: (F.threshold(x, 0.1, -2.0), F.hardshrink(x, 0.3), F.softshrink(x), F.tanhshrink(x),
                                F.softsign(x), F.glu(x, -1), F.glu(x, 1)), randn(2, 4, 6))
traced("clamp", lambda x, lo: (x.clamp(-0.5, 0.5), x.clamp(min=0.1), x.clamp(max=0.2), torch.clamp(x, lo, lo + 1),
                               x.clamp_min(0.0), x.clamp_max(0.0)), X, X)
traced("compare", lambda x, y: (x == y, x != 0, x < y, x <= 0.5, x > y, x >= 0, torch.maximum(x, y),
                                torch.minimum(x, y)), X, lambda g: torch.randn(2, 3, 4, generator=g).round())
traced("logical", lambda x, y: ((x > 0) & (y > 0), (x > 0) | (y > 0), (x > 0) ^ (y > 0), ~(x > 0),
                                torch.logical_and(x, y > 0), torch.logical_not(x > 0)), X, X)
traced("where_masked_fill", lambda x, y: (torch.where(x > 0, x, y), torch.where(x > 0, x, 0.0),
                                          x.masked_fill(y > 0, -1.0), x.masked_fill(y > 0, float("-inf"))), X, X)
traced("addcmul", lambda x, y, z: (torch.addcmul(x, y, z, value=0.5), torch.addcdiv(x, y, z.abs() + 1, value=2)),
       X, X, X)

# ---- Shapes, views, indexing, factories --------------------------------------------------
traced("view_size_arith", lambda x: x.view(x.size(0), -1), IMG)
traced("view_floordiv", lambda x: x.reshape(x.shape[0], x.shape[1] // 2, -1).narrow(1, 0, x.shape[1] // 4), IMG)
traced("flatten_unflatten", lambda x: (torch.flatten(x, 1), x.flatten(), x.unflatten(1, (2, 2)), x.flatten(1, 2)),
       IMG)
traced("squeeze_unsqueeze", lambda x: (x.unsqueeze(0), x.unsqueeze(-1), x.unsqueeze(1).squeeze(1),
                                       x[:, :1].squeeze(), x[:, :1].squeeze(1)), X)
traced("permute_transpose", lambda x, m: (x.permute(2, 0, 1), x.transpose(0, 2), x.transpose(-1, -2),
                                          m.t(), x.movedim(0, -1)), X, randn(3, 5))
traced("expand", lambda x, y: (x[:, :1].expand(2, 3, 4), x[:1].expand(-1, 3, 4) + 0, y.expand_as(x),
                               x[:, :1, :1].expand(5, 2, 3, 4)), X, randn(1, 1, 4))
traced("copies", lambda x: (x.contiguous(), x.clone(), x.detach(), x.transpose(0, 1).contiguous()), X)
traced("cat_stack", lambda x, y: (torch.cat([x, y], 1), torch.cat((x, y, x), -1), torch.stack([x, y]),
                                  torch.stack([x, y], -1)), X, X)
traced("split_chunk", lambda x: (*x.chunk(2, 1), *x.split(3, 2), *x.split([1, 5], -1), *torch.chunk(x, 3, 2)),
       randn(2, 4, 6))
traced("unbind", lambda x: x.unbind(1), X)
traced("slice_select", lambda x: (x[:, 1:3], x[..., ::2], x[:, -2:], x[:, 0], x[1, :, -1], x[:, 1:], x.narrow(2, 1, 2)),
       randn(2, 4, 5))
traced("index", lambda x, i: (x[i], x[:, i], x.index_select(2, i), torch.gather(x, 2, i.view(1, 1, -1).expand(3, 4, -1))),
       randn(3, 4, 5), lambda g: torch.tensor([0, 2, 1]))
traced("advanced_index", lambda x, i, j: (x[i, j], x[:, i, j], x[i, :, j], x[i.view(3, 1), j.view(1, 3)], x[-1, j],
                                          x[i, j, -2]),
       randn(3, 4, 5), lambda g: torch.tensor([0, 2, -1]), lambda g: torch.tensor([1, -1, 3]))


def index_put_all(x, i, j, m, v):
    a = x.clone()
    a[i] = 0.5                      # rows, one value
    a[:, j] = v.unsqueeze(1)        # a later dim, values broadcast
    b = x.clone()
    b[i, j] += 1.0                  # elementwise pairs, in place add
    b.index_put_((i,), v[0, :5], accumulate=True)  # duplicates accumulate
    c = x.clone()
    c[m] = -1.0                     # boolean mask, one value
    c[m[:, 0, 0]] = v[1, :5]        # boolean mask over the leading dim, values broadcast over the rest
    d = x.clone()
    d[i, :, j] = v[:3, 0]           # non-adjacent indexed dims
    return a, b, c, d


traced("index_put", index_put_all, randn(4, 3, 5), lambda g: torch.tensor([0, 2, 0]),
       lambda g: torch.tensor([1, -1, 0]), lambda g: torch.rand(4, 3, 5, generator=g) > 0.5, randn(4, 5))
# Plain scatter of a tensor: indices without duplicates (PyTorch leaves which
# duplicate wins unspecified; Kiln adds them up). A value, add and the
# reductions: with duplicates.
traced("scatter", lambda x, i, s: (x.scatter(1, i[:, :1], s),
                                   x.scatter(1, i, 2.5), x.scatter_add(1, i, s),
                                   x.scatter(0, i[:2] % 3, s, reduce="add"), torch.scatter_add(x, 0, i[:2] % 3, s),
                                   x.scatter_reduce(1, i, s, "sum"), x.scatter_reduce(1, i, s, "sum", include_self=False),
                                   x.scatter_reduce(1, i, s, "mean"), x.scatter_reduce(1, i, s, "mean", include_self=False),
                                   x.clone().scatter_(1, torch.tensor([[4, 0, 1], [1, 3, 2], [0, 2, 4]]), s)),
       randn(3, 5), lambda g: torch.tensor([[0, 1, 4], [2, 2, 0], [4, 3, 3]]), randn(3, 4))
traced("scatter_prod_max", lambda x, i, s: (x.scatter(1, i, s, reduce="multiply"), x.scatter(1, i, 2.0, reduce="multiply"),
                                            x.scatter_reduce(1, i, s, "prod"),
                                            x.scatter_reduce(1, i, s, "prod", include_self=False),
                                            x.scatter_reduce(1, i, s, "amax"),
                                            x.scatter_reduce(1, i, s, "amax", include_self=False),
                                            x.scatter_reduce(0, i[:2] % 3, s, "amin"),
                                            x.scatter_reduce(0, i[:2] % 3, s, "amin", include_self=False)),
       randn(3, 5), lambda g: torch.tensor([[0, 1, 4], [2, 2, 0], [4, 3, 3]]), randn(3, 4))
traced("scatter_int_amax", lambda x, i, s: (x.scatter_reduce(1, i, s, "amax", include_self=False),
                                            x.scatter_reduce(1, i, s, "prod")),
       randint(9, 3, 5), lambda g: torch.tensor([[0, 1, 4], [2, 2, 0], [4, 3, 3]]), randint(9, 3, 3))
traced("scatter_int_mean", lambda x, i, s: x.scatter_reduce(1, i, s, "mean", include_self=False),
       randint(9, 3, 5), lambda g: torch.tensor([[0, 1, 4], [2, 2, 0], [4, 3, 3]]), randint(9, 3, 3))
traced("take_along_dim", lambda x, i: (torch.take_along_dim(x, i, 1), torch.take_along_dim(x, i.view(-1)),
                                       torch.take_along_dim(x, i[:1], 1)),
       randn(3, 5), lambda g: torch.tensor([[0, 4], [2, 3], [1, 1]]))
# (make_fx cannot capture one_hot: it reads the largest class to check it.)
traced("one_hot", lambda i: nn.functional.one_hot(i % 4, 4), lambda g: torch.tensor([[0, 4], [2, 3], [1, 1]]))
traced("einsum", lambda a, b, c, q, k: (torch.einsum("ij,jk->ik", a, b), torch.einsum("ij,jk", a, b),
                                         torch.einsum("bij,bjk->bik", c, c.transpose(1, 2)),
                                         torch.einsum("bhqd,bhkd->bhqk", q, k), torch.einsum("...d,...d->...", q, k),
                                         torch.einsum("ij->ji", a), torch.einsum("ij->", a), torch.einsum("i,j->ij", a[0], b[:, 0]),
                                         torch.einsum("bn,anm,bm->ba", a[:2, :3], c[:, :3, :3], a[2:4, :3]),
                                         torch.einsum("b...d,d->b...", q, a[0, :4]), torch.einsum("ik,jk", a, a),
                                         torch.einsum("bhqd,hd->bqh", q, a[:3, :4])),
       randn(3, 4), randn(4, 5), randn(2, 3, 4), randn(2, 3, 5, 4), randn(2, 3, 5, 4))
traced("cumprod", lambda x, i: (x.cumprod(1), torch.cumprod(x, 0), x.cumprod(-1, dtype=torch.float64), i.cumprod(1)),
       randn(3, 5), randint(3, 2, 4))
traced("roll_flip_repeat", lambda x: (x.roll(1, 2), torch.roll(x, (1, -1), (1, 2)), x.roll(2), x.flip(1),
                                      x.flip(0, 2), x.repeat(2, 1, 1), x.repeat(1, 2, 1, 2)), X)
traced("repeat_interleave", lambda x: (x.repeat_interleave(2, dim=1), x.repeat_interleave(3, 2), x.repeat_interleave(2),
                                       x.repeat_interleave(torch.tensor([1, 0, 3]), dim=1),
                                       torch.repeat_interleave(torch.tensor([2, 1]))), X)
traced("topk_sort", lambda x: (*x.topk(3), *x.topk(2, dim=0, largest=False), *torch.sort(x, dim=1),
                                *x.sort(descending=True), x.argsort(dim=-1, descending=True), x.argsort(dim=0),
                                torch.argsort(x, dim=0, descending=True, stable=True)),
       randn(4, 6))
def _zeroed_copy(x):
    y = x.clone()
    y.zero_()
    return y


traced("any_all_moments", lambda x: (torch.all(x > -1), torch.all(x > 0, dim=1), torch.any(x > 1),
                                     torch.any(x > 1, dim=0, keepdim=True), *torch.var_mean(x, dim=1),
                                     *torch.std_mean(x, dim=0, unbiased=False, keepdim=True), *torch.var_mean(x),
                                     _zeroed_copy(x) + 1),
       randn(4, 6))
traced("kthvalue", lambda x: (*x.kthvalue(2), *x.kthvalue(3, dim=0, keepdim=True), *torch.kthvalue(x, 6, 1)),
       randn(4, 6))
traced("outer", lambda a, b, i: (torch.outer(a, b), torch.ger(b, a), torch.outer(i, a)), randn(3), randn(5),
       randint(4, 4))
traced("pad", lambda x: (F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=0.5), F.pad(x, (2, 1, 1, 2), mode="reflect"),
                         F.pad(x, (1, 1, 1, 1), mode="replicate")), IMG)
traced("triu_tril", lambda m: (m.triu(), m.tril(-1), torch.triu(m, 1)), randn(4, 5))
traced("factories", lambda x: (torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.int64), torch.full((2, 2), 1.5),
                               torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 3.0), x.new_zeros(4),
                               x.new_ones((1, 2)), torch.arange(5), torch.arange(1, 7, 2), torch.arange(0.0, 1.0, 0.25)),
       X)
traced("to_dtype", lambda x, i: (x.to(torch.int64), i.to(torch.float32), i.float(), x.type_as(i), (x > 0).long(),
                                 x.double().float()), X, randint(5, 2, 3, 4))
traced("tensor_constant", lambda x: x * torch.tensor([1.0, 2.0, 3.0, 4.0]) + torch.tensor(0.5), X)

# ---- Matrix products, conv, norms, pooling, softmax, losses ------------------------------------
module("linear", lambda: nn.Linear(4, 5), X)
traced("matmul_family", lambda a, b, c, bias: (a @ b, torch.mm(a[0], b[0]), torch.bmm(a, b), a @ b[0],
                                               torch.matmul(a[0, 0], b[0]), torch.addmm(bias, a[0], b[0]),
                                               torch.addmm(bias, a[0], b[0], beta=0.5, alpha=2),
                                               torch.baddbmm(c, a, b), torch.baddbmm(c, a, b, beta=0.5, alpha=2)),
       randn(2, 3, 4), randn(2, 4, 5), randn(2, 3, 5), randn(5))
module("conv1d", lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1), randn(2, 4, 9))
module("conv2d", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1), IMG)
module("conv2d_groups_nobias", lambda: nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2, bias=False), IMG)
module("conv2d_same", lambda: nn.Conv2d(4, 4, 4, padding="same"), IMG)
module("conv_transpose2d", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), IMG)
module("conv_transpose2d_groups", lambda: nn.ConvTranspose2d(4, 6, (3, 2), stride=(1, 2), padding=(0, 1), dilation=(2, 1),
                                                             groups=2, bias=False), IMG)
module("conv_transpose1d", lambda: nn.ConvTranspose1d(4, 3, 4, stride=2, padding=1), randn(2, 4, 9))
VOL = randn(2, 3, 6, 7, 5)  # NCDHW
module("conv3d", lambda: nn.Conv3d(3, 4, 3, padding=1), VOL)
module("conv3d_strided_groups", lambda: nn.Conv3d(3, 6, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1), dilation=(2, 1, 1),
                                                 groups=3, bias=False), VOL)
traced("conv3d_functional", lambda x, w: (F.conv3d(x, w, stride=2), F.conv3d(x[0], w, padding="same")), VOL,
       randn(4, 3, 3, 3, 3))
module("conv_transpose3d", lambda: nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1), VOL)
module("conv_transpose3d_groups", lambda: nn.ConvTranspose3d(3, 6, (2, 3, 2), stride=(3, 1, 2), padding=(1, 1, 0),
                                                             dilation=(2, 1, 1), groups=3), VOL)
traced("pool3d", lambda x: (F.max_pool3d(x, 2), F.max_pool3d(x, 3, stride=2, padding=1, dilation=(1, 2, 1)),
                            F.max_pool3d(x, (2, 3, 2), ceil_mode=True), F.avg_pool3d(x, 2),
                            F.avg_pool3d(x, 3, stride=2, padding=1), F.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
                            F.avg_pool3d(x, (3, 2, 2), ceil_mode=True), F.avg_pool3d(x, 2, divisor_override=3),
                            F.adaptive_avg_pool3d(x, (2, 3, 2)), F.adaptive_avg_pool3d(x, 1),
                            F.adaptive_max_pool3d(x, (3, 2, 4)), F.max_pool3d(x[0], 2)), VOL)
traced("upsample3d", lambda x: (F.interpolate(x, scale_factor=2, mode="trilinear"),
                                F.interpolate(x, size=(4, 9, 3), mode="trilinear", align_corners=True),
                                F.interpolate(x, scale_factor=(1.5, 2, 0.5), mode="trilinear"),
                                F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, size=(3, 10, 7))), VOL)
traced("conv_transpose_functional", lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), IMG,
       randn(4, 2, 3, 3))
def _bn_eval():
    m = nn.Sequential(nn.BatchNorm2d(4), nn.BatchNorm2d(4, affine=False))
    for bn in m:  # running statistics that differ from the 0/1 defaults
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return m


module("batch_norm_eval", _bn_eval, IMG)
module("batch_norm_train", lambda: nn.BatchNorm2d(4), IMG, train=True)
module("layer_norm", lambda: nn.Sequential(nn.LayerNorm(4), nn.LayerNorm([3, 4], elementwise_affine=False)), X)
module("group_norm", lambda: nn.GroupNorm(2, 4), IMG)
module("instance_norm", lambda: nn.InstanceNorm2d(4), IMG)
module("embedding", lambda: nn.Embedding(10, 4, padding_idx=0), randint(10, 2, 5))
module("embedding_freq", lambda: nn.Embedding(10, 4, padding_idx=3, scale_grad_by_freq=True), randint(10, 2, 5))
# embedding_bag: fixed-length bags (2-D input: reshaped, reduced over L), and
# 1-D indices with offsets known at import (a constant) or at run time (an
# input): empty bags, include_last_offset, per-sample weights, padding.
class EmbeddingBags(nn.Module):
    """Every mode, with and without a padding index, on one 2-D input."""

    def __init__(self):
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(12, 4, mode=m, padding_idx=p)
                                   for m in ("sum", "mean", "max") for p in (None, 0)])

    def forward(self, x):
        return tuple(b(x) for b in self.bags)


module("embedding_bag_2d", EmbeddingBags,
       lambda g: torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.randint(0, 12, (3, 5), generator=g)]),
       fmts=("trace",))
traced("embedding_bag_offsets",
       lambda w, x, off, psw: (F.embedding_bag(x, w, off, mode="sum", per_sample_weights=psw),
                               F.embedding_bag(x, w, off, mode="mean", padding_idx=2),
                               F.embedding_bag(x, w, off, mode="max"),
                               F.embedding_bag(x, w, torch.tensor([0, 4, 4, 9]), mode="mean"),
                               F.embedding_bag(x, w, torch.tensor([0, 1, 6, 11]), mode="max", include_last_offset=True),
                               F.embedding_bag(x, w, torch.tensor([0, 2, 11]), mode="sum", include_last_offset=True)),
       randn(8, 3), randint(8, 11), lambda g: torch.tensor([0, 3, 3, 10]), randn(11))
module("dropout_eval", lambda: nn.Sequential(nn.Dropout(0.3), nn.Dropout2d(0.2), nn.AlphaDropout(0.1)), IMG)
module("dropout_train", lambda: nn.Sequential(nn.Dropout(0.3), nn.Dropout2d(0.2)), IMG, train=True, run=False)
traced("pooling", lambda x: (F.max_pool2d(x, 2), F.max_pool2d(x, 3, 2, 1, ceil_mode=True), F.avg_pool2d(x, 2),
                             F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), F.adaptive_avg_pool2d(x, (3, 2)),
                             F.adaptive_max_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1)), IMG)
traced("pooling_1d", lambda x: (F.max_pool1d(x, 2), F.avg_pool1d(x, 3, 2, 1), F.adaptive_avg_pool1d(x, 3)),
       randn(2, 4, 9))
traced("softmax", lambda x: (x.softmax(-1), F.log_softmax(x, 1), torch.softmax(x, 0, dtype=torch.float64)), X)
traced("losses", lambda x, t, y: (F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="sum"),
                                  F.cross_entropy(x, t, label_smoothing=0.1), F.nll_loss(F.log_softmax(x, 1), t),
                                  F.mse_loss(x, y), F.mse_loss(x, y, reduction="none")),
       randn(4, 5), randint(5, 4), randn(4, 5))
traced("losses_weighted", lambda x, t, w, xs, ts: (
    F.cross_entropy(x, t, weight=w), F.cross_entropy(x, t, weight=w, reduction="sum"),
    F.cross_entropy(x, t, weight=w, reduction="none", ignore_index=2), F.cross_entropy(x, t, weight=w, ignore_index=1),
    F.nll_loss(F.log_softmax(x, 1), t, weight=w), F.cross_entropy(xs, ts, weight=w)),
    randn(6, 5), lambda g: torch.tensor([0, 2, 1, 4, 2, 3]), lambda g: torch.rand(5, generator=g) + 0.5,
    randn(2, 5, 3, 4), randint(5, 2, 3, 4))
traced("losses_weighted_smoothing", lambda x, t, w: (F.cross_entropy(x, t, weight=w, label_smoothing=0.2),
                                                     F.cross_entropy(x, t, weight=w, label_smoothing=0.1,
                                                                     reduction="none", ignore_index=2)),
       randn(6, 5), lambda g: torch.tensor([0, 2, 1, 4, 2, 3]), lambda g: torch.rand(5, generator=g) + 0.5)
traced("xlogy", lambda x, y: (torch.xlogy(x, y), torch.xlogy(x * 0, y), torch.xlogy(x, 2.0)),
       lambda g: torch.rand(3, 4, generator=g), lambda g: torch.rand(3, 4, generator=g) + 0.1)
traced("kl_div", lambda x, t, lt: (F.kl_div(F.log_softmax(x, 1), t, reduction="batchmean"),
                                   F.kl_div(F.log_softmax(x, 1), t, reduction="none"),
                                   F.kl_div(F.log_softmax(x, 1), lt, reduction="sum", log_target=True)),
       randn(4, 5), lambda g: torch.softmax(torch.randn(4, 5, generator=g), 1).index_fill(1, torch.tensor([2]), 0.0),
       lambda g: torch.log_softmax(torch.randn(4, 5, generator=g), 1))
traced("losses_more", lambda x, y, p, w: (F.l1_loss(x, y), F.smooth_l1_loss(x, y, beta=0.5),
                                          F.huber_loss(x, y, reduction="sum", delta=2.0),
                                          F.binary_cross_entropy(p, (y > 0).float()),
                                          F.binary_cross_entropy(p, (y > 0).float(), reduction="none"),
                                          F.binary_cross_entropy_with_logits(x, (y > 0).float(), weight=w),
                                          F.binary_cross_entropy_with_logits(x, (y > 0).float()),
                                          F.binary_cross_entropy_with_logits(x, (y > 0).float(), pos_weight=w[0] + 1)),
       randn(4, 5), randn(4, 5), lambda g: torch.rand(4, 5, generator=g) * 0.98 + 0.01,
       lambda g: torch.rand(4, 5, generator=g))
traced("resample", lambda x, s: (F.interpolate(x, scale_factor=2), F.interpolate(x, size=(5, 11)),
                                 F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                                 F.interpolate(x, size=(3, 12), mode="bilinear", align_corners=True),
                                 F.interpolate(s, scale_factor=3, mode="linear"), F.interpolate(s, size=4),
                                 F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2)), IMG, randn(2, 3, 5))
traced("bicubic", lambda x: (F.interpolate(x, scale_factor=2, mode="bicubic"),
                             F.interpolate(x, size=(5, 13), mode="bicubic", align_corners=True),
                             F.interpolate(x, scale_factor=1.5, mode="bicubic"),
                             F.interpolate(x, size=(3, 4), mode="bicubic")), IMG)
traced("area", lambda s, x, v: (F.interpolate(s, size=3, mode="area"), F.interpolate(x, size=(3, 5), mode="area"),
                                F.interpolate(x, scale_factor=0.5, mode="area"),
                                F.interpolate(v, size=(2, 3, 3), mode="area")),
       randn(2, 3, 7), IMG, randn(1, 2, 4, 5, 6))
module("upsample", lambda: nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                         nn.Upsample(size=(9, 20), mode="bilinear")), IMG)
module("mha", lambda: nn.MultiheadAttention(8, 2, batch_first=True), randn(2, 5, 8), randn(2, 6, 8), randn(2, 6, 8))
module("transformer_layer", lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
       randn(2, 5, 8))
# Traced for inference under torch.no_grad(): the fused fast-path ops, decomposed on import.
PAD = lambda g: torch.tensor([[False] * 5 + [True], [False] * 6])  # noqa: E731  (key padding)
module("fast_mha", lambda: SelfAttention(need_weights=False), randn(2, 6, 8), fmts=("trace",), no_grad=True)
module("fast_mha_weights", lambda: SelfAttention(need_weights=True), randn(2, 6, 8), PAD, fmts=("trace",),
       no_grad=True)
module("fast_mha_head_weights", lambda: SelfAttention(need_weights=True, average=False), randn(2, 6, 8),
       fmts=("trace",), no_grad=True)
module("fast_encoder_layer", lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), randn(2, 6, 8),
       fmts=("trace",), no_grad=True)
module("fast_encoder_layer_norm_first", lambda: nn.TransformerEncoderLayer(8, 2, 16, activation="gelu",
                                                                           batch_first=True, norm_first=True),
       randn(2, 6, 8), fmts=("trace",), no_grad=True)

class DecoderOnlyStep(nn.Module):
    """torch.ops.aten._transformer_decoder_only_layer_fwd: a prompt pass that
    returns the keys and values, then one incremental step over that cache."""

    def __init__(self, norm_first: bool):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)
        self.norm_first = norm_first

    def forward(self, prompt, token):
        m = self.layer
        w = (m.self_attn.in_proj_weight, m.self_attn.in_proj_bias, m.self_attn.out_proj.weight,
             m.self_attn.out_proj.bias, False, self.norm_first, m.norm1.eps, m.norm1.weight, m.norm1.bias,
             m.norm2.weight, m.norm2.bias, m.linear1.weight, m.linear1.bias, m.linear2.weight, m.linear2.bias)
        out, k, v = torch.ops.aten._transformer_decoder_only_layer_fwd(prompt, 8, 2, *w)
        step, k2, v2 = torch.ops.aten._transformer_decoder_only_layer_fwd(token, 8, 2, *w, None, k, v)
        return out, step, k2, v2


module("decoder_only_step", lambda: DecoderOnlyStep(False), randn(2, 5, 8), randn(2, 1, 8), fmts=("trace",),
       no_grad=True)
module("decoder_only_step_two", lambda: DecoderOnlyStep(False), randn(2, 4, 8), randn(2, 2, 8), fmts=("trace",),
       no_grad=True)  # (PyTorch's kernel has no norm_first)

# ---- Recurrent layers (unrolled on import) ----------------------------------------------


class LstmWithState(nn.Module):
    """An LSTM given its initial state (h0, c0)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 3, num_layers=2)

    def forward(self, x, h, c):
        return self.lstm(x, (h, c))


class LstmProjWithState(nn.Module):
    """A projected LSTM (proj_size 2) without biases, given (h0, c0)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 5, proj_size=2, bias=False)

    def forward(self, x, h, c):
        return self.lstm(x, (h, c))


class PackedLstm(nn.Module):
    """An LSTM over packed sequences (refused: the packed shape is data)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 3, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        y, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(y, batch_first=True)[0]


# (A scripted bare RNN module has only its overloads forward__0/forward__1:
# scripted RNNs are covered inside a model, models/zoo.py's rnn_mini.)
module("lstm", lambda: nn.LSTM(4, 3, num_layers=2, bidirectional=True), randn(5, 2, 4), fmts=("trace",))
module("lstm_state", LstmWithState, randn(5, 2, 4), randn(2, 2, 3), randn(2, 2, 3))
module("lstm_unbatched_nobias", lambda: nn.LSTM(4, 3, bias=False), randn(5, 4), fmts=("trace",))
module("lstm_proj", lambda: nn.LSTM(4, 5, num_layers=2, proj_size=3, bidirectional=True, batch_first=True),
       randn(2, 5, 4), fmts=("trace",))
module("lstm_proj_state_nobias", LstmProjWithState, randn(5, 2, 4), randn(1, 2, 2), randn(1, 2, 5), fmts=("trace",))
module("lstm_packed", PackedLstm, randn(3, 5, 4), lambda g: torch.tensor([5, 3, 2]), fmts=("trace",),
       expect_error="packed sequences (pack_padded_sequence) have a data-dependent shape")
module("gru_batch_first", lambda: nn.GRU(4, 3, num_layers=2, batch_first=True, bidirectional=True), randn(2, 5, 4),
       fmts=("trace",))
module("rnn_relu", lambda: nn.RNN(4, 3, num_layers=2, nonlinearity="relu"), randn(5, 2, 4), fmts=("trace",))
module("rnn_tanh_batch_first", lambda: nn.RNN(4, 3, batch_first=True), randn(2, 5, 4), fmts=("trace",))



class CellLoop(nn.Module):
    """nn.LSTMCell, nn.GRUCell and nn.RNNCell (tanh, relu, no bias) stepped by
    the model's own loop over x[:, t]: one cell op per step, a select per step
    whose gradients simplify's placement_sum joins into one cat."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTMCell(4, 3)
        self.gru = nn.GRUCell(3, 3)
        self.tanh = nn.RNNCell(3, 3)
        self.relu = nn.RNNCell(3, 2, nonlinearity="relu", bias=False)

    def forward(self, x, h0):
        hc = None
        g, r, s = h0, None, None
        outs = []
        for t in range(x.shape[1]):
            hc = self.lstm(x[:, t], hc)
            g = self.gru(hc[0], g)
            r = self.tanh(g, r)
            s = self.relu(r)
            outs.append(s)
        return torch.stack(outs, 1), hc[1]


module("rnn_cells_loop", CellLoop, randn(2, 5, 4), randn(2, 3), fmts=("trace",))

# ---- Reductions -----------------------------------------------------------------------
traced("reductions", lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.mean(-1), x.mean((1, 2)),
                                x.amax(1), x.amin((0, 1)), x.max(), x.min(), *x.max(1), *x.min(2, keepdim=True),
                                x.var(1), x.std(), x.var(2, unbiased=False), x.argmax(1), x.argmin(-1),
                                x.argmax(), x.cumsum(2), x.logsumexp(1), x.norm(dim=1), x.prod(2)),
       randn(2, 3, 4))

# ---- In-place ops and views ------------------------------------------------------------
traced("inplace", lambda x: x.clone().add_(1).mul_(2).relu_().sub_(0.5), X)
traced("inplace_view_write", lambda x: _view_write(x), randn(4, 6))
traced("inplace_masked_fill", lambda x, m: x.clone().masked_fill_(m > 0, 0.0), X, X)


def _view_write(x):
    y = x.clone()
    y[:, 0] = 0.0          # select + fill_
    y[1:3, 2:4] = 5.0      # slice + slice + fill_
    y[0, :] = x[3] * 2     # select + copy_
    return y, y.sum()


class InplaceConstant(nn.Module):
    # Scripted: a trace would record the constant after the in-place op already changed it.
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tensor([1.0, 2.0, 3.0, 4.0]).mul_(2)


module("inplace_constant", InplaceConstant, X, fmts=("script",))


# ---- Scripted control flow over constants ---------------------------------------------------
class ScriptedControl(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.scale = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:
            x = x * self.scale
        else:
            x = x - 1
        for i in range(3):
            x = x + i
        for blk in self.blocks:
            x = blk(x)
        h = x.shape[1] // 2
        parts: List[torch.Tensor] = []
        for k in range(x.size(0)):
            parts.append(x[k, :h])
        if self.training:
            x = x * 0
        return self.fc(torch.stack(parts) + h)


module("scripted_control", ScriptedControl, X, fmts=("script",))


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x
        return -x


module("data_dependent_if", DataDependent, X, fmts=("script",), run=False, expect_error="data-dependent")


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Fn(lambda x: torch.lgamma(x))

    def forward(self, x):
        return self.inner(x)


CASES.append(Case("unsupported_op", Unsupported, inputs_of(X), "trace", run=False,
                  expect_error="unsupported op aten::lgamma"))


# ---- Structure: scopes, tied weights ----------------------------------------------------------
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn1(self.conv1(x)) + x)


class Scoped(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(Block(), Block())
        self.h = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])

    def forward(self, x):
        x = self.layer1(x)
        for blk in self.h:
            x = blk(x)
        return x


module("scopes", Scoped, IMG)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        return self.lm_head(self.wte(idx))


module("tied_weights", Tied, randint(10, 2, 3))


# ---- Generation ---------------------------------------------------------------------------------

def flatten(out) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    res: List[torch.Tensor] = []
    for o in out:
        res.extend(flatten(o))
    return res


def build(case: Case) -> nn.Module:
    torch.manual_seed(0)
    m = case.make()
    m.train(case.train)
    return m


def write_case(case: Case, out_dir: str) -> None:
    prefix = os.path.join(out_dir, case.name)
    inputs = case.inputs()
    # Expected outputs from a fresh module (tracing runs the forward, which in
    # train mode would update the running statistics once more).
    ref = build(case)
    torch.manual_seed(0)
    expected = {f"output{i}": o.detach().contiguous() for i, o in enumerate(flatten(ref(*inputs)))}
    if case.train:
        params = {k for k, _ in ref.named_parameters()}
        for k, v in ref.state_dict().items():
            if k not in params:
                expected[f"buffer:{k}"] = v.detach().clone()
    m = build(case)
    initial = {k: v.detach().clone() for k, v in m.state_dict().items()}
    with warnings.catch_warnings(), torch.set_grad_enabled(not case.no_grad):
        warnings.simplefilter("ignore")
        if case.fmt == "script":
            ts = torch.jit.script(m)
        else:
            ts = torch.jit.trace(m, inputs, check_trace=False)
            if case.train:
                ts.load_state_dict(initial)
    types = json.dumps([{"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape)} for t in inputs])
    torch.jit.save(ts, prefix + ".pt", _extra_files={"kiln_inputs.json": types})
    save_st(prefix + ".input.safetensors", {f"input{i}": t for i, t in enumerate(inputs)})
    save_st(prefix + ".expected.safetensors", expected)


def write_fx(case: Case, out_dir: str) -> str:
    """The same module as an FX dump (models/fx_dump.py) at NAME_fx.fx.json,
    for the test that holds the FX importer to the TorchScript importer's
    coverage. Returns "" or why make_fx could not capture it (a PyTorch-side
    limit: such a case has no FX form to compare)."""
    import fx_dump
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fx_dump.dump_fx(build(case), case.inputs(), os.path.join(out_dir, case.name + "_fx"), train=case.train,
                            no_grad=case.no_grad)
        return ""
    except Exception as e:  # noqa: BLE001 -- recorded in the manifest, the C++ test reports it
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def fx_form(case: Case) -> bool:
    """Whether a case gets an FX dump: each function case, each module once
    (its trace variant; captured under torch.no_grad() where the trace was),
    never the error cases."""
    return not case.expect_error and case.fmt == "trace"


def write_extras(out_dir: str) -> None:
    """Files for the error tests: a zip that is no TorchScript archive, and an
    archive without kiln_inputs.json."""
    import zipfile
    with zipfile.ZipFile(os.path.join(out_dir, "not_torchscript.zip"), "w") as z:
        z.writestr("hello.txt", "not a model")
    ts = torch.jit.trace(nn.Linear(4, 2), (torch.randn(3, 4),))
    torch.jit.save(ts, os.path.join(out_dir, "no_inputs_json.pt"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output directory")
    p.add_argument("--only", action="append", default=[], help="generate only these cases")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--list-fx", action="store_true", help="print the names of the cases with an FX form and exit")
    args = p.parse_args(argv)
    if args.list or args.list_fx:
        for c in CASES:
            if args.list or fx_form(c):
                print(c.name)
        return 0
    if not args.out:
        p.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    selected = [c for c in CASES if not args.only or c.name in args.only]
    failed = 0
    fx = {}
    for c in selected:
        try:
            write_case(c, args.out)
        except Exception as e:  # report and go on: the C++ test names the missing case
            failed += 1
            print(f"{c.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        if fx_form(c):
            fx[c.name] = write_fx(c, args.out)
    if not args.only:
        write_extras(args.out)
    manifest = [{"name": c.name, "format": c.fmt, "run": c.run, "train": c.train, "expect_error": c.expect_error,
                 **({"fx_error": fx[c.name]} if c.name in fx else {})}
                for c in CASES]
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
