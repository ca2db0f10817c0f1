"""The freeze doctor: prove a freezing setup is right, statically and over real training steps.

Two entry points, both returning :class:`~workbench.core.checks.findings.Finding` lists (severity,
module path, what is wrong, why it costs, the fix):

- :func:`check` looks at a model (and optionally its optimizer and plan) as it stands:
  frozen parameters in the optimizer, trainable parameters missing from it, the same
  parameter in two groups, frozen BatchNorm in train mode, BatchNorm put in eval by hand
  (the next ``model.train()`` undoes it), parameters that are not leaves or retain their
  gradient (A+B written by hand), gradient hooks that zero or mask gradients, tied weights
  partly frozen, a model that does not follow its plan, and the plan linter's findings.
- :func:`watch` observes real optimizer steps::

      with doctor.watch(model, optimizer, steps=50) as w:
          for x, y in loader:
              optimizer.zero_grad()
              loss = loss_fn(model(x), y)
              loss.backward()
              optimizer.step()          # the watcher records here (a step post-hook)
              if w.done:
                  break
      for f in w.findings():
          print(f.one_line())

  Nothing else is needed inside the loop: the watcher hooks ``optimizer.step``. Passing the
  loss (``w.after_backward(loss)``) adds the size of each step's autograd graph. It reports
  step time or memory growing step over step (a least-squares slope), the autograd graph
  growing, frozen tensors or eval-mode BatchNorm statistics that changed, trainable
  parameters that never get a gradient or only zeros (the ``param.data = A + B`` mistake),
  and NaN/inf gradients.

Findings are grouped: one finding per kind of problem, its ``path`` the deepest module that
contains every affected module, its message naming them briefly.

One concept per file: the static check lives in :mod:`workbench.core.checks.static_check`,
the runtime watch in :mod:`workbench.core.checks.watch`, the grouping both share in
:mod:`workbench.core.checks.grouping`; this module is their public face.
"""

from __future__ import annotations

from workbench.core.checks.findings import Finding
from workbench.core.checks.grouping import group_findings, merge_findings
from workbench.core.checks.static_check import check
from workbench.core.checks.watch import Watch, watch

__all__ = ["Finding", "Watch", "check", "group_findings", "merge_findings", "watch"]
