"""Qt-free core of Freeze Workbench: module tree, freeze plans, applying them, verification.

Nothing in this package imports PySide6 or pyqtgraph, so it runs in scripts, notebooks and
under ``torchrun``.
"""
