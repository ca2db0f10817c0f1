"""Export a freeze plan as a standalone, readable plain-PyTorch script.

- :mod:`workbench.core.export.script`: :func:`render_script` / :func:`export_script`;
- :mod:`workbench.core.export.tables`: the plan as settings tables, from the resolver;
- :mod:`workbench.core.export.model_code`: how the script builds and feeds each kind of model;
- :mod:`workbench.core.export.plan_code`: the script's plan functions (flags, eval locks, A+B);
- :mod:`workbench.core.export.run_section` / :mod:`workbench.core.export.run_code`: the run (data,
  optimizer, schedule, loop);
- :mod:`workbench.core.export.export_rules`: how each plan key and config field is exported;
- :mod:`workbench.core.export.common`: :class:`ExportError`, literals.

Typical use::

    from workbench.core.export import export_script
    export_script(plan, ModelSpec(source="timm", name="vit_tiny_patch16_224", num_classes=10), "vit.py")
"""

from __future__ import annotations

from workbench.core.export.common import ExportError
from workbench.core.export.script import export_script, render_script, structure_model

__all__ = ["ExportError", "export_script", "render_script", "structure_model"]
