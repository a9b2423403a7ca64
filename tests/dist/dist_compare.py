"""The comparison both data-parallel checks make (dp_parity.py against
single-process kiln, ddp_oracle.py against PyTorch DDP): every tensor of the
reference by max |got - want| / max |want|, and every logged loss."""

from typing import Dict, List, Optional, Tuple

import torch

from compare import rel_max


def compare_run(variant: str, got: Dict[str, torch.Tensor], want: Dict[str, torch.Tensor], got_losses: List[float],
                want_losses: List[float], tol: float, bad: List[str], reference: str) -> Tuple[float, str]:
    """Append a line to `bad` for each tensor of `want` that `got` lacks or
    misses by more than `tol` (relative), for a loss count that differs, and
    for each loss off by more than `tol`; a tensor only `got` holds is a
    failure too (BatchNorm's num_batches_tracked, which kiln does not keep,
    aside). Returns the worst tensor error and its name."""
    worst, where = 0.0, ""
    skip = lambda k: k.endswith("num_batches_tracked")  # noqa: E731
    extra = sorted(k for k in set(got) - set(want) if not skip(k))
    if extra:
        bad.append(f"{variant}: tensors {reference} lacks: {extra}")
    for k in sorted(want):
        if skip(k):
            continue
        if k not in got:
            bad.append(f"{variant}: kiln wrote no '{k}'")
            continue
        e = rel_max(got[k], want[k].to(got[k].dtype))
        if e > worst:
            worst, where = e, k
        if e > tol:
            bad.append(f"{variant}: {k}: relative error {e:.3g} > {tol:g}")
    if len(got_losses) != len(want_losses):
        bad.append(f"{variant}: {len(got_losses)} losses logged, {reference} {len(want_losses)}")
    for i, (x, y) in enumerate(zip(got_losses, want_losses)):
        if abs(x - y) > tol * max(abs(y), 1e-30):
            bad.append(f"{variant}: loss of step {i}: {x} vs {reference} {y}")
    return worst, where


def summary(name: str, nproc: int, variant: str, worst: float, where: str, tol: float, losses: List[float],
            seconds: float) -> str:
    """The line a passing or failing variant prints."""
    return (f"{name} --nproc {nproc} {variant}: worst relative error {worst:.3g} ({where}), tol {tol:g}, "
            f"losses {losses[0]:.6g} -> {losses[-1]:.6g} ({seconds:.1f} s)")


def finish(name: str, nproc: int, work_dir: str, bad: List[str], error: Optional[str] = None) -> int:
    """Print the failures (or the error that stopped the run) and tidy
    kiln's outputs (parity.tidy_outputs); the exit code: 2 error, 1 mismatch."""
    import parity
    if error is not None:
        print(f"{name} --nproc {nproc}: ERROR: {error}")
        return parity.tidy_outputs(work_dir, 2, False)
    for line in bad:
        print(f"{name} --nproc {nproc}: FAIL {line}")
    return parity.tidy_outputs(work_dir, 1 if bad else 0, False)
