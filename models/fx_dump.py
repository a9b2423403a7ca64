#!/usr/bin/python3
"""Dump an nn.Module as an aten-level FX graph for Kiln's C++ FX importer.

    dump_fx(module, example_inputs, path_prefix, train=False)

writes PREFIX.fx.json (the graph; schema in docs/fx-format.md) and
PREFIX.safetensors (every state_dict key, tied ones included, plus the
tensor constants the tracer lifted, under "__constant__.<name>").

    dump_fx(module, example_inputs, path_prefix, shapes_only=True)

traces a module whose parameters and buffers are on the meta device (no
storage: a 7e9-parameter model costs nothing), with meta example inputs, and
writes only PREFIX.fx.json: the same document with "shapes_only": true and no
"weights_file". Step 4 below then runs the graph on the meta values for the
nodes' dtypes/shapes and checks the outputs' dtypes/shapes only.

How the graph is made (works on torch 1.13 and 2.x):

  1. capture: make_fx over  fn(*flat) = functional_call(module, {key: flat[i]},
     flat[n_state:])  so every parameter and buffer is a placeholder whose
     state_dict key we know. Tied tensors (one Parameter under several keys)
     are ONE placeholder passed under all their keys. Parameters require
     grad during this step, so PyTorch takes the same "slow" paths as during
     training (nn.MultiheadAttention / TransformerEncoderLayer otherwise pick
     fused inference kernels) -- unless no_grad asks for the capture an
     inference user makes under torch.no_grad(), where those fused
     fast-path ops are recorded as they are. Forward hooks record which module is running
     and a patched fx.Graph.create_node stamps every node with that scope and
     the user's source line.
  2. functionalize: the captured graph is re-traced through
     functionalize(remove="mutations"), which turns every in-place op
     (relu_, add_, fill_ on a slice, ...) into its functional form and
     mutations of graph inputs into trailing copy_(input, new_value) nodes.
     An Interpreter carries scope/source over to the new nodes.
  3. post-process: trailing copy_ into a buffer become "mutations" entries
     (kind "value"); ops whose schema hides an in-place update (1.13's
     aten.native_batch_norm.default with training=True updates running_mean
     and running_var) become "mutations" entries (kind "inplace"); dead pure
     nodes (detach for autograd, empty() reserves) are removed.
  4. check: the final graph is run with an Interpreter on fresh copies of the
     weights; this gives every node's dtype/shape and is compared with the
     module's own forward (shapes_only: on the meta tensors, comparing the
     outputs' dtypes and shapes only).

CLI:
    fx_dump.py MODEL --out-dir DIR [--train] [--shapes-only]   dump a zoo model
    fx_dump.py --op-census [--modes eval,train]    table of every aten overload
                                                   over the zoo (markdown)
"""

import argparse
import contextlib
import json
import math
import operator
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

FORMAT = "kiln-fx"
FORMAT_VERSION = 1

_HERE = os.path.abspath(__file__)
_REPO = os.path.dirname(os.path.dirname(_HERE))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

# --------------------------------------------------------------------------
# Version shims (torch 1.13 vs 2.x)
# --------------------------------------------------------------------------


def _rebuild_flat_weights(rnn, _inputs):
    """Forward pre-hook: nn.RNN/LSTM/GRU read their weights from a
    `_flat_weights` list filled when the module was built, which the
    attributes functional_call swaps in do not reach (torch 1.13), so the
    capture would see the original tensors as constants and no parameter
    would get a gradient. The list is rebuilt from the current attributes."""
    rnn._flat_weights = [getattr(rnn, n) if hasattr(rnn, n) else None for n in rnn._flat_weights_names]


def _functional_call(module, state: Dict[str, torch.Tensor], args: tuple):
    """torch.func.functional_call on 2.x, nn.utils.stateless on 1.13; RNN
    modules read the swapped-in weights (_rebuild_flat_weights)."""
    rnns = [m for m in module.modules() if isinstance(m, torch.nn.RNNBase)]
    hooks = [m.register_forward_pre_hook(_rebuild_flat_weights) for m in rnns]
    try:
        func = getattr(torch, "func", None)
        if func is not None and hasattr(func, "functional_call"):
            return func.functional_call(module, state, args)
        from torch.nn.utils.stateless import functional_call
        return functional_call(module, state, args)
    finally:
        for h in hooks:
            h.remove()
        for m in rnns:  # back to the module's own parameters
            _rebuild_flat_weights(m, ())


