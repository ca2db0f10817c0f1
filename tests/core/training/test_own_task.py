"""Your own data, loss, metric and input shape: the tables, and runs on audio-like, tabular and dict inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.core.training.config import ConfigError, TrainConfig, parse_input_shape
from workbench.core.training.data_sources import DATA_SOURCES, data_source_of
from workbench.core.training.engine import Trainer
from workbench.core.training.losses import LOSSES, LossSpecError, loss_name, make_loss
from workbench.core.training.task_metrics import METRICS, make_metric, metric_label, metric_name

TASK = '''
import torch
from torch.utils.data import TensorDataset


def frames():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 64, generator=g)
    y = (x[:, :8] > 0).float()          # 8 labels per sample: multi-label
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])


def table():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 5, generator=g)
    return TensorDataset(x, x[:, :1] * 2.0)  # regression on 5 features


def exact(output, target):
    return float(((output > 0).float() == target).float().mean())


def half_mse(output, target):
    return 0.5 * torch.nn.functional.mse_loss(output, target)
'''


@pytest.fixture
def task(tmp_path: Path) -> Path:
    p = tmp_path / "task.py"
    p.write_text(TASK)
    return p


class Audio(nn.Module):
    """A tiny 1-D net on (B, 64) frames with BatchNorm and a head of 8 outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, padding=2)
        self.bn = nn.BatchNorm1d(4)
        self.head = nn.Linear(4 * 64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x[:, None]))).flatten(1))


class TwoInputs(nn.Module):
    """A model called with keywords: ``model(a=..., b=...)``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(2, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.a(a) + self.b(b)))


class DictData(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> tuple[dict[str, torch.Tensor], int]:
        g = torch.Generator().manual_seed(i)
        return {"a": torch.randn(3, generator=g), "b": torch.randn(2, generator=g)}, i % 3


def test_tables_name_every_row_and_aliases_resolve() -> None:
    assert list(LOSSES) == ["cross_entropy", "bce", "mse", "l1"] and list(METRICS) == ["accuracy", "top5"]
    assert loss_name("BCE-with-logits") == "bce" and loss_name("CE") == "cross_entropy" and metric_name("acc") == "accuracy"
    assert loss_name("py: f.py:g") == "py:f.py:g" and metric_label("py:a/b.py:pitch") == "pitch"
    with pytest.raises(LossSpecError, match="is not one of"):
        loss_name("hinge")
    with pytest.raises(ConfigError, match="config field 'metric'"):
        TrainConfig(metric="f1").validate()
    assert {s.key for s in DATA_SOURCES.values() if s.runs_code} == {"py"}
    assert data_source_of("py:x.py:f") is DATA_SOURCES["py"] and data_source_of("nope:x") is None


def test_builtin_losses_and_metrics_on_a_batch() -> None:
    out = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.2, 3.0]])
    labels = torch.tensor([0, 1])
    bce = make_loss("bce")
    # class labels are one-hot for BCE; a target of another size is one line
    assert torch.isclose(bce(out, labels), nn.functional.binary_cross_entropy_with_logits(out, torch.eye(3)[labels]))
    with pytest.raises(TypeError, match=r"the mse loss needs a target of the output's shape \(2, 3\), got \(2, 2\)"):
        make_loss("mse")(out, torch.zeros(2, 2))
    assert float(make_loss("l1")(out, out)) == 0.0
    top1, top5 = make_metric("accuracy"), make_metric("top5")
    for m in (top1, top5):
        m.update(out, labels, 2)
    assert top1.value() == 0.5 and top5.value() == 1.0
    multi = make_metric("accuracy")
    multi.update(out, torch.zeros(2, 3), 2)  # not class labels: accuracy does not apply
    assert multi.value() is None


def test_py_loss_and_metric_run_and_their_results_are_checked(task: Path, tmp_path: Path) -> None:
    loss = make_loss(f"py:{task}:half_mse")
    assert float(loss(torch.ones(2, 1), torch.zeros(2, 1))) == 0.5
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef vec(o, t):\n    return o.sum(1)\ndef word(o, t):\n    return 'high'\n")
    with pytest.raises(TypeError, match=r"returned a tensor of shape \(2,\), not a scalar tensor"):
        make_loss(f"py:{bad}:vec")(torch.ones(2, 3), torch.ones(2, 3))
    metric = make_metric(f"py:{bad}:word")
    with pytest.raises(TypeError, match="returned str, not a number"):
        metric.update(torch.ones(2, 3), torch.ones(2, 3), 2)


def test_input_shape_parses_and_refuses() -> None:
    assert parse_input_shape("3, 224x224") == (3, 224, 224) and parse_input_shape([1024]) == (1024,)
    assert TrainConfig(input_shape=[3, 8, 8]).validate().input_shape == (3, 8, 8)
    cfg = TrainConfig(input_shape=(16,)).validate()
    assert TrainConfig.from_json(cfg.to_json()).input_shape == (16,)
    for bad in ("", "0", "3,-1", "a,b", [1.5], [True], "1," * 9, [2**20, 2**20]):
        with pytest.raises(ConfigError, match="input shape"):
            parse_input_shape(bad)


def test_multi_label_audio_frames_train_with_bce_and_a_py_metric(task: Path) -> None:
    """(train, val) from the data function: validation on, before the first step too; the model's head kept."""
    torch.manual_seed(0)
    model = Audio()
    head = model.head
    t = Trainer(TrainConfig(data=f"py:{task}:frames", loss="bce", metric=f"py:{task}:exact", steps=12, batch_size=16,
                            lr=0.01, device="cpu", val_at_start=True), model=model)
    r = t.run()
    s = r.summary
    assert r.status == "completed" and r.verify is not None and r.verify.ok, r.message
    assert t.model.head is head and t.new_heads == [] and t.head_note == ""
    assert s["input_shape"] == [64] and s["val_samples"] == 32 and s["loss_name"] == "bce"
    assert s["metric_name"] == f"py:{task}:exact" and s["val_acc"] is None
    assert 0 <= s["start_val_metric"] <= 1 and s["val_metric"] > s["start_val_metric"]
    assert s["best_val_metric"] == s["val_metric"] and s["val_loss"] < s["start_val_loss"]


