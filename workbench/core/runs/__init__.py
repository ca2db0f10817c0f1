"""Training runs as typed records: one format read and written in one place (Qt-free).

- :mod:`~workbench.core.runs.record`: :class:`RunRecord` (a run: config, plan, how it ended,
  its metrics) with the ``run.json`` schema version, and :class:`RunSummary` (the numbers a
  run is shown and compared by);
- :mod:`~workbench.core.runs.store`: the app's run store, ``workbench train --save`` folders
  and :func:`open_run`, which reads either;
- :mod:`~workbench.core.runs.compare`: the comparison line of the Runs tab and
  ``workbench runs compare``;
- :mod:`~workbench.core.runs.text`: a run in words (plan, setup, validation, table cells).
"""

from workbench.core.runs.record import (
    RUN_FORMAT,
    RUN_VERSION,
    RunRecord,
    RunStoreError,
    RunSummary,
    Segment,
    Validation,
)

__all__ = ["RUN_FORMAT", "RUN_VERSION", "RunRecord", "RunStoreError", "RunSummary", "Segment", "Validation"]