def _functionalize(fn):
    """torch.func.functionalize on 2.x, functorch.functionalize on 1.13."""
    func = getattr(torch, "func", None)
    if func is not None and hasattr(func, "functionalize"):
        return func.functionalize(fn, remove="mutations")
    from functorch import functionalize
    return functionalize(fn, remove="mutations")


def _other_dirs_to_skip() -> List[str]:
    dirs = []
    try:
        import functorch
        dirs.append(os.path.dirname(os.path.abspath(functorch.__file__)) + os.sep)
    except ImportError:
        pass
    return dirs


_SKIP_DIRS = [_TORCH_DIR] + _other_dirs_to_skip()


class _MetaShapePatches:
    """Context manager for tracing on the meta device, where a tensor has a
    shape but no values. repeat_interleave(x, r: int, dim) expands (torch
    1.13; later versions may expand it without an index) into
    repeat_interleave.Tensor(repeats) + index_select, and the meta kernel of
    repeat_interleave.Tensor cannot size its result without
    `output_size`, which the values would give. With an int `r` it is
    x.size(dim) * r (x.numel() * r without dim), so while this is active
    torch.repeat_interleave / Tensor.repeat_interleave pass it: the graph
    then records repeat_interleave.Tensor(repeats, output_size=N), the same
    op and value. Used only for shapes-only dumps, so ordinary dumps keep
    their graphs."""

    _TARGETS = ((torch, "repeat_interleave"), (torch.Tensor, "repeat_interleave"))

    def __init__(self):
        self.saved = []

    @staticmethod
    def _with_output_size(orig):
        def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
            if repeats is None:  # repeat_interleave(repeats): the index overload
                return orig(input, output_size=output_size)
            if output_size is None and isinstance(repeats, int) and not isinstance(repeats, bool):
                output_size = (input.numel() if dim is None else input.size(dim)) * repeats
            return orig(input, repeats, dim, output_size=output_size)
        return repeat_interleave

    def __enter__(self):
        for owner, name in self._TARGETS:
            own = name in vars(owner)
            orig = getattr(owner, name)
            self.saved.append((owner, name, own, vars(owner).get(name)))
            setattr(owner, name, self._with_output_size(orig))
        return self

    def __exit__(self, *exc):
        for owner, name, own, orig in reversed(self.saved):
            if own:
                setattr(owner, name, orig)
            else:
                delattr(owner, name)  # back to the inherited C method
        self.saved = []
        return False

# --------------------------------------------------------------------------
# Names and encodings
# --------------------------------------------------------------------------

_KILN_DTYPE = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool",
}


def dtype_name(dt: torch.dtype) -> str:
    """Kiln's text-IR dtype name (f32, i64, bool, ...); torch's name otherwise."""
    return _KILN_DTYPE.get(dt, str(dt).replace("torch.", ""))


def _torch_enum_name(x) -> str:
    return str(x).replace("torch.", "")


