"""The desktop app (PySide6): adapters over :mod:`workbench.core`, never the other way.

Importing this package does not import Qt; the modules inside do. Start the app with
:func:`workbench.gui.app.main` (or ``workbench`` / ``workbench gui`` on the command line).

Modules:
    app              QApplication set-up and ``main(argv)``.
    startup          the first window (before torch is imported) and the imports behind it.
    main_window      MainWindow: builds the plan side and places the training side's tabs,
                     controls, Run menu and actions.
    controller       Controller: model, tree, plan, file, undo stack; ``planChanged`` / ``modelChanged``.
    model_source     searchable torchvision model list, weights, new head size.
    model_loading    (Qt-free) what to load and loading it (runs on a worker thread).
    diagnostics      plan lint, the freeze doctor's model check and training watch.
    background       BackgroundTask: one callable on a QThread; the running-thread registry.
    icons            small icons painted in code (coloured dots).
    about / dialogs  the About box; every modal dialog (one seam for tests).
    settings         QSettings: recent files, geometry.
    qt_compat        work-around for a reference-count defect of shiboken6 6.12 on Python 3.11.
    screenshot       render the window offscreen to PNG files for the docs.
    plan/            the plan side:
        tree_columns   the tree's columns as one table (header, tooltip, display, check, editor, setData).
        tree_model     QAbstractItemModel over the tree and the plan, and its filter proxy.
        tree_view      the tree view and its check/LR × delegates; Space emits ``frozenToggleRequested``.
        tree_preview   the start-up window's tree from the description of the last start (before torch).
        cost_panel     parameter totals, training memory, lint findings.
        partial_dialog sub-tensor freezing ranges.
        state          (Qt-free) per-row states and counts derived from plan + tree.
        edits          (Qt-free) the plan edits behind clicks and bulk actions.
    training/        the training side:
        ui             TrainingUI: builds plots, runs, verify tabs, controls and the Run menu; signals.
        panel          data, batch, optimizer, device ...; Start / Pause / Stop, progress and ETA.
        run_controller starts, controls, records and persists runs; live plan changes.
        session        the worker QObject on a QThread driving the core Trainer; metric batching.
        plots          pyqtgraph plots fed from ring buffers by a timer; markers, overlays.
        runs_tab       the runs table and comparison; the runs folder.
        verify_panel   the end-of-run verify report, module by module.
        series         (Qt-free) ring buffer of metric columns.
    (runs on disk, run.json + metrics.csv, are workbench.core.runs: the CLI reads the same.)
"""

