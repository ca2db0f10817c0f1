"""The desktop app (PySide6): adapters over :mod:`workbench.core`, never the other way.

Importing this package does not import Qt; the modules inside do. Start the app with
:func:`workbench.gui.app.main` (or ``workbench`` / ``workbench gui`` on the command line).

Modules:
    app            QApplication set-up and ``main(argv)``.
    main_window    MainWindow: model bar, module tree, cost panel, files, undo.
    controller     Controller: model, tree, plan, file, undo stack; ``planChanged`` / ``modelChanged``.
    tree_model     QAbstractItemModel over the tree and the plan, and its filter proxy.
    tree_view      the tree view and its check/LR × delegates.
    cost_panel     parameter totals, training memory, lint findings.
    model_source   searchable torchvision model list, weights, new head size.
    partial_dialog sub-tensor freezing ranges (with workbench.core.partial).
    diagnostics    the freeze doctor on the model with the plan applied (with workbench.core.doctor).
    features       which optional core modules are installed.
    plan_state     (Qt-free) per-row states and counts derived from plan + tree.
    plan_edits     (Qt-free) the plan edits behind clicks and bulk actions.
    model_loading  (Qt-free) what to load and loading it (runs on a worker thread).
    worker         BackgroundTask: one callable on a QThread.
    dialogs        every modal dialog (one seam for tests).
    settings       QSettings: recent files, geometry.
    screenshot     render the window offscreen to PNG files for the docs.
"""