def target_name(target) -> str:
    """'aten.addmm.default' for OpOverloads, 'operator.getitem' for getitem."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if target is operator.getitem:
        return "operator.getitem"
    mod = getattr(target, "__module__", None) or ""
    if mod == "_operator":  # Python arithmetic on symbolic sizes (PyTorch 2.x dynamic shapes)
        mod = "operator"
    return f"{mod}.{getattr(target, '__name__', str(target))}".lstrip(".")


def encode(v) -> Any:
    """Lossless JSON encoding of an FX argument (see docs/fx-format.md)."""
    if isinstance(v, torch.fx.Node):
        return {"node": v.name}
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return {"float": "nan"}
        if math.isinf(v):
            return {"float": "inf" if v > 0 else "-inf"}
        return v  # json writes repr(v): always has '.' or 'e', round-trips exactly
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, torch.Size):
        return [encode(x) for x in v]
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [encode(x) for x in v]}
    if isinstance(v, torch.dtype):
        return {"dtype": dtype_name(v)}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.memory_format):
        return {"memory_format": _torch_enum_name(v)}
    if isinstance(v, torch.layout):
        return {"layout": _torch_enum_name(v)}
    raise TypeError(f"fx_dump: cannot encode argument {v!r} of type {type(v).__name__}")


def describe(v) -> Any:
    """dtype/shape metadata of a runtime value."""
    if isinstance(v, torch.Tensor):
        return {"dtype": dtype_name(v.dtype), "shape": list(v.shape)}
    if isinstance(v, (list, tuple)):
        return {"items": [describe(x) for x in v]}
    if v is None:
        return None
    # Symbolic sizes of PyTorch 2.x dynamic-shape graphs (absent in 1.13).
    for sym, kind in (("SymBool", "bool"), ("SymInt", "int"), ("SymFloat", "float")):
        if hasattr(torch, sym) and isinstance(v, getattr(torch, sym)):
            return {"scalar": kind}
    if isinstance(v, bool):
        return {"scalar": "bool"}
    if isinstance(v, int):
        return {"scalar": "int"}
    if isinstance(v, float):
        return {"scalar": "float"}
    return {"other": type(v).__name__}


def schema_of(target) -> Optional[dict]:
    """Argument list of an aten overload, defaults encoded like arguments."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None
    args = []
    for a in schema.arguments:
        e = {"name": a.name, "type": str(a.type)}
        if a.kwarg_only:
            e["kwarg_only"] = True
        if a.has_default_value():
            try:
                e["default"] = encode(a.default_value)
            except TypeError:
                e["default"] = repr(a.default_value)
        if a.alias_info is not None and a.alias_info.is_write:
            e["mutable"] = True
        args.append(e)
    return {"schema": str(schema), "args": args,
            "returns": [str(r.type) for r in schema.returns]}


def _rel_path(filename: str) -> str:
    f = os.path.abspath(filename)
    if f.startswith(_REPO + os.sep):
        return os.path.relpath(f, _REPO)
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        i = f.rfind(marker)
        if i >= 0:
            return f[i + len(marker):]
    return f


