"""The window opens the models people fine-tune: timm, Hugging Face folders, your own code,
structure-only (meta) models, and the cost panel says whether a plan fits a 24 / 80 GB GPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from tests.fixtures.exported import BLOCK_WORKBENCH
from tests.preload import python_argv
from tests.timeouts import GUI_WORKER_S, SUBPROCESS_LONG_S, SUBPROCESS_S, ms
from workbench.core.models.memory import estimate_memory
from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import LoadRequest, factory_candidates, path_kind, request_for_plan
from workbench.gui.plan.cost_panel import fit_text

FACTORY_CODE = '''
import torch.nn as nn


def build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def broken():
    raise RuntimeError("no GPU here")


def not_a_model():
    return 42


def _private():
    return None


class Net(nn.Module):
    pass
'''


def wait_load(qtbot: Any, w: MainWindow, start: Any) -> bool:
    with qtbot.waitSignal(w.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert start() is not False
    return bool(blocker.args[0])


@pytest.fixture
def llama_dir(tmp_path: Path) -> Path:
    """A Llama-shaped config.json alone (2 layers, hidden 64): no weights, opens structure-only."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=256, architectures=["LlamaForCausalLM"],
    )
    folder = tmp_path / "llama-shaped"
    config.save_pretrained(folder)
    return folder


@pytest.fixture
def factory_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_net.py"
    path.write_text(FACTORY_CODE, encoding="utf-8")
    return path


