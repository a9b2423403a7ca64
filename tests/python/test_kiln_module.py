"""The Python module `kiln` (python/kiln): the example of the README runs;
on zoo models its weights after a few steps equal `kiln train`'s on the same
archive and batch, and PyTorch's within float32 noise; bad arguments raise
kiln.KilnError with Kiln's one-line messages.

Run by ctest (python.module) as
    PYTHONPATH=build/python KILN_BINARY=build/kiln KILN_SOURCE_DIR=. python3 -m pytest tests/python
"""

import os
import subprocess
import sys

import pytest
import torch

import kiln

SRC = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
KILN = os.environ.get("KILN_BINARY", "kiln")
sys.path.insert(0, os.path.join(SRC, "models"))
sys.path.insert(0, os.path.join(SRC, "tests", "train"))
import make_batch  # noqa: E402
import st_io  # noqa: E402
import zoo  # noqa: E402

STEPS = 3


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)  # a bias before batch norm gets noise-level gradients
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(n)]


def test_the_readme_example_runs(tmp_path):
    torch.manual_seed(0)
    model = SmallNet()
    loader = batches(STEPS)
    step = kiln.compile(model, loader[0][0], loss="cross_entropy", optimizer="adamw", lr=1e-3,
                        amp="bf16", memory_budget="2GiB")
    losses = [step(x, target=y) for x, y in loader]  # lazy: read after the loop
    values = [float(l) for l in losses]
    assert all(v == v and v > 0 for v in values), values
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(step.state_dict())
    assert not torch.equal(before["conv.weight"], model.state_dict()["conv.weight"])
    assert model.state_dict()["bn.num_batches_tracked"].item() == STEPS
    report = step.report()
    assert report["schema"] == "kiln-report"
    assert report["options"]["amp"] == "bf16" and report["training"]["memory_budget"] == 2 * 1024 ** 3
    assert any(p["name"] == "amp" and p["changed"] for p in report["passes"])
    step.export(tmp_path / "step.py", format="fx")
    source = (tmp_path / "step.py").read_text()
    compile(source, "step.py", "exec")  # a Python file
    assert step.steps_done == STEPS


def test_losses_are_lazy_but_never_wrong():
    torch.manual_seed(0)
    model = SmallNet()
    loader = batches(4, seed=1)
    lazy = kiln.compile(model, loader[0][0], loss="cross_entropy", optimizer="sgd", lr=0.1, threads=1)
    eager = kiln.compile(model, loader[0][0], loss="cross_entropy", optimizer="sgd", lr=0.1, threads=1)
    kept = [lazy(x, target=y) for x, y in loader]
    read_at_once = [float(eager(x, target=y)) for x, y in loader]
    assert [float(l) for l in kept] == read_at_once


def train_with_pytorch(model, loader, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.state_dict()


def test_weights_match_pytorch():
    torch.manual_seed(0)
    model = SmallNet()
    reference = SmallNet()
    reference.load_state_dict(model.state_dict())
    loader = batches(STEPS, seed=2)
    step = kiln.compile(model, loader[0][0], loss="cross_entropy", optimizer="adamw", lr=1e-2)
    for x, y in loader:
        step(x, target=y)
    got, want = step.state_dict(), train_with_pytorch(reference, loader, 1e-2)
    assert set(got) == set(want)
    for k in want:
        if want[k].is_floating_point():
            err = (got[k] - want[k]).abs().max().item() / max(want[k].abs().max().item(), 1e-12)
            assert err < 1e-4, (k, err)
        else:
            assert torch.equal(got[k], want[k]), k


@pytest.mark.parametrize("name", ["mlp", "cnn_bn_train", "gpt2_mini"])
def test_equals_kiln_train_on_zoo_models(name, tmp_path):
    subprocess.run([sys.executable, os.path.join(SRC, "models", "export.py"), name, "--format", "trace", "--train",
                    "--no-dropout", "--out-dir", str(tmp_path)], check=True, capture_output=True)
    archive = str(tmp_path / f"{name}.pt")
    batch_file = str(tmp_path / "batch.safetensors")
    batch = make_batch.make_batch(name, "cross_entropy", batch_file, export_dir=str(tmp_path))
    weights = str(tmp_path / "kiln_train.safetensors")
    subprocess.run([KILN, "train", archive, "--input-file", batch_file, "--steps", str(STEPS), "--threads", "1",
                    "--no-cache", "--save-weights", weights], check=True, capture_output=True)
    step = kiln.compile(archive, threads=1, no_cache=True)
    inputs = [batch[f"input{i}"] for i in range(len(batch) - 1)]
    for _ in range(STEPS):
        step(*inputs, target=batch["target"])
    got, want = step.state_dict(), st_io.load(weights)
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), f"{name}: {k} differs from kiln train's"


def one_line_error(excinfo, *fragments):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for f in fragments:
        assert f in msg, msg


def test_bad_arguments_raise_kilns_one_line_errors(tmp_path):
    model, x = SmallNet(), torch.randn(4, 3, 8, 8)
    with pytest.raises(kiln.KilnError) as e:
        kiln.compile(model, x, no_such_option=1)
    one_line_error(e, "unknown option 'no_such_option'")
    with pytest.raises(kiln.KilnError) as e:
        kiln.compile(model, x, lr="fast")
    one_line_error(e, "options.lr")
    with pytest.raises(kiln.KilnError) as e:
        kiln.compile(model, x, loss="hinge")
    one_line_error(e, "unknown loss 'hinge'")
    with pytest.raises(kiln.KilnError) as e:
        kiln.compile(str(tmp_path / "missing.pt"))
    one_line_error(e, "missing.pt")
    with pytest.raises(kiln.KilnError) as e:
        kiln.compile(model)
    one_line_error(e, "example_inputs")
    step = kiln.compile(model, x, loss="cross_entropy")
    with pytest.raises(kiln.KilnError) as e:
        step(torch.randn(4, 3, 9, 9), target=torch.zeros(4, dtype=torch.int64))
    one_line_error(e, "input0")
    with pytest.raises(kiln.KilnError) as e:
        step(x, target=torch.full((4,), 10, dtype=torch.int64))  # class 10 of 10
    one_line_error(e, "target")
    assert "lr" in kiln.options() and "memory_budget" in kiln.options()
