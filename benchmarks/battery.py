#!/usr/bin/env python3
"""The realistic-size benchmark battery: Kiln against the best a PyTorch user
runs on this CPU, at the sizes people train.

For each model (ResNet-50 at 224x224, ViT-B/16, a ~40M-parameter GPT-2-style
decoder, a LLaMA-style decoder, a BERT-base-width encoder, a diffusion-style
UNet; AdamW, dropout at p=0 so both sides compute the same function):

  * fp32: `kiln bench --compare torch` -- Kiln's compiled step and libtorch's
    eager step (same TorchScript module, weights, batches, loss, optimizer,
    threads), alternating step by step in one process;
  * bf16: the same with `--amp bf16` on both sides: Kiln's mixed precision
    against libtorch eager under torch.autocast("cpu", torch.bfloat16);
  * FLOPs per step, counted from the aten ops PyTorch executes
    (benchmarks/flop_count.py), not from Kiln's cost model;
  * the machine's GEMM rate in each precision (torch.mm at 2048^2, fp32 and
    bf16, best of several runs at the start and the end of this run), and
    each step's share of it: step FLOPs / step time / GEMM rate.

    /usr/bin/python3 benchmarks/battery.py --kiln build/kiln --out-dir build/battery \\
        [--models resnet50,gpt2_40m] [--precisions fp32,bf16] [--steps 5] [--warmup 2]

Writes OUT_DIR/battery.json (everything, including each bench's JSON) and
OUT_DIR/battery.md (the table docs/benchmarks.md shows), and prints the
table. Exports go to OUT_DIR/models and are reused by later runs.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flop_count  # noqa: E402
import zoo  # noqa: E402
from cpu_zoo import export  # noqa: E402  (train-mode trace, dropout at p = 0)

# name -> (zoo model, loss, what it is)
MODELS = {
    "resnet50": ("bat_resnet50", "cross_entropy", "ResNet-50, batch 8, 224x224"),
    "vit_b16": ("bat_vit_b16", "cross_entropy", "ViT-B/16, batch 4, 224x224"),
    "gpt2_40m": ("bat_gpt2_40m", "cross_entropy", "GPT-2-style decoder, d 512, 8 layers, vocab 32000, batch 4 x 256"),
    "llama": ("bat_llama", "cross_entropy",
              "LLaMA-style decoder (RMSNorm, rotary, GQA 8/4 heads, SwiGLU 1376), d 512, 8 layers, vocab 32000, batch 4 x 256"),
    "bert_base6": ("bat_bert_base6", "cross_entropy", "BERT-base-width encoder, 6 layers, batch 8 x 128"),
    "unet": ("bat_unet", "mse", "diffusion-style UNet (GroupNorm, SiLU, skips, attention), batch 8, 64x64"),
}


def gemm_rate(dtype: torch.dtype, n: int = 2048, reps: int = 8, rounds: int = 3) -> float:
    """Best FLOP/s of torch.mm on n x n matrices over `rounds` timed runs."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    for _ in range(2):
        torch.mm(a, b)
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        dt = (time.perf_counter() - t0) / reps
        best = max(best, 2.0 * n ** 3 / dt)
    return best


def loss_fn(kind: str, target: torch.Tensor):
    def ce(out):
        if out.dim() == 3:  # language model: [N, T, V] against [N, T]
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        return F.cross_entropy(out, target)

    def mse(out):
        return F.mse_loss(out, target)

    return ce if kind == "cross_entropy" else mse


def count_flops(zoo_name: str, loss: str) -> dict:
    model, inputs = zoo.build(zoo_name, train=True, no_dropout=True)
    with torch.no_grad():
        out = model(*inputs)
    if loss == "mse":
        target = torch.randn(out.shape)
    elif out.dim() == 3:
        target = torch.randint(0, out.shape[-1], out.shape[:-1])
    else:
        target = torch.randint(0, out.shape[-1], out.shape[:1])
    params = sum(p.numel() for p in model.parameters())
    res = flop_count.step_flops(model, inputs, loss_fn(loss, target))
    res["params"] = params
    return res


def bench(args, pt: str, loss: str, precision: str, js: str) -> dict:
    cmd = [args.kiln, "bench", pt, "--compare", "torch", "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--optimizer", "adamw", "--loss", loss, "--json", js]
    if precision == "bf16":
        cmd += ["--amp", "bf16"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        return {"error": last}
    with open(js) as f:
        return json.load(f)


def fmt_ms(v):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0f}"


def fmt_x(v):
    return "–" if v is None else f"{v:.2f}x"


