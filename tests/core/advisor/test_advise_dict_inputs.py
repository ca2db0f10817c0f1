"""The advisor on a model whose forward takes a dict of tensors: the batch is built from one
sample of the data (each key's shape and dtype), in Python and from ``workbench advise --data``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.cli import main
from workbench.core.advisor import advise
from workbench.core.advisor.activations import predict_step, profile_activations
from workbench.core.advisor.measure import measure_peak
from workbench.core.advisor.profile import AdvisorError, DictBatch, batch_size_of, batch_template, batch_text
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

_TASK = '''
import torch
from torch import nn


class Mixer(nn.Module):
    """Audio frames and a per-sample class index (an embedding), called as model(audio=..., kind=...)."""

    def __init__(self, num_classes=None):
        super().__init__()
        self.audio = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.kind = nn.Embedding(5, 32)
        self.head = nn.Linear(32, num_classes or 3)

    def forward(self, audio, kind):
        return self.head(self.audio(audio) + self.kind(kind))


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"audio": torch.randn(64, generator=g), "kind": torch.tensor(i % 5)}, i % 3


def build(num_classes=None):
    return Mixer(num_classes)


def data():
    return Pairs()
'''


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "mixer.py"
    path.write_text(textwrap.dedent(_TASK))
    monkeypatch.chdir(tmp_path)
    return path


def _load(path: Path) -> dict:
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns


def test_batch_template_reads_each_keys_shape_and_dtype(task: Path) -> None:
    ns = _load(task)
    template = batch_template(ns["data"]()[0], 8)
    assert template == DictBatch((("audio", (8, 64), "float32"), ("kind", (8,), "int64")))
    assert batch_size_of(template) == 8 and batch_text(template) == "audio 8x64, kind 8 int64"
    assert template.with_batch(2).to_json() == {"audio": [2, 64], "kind": [2]}
    assert batch_template((torch.zeros(3, 5), 1), 4) == (4, 3, 5)
    assert batch_template(({"input_ids": torch.zeros(16, dtype=torch.long)}, 1), 4) == (4, 16)  # token dicts


def test_advise_predicts_for_dict_inputs_within_the_measured_tensor_peak(task: Path) -> None:
    ns = _load(task)
    torch.manual_seed(0)
    model, dataset = ns["build"](3), ns["data"]()
    template = batch_template(dataset[0], 16)
    advice = advise(model, 10**9, template)
    assert advice.to_dict()["input_shape"] == {"audio": [16, 64], "kind": [16]}
    full = next(a for a in advice.assessed if a.candidate.kind == "full" and not a.candidate.bn_eval)
    assert full.memory.activations > 0 and full.fits
    # the prediction against the live tensor bytes of real steps on the same data
    trainer = Trainer(TrainConfig(steps=3, batch_size=16, device="cpu", num_classes=3), model=model, dataset=dataset)
    trainer.setup()
    measured = measure_peak(trainer, trainer.steps(), 3, "full")
    assert abs(full.memory.peak - measured) / measured < 0.5, (full.memory.peak, measured)


def test_the_activation_profile_takes_a_dict_batch_at_any_batch_size(task: Path) -> None:
    ns = _load(task)
    model = ns["build"](3)
    template = batch_template(ns["data"]()[0], 1)
    act = profile_activations(model, 4, 0, input_shape=template)
    assert act.profile.input_shape == template.with_batch(4) and act.shapes["head"] == ((4, 3),)
    assert act.input_text == "input audio 4x64, kind 4 int64"
    pred = predict_step(act, {n for n, _ in model.named_parameters()})
    assert pred.activations > 0 and pred.input_text == act.input_text


def test_advise_cli_takes_the_batch_from_the_datas_first_sample(task: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["advise", f"py:{task.name}:build", "--data", f"py:{task.name}:data", "--memory", "1GB",
               "--batch-size", "8", "--num-classes", "3", "--device", "cpu", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads(out)
    assert data["input_shape"] == {"audio": [8, 64], "kind": [8]} and data["candidates"]
    rc = main(["advise", f"py:{task.name}:build", "--data", f"py:{task.name}:data", "--memory", "1GB",
               "--batch-size", "8", "--num-classes", "3", "--device", "cpu", "--measure", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "input audio 8x64, kind 8 int64" in out, out
    assert "measured peak" in out


def test_a_model_that_refuses_the_dict_names_its_keys(task: Path) -> None:
    ns = _load(task)
    wrong = DictBatch((("audio", (2, 64), "float32"), ("other", (2,), "int64")))
    with pytest.raises(AdvisorError, match=r"input audio 2x64, other 2 int64: TypeError.*dict inputs"):
        advise(ns["build"](3), 10**9, wrong)
    with pytest.raises(AdvisorError, match="entry 'kind' is not a tensor"):
        batch_template(({"audio": torch.zeros(2), "kind": 3}, 0), 2)
    with pytest.raises(AdvisorError, match="input of type str"):
        batch_template(("text", 0), 2)
    model = nn.Linear(2, 2)
    assert advise(model, 10**9, (2, 2)).input_shape == (2, 2)
