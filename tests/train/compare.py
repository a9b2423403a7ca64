"""How parity.py judges Kiln's numbers against PyTorch's.

Per tensor, the measure is the repository's parity measure

    err = max|kiln - torch| / max|torch|          (torch: PyTorch, float32)

and a tensor passes if err <= tol -- unless PyTorch's own float32 result is
itself that uncertain. That happens in ordinary models:

  * gradients that are mathematically zero: a conv bias followed by a
    train-mode BatchNorm, the key bias of attention (softmax is shift
    invariant), a residual stream that only feeds conv + BatchNorm. float32
    gives rounding noise (1e-9) there, and "relative to its own maximum"
    compares noise with noise;
  * Adam divides by sqrt(v): an element whose gradient is at the noise level
    moves by +-lr whatever its sign (see shadow.py: such elements are masked
    and may differ by 2 lr per step);
  * train-mode BatchNorm over batch 2 and 1x1 or 2x2 feature maps, next to
    ReLU kinks and max-pool choices: one activation on the other side of a
    kink changes a whole channel's gradient. Some torchvision models at the
    zoo's batch are like that; after a few optimizer steps the differences
    grow (chaotic training).

So PyTorch answers more than once: in float64 and in float32 with other
kernels (shadow.py), and a tensor passes if

    max|kiln - torch| <= tol * max|torch| + K * max_o max|torch - o|

over those other answers o: Kiln may differ from PyTorch by K times as much
as PyTorch differs from itself. Where float32 is accurate (almost
everywhere) the second term is negligible and this is exactly err <= tol.
The other answers sample PyTorch's spread only twice, and a single ReLU kink
that one float32 implementation crosses and another does not changes one
channel's gradient by percents; so after Adam steps (which move every
element by about lr, whatever its gradient's size), a parameter may also
differ by MOVE_FRACTION of how far PyTorch moved it (max|w_N - w_0|): a
wrong optimizer (say, twice the step) still fails by a factor of ~20, and
for the usual parameter (|w| >> its motion) this adds nothing.
`ratio` = lhs / rhs (pass: <= 1) is what the summary reports; tensors that
pass only thanks to the second term are counted as "noise-limited".
Integers (num_batches_tracked) must be equal. The same rule applies to the
per-step losses.
"""

import dataclasses
import math
from typing import Dict, List, Optional, Sequence

import torch

NOISE_FACTOR = 5.0
MOVE_FRACTION = 0.05


@dataclasses.dataclass
class Check:
    key: str
    err: float  # max|k - t| / max|t| (inf for a shape or dtype mismatch)
    ratio: float  # max|k - t| / allowance; pass: <= 1
    noise_limited: bool  # err > tol but passes thanks to float32 noise
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0


def _amax(t: torch.Tensor) -> float:
    return t.abs().max().item() if t.numel() else 0.0


def rel_max(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| relative to max|b| (the plain difference when b is all
    zero or empty)."""
    a, b = a.double(), b.double()
    scale, diff = _amax(b), _amax(a - b)
    return diff / scale if scale > 0 else diff


def _ratio(diff: float, allow: float) -> float:
    return diff / allow if allow > 0 else (0.0 if diff == 0 else math.inf)


def check_tensor(key: str, kiln: torch.Tensor, torch32: torch.Tensor, others: Sequence[torch.Tensor],
                 tol: float, noise_factor: float = NOISE_FACTOR, mask: Optional[torch.Tensor] = None,
                 mask_allow: float = 0.0, floor: float = 0.0) -> Check:
    """Compare one tensor (see module doc). `others`: PyTorch's other answers
    for it. `mask`: elements whose float32 value is noise-driven (Adam on a
    noise-level gradient); they may differ by `mask_allow` more, and do not
    count towards the noise term. `floor`: an absolute allowance added to
    the tolerance (parameters after training: a fraction of how far PyTorch
    moved them)."""
    if list(kiln.shape) != list(torch32.shape):
        return Check(key, math.inf, math.inf, False, f"shape {list(kiln.shape)} vs torch {list(torch32.shape)}")
    if not torch32.is_floating_point():
        same = torch.equal(kiln.to(torch32.dtype), torch32)
        d = 0.0 if same else _amax(kiln.double() - torch32.double())
        return Check(key, 0.0 if same else math.inf, 0.0 if same else math.inf, False,
                     "" if same else f"integers differ by up to {d:g}")
    if not kiln.is_floating_point():
        return Check(key, math.inf, math.inf, False, f"dtype {kiln.dtype} vs torch {torch32.dtype}")
    k, t = kiln.double(), torch32.double()
    if not torch.isfinite(k).all():
        return Check(key, math.inf, math.inf, False, "non-finite values")
    d = (k - t).abs()
    scale = _amax(t)
    err = _ratio(_amax(d), scale)
    keep = ~mask if mask is not None else torch.ones_like(d, dtype=torch.bool)
    noise = max((_amax((t - o.double()).abs()[keep]) for o in others), default=0.0)
    allow = tol * scale + noise_factor * noise + floor
    ratio = _ratio(_amax(d[keep]), allow)
    note = ""
    if mask is not None and bool(mask.any()):
        ratio = max(ratio, _ratio(_amax(d[mask]), allow + mask_allow))
        note = f"{int(mask.sum())} noise-driven elements"
    return Check(key, err, ratio, err > tol and ratio <= 1.0, note)


def check_maps(kiln: Dict[str, torch.Tensor], torch32: Dict[str, torch.Tensor],
               others: Sequence[Dict[str, torch.Tensor]], tol: float,
               masks: Optional[Dict[str, torch.Tensor]] = None, mask_allow: float = 0.0,
               floors: Optional[Dict[str, float]] = None, noise_factor: float = NOISE_FACTOR,
               ignore=("loss",)) -> List[Check]:
    """Check every key of torch32 (a key missing from kiln fails)."""
    out = []
    for key, t in torch32.items():
        if key in ignore or key.startswith("metric:"):
            continue
        if key not in kiln:
            out.append(Check(key, math.inf, math.inf, False, "missing from Kiln's output"))
            continue
        out.append(check_tensor(key, kiln[key], t, [o[key] for o in others], tol, noise_factor,
                                mask=(masks or {}).get(key), mask_allow=mask_allow,
                                floor=(floors or {}).get(key, 0.0)))
    return out


def check_losses(kiln: List[float], torch32: List[float], others: Sequence[List[float]], tol: float,
                 noise_factor: float = NOISE_FACTOR, what: str = "loss") -> List[Check]:
    """One check per step, by the same rule (`what`: the logged quantity)."""
    out = []
    if len(kiln) != len(torch32):
        out.append(Check(what, math.inf, math.inf, False,
                         f"Kiln logged {len(kiln)} steps, PyTorch {len(torch32)}"))
    as_t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    for i, (k, t) in enumerate(zip(kiln, torch32)):
        out.append(check_tensor(f"{what}[step {i}]", as_t(k), as_t(t), [as_t(o[i]) for o in others], tol,
                                noise_factor))
    return out


def worst(checks: List[Check]) -> Optional[Check]:
    return max(checks, key=lambda c: (c.ratio, c.err)) if checks else None


def format_row(c: Check) -> str:
    status = "ok" if c.ok else "FAIL"
    extra = " (noise-limited)" if c.noise_limited else ""
    note = f"  {c.note}" if c.note else ""
    return f"  {status:4s} {c.key:56s} err {c.err:9.3g}  ratio {c.ratio:9.3g}{extra}{note}"
