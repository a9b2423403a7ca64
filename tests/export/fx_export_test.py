#!/usr/bin/python3
"""`kiln export --graph step --format fx` against Kiln's own training step.

    fx_export_test.py NAME [NAME ...] --kiln PATH/TO/kiln --work-dir DIR [--cache-dir DIR]
                      [--dtypes float64,float32] [--optimizers sgd,adamw] [-v]
    fx_export_test.py --refusal --kiln PATH/TO/kiln --work-dir DIR [--cache-dir DIR]

For each zoo model NAME, dtype and optimizer:

1. export the model in train mode with dropout zeroed and write its batch
   (tests/train/parity.py's prepare: models/export.py + make_batch.py);
2. `kiln export MODEL.pt --graph step --format fx` (and --format text beside
   it, the same graph to read) with the training options below;
3. `kiln train MODEL.pt --steps 1 --checkpoint C1`, then `kiln train
   --steps 2 --resume C1 --checkpoint C2`: the weights (--save-weights), the
   optimizer state (the checkpoints) and the loss (--log-file) after each of
   Kiln's first two steps;
4. build the exported torch.fx.GraphModule, bind its inputs by name and run
   it twice:
   - step 1: parameters and buffers from the .pt's state_dict, input0.. and
     target from the batch, lr, the step counter 0 (the step graph adds 1:
     the step it takes) and zero optimizer state (SGD's momentum buffer is
     not read on step 1, as in torch.optim);
   - step 2: everything from Kiln's checkpoint after step 1 (weights,
     moments, step counter 1), so the later-step paths (momentum, bias
     corrections at step 2) run on real state;
   and compare every param_update, buffer_update and opt_state_update output
   and the loss with Kiln's.

Measure: per tensor, err = max|fx - kiln| / max|kiln|; integer tensors
(num_batches_tracked) exactly. Tolerance: 1e-12 in float64, 1e-5 in float32.
Four allowances, all for rounding noise that the computation amplifies:
- the loss is compared relative to at least the first step's loss: a loss
  near 0 (a batch memorized after one step) is log-sum-exp minus the target
  logit, a difference of terms of that size;
- optimizer state that is a gradient (momentum buffers, Adam's moments) is
  compared to the largest tensor of its kind: a gradient that is zero up to
  rounding (a conv bias in front of a train-mode BatchNorm) has no scale of
  its own;
- a parameter is compared to at least the largest move of any parameter in
  Kiln's step: a zero-initialized bias with such a gradient holds only the
  step's noise afterwards (VGG's conv biases);
- AdamW's step lr * m_hat / (sqrt(v_hat) + eps) reaches a slope of lr / eps =
  1e5 at a zero gradient: such elements (an attention key bias, that conv
  bias) get, on top of the tolerance, twice the difference of the steps the
  two sides' own moments give (adam_slack). Where the moments agree it is ~0.
Each run also checks the measure on a copy with one element moved by 10x the
tolerance, which must fail.

Optimizers: sgd (lr 0.01, momentum 0.9, Nesterov, weight decay 1e-4,
global-norm clipping at 1.0: sgd_update, global_norm and the clip factor)
and adamw (lr 1e-3, weight decay 0.01, betas and eps torch's defaults).

--refusal checks that a data-parallel step (--nproc 2, with its allreduce)
is refused: kiln export exits non-zero with one line naming the collective.

Prints one line per run with the worst error; exits 1 on any mismatch, 2 when
something could not run. A passing run deletes what it wrote.
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import parity  # noqa: E402  (prepare: export + batch, cached and file-locked)
import reference as ref  # noqa: E402  (read_log)
import st_io  # noqa: E402

TOL = {"float64": 1e-12, "float32": 1e-5}
LR = {"sgd": 0.01, "adamw": 1e-3}
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8  # kiln's (and torch's) Adam defaults
OPTIMIZERS = {
    "sgd": ["--optimizer", "sgd", "--lr", str(LR["sgd"]), "--momentum", "0.9", "--nesterov", "--weight-decay",
            "1e-4", "--clip-grad-norm", "1.0"],
    "adamw": ["--optimizer", "adamw", "--lr", str(LR["adamw"])],
}
Outputs = Dict[str, Tuple[str, torch.Tensor]]  # output name -> (role, tensor)


class Failure(Exception):
    """Something could not run (exit 2)."""


def run(cmd: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_ok(cmd: List[str]) -> None:
    r = run(cmd)
    if r.returncode != 0:
        raise Failure(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")


def load_step(path: str, tag: str):
    """The generated file as a module."""
    spec = importlib.util.spec_from_file_location(f"kiln_fx_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------
# Kiln's side: state before and after each step
# --------------------------------------------------------------------------

def checkpoint(path: str) -> Dict[str, torch.Tensor]:
    """Weights and optimizer state of Kiln's latest checkpoint in `path`."""
    with open(os.path.join(path, "latest")) as f:
        d = os.path.join(path, f.read().strip())
    state = st_io.load(os.path.join(d, "model.safetensors"))
    state.update(st_io.load(os.path.join(d, "optimizer.safetensors")))
    return state


