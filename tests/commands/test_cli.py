"""The command line: help, version, inspect, and one-line errors with a non-zero exit code."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.preload import python_argv
from workbench.cli import COMMANDS, main
from workbench.core.plan.rules import FreezePlan, Rule

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s+\S", out, re.M), f"{name} missing from --help"


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert re.match(r"freeze-workbench \d+\.\d+", capsys.readouterr().out)


def test_inspect_table_and_plan(tmp_path, capsys):
    plan = tmp_path / "p.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).save(plan)
    assert main(["inspect", "resnet18", "--plan", str(plan), "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "Trainable params: 513,000 (4.4%)" in out
    assert re.search(r"^\s+bn1\s+BatchNorm2d\s+128\s+0\s+128\s+yes", out, re.M)
    assert re.search(r"^\s+fc\s+Linear\s+513k\s+513k\s+0", out, re.M)
    assert "layer1.0" not in out  # depth 1


def test_inspect_json(capsys):
    assert main(["inspect", "resnet18", "--num-classes", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fc = next(m for m in data["modules"] if m["path"] == "fc")
    assert fc["params"] == 5130 and data["counts"]["total"] == 11_181_642
    assert len(data["fingerprint"]) == 64


@pytest.mark.parametrize(
    "argv, words",
    [
        (["inspect", "resnet19"], "did you mean resnet18"),
        (["inspect", "resnet18", "--plan", "/nope.json"], "no such plan file"),
        (["inspect", "resnet18", "--checkpoint", "/nope.pt"], "nope.pt"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and err.count("\n") == 1


def test_bad_plan_selector_named(tmp_path, capsys):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"rules": [{"select": "*", "frozen": True}, {"select": "layer5", "frozen": False}]}))
    assert main(["inspect", "resnet18", "--plan", str(plan)]) == 2
    err = capsys.readouterr().err
    assert "rule 1" in err and "'layer5' matches no module" in err and "layer4" in err


def test_python_dash_m_entry_point():
    r = subprocess.run(python_argv("-m", "workbench", "inspect", "resnet18", "--depth", "0"),
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "Total params:     11,689,512" in r.stdout


def test_bench_compares_plan_with_full_fine_tuning(tmp_path, capsys):
    plan = tmp_path / "fc.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).save(plan)
    argv = ["bench", "resnet18", "--plan", str(plan), "--steps", "2", "--warmup", "1",
            "--batch-size", "2", "--image-size", "32", "--device", "cpu", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["variant"] for r in rows] == ["full fine-tuning", "fc.json"]
    assert rows[0]["ratio"] == 1.0 and rows[0]["trainable_params"] == 11_689_512
    assert rows[1]["trainable_params"] == 513_000 and rows[1]["verify_ok"]
    assert 0 <= rows[1]["optimizer_state_bytes"] - 2 * 513_000 * 4 < 64  # exp_avg, exp_avg_sq (+ step scalars)
    assert rows[1]["training_bytes"] < rows[0]["training_bytes"]


def test_bench_bad_plan_is_one_line(capsys):
    assert main(["bench", "--plan", "/nope.json", "--steps", "1"]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_every_command_module_is_complete():
    import importlib

    for name, cmd in COMMANDS.items():
        mod = importlib.import_module(cmd.module)
        assert callable(mod.add_arguments) and callable(mod.run), name
        assert cmd.help and "\n" not in cmd.help


def test_help_and_version_import_neither_torch_nor_qt():
    code = (
        "import sys\n"
        "from workbench.cli import main\n"
        "for argv in (['--help'], ['--version']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'PySide6', 'pyqtgraph'))\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_command_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
