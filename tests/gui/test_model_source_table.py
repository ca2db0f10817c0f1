"""A model source is one row of the source table, all the way up: a throwaway row registered
in ``SOURCES`` shows in the model bar with its label, placeholder, ``…`` button and weights,
has its File menu entry, opens from the window through its file dialog or a drop, and is
exported through its own script hook, with no other code knowing its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.timeouts import GUI_WORKER_S, ms
from workbench.core.export import render_script
from workbench.core.models import sources
from workbench.core.models.build_request import BuildRequest
from workbench.core.models.script_code import ScriptModel, ScriptRequest
from workbench.core.models.sources import Browse, ModelSource, OwnWeights
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import path_kind, source_for_path

_BUILD = '''

def build_model() -> nn.Module:
    """The toy model: TOY_FILE names it."""
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
'''


def _toy_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


def _build(req: BuildRequest) -> nn.Module:
    if not Path(req.name).is_file():
        raise sources.ModelSourceError(f"{req.name}: no such toy file")
    return _toy_model()


def _script(req: ScriptRequest) -> ScriptModel:
    return ScriptModel([], "torch and a toy file", [f"TOY_FILE = {req.path(Path(req.name))!r}"], _BUILD)


TOY = ModelSource(
    key="toy", description="toy models read from .toy files", label="Toy zoo", placeholder="a .toy file",
    extra=None, build=_build, names=lambda pattern: [], cached=lambda name, weights: True, script=_script,
    browse=Browse("file", "Open toy model", "Choose a .toy file", "Open &Toy Model…", "Open a .toy file",
                  "Toy models (*.toy);;All files (*)"),
    own_weights=OwnWeights("From the toy file", "weights from the toy file"),
    searchable=False, short_name=lambda name: f"toy {Path(name).stem}",
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The toy row in the source table, and one toy file."""
    monkeypatch.setitem(sources.SOURCES, "toy", TOY)
    path = tmp_path / "tiny.toy"
    path.write_text("toy", encoding="utf-8")
    return path


def test_the_model_bar_offers_a_new_row_as_the_table_says(toy: Path, qtbot: Any) -> None:
    w = MainWindow(load_default=False)
    qtbot.addWidget(w)
    bar = w.source_bar
    i = bar.source_box.findData("toy")
    assert i >= 0 and bar.source_box.itemText(i) == "Toy zoo"
    bar.select_source("torchvision", search=False)
    assert not bar.browse_button.isVisibleTo(bar)  # torchvision names are chosen, not browsed
    bar.select_source("toy", search=False)
    edit = bar.model_box.lineEdit()
    assert edit is not None and edit.placeholderText() == "a .toy file"
    assert bar.browse_button.isVisibleTo(bar) and bar.browse_button.toolTip() == "Choose a .toy file"
    assert "opens offline" not in bar.model_box.toolTip()
    assert [bar.weights_box.itemText(j) for j in range(bar.weights_box.count())] == ["From the toy file"]
    assert not bar.weights_box.isEnabled()


def test_the_browse_button_opens_a_new_row_with_its_file_dialog(toy: Path, qtbot: Any, dialogs: Any) -> None:
    w = MainWindow(load_default=False)
    qtbot.addWidget(w)
    w.source_bar.select_source("toy", search=False)
    dialogs.script("open_file", str(toy))
    with qtbot.waitSignal(w.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        w.source_bar.browse_button.click()
        assert dialogs.kinds("open_file") == [("open_file", "Open toy model", "Toy models (*.toy);;All files (*)")]
    assert blocker.args[0] is True
    c = w.controller
    assert c.spec["source"] == "toy" and c.spec["name"] == str(toy)
    assert c.loaded.label == "toy tiny" and c.loaded.note == "weights from the toy file"
    assert set(c.tree.nodes) == {"", "0", "1", "2", "3"}


def test_export_builds_a_new_row_through_its_script_hook(toy: Path) -> None:
    plan = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [{"select": "0", "frozen": True}]})
    spec = ModelSpec(source="toy", name=str(toy))  # type: ignore[arg-type]  # a row added at run time
    text = render_script(plan, spec, script_dir=toy.parent)
    assert "TOY_FILE = 'tiny.toy'" in text  # named relative to the script, by the hook's req.path
    assert "nn.Linear(4, 3)" in text and "torch and a toy file" in text
    assert "torchvision" not in text


def test_a_new_row_has_its_file_menu_entry_and_opens_when_dropped(toy: Path, qtbot: Any, dialogs: Any) -> None:
    w = MainWindow(load_default=False)
    qtbot.addWidget(w)
    file_menu = w.menuBar().actions()[0].menu()
    assert "Open &Toy Model…" in [a.text() for a in file_menu.actions()]
    w.act_open_sources["toy"].trigger()  # cancelled file dialog: nothing happens
    assert dialogs.kinds("open_file") == [("open_file", "Open toy model", "Toy models (*.toy);;All files (*)")]
    assert not w.controller.busy
    assert path_kind(toy) == "model" and source_for_path(toy) == "toy"
    assert path_kind(toy.with_suffix(".txt")) is None
    with qtbot.waitSignal(w.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert w.documents.open_path(str(toy))  # what a drop or a recent file does
    assert blocker.args[0] is True and w.controller.spec["source"] == "toy"
