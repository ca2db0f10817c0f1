"""The exported script of a run with ``py:`` data, loss or metric: code named by a run record is
refused (nothing runs), and a reference with odd characters is written as a literal, never
pasted into the script's code."""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from workbench.core.export import ExportError, render_script
from workbench.core.export.from_run import load_run
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig

MODEL: dict[str, Any] = {"source": "torchvision", "name": "resnet18", "num_classes": 4}


def _record(config: dict[str, Any]) -> dict[str, Any]:
    """An app run's ``run.json`` with ``config``."""
    return {"format": "workbench-run", "version": 1, "id": "run", "name": "#1", "config": config, "plan": {"rules": []}}


@pytest.mark.parametrize("field", ["data", "loss", "metric"])
def test_py_code_named_by_a_run_record_is_refused_and_never_runs(field: str, tmp_path: Path):
    marker = tmp_path / "ran"
    code = tmp_path / "evil.py"
    code.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef f(*a):\n    raise SystemExit\n")
    folder = tmp_path / "run"
    folder.mkdir()
    config = {"model": MODEL, "data": "synthetic:16", "steps": 2, "val_every": 1, field: f"py:{code}:f"}
    (folder / "run.json").write_text(json.dumps(_record(config)))
    saved = load_run(folder)
    with pytest.raises(ExportError) as info:
        render_script(saved.plan, saved.spec, config=saved.config)
    message = str(info.value)
    assert "\n" not in message and f"--{field} py:" in message and "never run" in message
    assert not marker.exists()


def test_a_reference_with_odd_characters_is_a_literal(tmp_path: Path):
    marker = tmp_path / "ran"
    folder = tmp_path / "it's \"odd\" \\N{x} \"\"\" ); open('x','w') #"
    folder.mkdir()
    code = folder / "task'\".py"
    code.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef f(*a):\n    raise SystemExit\n")
    cfg = TrainConfig(model=MODEL, data=f"py:{code}:f", loss=f"py:{code}:f", metric=f"py:{code}:f", steps=2, val_every=1)
    text = render_script(FreezePlan(), ModelSpec(**MODEL), config=cfg)
    assert not marker.exists()  # exporting runs none of it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no invalid escape in the docstring either
        tree = ast.parse(text)
    values = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name)}
    assert ast.literal_eval(values["PY_DATA"]) == {cfg.data: (str(code.resolve()), "f")}
    assert ast.literal_eval(values["LOSS_REF"]) == (str(code.resolve()), "f")
    assert ast.literal_eval(values["METRIC_REF"]) == (str(code.resolve()), "f")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "open"]
    assert not calls  # the folder's "open(...)" stayed inside string literals


def test_export_run_refuses_the_records_py_data_until_it_is_typed(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from workbench.cli import main

    marker = tmp_path / "ran"
    code = tmp_path / "task.py"
    code.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef data():\n    raise SystemExit\n")
    folder = tmp_path / "run"
    folder.mkdir()
    config = {"model": MODEL, "data": f"py:{code}:data", "steps": 2}
    (folder / "run.json").write_text(json.dumps(_record(config)))
    dest = tmp_path / "out.py"
    rc = main(["export", "--run", str(folder), "--to", str(dest)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and f"--data py:{code}:data" in err[0], err
    assert not dest.exists() and not marker.exists()
    assert main(["export", "--run", str(folder), "--to", str(dest), "--data", f"py:{code}:data"]) == 0
    assert f"PY_DATA = {{{config['data']!r}: {(str(code.resolve()), 'data')!r}}}" in dest.read_text()
    assert not marker.exists()  # exporting runs none of it; the script runs it when it trains
