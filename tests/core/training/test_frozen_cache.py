"""The frozen-prefix activation cache: exact (same per-step losses as uncached), bounded, refused when unsafe."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.data import Dataset

from tests.core.models.hf_fixtures import tiny_bert
from workbench.core.training.cache_store import SPILL_NAME, RowStore, parse_budget
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.data import SyntheticImageDataset
from workbench.core.training.engine import Trainer
from workbench.core.training.setup import TrainError


def _plan(*train: str, eval_lock: bool = False, stages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    lock = {"eval": True} if eval_lock else {}
    unlock = {"eval": False} if eval_lock else {}
    d: dict[str, Any] = {"format": "freeze-plan", "version": 1,
                         "rules": [{"select": "*", "frozen": True, **lock}]
                         + [{"select": s, "frozen": False, **unlock} for s in train]}
    if stages:
        d["stages"] = stages
    return d


def run_cached(model_fn: Any, plan: dict[str, Any], mode: str, **kw: Any) -> tuple[Trainer, list[float], list[str]]:
    """Train ``model_fn()`` under ``plan`` with the frozen-prefix cache ``mode``; the trainer, losses and events."""
    torch.manual_seed(0)
    model = model_fn()
    defaults: dict[str, Any] = {"data": "synthetic:32", "batch_size": 8, "steps": 10, "device": "cpu", "seed": 0}
    defaults.update(kw)
    t = Trainer(TrainConfig(plan=plan, cache_frozen=mode, **defaults), model=model)
    losses: list[float] = []
    events: list[str] = []
    for m in t.steps():
        losses.append(m.loss)
        events.extend(m.events)
    assert t.result is not None and t.result.ok, t.result and t.result.message
    return t, losses, events


def _resnet18() -> nn.Module:
    return torchvision.models.resnet18(num_classes=10)


def _assert_same(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6), (a, b)


def test_resnet18_head_only_losses_match_uncached() -> None:
    plan = _plan("fc")
    t_off, off, _ = run_cached(_resnet18, plan, "off", image_size=32)
    t_on, on, events = run_cached(_resnet18, plan, "auto", image_size=32)
    _assert_same(off, on)
    stats = t_on.result.summary["frozen_cache"]
    assert stats["cut"] == "fc" and stats["hits"] == 6 and stats["misses"] == 4 and stats["rows"] == 32
    assert stats["bytes_memory"] == 32 * 512 * 4
    assert not events  # the cache works silently; the summary reads it out
    assert t_on.result.verify.ok and t_off.result.summary["frozen_cache"] is None


def _convnext() -> nn.Module:
    from torchvision.models.convnext import CNBlockConfig

    return torchvision.models.convnext.ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)


def _vit() -> nn.Module:
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10
    )


def _timm_vit() -> nn.Module:
    timm = pytest.importorskip("timm")
    return timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=10
    )


@pytest.mark.parametrize(
    ("model_fn", "train", "cut"),
    [
        (_convnext, ["classifier"], "classifier"),
        (_convnext, ["features.3", "classifier"], "features.3"),  # through the last stage
        (_vit, ["heads"], "heads"),
        (_vit, ["encoder.layers.encoder_layer_1", "encoder.ln", "heads"], "encoder.layers.encoder_layer_1"),
        (_timm_vit, ["head"], "head"),
        (_timm_vit, ["blocks.1", "norm", "fc_norm", "head"], "blocks.1"),
    ],
    ids=["convnext-head", "convnext-last-stage", "vit-head", "vit-last-layer", "timm-vit-head", "timm-vit-last-block"],
)
def test_convnext_and_vit_cuts_match_uncached(model_fn: Any, train: list[str], cut: str) -> None:
    plan = _plan(*train)
    _, off, _ = run_cached(model_fn, plan, "off", image_size=32)
    t_on, on, _ = run_cached(model_fn, plan, "auto", image_size=32)
    _assert_same(off, on)
    stats = t_on.result.summary["frozen_cache"]
    assert stats["cut"] == cut and stats["hits"] == 6 and stats["misses"] == 4
    assert t_on.result.verify.ok


def test_tiny_bert_layer_cut_losses_match_uncached() -> None:
    plan = _plan("bert.encoder.layer.1", "classifier", eval_lock=True)
    _, off, _ = run_cached(tiny_bert, plan, "off")
    t_on, on, _ = run_cached(tiny_bert, plan, "auto")
    _assert_same(off, on)
    stats = t_on.result.summary["frozen_cache"]
    assert stats["cut"] == "bert.encoder.layer.1" and stats["hits"] > 0
    assert t_on.result.verify.ok


def test_stage_unfreezing_the_prefix_drops_the_cache_and_stays_exact() -> None:
    stages = [{"at_step": 6, "rules": [{"select": "layer4", "frozen": False}]}]
    plan = _plan("fc", stages=stages)
    _, off, _ = run_cached(_resnet18, plan, "off", image_size=16, steps=14, optimizer="sgd")
    t_on, on, events = run_cached(_resnet18, plan, "on", image_size=16, steps=14, optimizer="sgd")
    _assert_same(off, on)
    assert any("frozen-prefix cache dropped" in e for e in events)
    stats = t_on.result.summary["frozen_cache"]
    assert stats["invalidations"] == 1 and stats["cut"] == "layer4"


def test_cut_falls_back_to_the_enclosing_block() -> None:
    t, _, _ = run_cached(_resnet18, _plan("layer3.1.conv2", "fc"), "on", image_size=32)
    assert t.result.summary["frozen_cache"]["cut"] == "layer3.1"


def test_dropout_in_train_mode_before_the_cut_is_refused_by_name() -> None:
    t, _, events = run_cached(tiny_bert, _plan("classifier"), "auto")
    line = next(e for e in events if e.startswith("frozen-prefix cache off"))
    assert "bert.embeddings.dropout" in line and "eval" in line
    assert t.result.summary["frozen_cache"]["hits"] == 0


class _Skip(nn.Module):
    """A head that also reads the stem's output past the cut: no clean cut there."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        return self.head(h) + h.sum(dim=1, keepdim=True)


