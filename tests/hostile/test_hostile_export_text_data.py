"""Text data in the exported script: what the script cannot open as the workbench does is refused
in one line naming the setting, and the script never holds more than the run's own references."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from workbench.core.export import ExportError, render_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig


def _refused(model: nn.Module, spec: ModelSpec, **fields: object) -> str:
    with pytest.raises(ExportError) as info:
        render_script(FreezePlan(), spec, model=model, config=TrainConfig(steps=2, **fields))  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


def test_text_data_for_an_image_model_and_mixed_validation_are_refused(tmp_path: Path):
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))
    spec = ModelSpec(source="py", name="net:make")
    assert "config field 'data'" in _refused(net, spec, data=f"text:{tmp_path / 'd.jsonl'}", image_size=8)
    message = _refused(net, spec, data=f"hf-dataset:{tmp_path}", image_size=8, val=f"imagefolder:{tmp_path}")
    assert "config field 'val'" in message  # a dataset folder validates on a dataset folder


def test_a_text_model_refuses_image_data_and_validation_of_another_kind(tmp_path: Path):
    pytest.importorskip("transformers")
    from tests.core.models.hf_fixtures import save_folder, tiny_bert

    model = tiny_bert(num_labels=2)
    folder = save_folder(model, tmp_path / "bert")
    spec = ModelSpec(source="hf", name=str(folder))
    assert "synthetic tokens, text:PATH.jsonl or hf-dataset:PATH" in _refused(model, spec, data=f"imagefolder:{tmp_path}")
    message = _refused(model, spec, data=f"text:{tmp_path / 'd.jsonl'}", val="synthetic:8")
    assert "config field 'val'" in message
    message = _refused(model, spec, data="synthetic:8", val=f"text:{tmp_path / 'd.jsonl'}")
    assert "config field 'val'" in message


def test_hostile_column_names_and_paths_are_literals(tmp_path: Path):
    """A column name or a path with quotes, newlines and triple quotes stays a literal in the script."""
    pytest.importorskip("transformers")
    from tests.core.models.hf_fixtures import save_folder, tiny_bert

    model = tiny_bert(num_labels=2)
    folder = save_folder(model, tmp_path / "bert")
    evil = 'x"""\nimport os; os.system("echo pwned")\n\'\'\''
    text = render_script(FreezePlan(), ModelSpec(source="hf", name=str(folder)), model=model,
                         config=TrainConfig(steps=2, data=f"hf-dataset:{tmp_path / evil}", text_column=evil,
                                            label_column=evil))
    compile(text, "script.py", "exec")
    assert "\nimport os; os.system" not in text
    assert f"TEXT_COLUMN = {evil!r}" in text and f"LABEL_COLUMN = {evil!r}" in text