def kiln_steps(a, base: List[str], tag: str) -> Tuple[List[Dict[str, torch.Tensor]], List[float], List[str]]:
    """Kiln's state after steps 1 and 2 (the second resumed from the first's
    checkpoint), each step's logged loss, and the files to delete."""
    states, losses, files = [], [], []
    for step in (1, 2):
        ckpt = os.path.join(a.work_dir, f"{tag}.ckpt{step}")
        shutil.rmtree(ckpt, ignore_errors=True)
        weights = os.path.join(a.work_dir, f"{tag}.weights{step}.safetensors")
        log = os.path.join(a.work_dir, f"{tag}.log{step}.jsonl")
        resume = ["--resume", os.path.join(a.work_dir, f"{tag}.ckpt1")] if step == 2 else []
        run_ok([a.kiln, "train"] + base + ["--steps", str(step), "--no-cache", "--checkpoint", ckpt,
                                           "--save-weights", weights, "--log-file", log] + resume)
        state = checkpoint(ckpt)
        state.update(st_io.load(weights))  # the state_dict users get (the checkpoint holds the same)
        states.append(state)
        losses.append(ref.read_log(log)[-1])
        files += [ckpt, weights, log]
    return states, losses, files


# --------------------------------------------------------------------------
# The exported side
# --------------------------------------------------------------------------

def inputs_before(mod, pt: str, batch: Dict[str, torch.Tensor], lr: float,
                  state: Optional[Dict[str, torch.Tensor]]) -> List[torch.Tensor]:
    """A tensor for each input of the module, by name and role: weights and
    optimizer state from `state` (Kiln's checkpoint), or before the first
    step from the .pt with the step counter and every moment at 0; the
    const inputs from the file's CONSTS."""
    weights = state if state is not None else torch.jit.load(pt, map_location="cpu").state_dict()
    args = []
    for name, role, dtype, shape in mod.INPUT_SPECS:
        if role in ("param", "buffer"):
            t = weights[name]
        elif role == "data":
            t = batch[name]
        elif role == "scalar" and name == "lr":
            t = torch.tensor(lr, dtype=dtype)
        elif role == "opt_state":
            t = state[name] if state is not None else torch.zeros(shape, dtype=dtype)
        elif role == "const":
            t = mod.CONSTS[name]  # the trace's baked-in tensor, written into the file
        else:
            raise Failure(f"input {name} ({role}): no rule to bind it")
        if t.dtype != dtype or list(t.shape) != list(shape):
            raise Failure(f"input {name}: have {t.dtype}{list(t.shape)}, the graph wants {dtype}{list(shape)}")
        args.append(t.detach().clone().contiguous())
    return args


def run_module(mod, gm, args: List[torch.Tensor]) -> Outputs:
    with torch.no_grad():
        outs = gm(*args)
    if len(outs) != len(mod.OUTPUTS):
        raise Failure(f"the module returned {len(outs)} outputs, OUTPUTS lists {len(mod.OUTPUTS)}")
    return {n: (role, t) for (n, role), t in zip(mod.OUTPUTS, outs)}


# --------------------------------------------------------------------------
# The measure
# --------------------------------------------------------------------------

