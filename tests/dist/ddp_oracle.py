#!/usr/bin/python3
"""`kiln train --nproc N` against PyTorch DistributedDataParallel, on a model
with BatchNorm.

    ddp_oracle.py NAME --kiln PATH/TO/kiln --nproc N --work-dir DIR [--cache-dir DIR]
                  [--batch B] [--steps 5] [--variants a,b,...] [--noise]

With BatchNorm, N ranks are not one process on the whole batch: each rank
normalizes with its own shard's statistics, and DDP (broadcast_buffers)
hands every rank rank 0's running statistics. So the oracle is PyTorch's
own data parallel: N processes (torch.distributed, Gloo, on loopback) each
train the zoo module, wrapped in DistributedDataParallel, on its contiguous
1/N of the same batch, from the exported weights, with torch.optim. Rank
0's state_dict after --steps steps (parameters and BatchNorm buffers) and
the mean of the ranks' losses must match `kiln train --nproc N`:

  f64_sgd     float64, SGD with momentum             tol 1e-9
  f64_adamw   float64, AdamW, --bucket-size 1KiB     tol 1e-9
  f64_zero    float64, SGD with momentum, --zero 1   tol 1e-9

Float64 only: these are the semantics checks (measured 1e-15 and, for
AdamW, 1e-10 on a convolution bias in front of BatchNorm, whose gradient is
zero up to rounding). In float32, BatchNorm on shards of 2 rows amplifies
the summation-order rounding of kiln's kernels against PyTorch's to 1e-3
after 5 steps (resnet_mini, 4 ranks) while float64 agrees to 3e-15; the
float32 data-parallel path is checked against kiln's own single-process
training in dp_parity.py instead.

With --noise, DDP also trains with channels-last kernels, and each tensor
and loss may be off by up to 10x PyTorch's own difference between the two
(at least the tolerance): for networks ill-conditioned enough that rounding
grows step by step (tests/train/parity.py's ILL_CONDITIONED), where PyTorch
does not reproduce itself to 1e-9 either; the line printed says how far.

Exits 1 on a mismatch, 2 when something could not run.
"""

import argparse
import datetime
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import losses  # noqa: E402
import parity  # noqa: E402
import reference as ref  # noqa: E402
import st_io  # noqa: E402
from dist_compare import Noise, compare_run, finish, summary  # noqa: E402

