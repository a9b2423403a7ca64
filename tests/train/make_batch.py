#!/usr/bin/python3
"""Write a training batch for a zoo model: BATCH.safetensors with input0,
input1, ... (the zoo's example inputs, in forward-argument order) and, for
cross_entropy and mse, `target` (random with a fixed seed, see
losses.make_target for the layout).

    make_batch.py NAME --loss cross_entropy|mse|l1|smooth_l1|huber|bce|model --out BATCH.safetensors
                  [--from-export DIR] [--seed S]

--from-export DIR reuses what models/export.py wrote there
(NAME.input.safetensors, and NAME.expected.safetensors for the output's
shape) instead of building the model and running its forward.
"""

import argparse
import os
import sys
from typing import Dict, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import losses  # noqa: E402
import st_io  # noqa: E402
import zoo  # noqa: E402


def _from_export(name: str, export_dir: str):
    prefix = os.path.join(export_dir, name)
    inputs = st_io.load(prefix + ".input.safetensors")
    pred = st_io.load(prefix + ".expected.safetensors")["output0"]
    return inputs, pred


def _from_zoo(name: str):
    model, ins = zoo.build(name, train=True, no_dropout=True)
    with torch.enable_grad():  # the ordinary (training) kernels, as exported
        pred = losses.prediction(model(*ins)).detach()
    return {f"input{i}": x for i, x in enumerate(ins)}, pred


def make_batch(name: str, loss: str, out: str, export_dir: Optional[str] = None,
               seed: int = 0) -> Dict[str, torch.Tensor]:
    """Write the batch for model `name` and loss kind `loss` to `out`; returns it."""
    inputs, pred = _from_export(name, export_dir) if export_dir else _from_zoo(name)
    batch = dict(inputs)
    target = losses.make_target(loss, pred, seed)
    if target is not None:
        batch["target"] = target
    st_io.save(out, batch, {"model": name, "loss": loss, "seed": str(seed)})
    return batch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=zoo.NAMES, metavar="NAME")
    p.add_argument("--loss", choices=losses.KINDS, default="cross_entropy")
    p.add_argument("--out", required=True)
    p.add_argument("--from-export", metavar="DIR")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    b = make_batch(args.name, args.loss, args.out, args.from_export, args.seed)
    print(", ".join(f"{k} {str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in b.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
