"""The Runs tab reads out a run's frozen-prefix cache (size held, hit rate) in its Setup cell."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torchvision
from PySide6.QtWidgets import QTableWidgetItem, QWidget
from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.store import RunStore
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_tab import COLUMNS, RunsPanel, cache_text, setup_text

_OWNERS: list[QWidget] = []


def _head_only_summary() -> tuple[dict[str, Any], dict[str, Any]]:
    """A real run's summary and config: resnet18 head only, 32 px, 10 steps over 4 batches."""
    plan = {"format": "freeze-plan", "version": 1,
            "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}
    cfg = TrainConfig(plan=plan, data="synthetic:32", batch_size=8, steps=10, device="cpu", seed=0, image_size=32)
    torch.manual_seed(0)
    t = Trainer(cfg, model=torchvision.models.resnet18(num_classes=10))
    for _ in t.steps():
        pass
    assert t.result is not None and t.result.ok
    return t.result.summary, cfg.to_dict()


def test_cache_text_reads_the_summary_and_ignores_what_is_not_a_cache() -> None:
    c = {"cut": "fc", "rows": 32, "bytes_memory": 65536, "bytes_disk": 1000, "hits": 6, "misses": 4, "hit_rate": 0.6}
    assert cache_text(c) == "cache 67 kB hit 60%"
    assert cache_text(None) == "" and cache_text({"cut": None}) == "" and cache_text("cache") == ""
    assert cache_text({"cut": "fc", "bytes_memory": "lots", "hit_rate": 7}) == ""  # hand-edited junk: nothing shown
    assert cache_text({"cut": "fc", "bytes_memory": 2_000_000, "hit_rate": None}) == "cache 2 MB"
    assert setup_text({"optimizer": "adamw", "batch_size": 8, "device": "cpu"}, frozen_cache=c) == "adamw bs8 cpu cache 67 kB hit 60%"


def test_runs_tab_setup_shows_a_real_runs_cache(qtbot: Any, runs_dir: Path) -> None:
    summary, config = _head_only_summary()
    stats = summary["frozen_cache"]
    assert stats["cut"] == "fc" and stats["hits"] == 6 and stats["misses"] == 4
    owner = QWidget()
    _OWNERS[:] = [owner]
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    store = RunStore(runs_dir)
    rec = store.new_record("#1 resnet18 head", status="completed", config=config, summary=summary,
                           plan={"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]})
    store.save(rec)
    uncached = store.new_record("#2 uncached", status="completed", config={**config, "cache_frozen": "off"},
                                summary={**summary, "frozen_cache": None, "frozen_cache_note": None})
    store.save(uncached)
    runs = RunController(c, RunStore(runs_dir), owner)
    panel = RunsPanel(runs, owner)
    owner.resize(1400, 300)
    panel.resize(1400, 300)
    def item(r: int, c: int) -> QTableWidgetItem:
        it = panel.table.item(r, c)
        assert it is not None
        return it

    row = next(i for i in range(panel.table.rowCount()) if item(i, 0).text().startswith("#1"))
    other = 1 - row
    cell = item(row, COLUMNS.index("Setup"))
    assert "cache 66 kB hit 60%" in cell.text()  # 32 rows of 512 float32 held, 6 of 10 steps served
    assert "frozen-prefix cache: input of 'fc', 32 samples, 66 kB in memory + 0 B on disk, hit rate 60% (6 of 10 steps)" in cell.toolTip()
    assert "cache" not in item(other, COLUMNS.index("Setup")).text()
    if os.environ.get("WORKBENCH_SHOTS"):
        panel.show()
        qtbot.waitExposed(panel, timeout=ms(GUI_EVENT_S))
        panel.grab().save(str(Path(os.environ["WORKBENCH_SHOTS"]) / "runs_cache.png"))
