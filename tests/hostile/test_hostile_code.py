"""Nothing runs from a file the user did not type: a ``py:`` model named by a plan, a config
or a run record is refused with one line (marker file never created), and a Hugging Face
folder never runs its own code (``auto_map``) or trains from random weights it lacks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from torch import nn

from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_S
from workbench.cli import main
from workbench.core.models.sources import CodeFromFileError, check_code_origin
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    """``evil.py:make`` touches a marker file when it runs; returns (file, marker)."""
    marker = tmp_path / "ran"
    code = tmp_path / "evil.py"
    code.write_text(
        "from pathlib import Path\nfrom torch import nn\n\n"
        f"Path({str(marker)!r} + '.import').touch()\n\n"
        f"def make():\n    Path({str(marker)!r}).touch()\n    return nn.Linear(4, 2)\n"
    )
    return code, marker


def _ran(marker: Path) -> bool:
    return marker.exists() or Path(str(marker) + ".import").exists()


def _plan(tmp_path: Path, code: Path) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"format": "freeze-plan", "version": 1,
                             "model": {"source": "py", "name": f"{code}:make"},
                             "rules": [{"select": "*", "frozen": False}]}))
    return p


def _one_line(rc: int, err: str, *needles: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["train", "--plan", "{plan}", "--steps", "1"],
    ["doctor", "--plan", "{plan}"],
    ["export", "--plan", "{plan}", "--to", "{out}"],
    ["inspect", "--plan", "{plan}"],
])
def test_a_plan_naming_code_never_runs_it(tmp_path: Path, evil: tuple[Path, Path], argv: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, marker = evil
    plan = _plan(tmp_path, code)
    args = [a.format(plan=plan, out=tmp_path / "x.py") for a in argv]
    rc = main(args)
    line = _one_line(rc, capsys.readouterr().err, "names model code", f"--model py:{code}:make")
    assert "plan file" in line
    assert not _ran(marker) and not (tmp_path / "x.py").exists()


@pytest.mark.parametrize("model", ["py:{code}:make", {"source": "py", "name": "{code}:make"},
                                   {"source": "torchvision", "name": "py:{code}:make"}])
def test_a_config_naming_code_never_runs_it(tmp_path: Path, evil: tuple[Path, Path], model: object,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, marker = evil
    cfg = tmp_path / "cfg.json"
    text = json.dumps({"model": model, "steps": 1}).replace("{code}", str(code))
    cfg.write_text(text)
    rc = main(["train", "--config", str(cfg)])
    _one_line(rc, capsys.readouterr().err, f"config file {cfg} names model code")
    assert not _ran(marker)


def test_a_run_record_config_never_runs_code(tmp_path: Path, evil: tuple[Path, Path]) -> None:
    """A run folder's config.json (a run record) is a config file: loading it marks the model."""
    code, marker = evil
    record = tmp_path / "run" / "config.json"
    record.parent.mkdir()
    TrainConfig(model=f"py:{code}:make", steps=1).save(record)
    cfg = TrainConfig.load(record).replace(steps=2)  # replace keeps where the model came from
    assert cfg.model_origin == f"config file {record}"
    with pytest.raises(Exception, match="names model code"):
        Trainer(cfg).setup()
    assert not _ran(marker)


