"""Export a freeze plan as a standalone, readable plain-PyTorch script.

- :mod:`workbench.core.export.script`: :func:`render_script` / :func:`export_script`;
- :mod:`workbench.core.export.tables`: the plan as settings tables, from the resolver;
- :mod:`workbench.core.export.model_code`: how the script builds and feeds each kind of model;
- :mod:`workbench.core.export.plan_code`: the script's plan functions (flags, eval locks, A+B);
- :mod:`workbench.core.export.common`: :class:`ExportError`, optimizers, literals.

Typical use::

    from workbench.core.export import export_script
    export_script(plan, ModelSpec(source="timm", name="vit_tiny_patch16_224", num_classes=10), "vit.py")
"""

from __future__ import annotations

from workbench.core.export.common import OPTIMIZERS, ExportError
from workbench.core.export.script import export_script, render_script, structure_model

__all__ = ["OPTIMIZERS", "ExportError", "export_script", "render_script", "structure_model"]
