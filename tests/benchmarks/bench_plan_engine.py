"""``workbench inspect`` and the advisor's plan step on the 60,486-module MoE, for two source trees side by side.

The MoE is DeepSeek-V3-shaped (``tests/benchmarks/moe_model.py``: 61 layers × 256 experts, built
on the ``meta`` device). Measured, each in a fresh interpreter, for this tree and for the tree
given by ``--compare`` (an older checkout: ``git worktree add /tmp/before <commit>``):

- ``inspect``: ``workbench inspect py:tests/benchmarks/moe_model.py:build --meta --plan P
  --depth 1`` end to end (model build included: the same in both trees), with a plan that
  freezes everything but the last layer and puts BatchNorm-free modules' ``lr_scale`` on one
  layer;
- ``advise plans``: what the advisor does with each candidate's plan on that model: the tree
  once, then the trainable names of the last-k candidates for k = 1..4
  (:func:`~workbench.core.advisor.candidates.trainable_names`, which resolves the plan on the
  tree). ``workbench advise`` itself cannot profile this model: its routing reads token values,
  which a shape-only forward pass does not have.

It prints seconds per measure and the ratio of the compared tree to this one; it asserts nothing.

Run::

    python tests/benchmarks/bench_plan_engine.py --compare /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MOE = HERE / "moe_model.py"
PLAN = {"format": "freeze-plan", "version": 1, "rules": [
    {"select": "*", "frozen": True}, {"select": "layers.60", "frozen": False},
    {"select": "layers.59", "frozen": False, "lr_scale": 0.1}]}
ADVISE = """
import sys, time, torch
sys.path.insert(0, {bench!r})
import moe_model
from workbench.core.advisor.candidates import Candidate, trainable_names
from workbench.core.models.tree import ModelTree
from workbench.core.plan import FreezePlan, Rule
with torch.device("meta"):
    model = moe_model.build()
t = time.perf_counter()
tree = ModelTree.from_model(model)
for k in range(1, 5):
    rules = [Rule("*", frozen=True)] + [Rule(f"layers.{{60 - i}}", frozen=False) for i in range(k)] + [Rule("lm_head", frozen=False)]
    names = trainable_names(Candidate(f"last {{k}}", FreezePlan(rules), "last_k", k), model, tree)
print(time.perf_counter() - t)
"""


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    return env


def _inspect(src: Path, plan: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "workbench", "inspect", f"py:{MOE}:build", "--meta", "--plan", plan,
                    "--depth", "1"], env=_env(src), check=True, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    return time.perf_counter() - t


def _advise(src: Path) -> float:
    out = subprocess.run([sys.executable, "-c", ADVISE.format(bench=str(HERE))], env=_env(src), check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", type=Path, help="another source tree (its folder holding workbench/)")
    ap.add_argument("--json", help="write the results to this file")
    args = ap.parse_args()
    trees = [("this", ROOT)] + ([("compared", args.compare.resolve())] if args.compare else [])
    with tempfile.NamedTemporaryFile("w", suffix=".plan.json", delete=False) as f:
        json.dump(PLAN, f)
    results: dict[str, dict[str, float]] = {}
    try:
        for name, src in trees:
            results[name] = {"inspect": _inspect(src, f.name), "advise plans": _advise(src)}
    finally:
        os.unlink(f.name)
    print(f"{'measure':<14}" + "".join(f"{n:>12}" for n, _ in trees) + ("       ratio" if args.compare else ""))
    for measure in ("inspect", "advise plans"):
        line = f"{measure:<14}" + "".join(f"{results[n][measure]:>11.1f}s" for n, _ in trees)
        if args.compare:
            line += f"{results['compared'][measure] / results['this'][measure]:>11.1f}x"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