def _is_mutating(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


# Ops whose schema (on some torch versions) does not declare that they update
# arguments in place: target name -> (argument indices updated, condition).
def _bn_training(node: torch.fx.Node) -> bool:
    training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training")
    return bool(training)


_HIDDEN_MUTATIONS = {
    "aten.native_batch_norm.default": ((3, 4), _bn_training),
}

_RANDOM_WORDS = ("bernoulli", "rand", "normal", "dropout", "uniform", "multinomial", "exponential")


def _is_random(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and any(
        w in str(target) for w in _RANDOM_WORDS)

# --------------------------------------------------------------------------
# Module state: parameters, buffers, tied names
# --------------------------------------------------------------------------


class StateEntry:
    """One distinct parameter/buffer tensor and every key it is reachable by."""

    def __init__(self, key: str, tensor: torch.Tensor, kind: str, persistent: bool):
        self.key = key          # canonical key: first in state_dict order
        self.aliases: List[str] = []  # further keys naming the same tensor
        self.tensor = tensor
        self.kind = kind        # "param" | "buffer"
        self.persistent = persistent

    @property
    def keys(self) -> List[str]:
        return [self.key] + self.aliases


def collect_state(module: torch.nn.Module) -> List[StateEntry]:
    """Distinct parameters and buffers in state_dict order, aliases grouped."""
    entries: List[StateEntry] = []
    by_id: Dict[int, StateEntry] = {}
    for mod_name, mod in module.named_modules(remove_duplicate=False):
        prefix = mod_name + "." if mod_name else ""
        non_persistent = getattr(mod, "_non_persistent_buffers_set", set())
        items = [(n, t, "param", True) for n, t in mod._parameters.items()]
        items += [(n, t, "buffer", n not in non_persistent) for n, t in mod._buffers.items()]
        for n, t, kind, persistent in items:
            if t is None:
                continue
            e = by_id.get(id(t))
            if e is None:
                e = StateEntry(prefix + n, t, kind, persistent)
                by_id[id(t)] = e
                entries.append(e)
            elif prefix + n not in e.keys:
                e.aliases.append(prefix + n)
    return entries


def _clone_state(entries: Sequence[StateEntry], grad: bool) -> List[torch.Tensor]:
    out = []
    for e in entries:
        t = e.tensor.detach().clone()
        if grad and e.kind == "param" and e.tensor.requires_grad:
            t.requires_grad_(True)
        out.append(t)
    return out


def flatten_outputs(out) -> List[torch.Tensor]:
    """Model outputs as a flat list of tensors (pytree order): output0, ..."""
    leaves, _ = tree_flatten(out)
    for i, x in enumerate(leaves):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"model output leaf {i} is a {type(x).__name__}, not a tensor")
    return leaves


def _state_fn(module, entries: Sequence[StateEntry]):
    """fn(*flat) running the module with flat[:n] as its state, flat[n:] as inputs."""
    n = len(entries)

    def fn(*flat):
        state = {}
        for e, t in zip(entries, flat[:n]):
            for k in e.keys:
                state[k] = t
        return tuple(flatten_outputs(_functional_call(module, state, tuple(flat[n:]))))
    return fn

# --------------------------------------------------------------------------
# Provenance: module scope and source line for every node
# --------------------------------------------------------------------------


class _Provenance:
    """Context manager: forward hooks keep a stack of running modules and a
    patched fx.Graph.create_node stamps each new node with
    meta["kiln_scope"] and meta["kiln_source"]. When `inherit` is set (while
    re-tracing an existing graph) the stamp is copied from it instead."""

    def __init__(self, module: Optional[torch.nn.Module]):
        self.module = module
        self.stack: List[str] = []
        self.inherit: Optional[Tuple[str, str]] = None
        self.handles = []
        self.orig_create_node = None

    def __enter__(self):
        if self.module is not None:
            # named_modules() yields each module once, under its first name.
            for name, m in self.module.named_modules():
                self.handles.append(m.register_forward_pre_hook(self._pre(name)))
                self.handles.append(m.register_forward_hook(self._post()))
        self.orig_create_node = torch.fx.Graph.create_node
        prov = self
        orig = self.orig_create_node

        def create_node(graph, *args, **kwargs):
            node = orig(graph, *args, **kwargs)
            if prov.inherit is not None:
                node.meta["kiln_scope"], node.meta["kiln_source"] = prov.inherit
            else:
                node.meta["kiln_scope"] = prov.stack[-1] if prov.stack else ""
                node.meta["kiln_source"] = _user_source()
            return node

        torch.fx.Graph.create_node = create_node
        return self

    def __exit__(self, *exc):
        torch.fx.Graph.create_node = self.orig_create_node
        for h in self.handles:
            h.remove()
        self.handles = []
        return False

    def _pre(self, name):
        def hook(mod, args):
            self.stack.append(name)
        return hook

    def _post(self):
        def hook(mod, args, out):
            if self.stack:
                self.stack.pop()
        return hook


def _user_source() -> str:
    """'file:line (function)' of the innermost frame outside torch/functorch."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if fn != _HERE and not any(fn.startswith(d) for d in _SKIP_DIRS) and not fn.startswith("<"):
            return f"{_rel_path(fn)}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return ""


class _InheritingInterpreter(torch.fx.Interpreter):
    """Runs a captured graph; nodes traced meanwhile inherit its provenance."""

    def __init__(self, gm, prov: _Provenance):
        super().__init__(gm)
        self.prov = prov

    def run_node(self, n):
        self.prov.inherit = (n.meta.get("kiln_scope", ""), n.meta.get("kiln_source", ""))
        try:
            return super().run_node(n)
        finally:
            self.prov.inherit = None


class _RecordingInterpreter(torch.fx.Interpreter):
    """Runs a graph and records describe() of every node's value."""

    def __init__(self, gm, keep=()):
        super().__init__(gm)
        self.meta: Dict[str, Any] = {}
        self.keep = set(keep)
        self.kept: Dict[str, Any] = {}

    def run_node(self, n):
        v = super().run_node(n)
        self.meta[n.name] = describe(v)
        if n.name in self.keep:
            self.kept[n.name] = v
        return v

# --------------------------------------------------------------------------
# Graph cleanup
# --------------------------------------------------------------------------


def _has_side_effect(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return node.op in ("placeholder", "output")
    if _is_mutating(node.target):
        return True
    hidden = _HIDDEN_MUTATIONS.get(target_name(node.target))
    return hidden is not None and hidden[1](node)


def _dce(graph: torch.fx.Graph, keep=()) -> int:
    """Remove unused pure call_function / get_attr nodes (except those named
    in `keep`); returns how many."""
    removed = 0
    keep = set(keep)
    for node in reversed(list(graph.nodes)):
        if (node.op in ("call_function", "get_attr") and not node.users
                and node.name not in keep and not _has_side_effect(node)):
            graph.erase_node(node)
            removed += 1
    return removed


def _capture(module, entries, inputs, no_grad: bool = False) -> torch.fx.GraphModule:
    """Phases 1 and 2: make_fx capture (under torch.no_grad() with no_grad),
    then a functionalizing re-trace."""
    fn = _state_fn(module, entries)
    with _Provenance(module) as prov:
        with torch.set_grad_enabled(not no_grad):
            gm1 = make_fx(fn)(*_clone_state(entries, grad=not no_grad), *inputs)
        _dce(gm1.graph)
        gm1.recompile()

        def replay(*flat):
            return tuple(_InheritingInterpreter(gm1, prov).run(*flat))

        with torch.no_grad():
            gm2 = make_fx(_functionalize(replay))(*_clone_state(entries, grad=False), *inputs)
    return gm2


def _extract_mutations(gm: torch.fx.GraphModule, ph_info: Dict[str, dict]) -> List[dict]:
    """Turn trailing copy_(placeholder, value) into 'value' mutations and
    hidden in-place updates into 'inplace' mutations; check nothing else
    mutates anything."""
    graph = gm.graph
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    mutations = []
    for node in nodes:
        if node.op != "call_function":
            continue
        name = target_name(node.target)
        if name == "aten.copy_.default" and node.args[0].op == "placeholder":
            dst, src = node.args[0], node.args[1]
            if not isinstance(src, torch.fx.Node):
                raise RuntimeError(f"copy_ into {dst.name} from a non-node {src!r}")
            info = ph_info[dst.name]
            mutations.append({"key": info["key"], "placeholder": dst.name, "kind": "value",
                              "node": src.name})
            node.replace_all_uses_with(src)
            graph.erase_node(node)
            continue
        hidden = _HIDDEN_MUTATIONS.get(name)
        if hidden is not None and hidden[1](node):
            for idx in hidden[0]:
                arg = node.args[idx] if idx < len(node.args) else None
                if arg is None:
                    continue
                if not (isinstance(arg, torch.fx.Node) and arg.op == "placeholder"):
                    raise RuntimeError(f"{node.name} ({name}) updates argument {idx} in place, "
                                       f"which is not a graph input: cannot represent it")
                later = [u.name for u in arg.users if u is not node and order[u] > order[node]]
                if later:
                    raise RuntimeError(f"{arg.name} is updated in place by {node.name} and read "
                                       f"again later by {later}: not representable")
                mutations.append({"key": ph_info[arg.name]["key"], "placeholder": arg.name,
                                  "kind": "inplace", "node": node.name, "op": name, "arg": idx})
            continue
        if _is_mutating(node.target):
            # Functionalization leaves some in-place ops alone (1.13: the
            # dropout mask's aten.bernoulli_.float). That is harmless when each
            # tensor it updates is a fresh intermediate read by nothing else:
            # then the op's result IS the updated tensor, and the importer can
            # treat it as a functional op. Anything else is not representable.
            for a in _written_args(node):
                if not (isinstance(a, torch.fx.Node) and a.op == "call_function"
                        and list(a.users) == [node]):
                    raise RuntimeError(f"{node.name}: in-place op {name} updates "
                                       f"{getattr(a, 'name', a)!r}, which is read elsewhere "
                                       f"or is a graph input: not representable")
    return mutations


def _written_args(node: torch.fx.Node) -> list:
    """Arguments (positional or keyword) an op's schema says it writes to."""
    out = []
    for i, a in enumerate(node.target._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            if i < len(node.args):
                out.append(node.args[i])
            elif a.name in node.kwargs:
                out.append(node.kwargs[a.name])
    return out

# --------------------------------------------------------------------------
# JSON writer: top level pretty, one line per list element
# --------------------------------------------------------------------------


def _dumps(v) -> str:
    return json.dumps(v, separators=(", ", ": "), allow_nan=False, ensure_ascii=False)


def format_doc(doc: dict) -> str:
    lines = ["{"]
    items = list(doc.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        if isinstance(v, list) and v:
            lines.append(f"  {_dumps(k)}: [")
            for j, x in enumerate(v):
                lines.append(f"    {_dumps(x)}{',' if j + 1 < len(v) else ''}")
            lines.append(f"  ]{comma}")
        elif isinstance(v, dict) and v and k == "ops":
            lines.append(f"  {_dumps(k)}: {{")
            sub = list(v.items())
            for j, (kk, vv) in enumerate(sub):
                lines.append(f"    {_dumps(kk)}: {_dumps(vv)}{',' if j + 1 < len(sub) else ''}")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {_dumps(k)}: {_dumps(v)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"

# --------------------------------------------------------------------------
# The dump
# --------------------------------------------------------------------------


def _require_meta(entries: Sequence[StateEntry], inputs: Sequence[torch.Tensor]) -> None:
    """shapes_only: every parameter, buffer and input must be a meta tensor."""
    off = [e.key for e in entries if not e.tensor.is_meta]
    off += [f"input{i}" for i, x in enumerate(inputs) if not (isinstance(x, torch.Tensor) and x.is_meta)]
    if off:
        raise ValueError(f"shapes_only: {len(off)} parameters/buffers/inputs are not on the meta device "
                         f"(first: {off[0]}); build the module and inputs on torch.device('meta') "
                         f"or move them there with .to('meta')")


def trace_fx(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], train: bool = False,
             no_grad: bool = False, shapes_only: bool = False):
    """Capture `module` as a functional aten graph (no_grad: as captured under
    torch.no_grad(), with the inference fast paths).

    Returns (doc, weights, gm): the JSON document (without "weights_file"),
    the dict of tensors for the weights file, and the GraphModule.

    shapes_only: the module's state and the inputs are meta tensors (see
    _require_meta); the graph is run on them for the nodes' dtypes/shapes,
    only the outputs' dtypes/shapes are checked against the module's own
    (meta) forward, the document gets "shapes_only": true, and `weights` is
    empty (there are no values to write)."""
    inputs = tuple(example_inputs)
    was_training = module.training
    module.train(train)
    try:
        entries = collect_state(module)
        if shapes_only:
            _require_meta(entries, inputs)
            with _MetaShapePatches():
                gm = _capture(module, entries, inputs, no_grad)
        else:
            gm = _capture(module, entries, inputs, no_grad)
    finally:
        module.train(was_training)
    graph = gm.graph

    # Placeholders: distinct state tensors first, then the inputs.
    phs = [n for n in graph.nodes if n.op == "placeholder"]
    if len(phs) != len(entries) + len(inputs):
        raise RuntimeError(f"expected {len(entries) + len(inputs)} placeholders, got {len(phs)}")
    ph_info: Dict[str, dict] = {}
    placeholders = []
    for i, node in enumerate(phs):
        if i < len(entries):
            e = entries[i]
            info = {"name": node.name, "kind": e.kind, "key": e.key}
            if e.aliases:
                info["aliases"] = list(e.aliases)
            t = e.tensor
            if e.kind == "param":
                info["requires_grad"] = bool(t.requires_grad)
            if not e.persistent:
                info["persistent"] = False
        else:
            k = i - len(entries)
            t = inputs[k]
            info = {"name": node.name, "kind": "input", "key": f"input{k}", "index": k}
        info.update(describe(t))
        ph_info[node.name] = info
        placeholders.append(info)

    mutations = _extract_mutations(gm, ph_info)
    _dce(graph, keep=[m["node"] for m in mutations])
    gm.recompile()

    # Lifted constants (get_attr nodes).
    constants, weights = [], {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if not isinstance(value, torch.Tensor):
                raise RuntimeError(f"get_attr {node.target} is not a tensor")
            key = f"__constant__.{node.target}"
            constants.append({"name": node.name, "kind": "constant", "key": key,
                              **describe(value)})
            if not shapes_only:
                weights[key] = value.detach().clone()

    # Run the final graph on fresh state: node metadata + self-check.
    flat = _clone_state(entries, grad=False)
    rec = _RecordingInterpreter(gm, keep=[m["node"] for m in mutations if m["kind"] == "value"])
    torch.manual_seed(0)
    with torch.no_grad():
        got = list(rec.run(*flat, *inputs))
    ref_state = _clone_state(entries, grad=True)
    module.train(train)
    try:
        torch.manual_seed(0)
        with torch.enable_grad(), (_MetaShapePatches() if shapes_only else contextlib.nullcontext()):
            ref = _state_fn(module, entries)(*ref_state, *inputs)
    finally:
        module.train(was_training)
    has_random = any(_is_random(n.target) for n in graph.nodes if n.op == "call_function")
    if shapes_only:  # meta tensors: no values to compare
        _check_types("output", got, ref)
    elif not has_random:
        _check_close("output", got, [r.detach() for r in ref])
        by_ph = {p.name: i for i, p in enumerate(phs)}
        for m in mutations:
            i = by_ph[m["placeholder"]]
            # "inplace": the op updated the placeholder's tensor; "value": a node holds it.
            new = flat[i] if m["kind"] == "inplace" else rec.kept[m["node"]]
            _check_close(f"buffer {m['key']}", [new], [ref_state[i].detach()])

    # Nodes.
    nodes, ops = [], {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        tname = target_name(node.target)
        rec_node = {"name": node.name, "target": tname,
                    "args": [encode(a) for a in node.args],
                    "kwargs": {k: encode(v) for k, v in node.kwargs.items()},
                    "val": rec.meta.get(node.name),
                    "scope": node.meta.get("kiln_scope", ""),
                    "source": node.meta.get("kiln_source", "")}
        nodes.append(rec_node)
        if tname not in ops:
            s = schema_of(node.target)
            if s is not None:
                ops[tname] = s
    out_node = next(n for n in graph.nodes if n.op == "output")
    outputs = [encode(a) for a in out_node.args[0]]

    # Weights: every state key (tied keys under each name) with initial values.
    if not shapes_only:
        for e in entries:
            for k in e.keys:
                weights[k] = e.tensor.detach().clone()
    aliases = {a: e.key for e in entries for a in e.aliases}

    doc = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "producer": {"tool": "models/fx_dump.py", "torch": torch.__version__,
                     "tracer": "make_fx+functionalize"},
        "mode": "train" if train else "eval",
        "random": has_random,
        **({"shapes_only": True} if shapes_only else {}),
        "placeholders": placeholders,
        "constants": constants,
        "aliases": aliases,
        "mutations": mutations,
        "nodes": nodes,
        "outputs": outputs,
        "ops": dict(sorted(ops.items())),
    }
    return doc, weights, gm


def _check_types(what: str, got: Sequence[torch.Tensor], ref: Sequence[torch.Tensor]):
    """Shapes-only self-check: same number of values, dtypes and shapes."""
    if len(got) != len(ref):
        raise RuntimeError(f"fx_dump self-check: {what}: {len(got)} values, expected {len(ref)}")
    for i, (g, r) in enumerate(zip(got, ref)):
        if g.shape != r.shape or g.dtype != r.dtype:
            raise RuntimeError(f"fx_dump self-check: {what} {i}: {g.dtype}{list(g.shape)} "
                               f"vs {r.dtype}{list(r.shape)}")


def _check_close(what: str, got: Sequence[torch.Tensor], ref: Sequence[torch.Tensor]):
    _check_types(what, got, ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        if not torch.allclose(g.double(), r.double(), rtol=1e-4, atol=1e-5, equal_nan=True):
            diff = (g.double() - r.double()).abs().max().item()
            raise RuntimeError(f"fx_dump self-check: {what} {i} differs (max abs diff {diff:g})")


def to_meta(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor]):
    """(module moved to the meta device, inputs as meta tensors): for a
    shapes-only dump of a model built with real weights (their memory is
    freed). Already-meta modules and inputs are returned as they are."""
    if any(not t.is_meta for t in list(module.parameters()) + list(module.buffers())):
        module = module.to("meta")
    return module, tuple(x if x.is_meta else x.to("meta") for x in example_inputs)


def dump_fx(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], path_prefix: str,
            train: bool = False, no_grad: bool = False, shapes_only: bool = False) -> dict:
    """Write PREFIX.fx.json and PREFIX.safetensors; returns the JSON document.

    shapes_only: `module`'s parameters/buffers and `example_inputs` are on the
    meta device; writes PREFIX.fx.json only, with "shapes_only": true and no
    "weights_file" (see trace_fx)."""
    doc, weights, _ = trace_fx(module, example_inputs, train, no_grad, shapes_only=shapes_only)
    if not shapes_only:
        base = os.path.basename(path_prefix)
        head = ("format", "version", "producer", "mode", "random")
        doc = {**{k: doc[k] for k in head}, "weights_file": base + ".safetensors",
               **{k: v for k, v in doc.items() if k not in head}}
    d = os.path.dirname(path_prefix)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path_prefix + ".fx.json", "w", encoding="utf-8") as f:
        f.write(format_doc(doc))
    if not shapes_only:
        st_io.save(path_prefix + ".safetensors", weights, {"format": FORMAT})
    return doc

# --------------------------------------------------------------------------
# Op census over the zoo
# --------------------------------------------------------------------------


def op_census(names: Sequence[str], modes: Sequence[str], log=sys.stderr) -> Tuple[dict, list]:
    """Trace every (model, mode); returns ({op: {"schema", "models": set}}, failures)."""
    import zoo
    census: Dict[str, dict] = {}
    failures = []
    for name in names:
        for mode in modes:
            t0 = time.time()
            model, inputs = zoo.build(name, train=(mode == "train"))
            try:
                # Inference exports: eval under no_grad (their fast paths), as exported.
                doc, _, _ = trace_fx(model, inputs, train=(mode == "train"),
                                     no_grad=(mode == "eval" and name in zoo.INFERENCE_EXPORT))
            except Exception as exc:  # report and go on: the census is a survey
                failures.append((name, mode, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))
                print(f"  {name} [{mode}] FAILED: {failures[-1][2]}", file=log)
                continue
            for node in doc["nodes"]:
                c = census.setdefault(node["target"], {"schema": None, "models": set(),
                                                       "modes": set(), "count": 0})
                c["count"] += 1
                c["models"].add(name)
                c["modes"].add(mode)
                if node["target"] in doc["ops"]:
                    c["schema"] = doc["ops"][node["target"]]["schema"]
            print(f"  {name} [{mode}] {len(doc['nodes'])} nodes {time.time() - t0:.1f}s", file=log)
    return census, failures


def census_markdown(census: dict, failures: list) -> str:
    lines = ["| aten overload | schema (argument order) | modes | nodes | models |",
             "|---|---|---|---:|---|"]
    for op in sorted(census):
        c = census[op]
        schema = c["schema"] or ("(tuple element access: args = [node, index])"
                                 if op == "operator.getitem" else "")
        models = sorted(c["models"])
        shown = ", ".join(models[:5]) + (f", +{len(models) - 5} more" if len(models) > 5 else "")
        modes = "/".join(m for m in ("eval", "train") if m in c["modes"])
        lines.append(f"| `{op}` | `{schema}` | {modes} | {c['count']} | {shown} |")
    if failures:
        lines.append("")
        lines.append("Not traced:")
        for name, mode, why in failures:
            lines.append(f"- {name} [{mode}]: {why}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", help="zoo model name (see models/zoo.py)")
    p.add_argument("--out-dir", default=".", help="directory for MODEL.fx.json / MODEL.safetensors")
    p.add_argument("--train", action="store_true", help="trace the forward in train mode")
    p.add_argument("--shapes-only", action="store_true",
                   help="trace on the meta device and write MODEL.fx.json only (no weights; "
                        "\"shapes_only\": true); required for zoo.SHAPES_ONLY models")
    p.add_argument("--op-census", action="store_true",
                   help="print a markdown table of every aten overload over the zoo")
    p.add_argument("--modes", default="eval,train", help="census modes (comma separated)")
    p.add_argument("--models", default="", help="census: comma separated subset of the zoo")
    p.add_argument("--example", action="store_true",
                   help="dump the Linear(4,3)+ReLU example of docs/fx-format.md into --out-dir")
    args = p.parse_args(argv)
    import zoo
    if args.example:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
        dump_fx(model, (torch.randn(2, 4),), os.path.join(args.out_dir, "linear_relu"))
        return 0
    if args.op_census:
        names = [n for n in args.models.split(",") if n] or zoo.NAMES
        census, failures = op_census(names, [m for m in args.modes.split(",") if m])
        sys.stdout.write(census_markdown(census, failures))
        return 0
    if not args.model:
        p.error("give a MODEL or --op-census")
    if zoo.is_shapes_only(args.model) and not args.shapes_only:
        print(f"fx_dump.py: error: {args.model} is built on the meta device (no weights): "
              f"dump it with --shapes-only", file=sys.stderr)
        return 2
    model, inputs = zoo.build(args.model)
    if args.shapes_only:
        model, inputs = to_meta(model, inputs)
    train = args.train or zoo.is_train(args.model)
    doc = dump_fx(model, inputs, os.path.join(args.out_dir, args.model), train=train,
                  no_grad=args.model in zoo.INFERENCE_EXPORT, shapes_only=args.shapes_only)
    print(f"{args.model}: {len(doc['nodes'])} nodes, {len(doc['placeholders'])} placeholders, "
          f"{len(doc['constants'])} constants, {len(doc['mutations'])} mutations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
