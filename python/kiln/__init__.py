"""Kiln from Python: compile a PyTorch model's whole training step and run it.

    import kiln
    step = kiln.compile(model, example_inputs, loss="cross_entropy", optimizer="adamw", lr=1e-3,
                        amp="bf16", memory_budget="2GiB")   # an nn.Module (traced for you) or a .pt / .fx.json path
    for x, y in loader:
        loss = step(x, target=y)          # lazy: reading float(loss) is what syncs
    model.load_state_dict(step.state_dict())
    step.report()                         # the report `kiln compile --report` writes, as a dict
    step.export("step.py", format="fx")

The keyword options are `kiln train`'s, named as `kiln options` lists them
(the flag without its dashes, `_` for `-`: `label_smoothing`,
`memory_budget`, `weight_decay`, `threads`, `device`, ...). Errors are
Kiln's one-line messages, raised as `kiln.KilnError` (a RuntimeError).
"""

import json
import os
import shutil
import tempfile
import warnings

from ._kiln import KilnError, __version__
from . import _kiln

__all__ = ["compile", "Step", "Loss", "KilnError", "options", "__version__"]


def options():
    """The names of the keyword options `compile` takes."""
    return list(_kiln.option_names())


def _as_list(inputs):
    if inputs is None:
        return []
    if isinstance(inputs, (list, tuple)):
        return list(inputs)
    return [inputs]


def _type_text(t):
    """A tensor's type as Kiln writes it: f32[2,3,16,16], i64[4,256]."""
    import torch

    names = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
             torch.bool: "bool"}
    if t.dtype not in names:
        raise KilnError(f"example input of dtype {t.dtype} is not supported")
    return f"{names[t.dtype]}[{','.join(str(d) for d in t.shape)}]"


def _to_numpy(x, what):
    """A CPU array viewing `x` (a torch tensor or anything NumPy takes) without a copy where it can."""
    try:
        import torch
    except ImportError:  # an FX dump trains without PyTorch installed
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype == torch.bfloat16:
            raise KilnError(f"{what}: bf16 tensors cannot cross into Kiln; pass float32 (--amp bf16 computes in bf16)")
        return x.detach().contiguous().numpy()
    import numpy

    return numpy.asarray(x)


class Loss:
    """The loss of one step. Reading it (float(loss), loss.item()) waits for the step."""

    def __init__(self, step, index):
        self._step, self._index, self._value = step, index, None

    def _fill(self):
        if self._value is None:
            self._value = self._step._native.read_loss()
        self._step = None

    def item(self):
        if self._value is None:
            self._fill()
        return self._value

    def __float__(self):
        return self.item()

    def __repr__(self):
        return f"kiln.Loss(step {self._index}: {self.item():.6g})"


class Step:
    """A compiled training step: forward, loss, backward and optimizer as one graph."""

    def __init__(self, native, workdir=None):
        self._native = native
        self._workdir = workdir
        self._last = None  # the last step's Loss, read before the next step overwrites it

    def __call__(self, *inputs, target=None):
        if self._last is not None:
            self._last._fill()
        arrays = [_to_numpy(x, f"input{i}") for i, x in enumerate(inputs)]
        tgt = None if target is None else _to_numpy(target, "target")
        index = self._native.run(arrays, tgt)
        self._last = Loss(self, index)
        return self._last

    @property
    def steps_done(self):
        return self._native.steps_done

    def state_dict(self):
        """Parameters and buffers keyed as the model's state_dict(), as torch tensors sharing Kiln's memory."""
        arrays = self._native.state_dict()
        try:
            import torch
        except ImportError:
            return arrays
        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    def report(self):
        """The compile report (docs/report-schema.md) as a dict."""
        return json.loads(self._native.report())

    def export(self, path, format="fx"):
        """Write the optimized step graph: fx (a Python file), text, json, dot or svg."""
        self._native.export(os.fspath(path), format)

    def close(self):
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __del__(self):
        self.close()


def compile(model, example_inputs=None, **options):
    """Compile `model`'s training step.

    model: an nn.Module (traced in train mode on `example_inputs`), or the path of a
    TorchScript archive (.pt) or FX dump (.fx.json).
    example_inputs: a tensor or a tuple of tensors, the model's inputs (their shapes and dtypes
    are the step's); optional for a path whose archive records them.
    options: kiln train's options by name (kiln.options() lists them).
    """
    workdir = None
    shapes = [_type_text(t) for t in _as_list(example_inputs)] if example_inputs is not None else []
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
    else:
        import torch

        if not isinstance(model, torch.nn.Module):
            raise KilnError(f"kiln.compile takes an nn.Module or a model path, not {type(model).__name__}")
        if example_inputs is None:
            raise KilnError("kiln.compile of an nn.Module needs example_inputs to trace it")
        workdir = tempfile.mkdtemp(prefix="kiln-")
        path = os.path.join(workdir, "model.pt")
        # Tracing runs the forward once in train mode, which would update batch
        # norm's running statistics: the model and the step start from the state before it.
        was_training = model.training
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.train()
        try:
            with warnings.catch_warnings():  # shape checks recorded as constants: the shapes are fixed anyway
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                traced = torch.jit.trace(model, tuple(_as_list(example_inputs)), check_trace=False)
        finally:
            model.train(was_training)
            model.load_state_dict(state)
        traced.load_state_dict(state)
        traced.save(path)
    try:
        native = _kiln.Step(path, shapes, options)
    except BaseException:
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Step(native, workdir)