def test_skip_connection_around_the_cut_is_refused() -> None:
    t, _, events = run_cached(_Skip, _plan("head"), "on", image_size=16)
    line = next(e for e in events if e.startswith("frozen-prefix cache off"))
    assert "no clean cut at 'head'" in line
    assert t.result.summary["frozen_cache"]["cut"] is None


def test_budget_zero_spills_to_the_run_folder_and_cleans_up(tmp_path: Path) -> None:
    plan = _plan("fc")
    _, off, _ = run_cached(_resnet18, plan, "off", image_size=32)
    save = tmp_path / "run"
    t, on, _ = run_cached(_resnet18, plan, "on", image_size=32, cache_budget=0, save_dir=str(save))
    _assert_same(off, on)
    stats = t.result.summary["frozen_cache"]
    assert stats["bytes_memory"] == 0 and stats["bytes_disk"] == 32 * 512 * 4 and stats["hits"] == 6
    assert not (save / SPILL_NAME).exists()
    assert not list(tmp_path.rglob(SPILL_NAME))


def test_budget_zero_without_a_run_folder_uses_a_private_temporary_file() -> None:
    t, _, _ = run_cached(_resnet18, _plan("fc"), "on", image_size=32, cache_budget="0")
    assert t.result.summary["frozen_cache"]["bytes_disk"] == 32 * 512 * 4


class _Augmented(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self) -> None:
        self.base = SyntheticImageDataset(16, 16, 10)
        self.transform = lambda x: x + torch.randn_like(x)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.base[i]
        return self.transform(x), y


def test_auto_refuses_data_not_known_to_be_deterministic_with_one_line() -> None:
    torch.manual_seed(0)
    cfg = TrainConfig(plan=_plan("fc"), batch_size=8, steps=4, device="cpu", image_size=16)
    t = Trainer(cfg, model=_resnet18(), dataset=_Augmented())
    result = t.run()
    assert result.ok and result.summary["frozen_cache"] is None
    note = result.summary["frozen_cache_note"]
    assert note.startswith("frozen-prefix cache off:") and "--cache-frozen on" in note and "\n" not in note


def test_on_refuses_at_setup_where_it_cannot_work() -> None:
    cfg = TrainConfig(plan=_plan("fc"), batch_size=8, steps=4, device="cpu", image_size=16, cache_frozen="on", compile=True)
    with pytest.raises(TrainError, match="--cache-frozen on: not with --compile"):
        Trainer(cfg, model=_resnet18()).setup()


def test_auto_stays_off_for_full_fine_tuning_and_single_epoch_runs() -> None:
    t, _, events = run_cached(_resnet18, _plan("*"), "auto", image_size=16, optimizer="sgd")
    assert t.cache is None and not any("cache" in e for e in events)
    t, _, events = run_cached(_resnet18, _plan("fc"), "auto", image_size=16, steps=3)
    assert t.cache is None and not any("cache" in e for e in events)


@pytest.mark.parametrize("value, needle", [
    ({"cache_frozen": "maybe"}, "cache_frozen"),
    ({"cache_frozen": True}, "cache_frozen"),
    ({"cache_budget": "lots"}, "not a size"),
    ({"cache_budget": "-1"}, "not a size"),
    ({"cache_budget": "9" * 30 + "T"}, "not a size"),
    ({"cache_budget": "999999T"}, "above 1 PiB"),
    ({"cache_budget": 1.5}, "size"),
])
def test_config_rejects_bad_cache_settings(value: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        TrainConfig(**value).validate()


def test_parse_budget_units() -> None:
    assert parse_budget("512M") == 512 << 20
    assert parse_budget("1.5G") == int(1.5 * (1 << 30))
    assert parse_budget(" 2 gib ") == 2 << 30
    assert parse_budget("auto") is None and parse_budget(None) is None and parse_budget(0) == 0


def test_row_store_round_trip_memory_and_file(tmp_path: Path) -> None:
    store = RowStore(10, (3,), torch.bfloat16, torch.device("cpu"), budget=4 * 3 * 2, spill_dir=tmp_path)
    assert store.mem_rows == 4 and store.disk_rows == 6 and (tmp_path / SPILL_NAME).stat().st_size == 6 * 3 * 2
    idx = torch.tensor([9, 0, 5, 3])
    rows = torch.arange(12, dtype=torch.bfloat16).view(4, 3)
    store.put(idx, rows)
    assert store.has_all(idx) and not store.has_all(torch.tensor([1])) and not store.has_all(torch.tensor([10]))
    assert torch.equal(store.get(idx), rows)
    store.put(idx, rows + 1)  # a filled row is kept
    assert torch.equal(store.get(idx), rows)
    store.close()
    assert not (tmp_path / SPILL_NAME).exists()


def test_row_store_never_writes_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / SPILL_NAME).symlink_to(target)
    store = RowStore(4, (2,), torch.float32, torch.device("cpu"), budget=0, spill_dir=tmp_path)
    assert store.capacity == 0 and "cannot be created" in store.note
    store.close()
    assert target.read_text() == "keep me" and (tmp_path / SPILL_NAME).is_symlink()
