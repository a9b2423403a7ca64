#!/usr/bin/python3
"""Self-test of Kiln's Python model exporters (models/).

    /usr/bin/python3 tests/models/test_export.py --out-dir /tmp/x [--quick] [--models a,b]

For every zoo model and every format it claims (models/zoo.py FORMATS):
  * exports it (models/export.py, in-process; one CLI run is also checked);
  * trace/script: torch.jit.load's the .pt and checks its outputs (and, in
    train mode, its buffers after the forward) against NAME.expected.safetensors;
  * fx: validates NAME.fx.json's structure, then re-executes the recorded
    graph with an interpreter written here (recorded aten names -> torch.ops,
    arguments decoded from the JSON encoding, weights from NAME.safetensors)
    and checks outputs, buffer mutations and per-node dtype/shape metadata;
    it also checks that executing the graph leaves every graph input untouched
    except the buffers listed as "inplace" mutations (the graph is functional);
  * reloads every safetensors file with st_io and checks the state dict;
  * for a few models, exports twice and checks the safetensors / fx.json files
    are byte-identical.
Prints a summary table and the total wall time; exits 1 on any failure.
"""

import argparse
import io
import json
import operator
import os
import subprocess
import sys
import time
import traceback
import warnings

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "models"))

import torch  # noqa: E402

import export  # noqa: E402
import st_io  # noqa: E402
import zoo  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
QUICK = ["mlp", "cnn_bn", "cnn_bn_train", "resnet_mini", "transformer_encoder", "gpt2_mini",
         "nn_transformer", "nn_mha", "tv_mobilenet_v3_small", "tv_vit"]
DETERMINISM = ["mlp", "cnn_bn_train", "gpt2_mini", "tv_squeezenet1_1"]

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
           "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
           "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}


class CheckError(Exception):
    pass


def check_close(what, got, want):
    if not isinstance(got, torch.Tensor):
        raise CheckError(f"{what}: got {type(got).__name__}, expected a tensor")
    if got.shape != want.shape or got.dtype != want.dtype:
        raise CheckError(f"{what}: {got.dtype}{list(got.shape)} vs expected "
                         f"{want.dtype}{list(want.shape)}")
    if not torch.allclose(got.double(), want.double(), rtol=RTOL, atol=ATOL, equal_nan=True):
        diff = (got.double() - want.double()).abs().max().item()
        raise CheckError(f"{what}: max abs diff {diff:g}")


def flat_outputs(out):
    from torch.utils._pytree import tree_flatten
    return tree_flatten(out)[0]


def check_expected(what, outputs, expected):
    want = sorted((k for k in expected if k.startswith("output")), key=lambda k: int(k[6:]))
    if len(outputs) != len(want):
        raise CheckError(f"{what}: {len(outputs)} outputs, expected file has {len(want)}")
    for i, k in enumerate(want):
        check_close(f"{what} {k}", outputs[i], expected[k])


# --------------------------------------------------------------------------
# TorchScript
# --------------------------------------------------------------------------

def check_pt(path, inputs, expected, train):
    m = torch.jit.load(path)
    torch.manual_seed(0)
    outs = flat_outputs(m(*inputs))
    check_expected(os.path.basename(path), [o.detach() for o in outs], expected)
    if train:
        sd = m.state_dict()
        bufs = [k for k in expected if k.startswith("buffer:")]
        if not bufs:
            raise CheckError("train mode but no buffer:* entries in expected file")
        for k in bufs:
            check_close(f"{os.path.basename(path)} {k}", sd[k[len("buffer:"):]], expected[k])


# --------------------------------------------------------------------------
# FX dump: structure check and an independent interpreter
# --------------------------------------------------------------------------

def decode(v, env):
    """Inverse of fx_dump.encode (written from docs/fx-format.md)."""
    if isinstance(v, list):
        return [decode(x, env) for x in v]
    if isinstance(v, dict):
        if len(v) != 1:
            raise CheckError(f"encoded value with {len(v)} keys: {v}")
        (tag, x), = v.items()
        if tag == "node":
            return env[x]
        if tag == "tuple":
            return tuple(decode(y, env) for y in x)
        if tag == "float":
            if x not in ("inf", "-inf", "nan"):
                raise CheckError(f"bad float encoding {v}")
            return float(x)
        if tag == "dtype":
            return _DTYPES[x]
        if tag == "device":
            return torch.device(x)
        if tag == "memory_format":
            return getattr(torch, x)
        if tag == "layout":
            return getattr(torch, x)
        raise CheckError(f"unknown encoded tag {tag!r}")
    return v


