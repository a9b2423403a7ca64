#!/usr/bin/python3
"""Export a zoo model for Kiln, with its example inputs and PyTorch's outputs.

    export.py NAME --format {trace,script,fx} [--format ...] --out-dir DIR
              [--train] [--no-dropout] [--state-dict] [--dtype float64] [--batch N]
    export.py NAME --format fx --shapes-only --out-dir DIR [--train] [--batch N] ...
    export.py --list

Writes into DIR:
  NAME.pt                      trace/script: torch.jit.save of torch.jit.trace /
                               torch.jit.script of the model
  NAME.fx.json, NAME.safetensors   fx: see models/fx_dump.py, docs/fx-format.md
  NAME.input.safetensors       always: input0, input1, ... in forward-argument order
  NAME.expected.safetensors    always: output0, output1, ... (pytree-flattened
                               outputs) of a FRESH copy of the model on those
                               inputs; in train mode also "buffer:<key>" for
                               every buffer after the forward
  NAME.state.safetensors       --state-dict: model.state_dict(), tied keys under
                               each name

Mode: eval, unless --train or the model is a *_train model. --no-dropout sets
every dropout / stochastic-depth probability to 0 before export (and for the
expected outputs), so that train-mode forwards are deterministic: what the
training-parity tests (tests/train/) need. Only one format of
.pt can exist per directory (trace and script both write NAME.pt), so asking
for both is an error. --dtype float64 casts the weights and inputs before
tracing (the training-parity tests' exact mode). All safetensors files are byte-for-byte reproducible.

--shapes-only (fx only): trace on the meta device, so no weight is ever
allocated, and write NAME.fx.json alone: "shapes_only": true, no
"weights_file", no NAME.safetensors, and no input/expected files (a meta
forward has no values). Kiln can compile such a dump, not train or run it.
The zoo.SHAPES_ONLY models (llama_7b_shape: LLaMA-7B's shape) are built on
the meta device and export only this way, in train mode; any other model is
built as usual and moved to the meta device.
"""

import argparse
import os
import sys
import time
import warnings
from typing import Dict, List, Optional, Sequence

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fx_dump  # noqa: E402
import st_io  # noqa: E402
import zoo  # noqa: E402

FORMATS = ("trace", "script", "fx")


def buffer_keys(model: torch.nn.Module) -> List[str]:
    """state_dict keys that name buffers (not parameters), in state_dict order."""
    params = set()
    for e in fx_dump.collect_state(model):
        if e.kind == "param":
            params.update(e.keys)
    return [k for k in model.state_dict().keys() if k not in params]


def build(name: str, train: bool, no_dropout: bool, dtype: torch.dtype, batch: Optional[int] = None):
    """zoo.build, with the parameters, buffers and floating-point inputs cast
    to `dtype` (the same values: float32 widens exactly to float64)."""
    model, inputs = zoo.build(name, train=train, no_dropout=no_dropout, batch=batch)
    if dtype != torch.float32:
        model.to(dtype)
        inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    return model, inputs


def reference_outputs(name: str, train: bool, no_dropout: bool = False, dtype: torch.dtype = torch.float32,
                      batch: Optional[int] = None):
    """Build a fresh model and run it once: (inputs, outputs, buffers after).

    Grad stays enabled, as during training: with grad on, PyTorch's
    transformer layers take their ordinary ("slow path") kernels, which is what
    trace, script and fx record."""
    model, inputs = build(name, train, no_dropout, dtype, batch)
    torch.manual_seed(0)  # only matters for models with dropout in train mode
    out = fx_dump.flatten_outputs(model(*inputs))
    outputs = {f"output{i}": o.detach().contiguous() for i, o in enumerate(out)}
    buffers = {}
    if train:
        sd = model.state_dict()
        buffers = {f"buffer:{k}": sd[k].detach().clone() for k in buffer_keys(model)}
    return inputs, outputs, buffers


def _initial_state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def input_types_json(inputs) -> str:
    """kiln_inputs.json: the example inputs' dtypes and shapes, stored inside
    TorchScript archives (which record no shapes) for Kiln's importer."""
    import json
    return json.dumps([{"dtype": fx_dump.dtype_name(t.dtype), "shape": list(t.shape)} for t in inputs])


def check_shapes_only(name: str, formats: Sequence[str], shapes_only: bool, state_dict: bool = False) -> None:
    """ValueError (one line) for a combination --shapes-only cannot do."""
    if shapes_only:
        other = [f for f in formats if f != "fx"]
        if other:
            raise ValueError(f"--shapes-only works with --format fx only (got {', '.join(other)}): "
                             f"trace and script archives need weight values")
        if not formats:
            raise ValueError("--shapes-only needs --format fx")
        if state_dict:
            raise ValueError("--shapes-only writes no weights: --state-dict cannot be combined with it")
    elif zoo.is_shapes_only(name):
        raise ValueError(f"{name} is built on the meta device (no weights): export it with "
                         f"--format fx --shapes-only")


