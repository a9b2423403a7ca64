#!/usr/bin/python3
"""Data-parallel benchmark: 4 CPU ranks on loopback (Gloo), dense against
block-sparse allreduce of the embedding gradient, on a GPT-2-style model
with GPT-2's 50257-token vocabulary (zoo gpt2_cls50k: 25.7 MB of token
embedding, 1.6 MB of everything else).

    benchmarks/dp_bench.py [--kiln build/kiln] [--nproc 4] [--steps 30] [--out-dir DIR] [--no-torch]
                           [--tokens uniform|zipf]

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

Then it trains the same model, weights, batch slices and optimizer with
PyTorch DistributedDataParallel (Gloo, the same threads per rank), with
dense embedding gradients and, for SGD, nn.Embedding(sparse=True) (DDP
allreduces torch sparse gradients), and prints the ratios (--no-torch skips).

--tokens: the batch's token ids drawn uniformly from the vocabulary (the
default: the ranks' rows barely overlap, so the row exchange all-gathers),
or Zipf-distributed as in text (frequency ~ 1/rank^1.1, the most frequent
ids lowest, as in GPT-2's BPE vocabulary: the ranks share their frequent
tokens, and the row exchange may send them to their owners instead).

Writes results.json into --out-dir. docs/data-parallel.md's numbers come from here.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "models"))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))

MODEL = "gpt2_cls50k"
CONFIGS = {
    "comm-bound": {"batch": 16, "args": ["--optimizer", "sgd", "--lr", "0.01"]},
    "compute-bound": {"batch": 64, "args": ["--optimizer", "adamw", "--lr", "1e-3"]},
}


def zipf_tokens(batch_file: str, vocab: int = 50257, s: float = 1.1, seed: int = 0) -> None:
    """Redraw the batch's integer inputs (the token ids) from a Zipf law."""
    import st_io
    import torch
    tensors, meta = st_io.load(batch_file), st_io.load_metadata(batch_file)
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64) ** s
    g = torch.Generator().manual_seed(seed)
    for k, v in tensors.items():
        if k != "target" and not v.is_floating_point():
            tensors[k] = torch.multinomial(weights, v.numel(), replacement=True, generator=g).reshape(v.shape).to(v.dtype)
    st_io.save(batch_file, tensors, dict(meta, tokens=f"zipf {s}"))


def prepare(out_dir: str, batch: int, tokens: str = "uniform"):
    import export
    import make_batch
    import torch
    d = os.path.join(out_dir, f"b{batch}" + ("" if tokens == "uniform" else f"_{tokens}"))
    pt = os.path.join(d, MODEL + ".pt")
    data = os.path.join(d, "batch.safetensors")
    if not (os.path.exists(pt) and os.path.exists(data)):
        export.export(MODEL, ["trace"], d, train=True, no_dropout=True, dtype=torch.float32, batch=batch)
        make_batch.make_batch(MODEL, "cross_entropy", data, export_dir=d)
        if tokens == "zipf":
            zipf_tokens(data)
    return pt, data


def run(kiln, pt, data, nproc, steps, extra, report):
    cmd = [kiln, "train", pt, "--input-file", data, "--steps", str(steps), "--nproc", str(nproc),
           "--no-cache", "--report", report] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"dp_bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}")
    return json.load(open(report))


def ddp_rank(rank, world, port, pt, data, cfg, steps, sparse, out):
    """One PyTorch DDP rank (Gloo, as many threads as kiln's ranks get) on the
    same model, weights, batch slice and optimizer; rank 0 writes its step
    times (ms) to `out`. sparse: nn.Embedding(sparse=True), whose gradient
    DDP allreduces as a torch sparse tensor (SGD only)."""
    import losses
    import parity
    import reference as ref
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = parity.eager_model(MODEL, torch.float32)
    model.load_state_dict(torch.jit.load(pt, map_location="cpu").state_dict())
    model.train()
    if sparse:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding):
                m.sparse = True
    ddp = DDP(model)
    inputs, target = ref.load_batch(data)
    rows = inputs[0].shape[0] // world
    shard = slice(rank * rows, (rank + 1) * rows)
    inputs, target = [x[shard] for x in inputs], target[shard]
    opt_args = dict(zip(cfg["args"][::2], cfg["args"][1::2]))
    params = ddp.parameters()
    lr = float(opt_args["--lr"])
    opt = torch.optim.SGD(params, lr=lr) if opt_args["--optimizer"] == "sgd" else torch.optim.AdamW(params, lr=lr)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = losses.loss("cross_entropy", ddp(*inputs), target)
        loss.backward()
        opt.step()
        times.append(1e3 * (time.perf_counter() - t0))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def run_ddp(pt, data, cfg, nproc, steps, sparse, out, skip=2):
    """Mean and median step time of PyTorch DDP over the steps after `skip`."""
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_rank, args=(nproc, port, pt, data, cfg, steps, sparse, out), nprocs=nproc)
    times = json.load(open(out))[skip:]
    return {"step_ms": statistics.mean(times), "step_ms_median": statistics.median(times)}


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
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "bench", "dp"))
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch DDP runs")
    ap.add_argument("--tokens", choices=("uniform", "zipf"), default="uniform",
                    help="token ids drawn uniformly (little overlap between ranks) or Zipf-distributed as in text")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    results = {}
    for name, cfg in CONFIGS.items():
        pt, data = prepare(a.out_dir, cfg["batch"], a.tokens)
        r = {}
        for mode, extra in (("dense", ["--dense-embeddings"]), ("sparse", [])):
            rep = run(a.kiln, pt, data, a.nproc, a.steps, cfg["args"] + extra,
                      os.path.join(a.out_dir, f"{name}.{mode}.json"))
            r[mode] = summarize(rep)
        r["speedup"] = r["dense"]["step_ms"] / r["sparse"]["step_ms"]
        if not a.no_torch:
            r["torch_ddp"] = run_ddp(pt, data, cfg, a.nproc, a.steps, False, os.path.join(a.out_dir, f"{name}.ddp.json"))
            if cfg["args"][1] == "sgd":  # torch's sparse embedding gradients take SGD, not AdamW
                r["torch_ddp_sparse"] = run_ddp(pt, data, cfg, a.nproc, a.steps, True,
                                                os.path.join(a.out_dir, f"{name}.ddp_sparse.json"))
        results[name] = r
        print(f"{MODEL} {name} (batch {cfg['batch']}, {a.tokens} tokens, {a.nproc} ranks, {' '.join(cfg['args'])}):")
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
        for key, what in (("torch_ddp", "PyTorch DDP"), ("torch_ddp_sparse", "PyTorch DDP, nn.Embedding(sparse=True)")):
            if key in r:
                t = r[key]["step_ms"]
                print(f"  {what}: step {t:7.1f} ms (median {r[key]['step_ms_median']:.1f}); kiln sparse is "
                      f"{t / r['sparse']['step_ms']:.2f}x faster, kiln dense {t / r['dense']['step_ms']:.2f}x")
    with open(os.path.join(a.out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