def resolve(target):
    if target == "operator.getitem":
        return operator.getitem
    parts = target.split(".")
    if len(parts) != 3:
        raise CheckError(f"target {target!r} is not ns.op.overload")
    ns, op, overload = parts
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def describe(v):
    if isinstance(v, torch.Tensor):
        return {"dtype": _DTYPE_NAMES.get(v.dtype, str(v.dtype)), "shape": list(v.shape)}
    if isinstance(v, (list, tuple)):
        return {"items": [describe(x) for x in v]}
    if v is None:  # an undefined tensor result (the fast path's weights with need_weights=False)
        return None
    return "other"


def validate_fx_doc(doc, weights):
    for k in ("format", "version", "mode", "random", "weights_file", "placeholders", "constants",
              "aliases", "mutations", "nodes", "outputs", "ops"):
        if k not in doc:
            raise CheckError(f"fx.json lacks {k!r}")
    if doc["format"] != "kiln-fx" or doc["version"] != 1:
        raise CheckError(f"unexpected format/version {doc['format']}/{doc['version']}")
    names = set()
    for p in doc["placeholders"]:
        if p["kind"] not in ("param", "buffer", "input"):
            raise CheckError(f"placeholder {p['name']}: kind {p['kind']}")
        if p["kind"] != "input":
            for k in [p["key"]] + p.get("aliases", []):
                if k not in weights:
                    raise CheckError(f"weights file lacks {k}")
                if list(weights[k].shape) != p["shape"] or _DTYPE_NAMES[weights[k].dtype] != p["dtype"]:
                    raise CheckError(f"{k}: weights file type differs from placeholder")
        names.add(p["name"])
    for c in doc["constants"]:
        if c["kind"] != "constant" or c["key"] not in weights:
            raise CheckError(f"constant {c}")
        names.add(c["name"])
    for alias, canon in doc["aliases"].items():
        if not torch.equal(weights[alias], weights[canon]):
            raise CheckError(f"alias {alias} differs from {canon}")
    for n in doc["nodes"]:
        for k in ("name", "target", "args", "kwargs", "val", "scope", "source"):
            if k not in n:
                raise CheckError(f"node {n.get('name')} lacks {k!r}")
        if n["name"] in names:
            raise CheckError(f"duplicate name {n['name']}")
        if n["target"] != "operator.getitem" and n["target"] not in doc["ops"]:
            raise CheckError(f"{n['target']} missing from ops")
        names.add(n["name"])

    def refs(v):
        if isinstance(v, list):
            for x in v:
                yield from refs(x)
        elif isinstance(v, dict):
            if "node" in v:
                yield v["node"]
            for x in v.values():
                if isinstance(x, (list, dict)):
                    yield from refs(x)
    defined = {p["name"] for p in doc["placeholders"]} | {c["name"] for c in doc["constants"]}
    for n in doc["nodes"]:  # topological order: every ref defined before use
        for r in list(refs(n["args"])) + list(refs(n["kwargs"])):
            if r not in defined:
                raise CheckError(f"{n['name']} uses {r} before its definition")
        defined.add(n["name"])
    for r in refs(doc["outputs"]):
        if r not in defined:
            raise CheckError(f"output refers to unknown {r}")


def run_fx(doc, weights, inputs):
    """Execute the dumped graph; returns (outputs, {buffer key: new value}, env)."""
    env, originals = {}, {}
    for p in doc["placeholders"]:
        t = inputs[p["index"]] if p["kind"] == "input" else weights[p["key"]]
        env[p["name"]] = t.clone()
        originals[p["name"]] = t.clone()
    for c in doc["constants"]:
        env[c["name"]] = weights[c["key"]].clone()
    torch.manual_seed(0)
    for n in doc["nodes"]:
        fn = resolve(n["target"])
        args = decode(n["args"], env)
        kwargs = {k: decode(v, env) for k, v in n["kwargs"].items()}
        val = fn(*args, **kwargs)
        if describe(val) != n["val"]:
            raise CheckError(f"{n['name']}: value {describe(val)} but recorded {n['val']}")
        env[n["name"]] = val
    outputs = [decode(o, env) for o in doc["outputs"]]
    new_buffers, inplace = {}, set()
    for m in doc["mutations"]:
        if m["kind"] == "value":
            new_buffers[m["key"]] = env[m["node"]]
        elif m["kind"] == "inplace":
            new_buffers[m["key"]] = env[m["placeholder"]]
            inplace.add(m["placeholder"])
        else:
            raise CheckError(f"unknown mutation kind {m['kind']}")
    # Functional graph: nothing but the "inplace" buffers may have changed.
    for name, orig in originals.items():
        if name not in inplace and not torch.equal(env[name], orig):
            raise CheckError(f"graph input {name} was modified but is not listed as inplace")
    return outputs, new_buffers