SGD = ref.OptConfig(optimizer="sgd", lr=0.05, momentum=0.9)
NOISE_K = 10  # --noise: allowed multiple of PyTorch's channels-last vs contiguous difference
ADAMW = ref.OptConfig(optimizer="adamw", lr=1e-3)
VARIANTS = {  # name: (dtype, optimizer, kiln's data-parallel args, tolerance)
    "f64_sgd": ("float64", SGD, [], 1e-9),
    "f64_adamw": ("float64", ADAMW, ["--bucket-size", "1KiB"], 1e-9),
    "f64_zero": ("float64", SGD, ["--zero", "1"], 1e-9),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_rank(rank, world, port, name, dtype, pt, batch, loss_kind, cfg, steps, out, channels_last=False):
    """One DDP rank; rank 0 saves the state_dict and the mean losses to `out`.
    channels_last: the same training with PyTorch's channels-last kernels
    (other summation orders), for --noise."""
    torch.set_num_threads(1)
    # A bounded wait: if another test took the port between free_port() and
    # here, fail in a minute instead of hanging until ctest's timeout.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    model = parity.eager_model(name, getattr(torch, dtype))
    # The weights kiln trains. The traced module's state_dict has no version
    # metadata, which MNASNet would read as its old layout: keep the zoo
    # module's own.
    state = torch.jit.load(pt, map_location="cpu").state_dict()
    state._metadata = model.state_dict()._metadata
    model.load_state_dict(state)
    model.train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = DDP(model)  # broadcast_buffers=True, as kiln's data_parallel pass
    inputs, target = ref.load_batch(batch, getattr(torch, dtype))
    rows = inputs[0].shape[0] // world
    shard = slice(rank * rows, (rank + 1) * rows)
    inputs = [x[shard] for x in inputs]
    if channels_last:
        inputs = [x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs]
    target = target[shard] if target is not None else None
    opt = ref.make_optimizer(ddp.parameters(), cfg)
    mean_losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = losses.loss(loss_kind, ddp(*inputs), target)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean_losses.append(float(mean) / world)
    if rank == 0:
        st_io.save(out + ".safetensors", ref.state_dict(model))
        with open(out + ".losses.json", "w") as f:
            json.dump(mean_losses, f)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cache-dir")
    ap.add_argument("--batch", type=int, default=0,
                    help="batch size, split over the ranks (default: 2 x nproc, 2 rows a rank)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--noise", action="store_true",
                    help=f"also train DDP with channels-last kernels and allow each tensor and loss {NOISE_K}x "
                         "PyTorch's own difference between the two (ill-conditioned networks)")
    a = ap.parse_args(argv)
    if a.batch and a.batch % a.nproc:
        ap.error(f"--batch {a.batch} does not split over {a.nproc} ranks")
    os.makedirs(a.work_dir, exist_ok=True)
    loss = "cross_entropy"
    bad = []
    # A DDP oracle depends only on the dtype, the optimizer and its kernels:
    # variants that differ only in kiln's data-parallel options (--zero)
    # share one run. Returns the output prefix of the (dtype, cfg) oracle.
    oracles = {}

    def oracle(variant, dtype, cfg, pt, data, channels_last=False):
        key = (dtype, tuple(cfg.cli_args()), channels_last)
        if key not in oracles:
            oracles[key] = os.path.join(a.work_dir, f"{variant}.ddp{'_cl' if channels_last else ''}")
            mp.start_processes(ddp_rank, nprocs=a.nproc, start_method="spawn",
                               args=(a.nproc, free_port(), a.name, dtype, pt, data, loss, cfg, a.steps, oracles[key],
                                     channels_last))
        return oracles[key]

    try:
        for variant in a.variants.split(","):
            if variant not in VARIANTS:
                raise parity.Failure(f"unknown variant {variant} (choose from {', '.join(VARIANTS)})")
            dtype, cfg, dp, tol = VARIANTS[variant]
            t0 = time.time()
            pt, data = parity.prepare(a.name, loss, a.cache_dir or a.work_dir, dtype, batch_size=a.batch or 2 * a.nproc)
            ddp_out = oracle(variant, dtype, cfg, pt, data)
            want = st_io.load(ddp_out + ".safetensors")
            with open(ddp_out + ".losses.json") as f:
                want_losses = json.load(f)
            w = os.path.join(a.work_dir, f"{variant}.kiln.safetensors")
            log = os.path.join(a.work_dir, f"{variant}.kiln.jsonl")
            parity.run_kiln(a.kiln, ["train", pt, "--input-file", data, "--loss", loss, "--steps", str(a.steps),
                                     "--no-cache", "--nproc", str(a.nproc), "--save-weights", w, "--log-file", log]
                            + cfg.cli_args() + dp)
            got, got_losses = st_io.load(w), ref.read_log(log)
            noise = None
            if a.noise:
                cl_out = oracle(variant, dtype, cfg, pt, data, channels_last=True)
                with open(cl_out + ".losses.json") as f:
                    noise = Noise(st_io.load(cl_out + ".safetensors"), json.load(f), NOISE_K)
            worst, where = compare_run(variant, got, want, got_losses, want_losses, tol, bad, "DDP", noise)
            print(summary(a.name, a.nproc, variant + " vs DDP", worst, where, tol, want_losses, time.time() - t0,
                          noise, want))
    except parity.Failure as e:
        return finish(a.name, a.nproc, a.work_dir, bad, str(e))
    return finish(a.name, a.nproc, a.work_dir, bad)


if __name__ == "__main__":
    sys.exit(main())