def rel_err(got: torch.Tensor, want: torch.Tensor, floor: float = 0.0) -> float:
    """max|got - want| / max(max|want|, floor) (integers: exact, 0 or inf)."""
    if list(got.shape) != list(want.shape) or got.dtype != want.dtype:
        return float("inf")
    if not want.is_floating_point():
        return 0.0 if torch.equal(got, want) else float("inf")
    if want.numel() == 0:
        return 0.0
    g, w = got.double(), want.double()
    if not torch.isfinite(g).all() or not torch.isfinite(w).all():
        return 0.0 if torch.equal(g.nan_to_num(), w.nan_to_num()) else float("inf")
    scale = max(w.abs().max().item(), floor)
    diff = (g - w).abs().max().item()
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def adam_step(m: torch.Tensor, v: torch.Tensor, step: float) -> torch.Tensor:
    """The step AdamW takes from its updated moments: lr * m_hat / (sqrt(v_hat) + eps)."""
    m_hat = m.double() / (1 - BETA1 ** step)
    return LR["adamw"] * m_hat / ((v.double() / (1 - BETA2 ** step)).sqrt() + EPS)


def adam_slack(name: str, outs: Outputs, kiln: Dict[str, torch.Tensor]) -> torch.Tensor:
    """Per element of parameter `name` after an AdamW step: twice the
    difference between the steps the two sides' own updated moments give.
    Rounding noise in a gradient that is zero up to rounding moves such an
    element by up to lr; elsewhere the slack is ~0."""
    step = kiln["step"].item()
    m, v = f"exp_avg.{name}", f"exp_avg_sq.{name}"
    return 2 * (adam_step(outs[m][1], outs[v][1], step) - adam_step(kiln[m], kiln[v], step)).abs()


def check(got: torch.Tensor, want: torch.Tensor, tol: float, slack=None,
          floor: float = 0.0) -> Tuple[float, bool, int]:
    """(err, pass, elements that pass only by `slack`). Without slack: pass
    if err <= tol. With slack: every element within tol * max|want| + slack;
    err then covers the elements whose slack is below tol * max|want|."""
    err = rel_err(got, want, floor)
    if slack is None or err == float("inf") or not want.is_floating_point() or want.numel() == 0:
        return err, err <= tol, 0
    diff = (got.double() - want.double()).abs()
    scale = want.double().abs().max()
    plain = tol * scale
    clean = slack <= plain
    err = (diff[clean].max() / scale).item() if clean.any() and scale > 0 else 0.0
    return err, bool((diff <= plain + slack).all()), int((diff > plain).sum())


def kind(name: str, role: str) -> str:
    """Which floor a tensor's error is measured against, besides its own
    max. Optimizer state of one kind (momentum_buffer, exp_avg, exp_avg_sq)
    is a gradient: one that is zero up to rounding is compared to the
    largest of its kind, not to its own rounding noise. A parameter is
    compared to at least the largest move any parameter made in the step (a
    zero-initialized bias with such a gradient holds nothing but noise)."""
    if role == "param_update":
        return "param_update"
    return name.split(".", 1)[0] if role == "opt_state_update" and "." in name else name


def perturbed(t: torch.Tensor, tol: float) -> torch.Tensor:
    """A copy with its largest element moved by 10 x tol of the tensor's max."""
    p = t.detach().clone()
    flat = p.view(-1)
    i = int(flat.abs().argmax())
    flat[i] += 10 * tol * (flat.abs().max() if flat.abs().max() > 0 else 1.0)
    return p


