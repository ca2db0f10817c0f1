"""Integrations of freeze plans with training frameworks.

- :mod:`workbench.integrations.lightning`: ``FreezePlanCallback`` for PyTorch Lightning
  (Lightning is imported only when the callback class is first used).

Importing this package imports no framework and no Qt.
"""
