"""Negative values of every number and size option: one line, exit 2, never argparse's usage
block (``--memory -5GB`` is a value, not an unknown option), and refused before a model is built."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest

from workbench import cli
from workbench.core.errors import WorkbenchError
from workbench.core.models.spec import ModelSpec
from workbench.core.training.config import MAX_EPOCHS, MAX_STEPS

#: The least each command needs before the option under test.
BASE = {
    "train": ["--model", "resnet18", "--device", "cpu"],
    "advise": ["resnet18", "--memory", "4GB"],
    "bench": ["resnet18"],
    "doctor": ["--model", "resnet18"],
    "export": ["--model", "resnet18", "--plan", "{plan}", "--to", "{out}"],
    "inspect": ["resnet18"],
    "sweep": ["--model", "resnet18", "--memory", "4GB", "--out", "{out}"],
}
#: Options whose range is checked once the model is known (the sweep's learning rates and its
#: plan limit apply to the advisor's plans), and options where a negative number is meaningful.
AFTER_BUILD = {("sweep", "--lr"), ("sweep", "--limit")}
SIGNED = {("sweep", "--min-retention")}  # a threshold on the user's own retention metric


def _options() -> list[tuple[str, str, str]]:
    out = []
    for name in cli.COMMANDS:
        if name == "gui":
            continue
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        for act in sub._actions:
            flag = act.option_strings[-1] if act.option_strings else ""
            if act.type in (int, float):
                out.append((name, flag, "-5"))
            elif act.dest in ("memory", "cache_budget"):
                out.append((name, flag, "-5GB"))
    return [o for o in out if o[:2] not in SIGNED]


class BuiltError(WorkbenchError):
    """The model was built: the option was not checked first."""


def _run(argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = int(e.code or 0)
    return rc, [ln for ln in err.getvalue().splitlines() if ln.strip()]


@pytest.mark.parametrize("command, flag, value", _options(), ids=lambda v: str(v))
def test_a_negative_value_is_one_line_exit_2(command: str, flag: str, value: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}))
    if (command, flag) not in AFTER_BUILD:
        monkeypatch.setattr(ModelSpec, "build", lambda *a, **k: (_ for _ in ()).throw(BuiltError("built")))
    base = [a.format(plan=plan, out=tmp_path / "out.py" if command == "export" else tmp_path / "sw") for a in BASE[command]]
    rc, lines = _run([command, *base, flag, value])
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"workbench {command}: error: ") and "built" not in lines[0], lines[0]
    assert "usage:" not in lines[0] and "expected one argument" not in lines[0], lines[0]


def test_every_number_option_is_covered() -> None:
    """The list above comes from the parsers: a new number option is tested without a new line here."""
    found = {(c, f) for c, f, _ in _options()}
    assert ("advise", "--memory") in found and ("train", "--steps") in found and ("train", "--cache-budget") in found
    assert len(found) > 40


@pytest.mark.parametrize("argv, needle", [
    (["train", "--steps", str(10**26)], f"must be at most {MAX_STEPS:,}"),
    (["train", "--epochs", str(MAX_EPOCHS + 1)], f"must be at most {MAX_EPOCHS:,}"),
    (["train", "--steps", "1e26"], "invalid int value: '1e26'"),
    (["train", "--steps", "abc"], "invalid int value"),
    (["train", "--no-such-option"], "unrecognized arguments"),
    (["trian"], "invalid choice: 'trian'"),
    (["advise", "resnet18", "--memory"], "expected one argument"),
])
def test_every_parse_error_is_one_line(argv: list[str], needle: str) -> None:
    rc, lines = _run([*argv, "--device", "cpu"] if argv[0] == "train" else argv)
    assert rc == 2 and len(lines) == 1 and needle in lines[0], lines


def test_a_negative_size_with_equals_says_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(["advise", "resnet18", "--memory=-5GB"])[1] == _run(["advise", "resnet18", "--memory", "-5GB"])[1]
