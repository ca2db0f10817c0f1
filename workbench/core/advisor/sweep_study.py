"""A sweep's Optuna study: where it is stored, which candidates are still to train, who trains them.

The study lives in SQLite in the sweep folder (``study.db``) unless a database URL is given
(``--storage postgresql://...``, for machines sharing one study). Each candidate is one trial
with the categorical parameter ``candidate`` (its id), put in the study's queue with
``enqueue_trial``; workers take trials from the queue until it is empty, so any number of
processes, on one machine or many, share the work. A candidate is done when one of its trials
completed or was pruned; a trial left ``RUNNING`` by a killed process is failed and its
candidate queued again: at once when this process holds the sweep folder's lock alone (no
other process of the folder is alive), else after Optuna's heartbeat goes stale.

Optuna is an optional dependency (``pip install 'freeze-workbench[sweep]'``); nothing here
imports it until a study is opened.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core.errors import WorkbenchError
from workbench.core.runs.sweeps import STUDY_FILE

if TYPE_CHECKING:
    import optuna

__all__ = [
    "HEARTBEAT_S",
    "INSTALL_HINT",
    "STUDY_FILE",
    "SweepError",
    "candidate_of",
    "enqueue_missing",
    "fail_orphans",
    "import_optuna",
    "open_study",
    "storage_url",
]

#: The one line that says how to get the optional dependency.
INSTALL_HINT = "pip install 'freeze-workbench[sweep]'"
#: Seconds between a running trial's heartbeats; a trial silent for three of them is stale.
HEARTBEAT_S = 10
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Set on a trial whose candidate failed for a reason a rerun would meet again (not a kill).
FAILED_ATTR = "failed"
#: Set on a trial the sampler made when the queue had just run dry (another worker took the last one).
SPARE_ATTR = "spare"


class SweepError(WorkbenchError):
    """A sweep cannot start or go on; the message says why and what to do."""


def import_optuna() -> Any:
    """Import Optuna, quietened to warnings.

    Returns:
        The ``optuna`` module.

    Raises:
        SweepError: it is not installed (the message names the install command).
    """
    try:
        import optuna
    except ImportError:
        raise SweepError(f"the sweep needs Optuna, which is not installed: {INSTALL_HINT}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def storage_url(folder: str | os.PathLike[str], url: str | None = None) -> str:
    """The study's storage: ``url``, or the SQLite file in ``folder``, checked before it is opened.

    Args:
        folder: the sweep folder.
        url: a database URL (``sqlite:///...``, ``postgresql://...``), or None.

    Returns:
        A SQLAlchemy URL.

    Raises:
        SweepError: the study file (or the file an ``sqlite:///`` URL names) is not a regular
            file (a folder, a FIFO, a device) or not an SQLite database; it is left as it is.
    """
    if url is None:
        path = Path(folder) / STUDY_FILE
    elif url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
    else:
        return url
    _check_sqlite_file(path)
    return f"sqlite:///{path}" if url is None else url


def _check_sqlite_file(path: Path) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise SweepError(f"cannot read the study file {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SweepError(f"the study file {path} is not a regular file; move it away or give another sweep folder")
    if st.st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise SweepError(f"cannot read the study file {path}: {e.strerror or e}") from None
    if head != _SQLITE_MAGIC:
        raise SweepError(f"the study file {path} is not an SQLite database (damaged or something else); "
                         "it is left as it is: move it away or give another sweep folder")


def open_study(url: str, name: str, *, maximize: bool, identity: dict[str, Any], reduction_factor: int,
               min_resource: int, prune: bool, heartbeat: bool = True) -> optuna.Study:
    """Create the study, or load it when it exists, and check it is this sweep's.

    Args:
        url: the storage URL (:func:`storage_url`).
        name: the study's name.
        maximize: a larger objective is better.
        identity: what makes two runs of a sweep the same sweep (its candidates, budget, data,
            model ...), kept in the study; a study made with another is refused, untouched.
        reduction_factor: the pruner's eta (keep the best 1/eta at each rung).
        min_resource: steps of the first rung.
        prune: stop candidates early (successive halving); False: train every one to the end.
        heartbeat: running trials send heartbeats and a silent one is failed (machines sharing a
            database); False for the sweep folder's own SQLite file, whose processes the folder
            lock accounts for (a loaded machine must not fail a live worker's trial as stale).

    Returns:
        The study.

    Raises:
        SweepError: Optuna is missing; the storage cannot be opened or is damaged; the study
            is another sweep's.
    """
    optuna = import_optuna()
    pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=reduction_factor)
              if prune else optuna.pruners.NopPruner())
    kwargs: dict[str, Any] = {}
    sqlite = url.startswith("sqlite:")
    if sqlite:  # workers wait for each other's writes instead of failing at once; pysqlite's own
        # BEGIN is off so that each transaction can begin IMMEDIATE (see _lock_on_begin)
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60, "isolation_level": None}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # heartbeats are "experimental" in some Optuna versions
            if heartbeat:
                kwargs.update(heartbeat_interval=HEARTBEAT_S, grace_period=3 * HEARTBEAT_S)
            storage = optuna.storages.RDBStorage(url, **kwargs)
            if sqlite:
                _lock_on_begin(storage.engine)
            study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True, pruner=pruner,
                                        sampler=optuna.samplers.RandomSampler(seed=0),
                                        direction="maximize" if maximize else "minimize")
            held = study.user_attrs.get("sweep")
            if held is None:
                study.set_user_attr("sweep", identity)
    except Exception as e:  # SQLAlchemy's errors: a damaged file, a locked or unreachable database
        raise SweepError(f"cannot open the study at {url}: {_one_line(e)}; the file is left as it is") from None
    if held is not None and held != identity:
        key = next((k for k in sorted(set(held) | set(identity)) if held.get(k) != identity.get(k)), "?")
        raise SweepError(f"the study {name!r} at {url} is another sweep (its {key} differs: {_short(held.get(key))} "
                         f"there, {_short(identity.get(key))} here); it is left as it is: give another folder "
                         "(or --study NAME), or the same command to resume it")
    return study


def _lock_on_begin(engine: Any) -> None:
    """Make every transaction on ``engine`` take SQLite's write lock when it begins.

    Optuna takes a queued trial by reading that it is ``WAITING`` and then writing ``RUNNING``,
    in one transaction with ``SELECT ... FOR UPDATE``, which SQLite ignores: two workers could
    both read ``WAITING`` and both train the candidate, and the second one's results then land on
    a finished trial ("Trial#2 has already finished"). ``BEGIN IMMEDIATE`` makes the read and the
    write one step: a second worker waits (the connection's timeout) for the first to commit,
    then reads ``RUNNING`` and moves on. SQLAlchemy's recipe for pysqlite transactions.
    """
    from sqlalchemy import event

    def begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine, "begin", begin)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _one_line(e: BaseException) -> str:
    text = " ".join(str(getattr(e, "orig", None) or e).split())
    return text[:300] or type(e).__name__


def candidate_of(trial: Any) -> str | None:
    """The candidate id of a (frozen) trial: its parameter, or for a queued trial its fixed parameter."""
    if "candidate" in trial.params:
        return str(trial.params["candidate"])
    fixed = trial.system_attrs.get("fixed_params") or {}
    value = fixed.get("candidate")
    return None if value is None else str(value)


def fail_orphans(study: optuna.Study) -> int:
    """Fail every trial left ``RUNNING`` (call only when no other process of the sweep is alive).

    Args:
        study: the study.

    Returns:
        How many trials were failed.
    """
    optuna = import_optuna()
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    storage = study._storage
    n = 0
    for t in running:
        try:
            if storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL):
                n += 1
        except Exception:  # finished meanwhile
            continue
    return n


def enqueue_missing(study: optuna.Study, candidate_ids: Sequence[str]) -> list[str]:
    """Queue the candidates that have no finished, running or queued trial.

    A candidate whose trial failed for a reason a rerun meets again (marked ``failed``) is not
    queued again; one whose trial a kill or a stale heartbeat failed is.

    Args:
        study: the study.
        candidate_ids: every candidate, in order.

    Returns:
        The ids queued now.
    """
    optuna = import_optuna()
    state = optuna.trial.TrialState
    taken: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        cid = candidate_of(t)
        if cid is None or t.user_attrs.get(SPARE_ATTR):
            continue
        if t.state in (state.COMPLETE, state.PRUNED, state.RUNNING, state.WAITING) or (
                t.state == state.FAIL and t.user_attrs.get(FAILED_ATTR)):
            taken.add(cid)
    queued = [c for c in candidate_ids if c not in taken]
    for c in queued:
        study.enqueue_trial({"candidate": c}, skip_if_exists=False)
    return queued


def waiting_count(study: optuna.Study) -> int:
    """Trials still in the queue."""
    optuna = import_optuna()
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