def drop(window: MainWindow, path: Path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    assert event.isAccepted()


# ---------------------------------------------------------------- Qt-free helpers
def test_load_request_takes_a_prefixed_spec_and_keeps_positional_fields() -> None:
    assert LoadRequest("resnet18", "IMAGENET1K_V1").source == "torchvision"
    r = LoadRequest(name="timm:resnet10t")
    assert (r.source, r.name, r.spec_text) == ("timm", "resnet10t", "timm:resnet10t")
    assert LoadRequest(name="hf:/x/bert", meta=True).describe() == "hf:/x/bert · structure only"


def test_request_for_plan_names_the_plan_source() -> None:
    plan = FreezePlan(model={"source": "timm", "name": "resnet10t"})
    req = request_for_plan(plan, {"source": "torchvision", "name": "resnet18"})
    assert req is not None and (req.source, req.name) == ("timm", "resnet10t")
    assert request_for_plan(plan, {"source": "timm", "name": "resnet10t"}) is None


def test_path_kind_and_factory_candidates(tmp_path: Path, factory_file: Path) -> None:
    assert path_kind(tmp_path) == "folder"
    assert path_kind(factory_file) == "code"
    assert path_kind(tmp_path / "p.json") == "plan"
    assert path_kind(tmp_path / "w.safetensors") == "checkpoint"
    assert path_kind(tmp_path / "notes.txt") is None
    assert factory_candidates(factory_file) == ["build", "broken", "not_a_model", "Net"]
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n", encoding="utf-8")
    with pytest.raises(Exception, match="not valid Python"):
        factory_candidates(bad)


def test_fit_text_marks_each_gpu_size() -> None:
    est = estimate_memory(total=7_000_000_000, trainable=0, dtype="fp32")  # 28 GB of weights
    text = fit_text(est, rich=False)
    assert text.startswith("fp32: ") and text.endswith(" · 24 GB ✗ · 80 GB ✓")
    assert "✓" in fit_text(est) and "<span" in fit_text(est)
    half = estimate_memory(total=7_000_000_000, trainable=0, dtype="bf16")
    assert "24 GB ✓" in fit_text(half, rich=False)


# ---------------------------------------------------------------- the model bar
def test_source_selector_offers_every_source(window: MainWindow) -> None:
    bar = window.source_bar
    labels = [bar.source_box.itemText(i) for i in range(bar.source_box.count())]
    assert labels == ["torchvision", "timm", "Hugging Face", "Your code"]
    assert not bar.browse_button.isVisibleTo(bar)
    bar.select_source("py", search=False)
    assert bar.browse_button.isVisibleTo(bar) and not bar.weights_box.isEnabled()
    assert "runs that code" in bar.model_box.toolTip()
    bar.model_box.setEditText("net.py:build")
    bar.meta_box.setChecked(True)
    req = bar.request()
    assert (req.source, req.name, req.weights, req.meta) == ("py", "net.py:build", None, True)
    bar.select_source("torchvision", search=False)
    assert bar.current_name() == "resnet18" and bar.request().source == "torchvision"


def test_timm_search_lists_the_registry_with_cached_marks(window: MainWindow, qtbot: Any) -> None:
    pytest.importorskip("timm")
    bar = window.source_bar
    with qtbot.waitSignal(bar.namesReady, timeout=ms(GUI_WORKER_S)):
        bar.select_source("timm")
    names = bar.model_names()
    assert len(names) > 500 and "resnet10t" in names
    i = bar.model_box.findText("resnet10t")
    assert "cache" in bar.model_box.itemData(i, Qt.ItemDataRole.ToolTipRole)
    bar.model_box.setCurrentIndex(i)
    weights = [bar.weights_box.itemData(j) for j in range(bar.weights_box.count())]
    assert weights == [None, "DEFAULT"]


def test_model_bar_loads_a_timm_model(window: MainWindow, qtbot: Any) -> None:
    pytest.importorskip("timm")
    bar = window.source_bar
    bar.select_source("timm", search=False)
    bar.model_box.setEditText("resnet10t")
    bar.classes.setValue(5)
    assert wait_load(qtbot, window, bar.load_button.click)
    spec = window.controller.spec
    assert (spec["source"], spec["name"], spec["num_classes"]) == ("timm", "resnet10t", 5)
    assert "fc" in window.controller.tree.nodes


# ---------------------------------------------------------------- File ▸ Open, drops
def test_opens_a_hugging_face_folder_and_renders_it(window: MainWindow, qtbot: Any, bert_dir: Path, tmp_path: Path) -> None:
    assert wait_load(qtbot, window, lambda: window.documents.open_model_folder(str(bert_dir)))
    c = window.controller
    assert c.spec["source"] == "hf" and c.spec["name"] == str(bert_dir)
    assert c.loaded.label == "tiny-bert" and not c.loaded.meta
    assert "bert.encoder.layer.1.attention" in c.tree.nodes and "classifier" in c.tree.nodes
    assert window.source_bar.current_source() == "hf"
    assert window.source_bar.current_name() == str(bert_dir)
    assert "tiny-bert" in window.windowTitle()
    shot = tmp_path / "hf-window.png"
    assert window.grab().save(str(shot)) and shot.stat().st_size > 10_000


def test_exports_a_plain_script_for_a_hugging_face_folder(
    window: MainWindow, qtbot: Any, dialogs: Any, bert_dir: Path, tmp_path: Path
) -> None:
    assert wait_load(qtbot, window, lambda: window.documents.open_model_folder(str(bert_dir)))
    c = window.controller
    c.set_value(["bert.embeddings", "bert.encoder.layer.0"], "frozen", True)
    dialogs.script("save_file", str(tmp_path / "bert_plan"))
    assert window.documents.export_script() and not dialogs.kinds("error")
    script = tmp_path / "bert_plan.py"
    text = script.read_text()
    assert "import transformers" in text and "import torchvision" not in text and "import workbench" not in text
    state_file = tmp_path / "state.json"
    blocker = (BLOCK_WORKBENCH + "import runpy; "
               f"sys.argv = [{str(script)!r}, '--describe', {str(state_file)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')")
    subprocess.run(python_argv("-c", blocker), check=True, timeout=SUBPROCESS_S, capture_output=True, cwd=tmp_path,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    state = json.loads(state_file.read_text())
    assert state["trainable_count"] == c.counts.trainable and state["total_count"] == c.counts.total
    assert not any(n.startswith(("bert.embeddings", "bert.encoder.layer.0.")) for n in state["trainable"])


def test_file_menu_opens_a_folder_and_model_code(window: MainWindow, dialogs: Any) -> None:
    file_menu = window.menuBar().actions()[0].menu()
    texts = [a.text() for a in file_menu.actions()]
    assert "Open Model &Folder…" in texts and "Open Model C&ode…" in texts
    window.act_open_sources["hf"].trigger()  # cancelled folder dialog: nothing happens
    assert dialogs.kinds("open_dir") and not window.controller.busy


def test_opens_a_py_factory_and_says_it_runs_code(
    window: MainWindow, qtbot: Any, dialogs: Any, factory_file: Path
) -> None:
    dialogs.script("choose", "build")
    dialogs.script("ask", "Run")
    assert wait_load(qtbot, window, lambda: window.documents.open_model_code(str(factory_file)))
    (_kind, _title, label), = dialogs.kinds("choose")
    assert "runs this file's code" in label
    (_kind, title, question), = dialogs.kinds("ask")
    assert title == "Run model code?" and str(factory_file) in question and "def build" in question
    c = window.controller
    assert c.spec == {"source": "py", "name": f"{factory_file}:build", "fingerprint": c.tree.fingerprint}
    assert set(c.tree.nodes) == {"", "0", "1", "2"}
    assert c.loaded.label == "build (my_net.py)"


def test_drops_open_folders_and_code(
    window: MainWindow, qtbot: Any, dialogs: Any, bert_dir: Path, factory_file: Path
) -> None:
    assert wait_load(qtbot, window, lambda: drop(window, bert_dir))
    assert window.controller.spec["source"] == "hf"
    dialogs.script("choose", "build")
    dialogs.script("ask", "Run")
    assert wait_load(qtbot, window, lambda: drop(window, factory_file))
    assert window.controller.spec["source"] == "py"


# ---------------------------------------------------------------- structure only
def test_config_only_folder_opens_structure_only(window: MainWindow, qtbot: Any, llama_dir: Path) -> None:
    assert wait_load(qtbot, window, lambda: window.documents.open_model_folder(str(llama_dir)))
    c = window.controller
    assert c.loaded.meta and "structure only" in window.model_label.text()
    assert window.source_bar.meta_box.isChecked()  # built on meta: the box says so
    assert all(p.is_meta for p in c.model.parameters())
    assert "model.layers.1.self_attn" in c.tree.nodes
    root = window.proxy.index(0, 0)
    assert window.proxy.rowCount(root) > 0  # the tree shows
    assert c.counts is not None and c.counts.total > 0
    assert "24 GB" in window.cost_panel.fit_label.text()


def test_structure_only_checkbox_builds_on_meta(window: MainWindow, qtbot: Any) -> None:
    window.source_bar.meta_box.setChecked(True)
    window.source_bar.set_current({"name": "resnet50"})
    assert wait_load(qtbot, window, window.source_bar.load_button.click)
    c = window.controller
    assert c.loaded.meta and c.spec["name"] == "resnet50"
    assert next(c.model.parameters()).is_meta
    # Start refuses a structure-only model with a message, and adds no run
    errors: list[tuple[str, ...]] = []
    window.training.runs.errorOccurred.connect(lambda *a: errors.append(a))
    assert not window.training.panel.start()
    assert errors and "structure only" in errors[-1][1] and window.training.runs.records == []


# ---------------------------------------------------------------- bad input keeps the model
@pytest.mark.parametrize(
    "source, name, expected",
    [
        ("timm", "resnet10", "did you mean"),
        ("py", "FACTORY:broken", "raised RuntimeError: no GPU here"),
        ("py", "FACTORY:not_a_model", "returned int, not a torch.nn.Module"),
    ],
)
def test_bad_model_gives_one_message_and_keeps_the_model(
    window: MainWindow, qtbot: Any, dialogs: Any, factory_file: Path, source: str, name: str, expected: str
) -> None:
    if source == "timm":
        pytest.importorskip("timm")
    before = window.controller.tree.fingerprint
    bar = window.source_bar
    bar.select_source(source, search=False)
    bar.model_box.setEditText(name.replace("FACTORY", str(factory_file)))
    if source == "py":
        dialogs.script("ask", "Run")  # the code confirmation
    assert not wait_load(qtbot, window, bar.load_button.click)
    (_kind, title, message), = dialogs.kinds("error")
    assert title == "Cannot load model" and expected in message
    assert "\n" not in message and "Traceback" not in message
    assert window.controller.tree.fingerprint == before and window.controller.loaded.label == "resnet18"


def test_folder_without_config_is_refused_and_keeps_the_model(
    window: MainWindow, qtbot: Any, dialogs: Any, tmp_path: Path
) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    assert not wait_load(qtbot, window, lambda: window.documents.open_model_folder(str(empty)))
    (_kind, _title, message), = dialogs.kinds("error")
    assert "no config.json" in message
    assert window.controller.loaded.label == "resnet18"


def test_code_without_functions_is_refused(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n", encoding="utf-8")
    assert not window.documents.open_model_code(str(empty))
    (_kind, _title, message), = dialogs.kinds("error")
    assert "defines no top-level function" in message and not window.controller.busy


# ---------------------------------------------------------------- cost panel
def test_cost_panel_dtype_selector_answers_gpu_fit(window: MainWindow) -> None:
    panel = window.cost_panel
    state = window.controller.state
    assert [panel.dtype_box.itemText(i) for i in range(panel.dtype_box.count())] == ["fp32", "bf16", "fp16"]
    fp32 = state.memory("fp32")
    panel.set_dtype("bf16")
    bf16 = state.memory("bf16")
    assert bf16.param_bytes * 2 == fp32.param_bytes == 4 * state.counts.total
    assert fp32.grad_bytes == 4 * state.counts.trainable
    text = panel.fit_label.text()
    assert text.startswith("bf16:") and "24 GB" in text and "80 GB" in text and "✓" in text
    assert "gradients" in panel.fit_label.toolTip()
    with pytest.raises(ValueError, match="unknown dtype"):
        panel.set_dtype("int3")


def test_a_plus_b_counts_its_fixed_copy_in_the_estimate(window: MainWindow) -> None:
    c = window.controller
    c.set_value(["fc"], "reparam", {"kind": "a_plus_b"})
    est = c.state.memory("fp32")
    fc_params = c.tree.nodes["fc"].own_params
    assert c.state.fixed_params == fc_params
    assert est.param_bytes == 4 * (c.counts.total + fc_params)


# ---------------------------------------------------------------- workbench gui --model SPEC
def run_gui(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))
    return subprocess.run(
        python_argv("-m", "workbench", "gui", *args), capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=SUBPROCESS_LONG_S,
    )


def test_gui_command_opens_model_specs(tmp_path: Path, bert_dir: Path, factory_file: Path) -> None:
    out = tmp_path / "hf.png"
    r = run_gui(tmp_path, "--model", f"hf:{bert_dir}", "--screenshot", str(out))
    assert r.returncode == 0, r.stderr
    assert f"model: {bert_dir}" in r.stdout and out.stat().st_size > 10_000
    r = run_gui(tmp_path, "--model", f"py:{factory_file}:broken", "--screenshot", str(tmp_path / "py.png"))
    assert r.returncode == 2
    assert "raised RuntimeError: no GPU here" in r.stderr and "Traceback" not in r.stderr
