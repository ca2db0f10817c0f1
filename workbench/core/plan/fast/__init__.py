"""The plan engine for large trees: flat pre-order arrays, a plan resolved over them with numpy,
and the parameter and memory counts of every row (Qt-free, torch-free).

- :mod:`~workbench.core.plan.fast.layout`: the tree as flat pre-order arrays;
- :mod:`~workbench.core.plan.fast.resolve`: a plan's settings over any set of rows, and the
  part of a tree a plan edit can reach;
- :mod:`~workbench.core.plan.fast.counts`: each row's own and subtree counts, in named columns.

:meth:`FreezePlan.resolve <workbench.core.plan.rules.FreezePlan.resolve>` resolves a large tree
here; the app's tree and cost panel, ``workbench inspect`` and the advisor read the counts.
"""