def export_shapes_only(name: str, out_dir: str, train: Optional[bool] = None, log=None,
                       no_dropout: bool = False, dtype: torch.dtype = torch.float32,
                       batch: Optional[int] = None) -> Dict[str, float]:
    """Shapes-only FX dump of `name` into out_dir: NAME.fx.json only (see the
    module docstring). The model is built on the meta device (zoo.SHAPES_ONLY)
    or moved there, so no weight memory is used."""
    if train is None:
        train = zoo.is_train(name)
    os.makedirs(out_dir, exist_ok=True)
    times: Dict[str, float] = {}
    t0 = time.time()
    model, inputs = build(name, train, no_dropout, dtype, batch)
    model, inputs = fx_dump.to_meta(model, inputs)
    times["build"] = time.time() - t0
    t0 = time.time()
    inference = name in zoo.INFERENCE_EXPORT  # as the ordinary export: eval under no_grad
    doc = fx_dump.dump_fx(model, inputs, os.path.join(out_dir, name), train=train and not inference,
                          no_grad=inference, shapes_only=True)
    times["fx"] = time.time() - t0
    if log is not None:
        print(f"{name} [{'train' if train else 'eval'}, shapes only]: "
              + ", ".join(f"{k} {v:.2f}s" for k, v in times.items())
              + f"; {len(doc['nodes'])} nodes, {len(doc['placeholders'])} placeholders", file=log)
    return times


def export(name: str, formats: Sequence[str], out_dir: str, train: Optional[bool] = None,
           state_dict: bool = False, log=None, no_dropout: bool = False,
           dtype: torch.dtype = torch.float32, batch: Optional[int] = None,
           inference: Optional[bool] = None, shapes_only: bool = False) -> Dict[str, float]:
    """Export `name` in `formats` (subset of trace/script/fx) into out_dir.
    Returns seconds spent per step ("expected", "trace", "script", "fx", ...).
    no_dropout: zero every dropout probability first (zoo.zero_dropout).
    dtype: the floating-point type of the weights and inputs (traced with it).
    batch: the example inputs' batch size instead of the zoo's.
    inference: export in eval mode under torch.no_grad() (default: the zoo's
    INFERENCE_EXPORT models); False: the ordinary grad-enabled export.
    shapes_only: NAME.fx.json alone, traced on the meta device
    (export_shapes_only); formats must be ["fx"]."""
    if train is None:
        train = zoo.is_train(name)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown format(s) {bad}; choose from {FORMATS}")
    check_shapes_only(name, formats, shapes_only, state_dict)
    if shapes_only:
        return export_shapes_only(name, out_dir, train, log, no_dropout, dtype, batch)
    if "trace" in formats and "script" in formats:
        raise ValueError("trace and script both write NAME.pt: export them into different dirs")
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(out_dir, name)
    times: Dict[str, float] = {}
    mode = "train" if train else "eval"
    meta = {"model": name, "mode": mode, "torch": torch.__version__}
    if no_dropout:
        meta["dropout"] = "zeroed"
    if dtype != torch.float32:
        meta["dtype"] = str(dtype).replace("torch.", "")
    if batch is not None:
        meta["batch"] = str(batch)

    t0 = time.time()
    inputs, outputs, buffers = reference_outputs(name, train, no_dropout, dtype, batch)
    st_io.save(prefix + ".input.safetensors",
               {f"input{i}": x for i, x in enumerate(inputs)}, meta)
    st_io.save(prefix + ".expected.safetensors", {**outputs, **buffers}, meta)
    times["expected"] = time.time() - t0

    # One more fresh model for the exports (tracing runs its forward).
    t0 = time.time()
    model, inputs = build(name, train, no_dropout, dtype, batch)
    initial = _initial_state(model)
    times["build"] = time.time() - t0

    if state_dict:
        t0 = time.time()
        st_io.save(prefix + ".state.safetensors", initial, meta)
        times["state"] = time.time() - t0

    # Inference exports (zoo.INFERENCE_EXPORT): eval mode under no_grad, as
    # users trace for inference; the reference outputs above are the same
    # function (no dropout, no BatchNorm in those models).
    if inference is None:
        inference = name in zoo.INFERENCE_EXPORT
    if inference:
        meta["export"] = "inference (eval, torch.no_grad)"
    if "fx" in formats:
        t0 = time.time()
        doc = fx_dump.dump_fx(model, inputs, prefix, train=train and not inference, no_grad=inference)
        if inference:
            _require_fast_path(name, "FX dump", " ".join(doc["ops"]))
        times["fx"] = time.time() - t0

    if "script" in formats:
        t0 = time.time()
        scripted = torch.jit.script(model)
        torch.jit.save(scripted, prefix + ".pt", _extra_files={"kiln_inputs.json": input_types_json(inputs)})
        times["script"] = time.time() - t0

    if "trace" in formats:
        t0 = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # No check_trace: it re-runs the forward (in train mode updating the
            # running stats again), and on 1.13 it reports spurious "graphs
            # differed" errors for nn.MultiheadAttention users that differ only
            # in mangled class names. The test suite checks the outputs instead.
            with torch.set_grad_enabled(not inference):
                traced = torch.jit.trace(model.train(train and not inference), tuple(inputs), check_trace=False)
        if inference:
            _require_fast_path(name, "trace", str(traced.inlined_graph))
        if train:
            traced.load_state_dict(initial)  # undo the running-stat update of tracing
        torch.jit.save(traced, prefix + ".pt", _extra_files={"kiln_inputs.json": input_types_json(inputs)})
        times["trace"] = time.time() - t0
    if log is not None:
        print(f"{name} [{mode}]: " + ", ".join(f"{k} {v:.2f}s" for k, v in times.items()), file=log)
    return times


