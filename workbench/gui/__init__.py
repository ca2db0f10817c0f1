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
    partial_dialog sub-tensor freezing ranges (with workbench.core.freezing.partial).
    diagnostics    plan lint, the freeze doctor's model check and training watch.
    training_ui    the training side of the window: plots, runs, verify tabs, controls, Run menu.
    training_panel data, batch, optimizer, device ...; Start / Pause / Stop, progress and ETA.
    training_worker the worker QObject on a QThread driving core.engine.Trainer; metric batching.
    run_controller starts, controls, records and persists runs; live plan changes.
    plots          pyqtgraph plots fed from ring buffers by a timer (up to 15 Hz, within a CPU budget); markers, overlays.
    runs           the runs table and comparison; the runs folder.
    verify_panel   the end-of-run verify report, module by module.
    series         (Qt-free) ring buffer of metric columns.
    run_store      (Qt-free) runs on disk: run.json + metrics.csv.
    qt_compat      work-around for a reference-count defect of shiboken6 6.12 on Python 3.11.
    features       which optional core modules are installed.
    plan_state     (Qt-free) per-row states and counts derived from plan + tree.
    plan_edits     (Qt-free) the plan edits behind clicks and bulk actions.
    model_loading  (Qt-free) what to load and loading it (runs on a worker thread).
    worker         BackgroundTask: one callable on a QThread.
    dialogs        every modal dialog (one seam for tests).
    settings       QSettings: recent files, geometry.
    screenshot     render the window offscreen to PNG files for the docs.
"""