def _reject_constant(c):
    """Strict JSON: NaN / Infinity literals are not JSON (C++ parsers reject them)."""
    raise CheckError(f"fx.json contains the non-JSON literal {c}")


def check_fx(prefix, inputs, expected, train):
    with open(prefix + ".fx.json", encoding="utf-8") as f:
        doc = json.load(f, parse_constant=_reject_constant)
    weights = st_io.load(os.path.join(os.path.dirname(prefix), doc["weights_file"]))
    validate_fx_doc(doc, weights)
    if doc["mode"] != ("train" if train else "eval"):
        raise CheckError(f"fx.json mode {doc['mode']}")
    outputs, new_buffers = run_fx(doc, weights, inputs)
    check_expected("fx", outputs, expected)
    if train:
        for k, v in expected.items():
            if not k.startswith("buffer:"):
                continue
            key = k[len("buffer:"):]
            if key in new_buffers:
                check_close(f"fx {k}", new_buffers[key], v)
            else:  # not mutated: must equal the initial value
                check_close(f"fx {k} (unchanged)", weights[key], v)
    return len(doc["nodes"])


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

def check_state(prefix, name, train):
    sd = st_io.load(prefix + ".state.safetensors")
    model, _ = zoo.build(name, train=train)
    ref = model.state_dict()
    if list(sorted(sd)) != list(sorted(ref)):
        raise CheckError(f"state keys differ: {sorted(set(sd) ^ set(ref))[:5]}")
    for k, v in ref.items():
        if not torch.equal(sd[k], v):
            raise CheckError(f"state {k} differs")


