"""Time building the module tree and resolving a plan on large models.

Run: python tests/benchmarks/bench_tree.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torchvision
from torch import nn

from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, Rule


def _nested(n_blocks: int = 170) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(10)]) for _ in range(n_blocks)])


def _time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    models = {
        "nested Sequential (5k+ modules)": _nested(),
        "vit_l_16": torchvision.models.vit_l_16(weights=None),
        "convnext_large": torchvision.models.convnext_large(weights=None),
    }
    print(f"{'model':34} {'modules':>8} {'tree ms':>9} {'resolve ms':>11} {'freeze-root set ms':>19}")
    for name, model in models.items():
        tree = ModelTree.from_model(model)
        plan = FreezePlan([Rule("*", frozen=True), Rule("type:Linear", lr_scale=0.5)])
        t_tree = _time(lambda: ModelTree.from_model(model), args.repeat)
        t_res = _time(lambda: plan.resolve(tree), args.repeat)

        def toggle() -> None:
            p = plan.copy()
            p.set("", "frozen", False, tree)
            p.resolve(tree)

        t_set = _time(toggle, args.repeat)
        print(f"{name:34} {len(tree):8d} {t_tree * 1e3:9.1f} {t_res * 1e3:11.1f} {t_set * 1e3:19.1f}")


if __name__ == "__main__":
    main()
