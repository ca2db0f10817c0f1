"""The training panel's Data list offers a Hugging Face dataset folder (``hf-dataset:PATH``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWidget
from torch import nn

from workbench.core.runs.store import RunStore
from workbench.core.training.config import ConfigError
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.panel import TrainingPanel
from workbench.gui.training.run_controller import RunController


def test_hf_dataset_in_the_data_list(qtbot: Any, runs_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from tests.integrations.hf_data import image_dataset
    from workbench.core.training.data_sources import make_dataset

    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    panel = TrainingPanel(c, RunController(c, RunStore(runs_dir), owner), None, owner)
    i = panel.data_box.findData("hf-dataset")
    assert i >= 0 and "save_to_disk" in panel.data_box.itemText(i)
    panel.data_box.setCurrentIndex(i)
    assert not panel.data_path.isHidden() and not panel.browse.isHidden()
    with pytest.raises(ConfigError, match="choose the folder of the HF dataset"):
        panel.config()
    folder = image_dataset(tmp_path / "pets")
    panel.data_path.setText(str(folder))
    cfg = panel.config()
    assert cfg.data == f"hf-dataset:{folder}"
    assert len(make_dataset(cfg.data, image_size=16, num_classes=2)) == 5
    owner.resize(1100, 120)
    panel.setParent(owner)
    owner.show()
    owner.grab().save("/tmp/i28/hf_panel.png")