def test_model(name, out_dir):
    """Export + check one model; returns a row dict for the summary table."""
    train = zoo.is_train(name)
    fmts = list(zoo.formats(name))
    row = {"name": name, "mode": "train" if train else "eval", "inputs": "", "ok": [],
           "fail": [], "export_s": 0.0, "check_s": 0.0, "nodes": ""}
    # trace and script both write NAME.pt: script goes to its own directory.
    jobs = [("main", [f for f in fmts if f != "script"])]
    if "script" in fmts:
        jobs.append(("script", ["script"]))
    for sub, job_fmts in jobs:
        d = os.path.join(out_dir, sub)
        prefix = os.path.join(d, name)
        t0 = time.time()
        try:
            export.export(name, job_fmts, d, state_dict=(sub == "main"))
        except Exception as exc:
            row["fail"].append(f"export {job_fmts}: {type(exc).__name__}: "
                               f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            traceback.print_exc()
            continue
        finally:
            row["export_s"] += time.time() - t0
        t0 = time.time()
        ins = st_io.load(prefix + ".input.safetensors")
        inputs = [ins[f"input{i}"] for i in range(len(ins))]
        row["inputs"] = " ".join(f"{_DTYPE_NAMES[x.dtype]}{list(x.shape)}" for x in inputs)
        expected = st_io.load(prefix + ".expected.safetensors")
        checks = [(f, f) for f in job_fmts] + ([("state", "state")] if sub == "main" else [])
        for label, what in checks:
            try:
                if what in ("trace", "script"):
                    check_pt(prefix + ".pt", inputs, expected, train)
                elif what == "fx":
                    row["nodes"] = str(check_fx(prefix, inputs, expected, train))
                elif what == "state":
                    check_state(prefix, name, train)
                row["ok"].append(label)
            except Exception as exc:
                row["fail"].append(f"{label}: {type(exc).__name__}: "
                                   f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
                if not isinstance(exc, CheckError):
                    traceback.print_exc()
        row["check_s"] += time.time() - t0
    if "script" in fmts and "main" in [j[0] for j in jobs]:
        # Two independent exports of the same model: identical references.
        a = os.path.join(out_dir, "main", name + ".expected.safetensors")
        b = os.path.join(out_dir, "script", name + ".expected.safetensors")
        if os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() != open(b, "rb").read():
            row["fail"].append("expected.safetensors differs between two exports")
    return row


def test_determinism(names, out_dir):
    """Export twice into different dirs; all safetensors and fx.json must match."""
    fails = []
    for name in names:
        dirs = [os.path.join(out_dir, "det", s) for s in ("a", "b")]
        for d in dirs:
            export.export(name, ["fx"], d, state_dict=True)
        for suffix in (".safetensors", ".input.safetensors", ".expected.safetensors",
                       ".state.safetensors", ".fx.json"):
            a, b = (open(os.path.join(d, name + suffix), "rb").read() for d in dirs)
            if a != b:
                fails.append(f"{name}{suffix} differs between two exports")
    return fails


def test_st_io(out_dir):
    """Round trip of every supported dtype, odd shapes and metadata."""
    fails = []
    ts = {"f32": torch.randn(3, 5), "f64": torch.randn(2, dtype=torch.float64),
          "f16": torch.randn(7).half(), "bf16": torch.randn(3, 1).bfloat16(),
          "i64": torch.arange(5), "i32": torch.arange(3, dtype=torch.int32),
          "i16": torch.arange(4, dtype=torch.int16), "i8": torch.arange(-3, 3, dtype=torch.int8),
          "u8": torch.arange(9, dtype=torch.uint8), "bool": torch.tensor([True, False, True]),
          "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 4),
          "noncontig": torch.randn(4, 6).t()}
    path = os.path.join(out_dir, "st_io_roundtrip.safetensors")
    st_io.save(path, ts, {"hello": "world"})
    back = st_io.load(path)
    for k, t in ts.items():
        if k not in back or back[k].dtype != t.dtype or not torch.equal(back[k], t):
            fails.append(f"st_io round trip of {k}")
    if st_io.load_metadata(path) != {"hello": "world"}:
        fails.append("st_io metadata")
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    if n % 8 or list(header)[0] != "__metadata__" or list(header)[1:] != sorted(ts):
        fails.append("st_io header layout (padding / key order)")
    for k, info in header.items():
        if k != "__metadata__" and info["data_offsets"][0] % ts[k].element_size():
            fails.append(f"st_io: {k} is not aligned")
    return fails


def test_cli(out_dir):
    fails = []
    py = sys.executable
    r = subprocess.run([py, os.path.join(_REPO, "models", "export.py"), "--list"],
                       capture_output=True, text=True)
    if r.returncode != 0 or "gpt2_mini" not in r.stdout:
        fails.append(f"export.py --list failed: {r.stderr[-300:]}")
    d = os.path.join(out_dir, "cli")
    r = subprocess.run([py, os.path.join(_REPO, "models", "export.py"), "mlp", "--format", "trace",
                        "--format", "fx", "--out-dir", d], capture_output=True, text=True)
    for f in ("mlp.pt", "mlp.fx.json", "mlp.safetensors", "mlp.input.safetensors",
              "mlp.expected.safetensors"):
        if r.returncode != 0 or not os.path.exists(os.path.join(d, f)):
            fails.append(f"export.py CLI did not write {f}: {r.stderr[-300:]}")
            break
    return fails


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", required=True)
    p.add_argument("--quick", action="store_true", help="Kiln's own models plus two torchvision")
    p.add_argument("--models", default="", help="comma separated subset")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    os.makedirs(args.out_dir, exist_ok=True)
    names = [n for n in args.models.split(",") if n] or (QUICK if args.quick else zoo.NAMES)
    t_start = time.time()
    rows = []
    for name in names:
        rows.append(test_model(name, args.out_dir))
        r = rows[-1]
        print(f"  {name:24s} {'FAIL' if r['fail'] else 'ok  '} export {r['export_s']:5.2f}s "
              f"check {r['check_s']:5.2f}s", flush=True)
    extra = test_st_io(args.out_dir) + test_cli(args.out_dir)
    extra += test_determinism([n for n in DETERMINISM if n in names] or names[:1], args.out_dir)
    wall = time.time() - t_start

    out = io.StringIO()
    print(f"\n{'model':24s} {'mode':5s} {'inputs':34s} {'passed':22s} {'nodes':>5s} "
          f"{'export':>7s} {'check':>6s}", file=out)
    for r in rows:
        print(f"{r['name']:24s} {r['mode']:5s} {r['inputs']:34s} {','.join(r['ok']):22s} "
              f"{r['nodes']:>5s} {r['export_s']:6.2f}s {r['check_s']:5.2f}s", file=out)
    failures = [f"{r['name']}: {f}" for r in rows for f in r["fail"]] + extra
    for f in failures:
        print(f"FAIL {f}", file=out)
    print(f"\n{len(rows)} models, {len(failures)} failures, total wall time {wall:.1f}s", file=out)
    sys.stdout.write(out.getvalue())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
