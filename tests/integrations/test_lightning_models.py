"""The Lightning callback names its model with the model-spec syntax (timm:, hf:, py:, torchvision)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

L = pytest.importorskip("lightning")
pytest.importorskip("timm")
pytest.importorskip("transformers")

from tests.core.models.hf_fixtures import save_folder, tiny_bert
from workbench.core.models.zoo import ModelSourceError
from workbench.core.plan.rules import FreezePlan
from workbench.integrations.lightning import FreezePlanCallback

pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Found \d+ module\(s\) in eval mode"),
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
    pytest.mark.filterwarnings("ignore:The '\\w+_dataloader' does not have many workers"),
]

HEAD_ONLY = [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}, {"select": "layer4", "frozen": False}]


def _trainer(tmp_path: Path, cb) -> L.Trainer:
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, default_root_dir=str(tmp_path), max_steps=2, callbacks=[cb])


class TwoResnets(L.LightningModule):
    """A frozen teacher and the student the plan is for: both have layer4 and fc, so the plan's
    selectors alone cannot tell them apart; the model spec's structure does."""

    def __init__(self, freeze) -> None:
        super().__init__()
        import timm

        self.freeze = [freeze]
        self.teacher = timm.create_model("resnet10t", pretrained=False)  # 1000 classes
        self.student = freeze.build_model()  # timm:resnet10t with 3 classes, from the spec

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.student(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.freeze[0].param_groups(lr=0.1), lr=0.1)


def _images():
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 3, (4,), generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=2)


@pytest.mark.parametrize("where", ["argument", "plan_block"])
def test_timm_spec_builds_the_model_and_finds_its_submodule(where, tmp_path):
    if where == "argument":
        cb = FreezePlanCallback({"rules": HEAD_ONLY}, model="timm:resnet10t", num_classes=3)
    else:
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"format": "freeze-plan", "version": 1, "rules": HEAD_ONLY,
                                    "model": {"source": "timm", "name": "resnet10t", "num_classes": 3}}))
        cb = FreezePlanCallback(path)
    lit = TwoResnets(cb)
    assert lit.student.fc.out_features == 3
    w0 = lit.student.layer4[0].conv1.weight.detach().clone()
    _trainer(tmp_path, cb).fit(lit, _images())
    assert cb.module == "student"
    assert not lit.student.conv1[0].weight.requires_grad and lit.student.fc.weight.requires_grad
    assert all(p.requires_grad for p in lit.teacher.parameters())  # not the plan's model: untouched
    assert not torch.equal(lit.student.layer4[0].conv1.weight, w0)


class Bert(L.LightningModule):
    def __init__(self, freeze) -> None:
        super().__init__()
        self.freeze = [freeze]
        self.head = nn.Linear(4, 4)  # something else the LightningModule holds
        self.model = freeze.build_model()

    def training_step(self, batch, batch_idx):
        ids, labels = batch
        return self.model(input_ids=ids, labels=labels).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.freeze[0].param_groups(lr=1e-3, weight_decay=0.01, no_decay="auto"))


def test_hf_folder_spec(tmp_path):
    folder = save_folder(tiny_bert(num_labels=2), tmp_path / "bert", weights="none")
    plan = {"rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False},
                      {"select": "param:bert.encoder.layer.1.*.bias", "frozen": False}]}
    cb = FreezePlanCallback(plan, model=f"hf:{folder}")
    lit = Bert(cb)
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randint(0, 99, (4, 8), generator=g), torch.randint(0, 2, (4,), generator=g))
    trainer = _trainer(tmp_path, cb)
    trainer.fit(lit, torch.utils.data.DataLoader(ds, batch_size=2))
    assert cb.module == "model"
    trainable = [n for n, p in lit.model.named_parameters() if p.requires_grad]
    assert "classifier.weight" in trainable and "bert.encoder.layer.1.output.dense.bias" in trainable
    assert "bert.encoder.layer.1.output.dense.weight" not in trainable
    decays = {n: g["weight_decay"] for g in trainer.optimizers[0].param_groups for n in g["param_names"]}
    assert decays["classifier.weight"] == 0.01 and decays["classifier.bias"] == 0.0  # no_decay="auto"


def test_py_and_torchvision_specs_build(tmp_path):
    (tmp_path / "net.py").write_text("from torch import nn\n\ndef make():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 5))\n")
    cb = FreezePlanCallback({"rules": [{"select": "0", "frozen": True}]}, model=f"py:{tmp_path / 'net.py'}:make", num_classes=2)
    assert cb.build_model()[1].out_features == 2
    cb = FreezePlanCallback({"rules": []}, model="resnet18", num_classes=4)
    assert cb.build_model().fc.out_features == 4


def test_no_model_named_and_bad_spec_are_one_line():
    with pytest.raises(ModelSourceError, match="no model named: pass model="):
        FreezePlanCallback({"rules": []}).build_model()
    with pytest.raises(ModelSourceError, match="unknown timm model"):
        FreezePlanCallback({"rules": []}, model="timm:no_such_net").build_model()
    with pytest.raises(ModelSourceError, match="num_classes must be a positive integer"):
        FreezePlanCallback({"rules": []}, model="resnet18", num_classes=0)


def test_plan_block_py_spec_is_not_run_to_find_the_module(tmp_path):
    """A shared plan file must not run code by naming it: the selectors decide instead."""
    marker = tmp_path / "ran"
    (tmp_path / "evil.py").write_text(f"from pathlib import Path\n\ndef make():\n    Path({str(marker)!r}).touch()\n")
    plan = FreezePlan.from_dict({"rules": [{"select": "fc", "frozen": True}],
                                 "model": {"source": "py", "name": f"{tmp_path / 'evil.py'}:make"}})
    cb = FreezePlanCallback(plan)
    holder = nn.Module()
    holder.net = nn.Sequential()
    holder.net.fc = nn.Linear(2, 2)
    cb.apply(holder)
    assert cb.module == "net" and not marker.exists()