def test_typed_code_still_runs(tmp_path: Path, evil: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The rule refuses only what a file names: the same spec typed on the command line runs,
    also over a config and a plan that name other code."""
    code, marker = evil
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"model": f"py:{code}:make"}))
    rc = main(["inspect", f"py:{code}:make", "--plan", str(_plan(tmp_path, code))])
    assert rc == 0 and marker.exists(), capsys.readouterr().err
    marker.unlink()
    assert isinstance(ModelSpec(source="py", name=f"{code}:make").build(), nn.Linear) and marker.exists()


def test_lightning_callback_refuses_the_plans_code(tmp_path: Path, evil: tuple[Path, Path]) -> None:
    pytest.importorskip("lightning")
    from workbench.integrations.lightning import FreezePlanCallback

    code, marker = evil
    cb = FreezePlanCallback(FreezePlan.load(_plan(tmp_path, code)))
    with pytest.raises(CodeFromFileError, match=r"model=|--model py:"):
        cb.build_model()
    assert not _ran(marker)
    typed = FreezePlanCallback(FreezePlan.load(_plan(tmp_path, code)), model=f"py:{code}:make")
    assert isinstance(typed.build_model(), nn.Linear) and marker.exists()


def test_spec_from_data_never_runs_code_and_keeps_its_origin(tmp_path: Path, evil: tuple[Path, Path]) -> None:
    code, marker = evil
    spec = ModelSpec.from_dict({"source": "py", "name": f"{code}:make"})
    for build in (spec.build, lambda: spec.build(meta=True), spec.head_classes):
        with pytest.raises(CodeFromFileError):
            build()
    assert "origin" not in spec.to_dict()  # no file can clear it
    check_code_origin("timm", "resnet18", "plan file x.json")  # code-free sources pass
    assert not _ran(marker)


def test_gui_refuses_a_plans_code_without_the_confirmation(tmp_path: Path, evil: tuple[Path, Path]) -> None:
    """``workbench PLAN.json`` (the app): the confirmation dialog is answered Cancel headless,
    so nothing runs; the model loaded is the default one."""
    pytest.importorskip("PySide6")
    code, marker = evil
    plan = _plan(tmp_path, code)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(python_argv("-m", "workbench", str(plan), "--screenshot", str(tmp_path / "s.png")),
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=SUBPROCESS_S)
    assert "Run model code?" in r.stderr and f"{code}" in r.stderr and "-> Cancel" in r.stderr, r.stderr
    assert "Path(" in r.stderr  # the first lines of the function were shown
    assert not _ran(marker)


# ---------------------------------------------------------------- Hugging Face folders
def _bert_config(**extra: object) -> dict[str, object]:
    return {"model_type": "bert", "architectures": ["BertForSequenceClassification"], "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
            "max_position_embeddings": 64, **extra}


def test_hf_folder_with_auto_map_never_runs_its_code(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder = tmp_path / "remote"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "config.json").write_text(json.dumps(
        _bert_config(model_type="evil", auto_map={"AutoConfig": "modeling_evil.EvilConfig",
                                                  "AutoModel": "modeling_evil.EvilModel"})))
    (folder / "modeling_evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n")
    r = subprocess.run(python_argv("-m", "workbench", "inspect", f"hf:{folder}"), input="y\ny\n",
                       capture_output=True, text=True, cwd=tmp_path, timeout=SUBPROCESS_S,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    _one_line(r.returncode, r.stderr, "auto_map", "never runs")
    assert not marker.exists()


def test_hf_shard_index_naming_missing_files_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_bert_config()))
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"bert.embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors"}}))
    rc = main(["train", "--model", f"hf:{folder}", "--steps", "1", "--num-classes", "2"])
    _one_line(rc, capsys.readouterr().err, "model-00001-of-00002.safetensors", "lacks")


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, "not json", "[1, 2]"])
def test_hf_config_json_is_read_bounded(tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "config.json").write_text(content)
    rc = main(["inspect", f"hf:{folder}"])
    _one_line(rc, capsys.readouterr().err, "config.json")


# ---------------------------------------------------------------- what the "Run model code?" dialog shows
def test_the_outline_lists_every_top_level_statement_and_runs_none(tmp_path: Path) -> None:
    """Importing runs imports, calls, decorators and class bodies: each is listed, none is run."""
    from workbench.core.models.code_outline import top_level_statements

    marker = tmp_path / "ran"
    code = tmp_path / "net.py"
    code.write_text(
        "import os\n"
        f"os.system('touch {marker}')\n"
        "@print\n"
        "def build():\n    return None\n"
        "class Net:\n    x = open('/etc/hostname').read()\n"
        "X = [\n    1,\n]\n"
    )
    text = top_level_statements(code)
    for needle in ("1  import os", "2  os.system(", "3  @print …", "6  class Net: …", "8  X = [ …"):
        assert needle in text, text
    assert not marker.exists()


@pytest.mark.parametrize("content, needle", [
    (b"\xff\xfe not utf-8", "cannot read the file"),
    (b"def (:\n", "cannot read the file"),
    (b"x = " + b"(" * 200_000 + b")" * 200_000, "cannot read the file"),
])
def test_the_outline_of_a_hostile_file_is_one_line(tmp_path: Path, content: bytes, needle: str) -> None:
    from workbench.core.models.code_outline import top_level_statements

    code = tmp_path / "net.py"
    code.write_bytes(content)
    text = top_level_statements(code, max_bytes=10_000_000)
    assert needle in text and "\n" not in text


def test_the_outline_of_a_huge_file_or_a_fifo_reads_nothing(tmp_path: Path) -> None:
    import os

    from workbench.core.models.code_outline import top_level_statements

    big = tmp_path / "big.py"
    with big.open("wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse
    assert "not shown" in top_level_statements(big)
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    assert "not a file" in top_level_statements(fifo)  # never opened: no wait for a writer
