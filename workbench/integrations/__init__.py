"""Integrations of freeze plans with training frameworks.

- :mod:`workbench.integrations.lightning`: ``FreezePlanCallback`` for PyTorch Lightning
  (Lightning is imported only when the callback class is first used).
- :mod:`workbench.integrations.transformers`: ``FreezePlanCallback`` for the Hugging Face
  ``Trainer`` (transformers is imported only when the callback class is first used).
- :mod:`workbench.integrations.common`: what both share (stages, optimizer groups, resume,
  rebuilding a DDP wrapper), usable in a loop of your own (an ``accelerate`` loop).

Importing this package imports no framework and no Qt.
"""