def fmt_pct(v):
    return "–" if v is None else f"{100 * v:.0f}%"


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(result: dict) -> str:
    rates = result["gemm_rate"]
    lines = [
        f"GEMM rate (torch.mm 2048^2, best of the run): fp32 {rates['fp32'] / 1e9:.0f} GFLOP/s, "
        f"bf16 {rates['bf16'] / 1e9:.0f} GFLOP/s; {result['threads']} threads; {result['steps']} measured steps "
        f"after {result['warmup']} warm-up, medians.",
        "",
        "| model | GFLOP/step | eager fp32 ms | Kiln fp32 ms | Kiln vs eager | autocast bf16 ms | Kiln bf16 ms "
        "| Kiln vs autocast | Kiln bf16 vs fp32 | GEMM share eager / Kiln fp32 | GEMM share autocast / Kiln bf16 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fp32_x, bf16_x, lowp_x = [], [], []
    for name, row in result["models"].items():
        flops = row["flops"]["total"]
        cells = {}
        for prec in ("fp32", "bf16"):
            b = row.get(prec) or {}
            if "kiln" in b:
                k, t = b["kiln"]["median_ms"], b["torch"]["median_ms"]
                rate = rates[prec]
                cells[prec] = (t, k, t / k, flops / (t / 1e3) / rate, flops / (k / 1e3) / rate)
        f = cells.get("fp32")
        h = cells.get("bf16")
        if f:
            fp32_x.append(f[2])
        if h:
            bf16_x.append(h[2])
        lowp = f[1] / h[1] if f and h else None
        if lowp:
            lowp_x.append(lowp)
        lines.append(
            f"| {MODELS[name][2]} | {flops / 1e9:.0f} | {fmt_ms(f and f[0])} | {fmt_ms(f and f[1])} | "
            f"{fmt_x(f and f[2])} | {fmt_ms(h and h[0])} | {fmt_ms(h and h[1])} | {fmt_x(h and h[2])} | "
            f"{fmt_x(lowp)} | {fmt_pct(f and f[3])} / {fmt_pct(f and f[4])} | "
            f"{fmt_pct(h and h[3])} / {fmt_pct(h and h[4])} |")
    lines += ["", f"Geometric means: Kiln fp32 vs eager fp32 {fmt_x(geomean(fp32_x))}; Kiln bf16 vs autocast bf16 "
              f"{fmt_x(geomean(bf16_x))}; Kiln bf16 vs Kiln fp32 {fmt_x(geomean(lowp_x))}."]
    errors = [(n, p, row[p]["error"]) for n, row in result["models"].items() for p in ("fp32", "bf16")
              if isinstance(row.get(p), dict) and "error" in row[p]]
    for n, p, e in errors:
        lines.append(f"- {n} {p}: {e}")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="threads for both sides (default: all cores)")
    args = p.parse_args()

    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; known: {', '.join(MODELS)}")
    precisions = [x for x in args.precisions.split(",") if x]
    os.makedirs(os.path.join(args.out_dir, "models"), exist_ok=True)
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)

    print("measuring the GEMM rate (torch.mm 2048^2) ...", flush=True)
    rates = {"fp32": gemm_rate(torch.float32), "bf16": gemm_rate(torch.bfloat16)}
    result = {"schema": "kiln-battery", "version": 1, "threads": threads, "steps": args.steps, "warmup": args.warmup,
              "torch": torch.__version__, "models": {}}
    flops_cache_path = os.path.join(args.out_dir, "flops.json")
    flops_cache = json.load(open(flops_cache_path)) if os.path.exists(flops_cache_path) else {}
    for m in models:
        zoo_name, loss, desc = MODELS[m]
        print(f"{m}: {desc}", flush=True)
        pt = export(zoo_name, os.path.join(args.out_dir, "models"), 0)  # 0: the zoo entry's batch
        if zoo_name not in flops_cache:
            flops_cache[zoo_name] = count_flops(zoo_name, loss)
            with open(flops_cache_path, "w") as f:
                json.dump(flops_cache, f, indent=1)
        row = {"zoo": zoo_name, "loss": loss, "flops": flops_cache[zoo_name]}
        for prec in precisions:
            t0 = time.time()
            row[prec] = bench(args, pt, loss, prec, os.path.join(args.out_dir, f"{m}.{prec}.json"))
            b = row[prec]
            if "error" in b:
                print(f"  {prec}: FAILED: {b['error']}", flush=True)
            else:
                print(f"  {prec}: kiln {b['kiln']['median_ms']:.0f} ms, torch {b['torch']['median_ms']:.0f} ms, "
                      f"{b['speedup']:.2f}x ({time.time() - t0:.0f} s)", flush=True)
        result["models"][m] = row
    # The GEMM rate again at the end; the best of both is the roof.
    rates_end = {"fp32": gemm_rate(torch.float32), "bf16": gemm_rate(torch.bfloat16)}
    result["gemm_rate_start"], result["gemm_rate_end"] = rates, rates_end
    result["gemm_rate"] = {k: max(rates[k], rates_end[k]) for k in rates}
    md = table(result)
    with open(os.path.join(args.out_dir, "battery.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out_dir, "battery.md"), "w") as f:
        f.write(md)
    print()
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