_FAST_PATH_OPS = ("_native_multi_head_attention", "_transformer_encoder_layer_fwd")


def _require_fast_path(name: str, what: str, graph_text: str) -> None:
    """An inference export must record the fused fast-path ops it exists to
    test; if PyTorch stops taking the fast path, fail instead of testing the
    ordinary ops under another name."""
    if not any(op in graph_text for op in _FAST_PATH_OPS):
        raise RuntimeError(f"{name}: the {what} exported under torch.no_grad() records none of "
                           f"{', '.join(_FAST_PATH_OPS)}: PyTorch did not take its inference fast path")


def parse_formats(name: str, requested: Sequence[str]) -> List[str]:
    out: List[str] = []
    for r in requested:
        for f in r.split(","):
            f = f.strip()
            if f:
                out.append(f)
    return list(dict.fromkeys(out))


def list_models(out=sys.stdout):
    print(f"{'name':24s} {'mode':5s} {'formats':18s} inputs", file=out)
    for n in zoo.NAMES:
        _, specs, fmts = zoo._REGISTRY[n]
        shapes = []
        for s in specs:
            shapes.append(f"i64{list(s[1])}" if s and s[0] == "int64" else f"f32{list(s)}")
        mode = "train" if zoo.is_train(n) else "eval"
        print(f"{n:24s} {mode:5s} {','.join(fmts):18s} {' '.join(shapes)}", file=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Export a Kiln zoo model (see models/README.md).")
    p.add_argument("name", nargs="?", help="model name (--list shows them)")
    p.add_argument("--format", action="append", default=[],
                   help="trace, script or fx (repeat or comma-separate; trace and script "
                        "exclude each other); NAME.input/expected.safetensors are always "
                        "written")
    p.add_argument("--out-dir", default=".", help="output directory")
    p.add_argument("--train", action="store_true", help="run/export the forward in train mode")
    p.add_argument("--state-dict", action="store_true", help="also write NAME.state.safetensors")
    p.add_argument("--no-dropout", action="store_true",
                   help="zero every dropout / stochastic-depth probability first (deterministic "
                        "train-mode forwards)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="weights and inputs in this type (float64: for exact parity checks)")
    p.add_argument("--batch", type=int, help="example inputs' batch size (default: the zoo's)")
    p.add_argument("--shapes-only", action="store_true",
                   help="fx only: trace on the meta device (no weights allocated) and write NAME.fx.json "
                        "alone, with \"shapes_only\": true and no weights file; Kiln can compile it but "
                        "not train or run it. Required for models built on the meta device (llama_7b_shape)")
    p.add_argument("--list", action="store_true", help="list models and supported formats")
    args = p.parse_args(argv)
    if args.list:
        list_models()
        return 0
    if not args.name:
        p.error("give a model NAME or --list")
    if args.name not in zoo._REGISTRY:
        p.error(f"unknown model {args.name!r}; known: {', '.join(zoo._REGISTRY)}")
    formats = parse_formats(args.name, args.format)
    try:
        check_shapes_only(args.name, formats, args.shapes_only, args.state_dict)
    except ValueError as exc:
        print(f"export.py: error: {exc}", file=sys.stderr)
        return 2
    unsupported = [f for f in formats if f not in zoo.formats(args.name)]
    if unsupported:
        print(f"warning: {args.name} is not known to export as {unsupported} on torch 1.13",
              file=sys.stderr)
    train = True if args.train else None
    try:
        export(args.name, formats, args.out_dir, train=train, state_dict=args.state_dict,
               log=sys.stdout, no_dropout=args.no_dropout, dtype=getattr(torch, args.dtype), batch=args.batch,
               shapes_only=args.shapes_only)
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
