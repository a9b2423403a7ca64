#!/usr/bin/python3
"""Data-parallel benchmark: 4 CPU ranks on loopback (Gloo), dense against
block-sparse allreduce of the embedding gradient, on a GPT-2-style model
with GPT-2's 50257-token vocabulary (zoo gpt2_cls50k: 25.7 MB of token
embedding, 1.6 MB of everything else).

    benchmarks/dp_bench.py [--kiln build/kiln] [--nproc 4] [--steps 12] [--out-dir DIR]

For each configuration it runs `kiln train --nproc N --report` twice, with
the embedding gradient dense (--dense-embeddings) and block-sparse (the
default), and prints from rank 0's report, over the steps after the first
two: the mean step time, the embedding allreduce's bytes sent against its
non-zero-block fraction of the dense ring bytes, and the share of the
communication time hidden behind compute. Configurations:

  comm-bound     SGD (no momentum): the update is cheap, the 27 MB of
                 gradients on the wire dominate the step
  compute-bound  AdamW and a batch 4x larger: the update of 6.4M
                 parameters and the larger forward/backward dominate

Writes results.json into --out-dir. The README's numbers come from here.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "models"))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))

MODEL = "gpt2_cls50k"
CONFIGS = {
    "comm-bound": {"batch": 16, "args": ["--optimizer", "sgd", "--lr", "0.01"]},
    "compute-bound": {"batch": 64, "args": ["--optimizer", "adamw", "--lr", "1e-3"]},
}


def prepare(out_dir: str, batch: int):
    import export
    import make_batch
    import torch
    d = os.path.join(out_dir, f"b{batch}")
    pt = os.path.join(d, MODEL + ".pt")
    data = os.path.join(d, "batch.safetensors")
    if not (os.path.exists(pt) and os.path.exists(data)):
        export.export(MODEL, ["trace"], d, train=True, no_dropout=True, dtype=torch.float32, batch=batch)
        make_batch.make_batch(MODEL, "cross_entropy", data, export_dir=d)
    return pt, data


def run(kiln, pt, data, nproc, steps, extra, report):
    cmd = [kiln, "train", pt, "--input-file", data, "--steps", str(steps), "--nproc", str(nproc),
           "--no-cache", "--report", report] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"dp_bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}")
    return json.load(open(report))


def summarize(rep, skip=2):
    steps = rep["communication"]["steps"][skip:]
    emb = [c for s in steps for c in s["collectives"] if c.get("blocks") or c["dense_bytes"] > 20e6]
    out = {
        "step_ms": statistics.mean(s["step_ms"] for s in steps),
        "step_ms_median": statistics.median(s["step_ms"] for s in steps),
        "comm_ms": statistics.mean(s["comm_ms"] for s in steps),
        "exposed_ms": statistics.mean(s["exposed_ms"] for s in steps),
        "overlap": sum(s["comm_ms"] * s["overlap"] for s in steps) / max(sum(s["comm_ms"] for s in steps), 1e-9),
        "sent_bytes": statistics.mean(s["sent_bytes"] for s in steps),
    }
    if emb:
        e = emb[-1]
        ranks = rep["communication"]["ranks"]
        ring = 2 * (ranks - 1) / ranks * e["dense_bytes"]
        out["embedding"] = {"algorithm": e["algorithm"], "dense_bytes": e["dense_bytes"], "sent_bytes": e["sent_bytes"],
                            "ring_bytes": ring}
        if e.get("blocks"):
            out["embedding"]["nonzero_blocks_rank0"] = e["nonzero_blocks"]
            out["embedding"]["blocks"] = e["blocks"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "bench", "dp"))
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    results = {}
    for name, cfg in CONFIGS.items():
        pt, data = prepare(a.out_dir, cfg["batch"])
        r = {}
        for mode, extra in (("dense", ["--dense-embeddings"]), ("sparse", [])):
            rep = run(a.kiln, pt, data, a.nproc, a.steps, cfg["args"] + extra,
                      os.path.join(a.out_dir, f"{name}.{mode}.json"))
            r[mode] = summarize(rep)
        r["speedup"] = r["dense"]["step_ms"] / r["sparse"]["step_ms"]
        results[name] = r
        print(f"{MODEL} {name} (batch {cfg['batch']}, {a.nproc} ranks, {' '.join(cfg['args'])}):")
        for mode in ("dense", "sparse"):
            s = r[mode]
            line = (f"  {mode:6s} step {s['step_ms']:7.1f} ms (median {s['step_ms_median']:.1f}), comm "
                    f"{s['comm_ms']:6.1f} ms, exposed {s['exposed_ms']:6.1f} ms, hidden {100 * s['overlap']:3.0f}%, "
                    f"sent {s['sent_bytes'] / 1e6:6.2f} MB/step")
            e = s.get("embedding")
            if e and e.get("blocks"):
                frac = e["nonzero_blocks_rank0"] / e["blocks"]
                line += (f"; embedding: {e['algorithm']}, sent {e['sent_bytes'] / 1e3:.0f} KB = "
                         f"{e['sent_bytes'] / e['ring_bytes']:.4f} of the ring's {e['ring_bytes'] / 1e6:.1f} MB "
                         f"(rank 0's non-zero blocks {100 * frac:.2f}%)")
            print(line)
        print(f"  sparse vs dense step time: {r['speedup']:.2f}x")
    with open(os.path.join(a.out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
