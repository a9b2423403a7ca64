"""A learnable generated task for the demo: next-token prediction on
sequences that follow a fixed hidden rule: token i+1 = perm[token i] for a
random permutation `perm` of the vocabulary, from random starting tokens.

    task.py make --out tokens.bin [--tokens N] [--vocab V]
        writes a flat little-endian u16 token file (kiln train --data) made of
        independent sequences of 64 tokens, each from a random start;
    task.py eval --weights W.safetensors [--model gpt2_mini]
        loads Kiln's trained weights into the PyTorch model with
        load_state_dict and measures next-token accuracy on fresh sequences:
        the check that Kiln's output is a normal PyTorch state_dict.

A model that has learned the rule predicts every next token (a window that
crosses into the next sequence has one unpredictable target); chance is
1/vocab."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SEQ = 64


def sequences(count: int, vocab: int, seed: int) -> torch.Tensor:
    perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))  # the hidden rule
    g = torch.Generator().manual_seed(seed)
    seq = torch.zeros(count, SEQ, dtype=torch.long)
    seq[:, 0] = torch.randint(0, vocab, (count,), generator=g)
    for i in range(1, SEQ):
        seq[:, i] = perm[seq[:, i - 1]]
    return seq


def make(args) -> None:
    seq = sequences(args.tokens // SEQ, args.vocab, seed=1).flatten()
    with open(args.out, "wb") as f:
        f.write(seq.to(torch.int32).numpy().astype("<u2").tobytes())
    print(f"wrote {seq.numel()} tokens ({seq.numel() // SEQ} sequences of {SEQ}) to {args.out}")


def evaluate(args) -> None:
    import zoo
    from st_io import load
    model, (example,) = zoo.build(args.model)
    model.load_state_dict(load(args.weights), strict=True)
    model.eval()
    window = example.shape[1]
    seq = sequences(256, args.vocab, seed=2)  # unseen starting pairs
    x = seq[:, :window]
    y = seq[:, 1:window + 1]
    with torch.no_grad():
        pred = model(x).argmax(-1)
    acc = (pred == y).float().mean().item()
    print(f"PyTorch, with Kiln's trained weights loaded by load_state_dict: next-token accuracy "
          f"{acc:.3f} on 256 unseen sequences (chance {1 / args.vocab:.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--tokens", type=int, default=1 << 18)
    m.add_argument("--vocab", type=int, default=128)
    e = sub.add_parser("eval")
    e.add_argument("--weights", required=True)
    e.add_argument("--model", default="gpt2_mini")
    e.add_argument("--vocab", type=int, default=128)
    args = p.parse_args()
    make(args) if args.cmd == "make" else evaluate(args)


if __name__ == "__main__":
    main()
