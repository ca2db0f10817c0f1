"""``py:`` data, loss and metric are code: named by a config or a run record they never run (one line,
marker file never created); typed, a file that raises or returns garbage is one line; a huge file, a
FIFO, a symbolic link and a file that is not UTF-8 are handled without blocking or a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.makers import one_line_exit_2
from workbench.core.models.sources import CodeFromFileError
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.py_code import MAX_CODE_BYTES

CODE = '''
from pathlib import Path
import torch
from torch.utils.data import TensorDataset

Path({marker!r} + ".import").touch()


def data():
    Path({marker!r}).touch()
    return TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))


def loss(o, t):
    Path({marker!r}).touch()
    return torch.nn.functional.cross_entropy(o, t)


metric = loss
'''

_BASE = ["train", "--model", "py:{tiny}:make", "--steps", "1", "--batch-size", "4", "--device", "cpu", "--no-progress"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(evil code file, its marker, a tiny model file)."""
    marker = tmp_path / "ran"
    code = tmp_path / "evil.py"
    code.write_text(CODE.format(marker=str(marker)))
    tiny = tmp_path / "tiny.py"
    tiny.write_text("from torch import nn\n\ndef make():\n    return nn.Linear(4, 2)\n")
    return code, marker, tiny


def _ran(marker: Path) -> bool:
    return marker.exists() or Path(str(marker) + ".import").exists()


@pytest.mark.parametrize(("field", "flag", "func"), [("data", "--data", "data"), ("val", "--val", "data"),
                                                      ("loss", "--loss", "loss"), ("metric", "--metric", "metric")])
def test_a_config_naming_code_never_runs_it(tmp_path: Path, files: tuple[Path, Path, Path], field: str, flag: str,
                                            func: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, marker, tiny = files
    cfg = tmp_path / "cfg.json"
    extra = {"val_every": 1} if field in ("val", "metric") else {}
    cfg.write_text(json.dumps({field: f"py:{code}:{func}", **extra}))
    argv = [a.format(tiny=tiny) for a in _BASE] + ["--config", str(cfg)]
    if field != "data":
        argv += ["--data", "synthetic:8", "--input-shape", "4"]
    one_line_exit_2(argv, capsys, f"config file {cfg} names {'data' if field == 'val' else field} code",
                    f"{flag if field != 'val' else '--data'} py:{code}:{func}")
    assert not _ran(marker)


def test_a_run_record_naming_code_never_runs_it(tmp_path: Path, files: tuple[Path, Path, Path]) -> None:
    code, marker, tiny = files
    record = tmp_path / "run" / "config.json"
    record.parent.mkdir()
    TrainConfig(model=f"py:{tiny}:make", data=f"py:{code}:data", loss=f"py:{code}:loss", steps=1).save(record)
    cfg = TrainConfig.load(record).replace(model=f"py:{tiny}:make", steps=2)  # the model typed again, the rest not
    with pytest.raises(CodeFromFileError, match="names loss code"):
        Trainer(cfg).setup()
    with pytest.raises(CodeFromFileError, match="names data code"):
        Trainer(cfg.replace(loss="cross_entropy")).setup()
    assert not _ran(marker)


def test_typed_code_runs(files: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    code, marker, tiny = files
    rc = main([a.format(tiny=tiny) for a in _BASE] + ["--data", f"py:{code}:data", "--loss", f"py:{code}:loss"])
    assert rc == 0 and marker.exists(), capsys.readouterr().err


@pytest.mark.parametrize(("body", "needle"), [
    ("def data():\n    raise KeyError('no shard 3')\n", "data function py:{f}:data raised KeyError: 'no shard 3'"),
    ("def data():\n    return 42\n", "is int, not a map-style dataset"),
    ("def data():\n    return []\n", "has no items"),
    ("def data():\n    return 'text'\n", "item 0 is str, not an (input, target) pair"),
    ("raise SystemError('at import')\ndef data():\n    pass\n", "running data file {f} failed: SystemError: at import"),
    ("def other():\n    pass\n", "has no function 'data'"),
    ("def data(:\n", "failed: SyntaxError"),
])
def test_data_code_that_fails_is_one_line(tmp_path: Path, files: tuple[Path, Path, Path], body: str, needle: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, _, tiny = files
    f = tmp_path / "d.py"
    f.write_text(body)
    one_line_exit_2([a.format(tiny=tiny) for a in _BASE] + ["--data", f"py:{f}:data"], capsys, needle.format(f=f))


def test_a_loss_that_returns_garbage_fails_the_run_in_one_line(tmp_path: Path, files: tuple[Path, Path, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    code, _, tiny = files
    f = tmp_path / "l.py"
    f.write_text("def loss(o, t):\n    return [1.0]\n")
    rc = main([a.format(tiny=tiny) for a in _BASE] + ["--data", f"py:{code}:data", "--loss", f"py:{f}:loss"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and f"loss py:{f}:loss returned list, not a scalar tensor" in err, err


@pytest.mark.parametrize("kind", ["fifo", "huge", "binary", "folder", "missing", "dangling"])
def test_a_code_path_that_is_no_code_file_is_one_line(tmp_path: Path, files: tuple[Path, Path, Path], kind: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _, marker, tiny = files
    f = tmp_path / "x.py"
    needle = {"fifo": "is not a regular file", "huge": "more than the 8 MB", "binary": "is not UTF-8 text",
              "folder": "is not a regular file", "missing": "cannot be read", "dangling": "cannot be read"}[kind]
    if kind == "fifo":
        os.mkfifo(f)  # opening it for reading would block: it is never opened
    elif kind == "huge":
        with open(f, "wb") as fh:
            fh.truncate(MAX_CODE_BYTES + 1)  # sparse: nothing written
    elif kind == "binary":
        f.write_bytes(b"def data():\n    return '\xff\xfe'\n")
    elif kind == "folder":
        f.mkdir()
    elif kind == "dangling":
        f.symlink_to(tmp_path / "gone.py")
    for flag in ("--data", "--loss", "--metric"):
        argv = [a.format(tiny=tiny) for a in _BASE] + [flag, f"py:{f}:data"]
        if flag != "--data":
            argv += ["--data", "synthetic:8", "--input-shape", "4"]
        one_line_exit_2(argv, capsys, needle)
    assert not _ran(marker)


def test_a_symlinked_code_file_runs_the_file_it_names(tmp_path: Path, files: tuple[Path, Path, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    code, marker, tiny = files
    link = tmp_path / "link.py"
    link.symlink_to(code)
    rc = main([a.format(tiny=tiny) for a in _BASE] + ["--data", f"py:{link}:data"])
    assert rc == 0 and marker.exists(), capsys.readouterr().err


@pytest.mark.parametrize("spec", ["py:", "py:data", "py:f.py:", "py:f.py:not-a-name", "py:a b:f"])
def test_malformed_specs_are_one_line(files: tuple[Path, Path, Path], spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, tiny = files
    one_line_exit_2([a.format(tiny=tiny) for a in _BASE] + ["--data", spec], capsys, "data")