def compare(outs: Outputs, kiln: Dict[str, torch.Tensor], before: Dict[str, torch.Tensor], loss: float,
            loss_floor: float, tol: float, adam: bool, label: str, verbose: bool) -> Tuple[float, str, List[str], int]:
    """Every output against Kiln's: updated parameters, buffers and optimizer
    state, and the loss (relative to at least `loss_floor`); `before` holds
    the step's inputs by name. Returns (worst error, where, failure lines,
    elements that pass only by Adam's noise slack; the worst error leaves
    those out)."""
    bad, pairs = [], []
    if not any(r == "param_update" for r, _ in outs.values()):
        bad.append(f"FAIL {label}: the exported step updates no parameter")
    for name, (role, got) in outs.items():
        if role == "loss":
            pairs.append((name, role, got.reshape(()).double(), torch.tensor(loss, dtype=torch.float64)))
        elif role in ("param_update", "buffer_update", "opt_state_update"):
            if name in kiln:
                pairs.append((name, role, got, kiln[name]))
            else:
                bad.append(f"FAIL {label}: {name} ({role}): kiln saved no such tensor")
        # metrics (accuracy) are not compared
    floor: Dict[str, float] = {"loss": loss_floor}
    for name, role, _, want in pairs:
        if want.is_floating_point() and want.numel():
            k = kind(name, role)
            floor[k] = max(floor.get(k, 0.0), want.double().abs().max().item())
            if role == "param_update":  # the largest move of any parameter in Kiln's step
                moved = (want.double() - before[name].double()).abs().max().item()
                floor["param_update"] = max(floor.get("param_update", 0.0), moved)
    worst, where, noisy = 0.0, "-", 0
    for name, role, got, want in pairs:
        slack = adam_slack(name, outs, kiln) if adam and role == "param_update" else None
        err, ok, n = check(got, want, tol, slack, floor.get(kind(name, role), 0.0))
        noisy += n
        if verbose:
            print(f"  {label} {name}: err {err:.3g}" + (f" ({n} elements within Adam's noise slack)" if n else ""))
        if where == "-" or err > worst:
            worst, where = err, name
        if not ok:
            bad.append(f"FAIL {label}: {name}: err {err:.3g} (tol {tol:g})"
                       + (", elements beyond Adam's noise slack" if slack is not None else ""))
    # The same measure must fail on a copy with one element off by 10 x tol.
    name, want = next((p[0], p[3]) for p in pairs if p[3].is_floating_point() and p[3].numel() > 0)
    if check(perturbed(want, tol), want, tol)[1]:
        bad.append(f"FAIL {label}: the comparison did not catch a perturbed {name}")
    return worst, where, bad, noisy


# --------------------------------------------------------------------------
# Synthetic models: the ops the zoo's steps do not reach
# --------------------------------------------------------------------------

