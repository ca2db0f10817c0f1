"""The accelerate recipe of docs/integrations.md, run from the doc with ``accelerate launch``
(2 CPU processes, gloo): a stage unfreezes a layer, the replicas stay identical, verify holds;
without ``rebuild_ddp`` they drift apart (that run's ranks are forked from a preloaded server,
``tests/fixtures/ranks.py``: the launcher is not what it is about)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from tests.fixtures.ranks import run_ranks
from tests.fixtures.torchrun import launcher
from tests.timeouts import SUBPROCESS_LONG_S

pytest.importorskip("accelerate")
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _recipe() -> str:
    m = re.search(r"cat > train_accelerate.py <<'EOF'\n(.*?)\nEOF\n", DOC.read_text(), re.DOTALL)
    assert m, "the accelerate recipe is missing from docs/integrations.md"
    return m.group(1)


def _quoted_output() -> list[str]:
    """The lines the doc shows the recipe printing (the text block after it)."""
    m = re.search(r"train_accelerate\.py\n```\n\n```text\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    assert m, "the recipe's output is no longer quoted after it in docs/integrations.md"
    return m.group(1).splitlines()


def _launch(script: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    python, env = launcher(env)  # the launcher and the ranks are forks of the preloaded interpreter
    cmd = [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
           str(script)]
    if torch.cuda.is_available():  # the recipe picks the GPU when there is one; this test is about CPU processes
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run(cmd, cwd=script.parent, env=env, capture_output=True, text=True, timeout=SUBPROCESS_LONG_S, check=False)


def test_recipe_keeps_replicas_identical_and_needs_the_rebuild(tmp_path):
    recipe = _recipe()
    script = tmp_path / "train_accelerate.py"
    script.write_text(recipe)
    done = _launch(script)
    assert done.returncode == 0, done.stderr[-4000:]
    for line in _quoted_output():  # what the doc says it prints (the docs tier leaves this block to this test)
        assert line in done.stdout, (line, done.stdout)
    assert "2 processes, replicas identical: True" in done.stdout

    assert "rebuild_ddp(model)" in recipe
    script.write_text(recipe.replace("rebuild_ddp(model)", "pass"))
    drift = run_ranks(script, [], tmp_path, env={"HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert drift.returncode == 0, drift.stdout[-4000:]
    assert "2 processes, replicas identical: False" in drift.stdout
