"""The comparison both data-parallel checks make (dp_parity.py against
single-process kiln, ddp_oracle.py against PyTorch DDP): every tensor of the
reference by max |got - want| / max |want|, and every logged loss. A tensor
the reference left at rounding noise (max |want| below NOISE_FLOOR: a
convolution bias in front of BatchNorm, whose gradient is zero in exact
arithmetic) must be noise in kiln too; its relative error means nothing."""

from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from compare import rel_max


# Trained weights of O(1) never come this close to zero:
# below it a tensor of the reference is rounding noise.
NOISE_FLOOR = {torch.float64: 1e-12, torch.float32: 1e-6}


def at_noise(t: torch.Tensor) -> bool:
    """Whether a reference tensor is rounding noise (see NOISE_FLOOR)."""
    floor = NOISE_FLOOR.get(t.dtype)
    return floor is not None and t.numel() > 0 and t.abs().max().item() <= floor


class Noise(NamedTuple):
    """The reference trained a second way (other kernels, other rounding):
    each tensor and loss may be off by k x the two references' difference."""
    tensors: Dict[str, torch.Tensor]
    losses: List[float]
    k: float

    def allowed(self, key: str, want: torch.Tensor, tol: float) -> float:
        if key not in self.tensors:
            return tol
        return max(tol, self.k * rel_max(self.tensors[key].to(want.dtype), want))

    def worst(self, want: Dict[str, torch.Tensor]) -> float:
        """The largest difference of the two references, over the tensors
        not left at rounding noise."""
        return max((rel_max(self.tensors[k].to(v.dtype), v) for k, v in want.items()
                    if k in self.tensors and not at_noise(v)), default=0.0)


def compare_run(variant: str, got: Dict[str, torch.Tensor], want: Dict[str, torch.Tensor], got_losses: List[float],
                want_losses: List[float], tol: float, bad: List[str], reference: str,
                noise: Optional[Noise] = None) -> Tuple[float, str]:
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
        if at_noise(want[k]):
            floor = NOISE_FLOOR[want[k].dtype]
            # Left at rounding noise by the reference (a convolution bias in
            # front of BatchNorm: its gradient is exactly zero in exact
            # arithmetic): its relative error says nothing; both must be
            # zero up to rounding.
            if got[k].abs().max().item() > floor:
                bad.append(f"{variant}: {k}: {reference} left it at rounding noise (<= {floor:g}), kiln moved it to "
                           f"{got[k].abs().max().item():.3g}")
            continue
        e = rel_max(got[k], want[k].to(got[k].dtype))
        if e > worst:
            worst, where = e, k
        allowed = noise.allowed(k, want[k], tol) if noise else tol
        if e > allowed:
            bad.append(f"{variant}: {k}: relative error {e:.3g} > {allowed:g}")
    if len(got_losses) != len(want_losses):
        bad.append(f"{variant}: {len(got_losses)} losses logged, {reference} {len(want_losses)}")
    for i, (x, y) in enumerate(zip(got_losses, want_losses)):
        allowed = tol * max(abs(y), 1e-30)
        if noise and i < len(noise.losses):
            allowed = max(allowed, noise.k * abs(noise.losses[i] - y))
        if abs(x - y) > allowed:
            bad.append(f"{variant}: loss of step {i}: {x} vs {reference} {y}")
    return worst, where


def summary(name: str, nproc: int, variant: str, worst: float, where: str, tol: float, losses: List[float],
            seconds: float, noise: Optional[Noise] = None, want: Optional[Dict[str, torch.Tensor]] = None) -> str:
    """The line a passing or failing variant prints."""
    own = f" (the reference against itself: {noise.worst(want):.3g})" if noise and want else ""
    return (f"{name} --nproc {nproc} {variant}: worst relative error {worst:.3g} ({where}), tol {tol:g}{own}, "
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