def test_tabular_regression_with_mse_and_the_cache_on(task: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
    plan = {"format": "freeze-plan", "version": 1, "rules": [{"select": "0", "frozen": True}]}
    t = Trainer(TrainConfig(data=f"py:{task}:table", loss="mse", steps=8, batch_size=16, device="cpu", plan=plan,
                            cache_frozen="auto"), model=model)
    r = t.run()
    assert r.status == "completed" and r.verify is not None and r.verify.ok, r.message
    stats = r.summary["frozen_cache"]
    assert stats is not None and stats["hits"] > 0, (stats, r.summary["frozen_cache_note"])  # a TensorDataset is exact
    assert r.summary["input_shape"] == [5] and math.isfinite(r.summary["final_loss"])


def test_dict_inputs_are_passed_as_keywords() -> None:
    torch.manual_seed(0)
    t = Trainer(TrainConfig(steps=4, batch_size=8, device="cpu", val_every=2), model=TwoInputs(), dataset=DictData())
    r = t.run()
    assert r.status == "completed" and r.verify is not None and r.verify.ok, r.message
    assert r.summary["input_shape"] == {"a": [3], "b": [2]} and r.summary["val_acc"] is not None


def test_synthetic_data_takes_the_input_shape() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 10))
    t = Trainer(TrainConfig(data="synthetic:64", input_shape=(32,), steps=2, batch_size=8, device="cpu"), model=model)
    r = t.run()
    assert r.status == "completed" and t.dataset is not None and t.dataset[0][0].shape == (32,)


def test_a_run_record_keeps_what_named_its_code(task: Path, tmp_path: Path) -> None:
    record = tmp_path / "config.json"
    TrainConfig(data=f"py:{task}:frames", loss=f"py:{task}:half_mse", metric=f"py:{task}:exact").save(record)
    cfg = TrainConfig.load(record).replace(steps=3)
    assert all(cfg.origin_of(f) == f"config file {record}" for f in ("data", "loss", "metric"))
    assert cfg.origin_of("val") is None and cfg.replace(loss="bce").origin_of("loss") is None
    assert json.loads(record.read_text())["loss"] == f"py:{task}:half_mse"


def test_the_activation_profile_takes_one_samples_shape() -> None:
    """The cost panel's estimate (profile_activations) for audio frames: no image batch assumed."""
    from workbench.core.advisor.activations import predict_step, profile_activations

    model = Audio()
    act = profile_activations(model, 4, 0, input_shape=(64,))
    assert act.input_text == "input 64" and act.profile.input_shape == (4, 64) and act.shapes["head"] == ((4, 8),)
    pred = predict_step(act, {n for n, _ in model.named_parameters()})
    assert pred.input_text == "input 64" and pred.activations > 0


def test_a_model_fed_images_it_does_not_take_names_the_input_shape() -> None:
    r = Trainer(TrainConfig(data="synthetic:8", image_size=8, steps=1, batch_size=4, device="cpu"), model=Audio()).run()
    assert r.status == "failed" and "but got input of size" in r.message and "--input-shape" in r.message, r.message
