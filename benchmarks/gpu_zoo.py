#!/usr/bin/env python3
"""Kiln vs PyTorch eager and torch.compile, training step on one GPU, bf16 AMP.

For each model: export it as a train-mode TorchScript trace, time
`kiln bench MODEL --device cuda --amp bf16` (Kiln's compiled step; the loss
read back each step), then PyTorch's eager step and `torch.compile(model)`
(default mode) on the same architecture, batch, loss (cross-entropy),
optimizer (AdamW, fused=False as torch.optim's default) and autocast(bf16),
in the same process run, timed with CUDA events after warm-up. Also the
compile time of Kiln's step cold (empty cache) and from the cache, and the
model-flops utilization of each side (Kiln's graph flops per step over the
time, against the GPU's dense bf16 peak given by --peak-tflops).

    python3 benchmarks/gpu_zoo.py --kiln build-gpu/kiln --out-dir OUT \\
        [--models gpt2_small,tv_resnet50] [--batch N] [--steps 20] [--warmup 5] [--peak-tflops 989]
        [--profile N]

With --profile N, Kiln's bench also times each node on the device (up to 3
extra steps enqueued node by node with CUDA events) and prints its N most
expensive kernels: OUT/MODEL.kiln_bench.txt, and "profile" in MODEL.gpu.json.

Writes OUT/gpu_zoo.md (docs/cuda.md's table) and one JSON per model. With
--smoke it runs the plumbing on the CPU with a small model (no GPU numbers).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import torch  # noqa: E402
import zoo  # noqa: E402

BATCH = {"gpt2_small": 8, "tv_resnet50": 64}


def export(model, out_dir, batch, fmt):
    path = os.path.join(out_dir, f"{model}.pt" if fmt == "trace" else f"{model}.fx.json")
    if not os.path.exists(path):
        cmd = [sys.executable, os.path.join(HERE, "..", "models", "export.py"), model, "--format", fmt,
               "--train", "--no-dropout", "--out-dir", out_dir, "--batch", str(batch)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return path


def kiln_side(kiln, pt, device, amp, steps, warmup, out_dir, name, profile=0):
    """kiln bench on the model, then kiln compile cold and cached."""
    js = os.path.join(out_dir, f"{name}.kiln.json")
    cache = tempfile.mkdtemp(prefix="kiln-cache-")
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    times = []
    for label in ("cold", "cached"):
        rep = os.path.join(out_dir, f"{name}.compile_{label}.json")
        cmd = [kiln, "compile", pt, "--device", device, "--report", rep] + (["--amp", amp] if amp else [])
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"kiln compile failed: {r.stderr.strip()[-400:]}")
        times.append((time.time() - t0) * 1e3)
        report = json.load(open(rep))
    cmd = [kiln, "bench", pt, "--device", device, "--steps", str(steps), "--warmup", str(warmup), "--json", js,
           "--optimizer", "adamw"] + (["--amp", amp] if amp else [])
    r = subprocess.run(cmd + (["--profile", str(profile)] if profile else []), capture_output=True, text=True, env=env)
    with open(os.path.join(out_dir, f"{name}.kiln_bench.txt"), "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0 and profile:  # the profile must not cost the measurement
        print(f"gpu_zoo: kiln bench --profile failed ({r.stderr.strip()[-300:]}); again without", file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"kiln bench failed: {r.stderr.strip()[-400:]}")
    j = json.load(open(js))
    out = {"median_ms": j["kiln"]["median_ms"], "compile_cold_ms": times[0], "compile_cached_ms": times[1],
           "compile_cold_report_ms": report["compile"]["millis"], "flops": float(report["graph"]["flops"]),
           "graph_nodes": j.get("graph_nodes")}
    if "profile" in j:
        out["profile"] = j["profile"]
    return out


def torch_side(name, batch, device, amp, steps, warmup, compiled):
    model, inputs = zoo.build(name, train=True, no_dropout=True, batch=batch)
    model = model.to(device)
    inputs = [x.to(device) for x in inputs]
    with torch.no_grad():
        out = model(*inputs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    classes = out.shape[-1]
    target = torch.randint(0, classes, out.shape[:-1], device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fwd = torch.compile(model) if compiled else model
    dtype = torch.bfloat16 if amp == "bf16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            o = fwd(*inputs)
            o = o[0] if isinstance(o, (tuple, list)) else o
            loss = torch.nn.functional.cross_entropy(o.reshape(-1, classes).float(), target.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    t0 = time.time()
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    warm_s = time.time() - t0
    ms = []
    for _ in range(steps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            loss = step()
            loss.item()  # as Kiln's side: the loss is read each step
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            step().item()
            ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    return {"median_ms": ms[len(ms) // 2], "warmup_s": warm_s}


def measured_gemm_tflops(n=8192, reps=20):
    """The GPU's bf16 matrix rate as this run finds it (random data, CUDA events, median)."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    ms = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    return 2 * n ** 3 / (ms[len(ms) // 2] * 1e-3) / 1e12


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--models", default="gpt2_small,tv_resnet50")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100 SXM: 989)")
    p.add_argument("--format", choices=("trace", "fx"), default="trace",
                   help="how Kiln reads the model: a TorchScript trace (needs the libtorch plugin) or an FX dump")
    p.add_argument("--sides", default="kiln,eager,compiled",
                   help="which steps to time: kiln, eager, compiled (torch.compile takes 30-45 s per model to compile)")
    p.add_argument("--profile", type=int, default=0,
                   help="also profile Kiln's step per node and keep its N most expensive kernels")
    p.add_argument("--smoke", action="store_true", help="CPU, fp32, the mlp model: check the plumbing")
    args = p.parse_args()
    device, amp = ("cpu", "") if args.smoke else ("cuda", "bf16")
    models = ["mlp"] if args.smoke else [m for m in args.models.split(",") if m]
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_zoo: no CUDA device (use --smoke to check the script on the CPU)", file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    gemm = measured_gemm_tflops() if device == "cuda" else float("nan")
    print(f"measured bf16 GEMM rate (8192^3, torch.mm): {gemm:.0f} TFLOP/s", file=sys.stderr)
    rows = []
    for m in models:
        batch = args.batch or BATCH.get(m, 0) or None
        pt = export(m, os.path.join(args.out_dir, "models"), batch or 2, args.format)
        row = {"model": m, "batch": batch}
        try:
            row["kiln"] = kiln_side(args.kiln, pt, device, amp, args.steps, args.warmup, args.out_dir, m, args.profile)
        except RuntimeError as e:
            row["kiln_error"] = str(e)
        for side, compiled in (("eager", False), ("compiled", True)):
            if (compiled and args.smoke) or side not in args.sides.split(","):
                row[side] = {"median_ms": float("nan"), "error": "not measured (--sides)"}
                continue
            try:
                row[side] = torch_side(m, batch or 2, device, amp, args.steps, args.warmup, compiled=compiled)
            except Exception as e:  # a torch.compile failure must not lose Kiln's numbers
                row[side] = {"median_ms": float("nan"), "error": f"{type(e).__name__}: {str(e)[:300]}"}
        json.dump(row, open(os.path.join(args.out_dir, f"{m}.gpu.json"), "w"), indent=2)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    lines = [f"measured bf16 GEMM rate: {gemm:.0f} TFLOP/s (torch.mm 8192^3); datasheet peak {args.peak_tflops:.0f}", "",
             "| model | batch | Kiln ms | eager ms | torch.compile ms | vs eager | vs compile | Kiln MFU | "
             "share of measured GEMM | compile cold / cached |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        k = r.get("kiln")
        if not k:
            lines.append(f"| `{r['model']}` | {r['batch']} | failed: {r['kiln_error'][:80]} | "
                         f"{r['eager']['median_ms']:.2f} | | | | | | |")
            continue
        comp = r.get("compiled", {}).get("median_ms", float("nan"))
        mfu = k["flops"] / (k["median_ms"] * 1e-3) / (args.peak_tflops * 1e12)
        lines.append(f"| `{r['model']}` | {r['batch']} | {k['median_ms']:.2f} | {r['eager']['median_ms']:.2f} | "
                     f"{comp:.2f} | {r['eager']['median_ms'] / k['median_ms']:.2f}x | "
                     f"{comp / k['median_ms']:.2f}x | {100 * mfu:.1f}% | "
                     f"{100 * k['flops'] / (k['median_ms'] * 1e-3) / (gemm * 1e12):.1f}% | "
                     f"{k['compile_cold_ms']:.0f} / {k['compile_cached_ms']:.0f} ms |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out_dir, "gpu_zoo.md"), "w").write(text)
    print(text)
    return 0 if all("kiln" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