class OpsConv(torch.nn.Module):
    """Padding in every mode, group norm, avg and adaptive max pooling,
    roll, flip, grouped strided convolution, an embedding with padding_idx,
    and the activations with attributes (their forward and backward ops)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.conv = nn.Conv2d(4, 8, 3)
        self.gn = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, groups=2, bias=False)
        self.fc = nn.Linear(8 * 4 + 8, 5)
        self.emb = nn.Embedding(10, 8, padding_idx=0)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x, ids):
        F = torch.nn.functional
        y = self.conv(F.pad(x, (1, 2, 1, 0), mode="reflect"))
        y = F.elu(self.gn(y), alpha=0.7)
        y = F.pad(y, (1, 1, 1, 1), mode="replicate")
        y = torch.roll(y, 1, dims=2) + torch.flip(y, dims=[3]) * 0.5
        y = F.avg_pool2d(y, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        y = F.leaky_relu(y, 0.1) + F.softplus(y, beta=2.0) - F.hardtanh(y, -0.5, 0.5) + torch.sigmoid(y) * F.mish(y)
        y = self.conv2(F.pad(y, (1, 0, 0, 1), mode="circular"))
        y = y * self.scale.view(1, 8, 1, 1)
        z = F.adaptive_max_pool2d(y, (2, 2)).flatten(1)
        e = self.emb(ids).sum(1)
        return self.fc(torch.tanh(torch.cat([z, e], 1)))


class OpsSeq(torch.nn.Module):
    """Binary ops with gradients of their own (maximum, minimum, pow, div,
    where), unary math and its backward ops, comparisons and logical ops,
    rounding, softmax / log_softmax, nll_loss, reductions (cumsum, cumprod, var,
    amax, amin, argmin, mean, prod), slicing, select, triu / tril, indexing,
    gather, repeat, flip and transposes, and an index constant the trace
    bakes in (a const input). (Its p = 0 dropout never reaches the step:
    Kiln's simplifier removes it.)"""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(6, 12)
        self.v = torch.nn.Parameter(torch.linspace(-1, 1, 12))
        self.out = torch.nn.Linear(12, 4)
        self.register_buffer("idx", torch.tensor([2, 0, 1]))
        self.register_buffer("classes", torch.tensor([1, 3, 0, 2, 1, -100, 3, 0, 2, 1]))
        # A plain tensor attribute, not a buffer: the trace bakes it in as a
        # constant, which Kiln keeps as a const input and the file as CONSTS.
        self.perm = torch.tensor([5, 2, 11, 0, 7, 3, 9, 1, 10, 4, 8, 6])

    def forward(self, x):
        F = torch.nn.functional
        h = self.w(x)  # [B, T, 12]
        a = torch.maximum(h, -0.3 * h) + torch.minimum(h, self.v) * 0.2
        b = torch.where(h > 0, torch.sqrt(h.abs() + 1), torch.exp(h) / (1 + h * h))
        c = torch.log1p(h.abs()) * torch.sin(h) - torch.cos(h) * torch.erf(h) + F.silu(h) + F.gelu(h)
        c = c + torch.expm1(h.clamp(max=2.0)) * 0.1 + torch.atan2(h, self.v + 0.5) + torch.xlogy(h, h.abs() + 0.5)
        d = h.clamp(-1.0, 0.8) + torch.rsqrt(h * h + 1) + torch.reciprocal(h.abs() + 2) + (h.abs() + 0.5) ** 1.5
        s = torch.softmax(a, -1) + torch.log_softmax(b, -1) / 10 + F.hardswish(c) + F.hardsigmoid(d)
        s = s + h.cumsum(1) / 10 + (torch.tanh(h) * 0.5 + 1).cumprod(1) / 10 + h.var(1, keepdim=True) + h.amax(-1, keepdim=True) + h.mean((0, 1)) / 3
        s = s + torch.prod(torch.tanh(h[:, :3]), 1, keepdim=True) + h[:, 1:4:2].sum(1, keepdim=True)
        s = s + h.select(1, 2).unsqueeze(1) + h.triu()[..., :12].sum(-1, keepdim=True) * 0.01
        cols = (torch.arange(12) % 5).expand(h.shape[0], h.shape[1], 12)
        s = s + h[:, self.idx].mean(1, keepdim=True) + torch.gather(h, 2, cols)
        s = s.repeat(1, 1, 2)[..., ::2] + s.transpose(1, 2).reshape(s.shape).flip(1) * 0.1
        keep = ((h >= 0.1) & ~(h < -0.2)) | ((h != 0.5) ^ (h > 1))
        s = s + torch.where(keep, h, h.tril()) + torch.log(h.abs() + 1) + h.amin(1, keepdim=True)
        s = s + torch.gather(h, 2, h.argmin(-1, keepdim=True)) + F.dropout(h, 0.0, True)
        s = s + torch.index_select(h, 2, self.perm) * 0.1
        s = s + (torch.floor(h) + torch.ceil(h) + torch.round(h * 3) - torch.sign(h)
                 + torch.div(h, 0.7, rounding_mode="floor")) * 0.01  # values only: no gradient
        logits = self.out(s)
        aux = F.nll_loss(torch.log_softmax(logits, -1).flatten(0, 1), self.classes)
        return logits + 0.1 * aux


SYNTHETIC = {
    "ops_conv": (OpsConv, lambda: [torch.randn(2, 4, 9, 9), torch.tensor([[0, 3, 5], [7, 0, 0]])]),
    "ops_seq": (OpsSeq, lambda: [torch.randn(2, 5, 6)]),
}


def prepare_synthetic(name: str, cache: str, dtype: str) -> Tuple[str, str]:
    """Trace a synthetic model in train mode as models/export.py traces the
    zoo's, and write its batch (a seeded class-index target for the logits'
    last dim); returns (model.pt, batch)."""
    import export  # models/export.py: the input types Kiln's importer reads from the archive
    d = os.path.join(cache, f"{name}.{dtype}")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    cls, make_inputs = SYNTHETIC[name]
    model = cls().to(getattr(torch, dtype)).train()
    inputs = [x.to(getattr(torch, dtype)) if x.is_floating_point() else x for x in make_inputs()]
    traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
    pt = os.path.join(d, name + ".pt")
    torch.jit.save(traced, pt, _extra_files={"kiln_inputs.json": export.input_types_json(inputs)})
    with torch.no_grad():
        logits = model(*inputs)
    g = torch.Generator().manual_seed(1)
    batch = {f"input{i}": x for i, x in enumerate(inputs)}
    batch["target"] = torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=g)
    path = os.path.join(d, "batch.safetensors")
    st_io.save(path, batch)
    return pt, path


# --------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------

def check_model(a, name: str, dtype: str, opt: str) -> List[str]:
    loss = parity.DEFAULT_LOSS.get(name, "cross_entropy")
    cache = a.cache_dir or a.work_dir
    if name in SYNTHETIC:
        pt, batch_path = prepare_synthetic(name, cache, dtype)
    else:
        pt, batch_path = parity.prepare(name, loss, cache, dtype)
    tag = f"{name}.{dtype}.{opt}"
    base = [pt, "--input-file", batch_path, "--loss", loss] + OPTIMIZERS[opt]
    step_py = os.path.join(a.work_dir, f"{tag}.step.py")
    step_kir = os.path.join(a.work_dir, f"{tag}.step.kir")
    t0 = time.time()
    run_ok([a.kiln, "export"] + base + ["--graph", "step", "--format", "fx", "-o", step_py])
    run_ok([a.kiln, "export"] + base + ["--graph", "step", "--format", "text", "-o", step_kir])
    states, losses, files = kiln_steps(a, base, tag)
    mod = load_step(step_py, tag.replace(".", "_"))
    gm = mod.build()
    batch = st_io.load(batch_path)
    bad, report = [], []
    for step, state in ((1, None), (2, states[0])):
        label = f"{tag}.step{step}"
        args = inputs_before(mod, pt, batch, LR[opt], state)
        before = dict(zip(mod.INPUTS, args))
        outs = run_module(mod, gm, args)
        # A loss near 0 (a memorized batch) is a difference of terms of the
        # first loss's size: its rounding is relative to that.
        worst, where, b, noisy = compare(outs, states[step - 1], before, losses[step - 1], abs(losses[0]),
                                         TOL[dtype], opt == "adamw", label, a.verbose)
        bad += b
        report.append(f"step {step} {worst:.3g} ({where})" + (f" [{noisy} Adam-noise elements]" if noisy else ""))
    calls = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    print(f"{'FAIL' if bad else 'ok  '} {tag}: worst err {'; '.join(report)}; tol {TOL[dtype]:g}; "
          f"{len(mod.OUTPUTS)} outputs, {calls} call_function nodes; {time.time() - t0:.1f} s")
    if not bad:
        for f in [step_py, step_kir] + files:
            shutil.rmtree(f) if os.path.isdir(f) else os.remove(f)
    return bad


def check_refusal(a) -> List[str]:
    """A data-parallel step holds collectives: --format fx must refuse it in one line."""
    pt, batch = parity.prepare("mlp", "cross_entropy", a.cache_dir or a.work_dir, "float32")
    out = os.path.join(a.work_dir, "nproc2.step.py")
    if os.path.exists(out):
        os.remove(out)
    r = run([a.kiln, "export", pt, "--input-file", batch, "--loss", "cross_entropy", "--graph", "step", "--nproc",
             "2", "--format", "fx", "-o", out])
    err = (r.stderr or "").strip()
    if r.returncode == 0:
        return [f"FAIL refusal: exporting a --nproc 2 step as fx succeeded (wrote {out})"]
    if "collective" not in err or len(err.splitlines()) != 1:
        return [f"FAIL refusal: expected one line naming the collective, got: {err!r}"]
    if os.path.exists(out):
        return [f"FAIL refusal: {out} was written anyway"]
    print(f"ok   refusal: exit {r.returncode}: {err}")
    return []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--cache-dir")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--optimizers", default="sgd,adamw")
    ap.add_argument("--refusal", action="store_true", help="check that a data-parallel step is refused")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.work_dir, exist_ok=True)
    bad = []
    try:
        if a.refusal:
            bad += check_refusal(a)
        for name in a.names:
            for dtype in a.dtypes.split(","):
                for opt in a.optimizers.split(","):
                    bad += check_model(a, name, dtype, opt)
    except (Failure, parity.Failure) as e:
        print(f"ERROR: {e}")
        return 2
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
