"""Docs are tests: every fenced ```bash and ```python block of README.md and docs/*.md runs.

One test per document (the documents run side by side, see ``doc_runs``): its blocks run in
order in one temporary folder (files made by one block
are there for the next), bash blocks in ``bash -e -o pipefail`` with this interpreter's
``bin`` folder first on PATH (the project installed; a ``torchrun`` shim runs
``python -m torch.distributed.run`` where torch's console scripts are not in that folder), python blocks each in a fresh interpreter
unless a ``continue`` directive joins them. Each ``python`` and ``workbench`` program, and each ``torchrun``
with its workers but the one of ``FRESH_TORCHRUN``, is a fork of the suite's preloaded interpreter
(``tests/preload``: the same fresh state without importing torch each time). HOME and the caches point into the folder, and the
Hugging Face libraries are offline, so nothing a block does reaches the user's files or the
network. Directives (HTML comments before a fence) skip a block with a reason, make its sizes
small, or check its output; docs/README.md describes them. Skipped blocks are counted in the
terminal summary (``docs-test: N blocks run, M skipped``) and listed by
``test_every_skip_gives_a_reason``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs.doc_blocks import Block, DirectiveError, parts, read_blocks
from tests.fixtures.torchrun import launcher
from tests.preload import preloaded
from tests.timeouts import DOC_BLOCK_S

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The document part whose ``torchrun`` starts fresh interpreters, launcher and ranks: a DDP job's interpreter
#: shutdown (which the preloaded interpreter's forks skip: they end with ``os._exit``) stays tested end to end
#: here; every other ``torchrun`` block launches from the preloaded interpreter.
FRESH_TORCHRUN = (ROOT / "docs" / "training.md", "torchrun")
#: the README's test command (Quick start), which .ci/run must run
README_TEST_COMMAND = ".venv/bin/python -m pytest -n auto"


def _blocks(doc: Path) -> list[Block]:
    return [b for b in read_blocks(doc) if b.lang in ("bash", "python")]


def _part_names(doc: Path) -> list[str]:
    try:
        return list(parts(_blocks(doc)))
    except DirectiveError:
        return [""]  # the document's test reports it


#: (document, part): one test each; a document without ``part`` directives is one part, ""
DOC_PARTS = [(d, p) for d in DOCS for p in _part_names(d)]


def _part_id(doc: Path, part: str) -> str:
    rel = doc.relative_to(ROOT).as_posix()
    return f"{rel}#{part}" if part else rel


def _env(folder: Path, block: Block, fresh_torchrun: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    home = folder / ".home"
    home.mkdir(exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    if not (Path(bin_dir) / "torchrun").exists():  # torch from a shared site-packages: no console script
        shims = folder / ".bin"
        shims.mkdir(exist_ok=True)
        shim = shims / "torchrun"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m torch.distributed.run "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
        bin_dir += os.pathsep + str(shims)
    env.update(
        PATH=bin_dir + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        TORCH_HOME=str(home / ".cache/torch"),
        HF_HOME=str(home / ".cache/huggingface"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WORKBENCH_RUNS_DIR=str(folder / ".runs"),
        QT_QPA_PLATFORM="offscreen",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH="",
    )
    env.update(block.env)
    server = preloaded()
    if server is None:
        return env
    if fresh_torchrun:  # python and workbench served, torchrun and its ranks fresh interpreters
        return server.child_env(env)
    # torchrun and the workers it starts are forks of the preloaded interpreter too, as the suite's own jobs
    # (tests/fixtures/torchrun.py): torchrun's command line, rendezvous and exit statuses stay the real ones
    python, env = launcher(env)
    shims = folder / ".bin-preloaded"
    shims.mkdir(exist_ok=True)
    shim = shims / "torchrun"
    shim.write_text(f'#!/bin/sh\nexec "{python}" -m torch.distributed.run "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    return dict(env, PATH=str(shims) + os.pathsep + env["PATH"])


def _run(block: Block, code: str, folder: Path, fresh_torchrun: bool = False) -> str:
    if block.lang == "python":
        script = folder / f".docs-block-{block.line}.py"
        script.write_text(code, encoding="utf-8")
        cmd = ["python", str(script)]  # the first python on the block's PATH: the preloaded one
    else:
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    env = _env(folder, block, fresh_torchrun)
    proc = subprocess.run(
        cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=DOC_BLOCK_S,
        executable=shutil.which(cmd[0], path=env["PATH"]),
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"{block.where}: exit {proc.returncode}\n--- code ---\n{code}--- output ---\n{out[-6000:]}")
    return out


def _groups(blocks: list[Block]) -> list[list[Block]]:
    """Runnable blocks, python blocks joined by ``continue`` into one group."""
    groups: list[list[Block]] = []
    for b in blocks:
        if not b.runnable:
            continue
        if b.cont:
            if not groups or groups[-1][-1].lang != "python":
                pytest.fail(f"{b.where}: continue needs a runnable python block right before it")
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def _run_doc(doc: Path, part: str, folder: Path) -> list[str]:
    """Run the blocks of a document's part in order in ``folder``; the time each took, one line per group."""
    times: list[str] = []
    for group in _groups(parts(_blocks(doc))[part]):
        code = "".join(b.setup + b.code_to_run() + b.check for b in group)
        start = time.perf_counter()
        out = _run(group[0], code, folder, fresh_torchrun=(doc, part) == FRESH_TORCHRUN)
        times.append(f"{group[0].where}: {time.perf_counter() - start:.1f} s")
        for b in group:
            for text in b.expect:
                assert text in out, f"{b.where}: the doc quotes {text!r}; the output was:\n{out[-4000:]}"
    return times


@pytest.fixture(scope="module")
def doc_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path, str], Future]]:
    """A document part's run, by (document, part). In one process every selected part starts at
    once, ``DOCS_TEST_WORKERS`` (default: the CPU count, at most 4) at a time: parts are
    independent (a folder each), the blocks of one run in order. Under pytest-xdist the workers
    share the parts out, so each runs a part only when its test asks for it (starting them all
    would run every part once per worker)."""
    spread = "PYTEST_XDIST_WORKER" in os.environ
    wanted = [] if spread else [
        (d, p) for d, p in DOC_PARTS
        if any(f"test_doc_blocks_run[{_part_id(d, p)}]" in i.nodeid for i in request.session.items)
    ]
    workers = 1 if spread else int(os.environ.get("DOCS_TEST_WORKERS") or min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:

        def start(doc: Path, part: str) -> Future:
            return pool.submit(_run_doc, doc, part, tmp_path_factory.mktemp(f"{doc.stem}-{part}" if part else doc.stem))

        futures = {(d, p): start(d, p) for d, p in wanted}

        def run(doc: Path, part: str) -> Future:
            if (doc, part) not in futures:
                futures[(doc, part)] = start(doc, part)
            return futures[(doc, part)]

        yield run
        for f in futures.values():
            f.cancel()


@pytest.mark.parametrize(("doc", "part"), DOC_PARTS, ids=[_part_id(d, p) for d, p in DOC_PARTS])
def test_doc_blocks_run(doc: Path, part: str, doc_runs: Callable[[Path, str], Future]) -> None:
    for line in doc_runs(doc, part).result():  # a failed block raises here, in the test of its part
        print(line)


def test_every_skip_gives_a_reason() -> None:
    """The skipped blocks, listed (``-rA`` or ``-v`` shows them); each reason says why."""
    skipped = [b for d in DOCS for b in _blocks(d) if b.skip is not None]
    for b in skipped:
        assert len(b.skip or "") >= 8, f"{b.where}: skip reason {b.skip!r} says too little"
    print("\n".join(f"skipped {b.where}: {b.skip}" for b in skipped))


def test_ci_runs_the_readme_test_command() -> None:
    """The README's Quick start cannot rerun inside the suite; .ci/run runs its test command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert README_TEST_COMMAND in readme
    assert README_TEST_COMMAND in ci
    assert "python3 -m venv --upgrade-deps .venv && .venv/bin/pip install -e '.[test]'" in readme
    assert "python3 -m venv --upgrade-deps .venv && .venv/bin/pip install -q -e '.[test]'" in ci


def test_a_directive_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text('<!-- docs-test: skip no fence follows -->\ntext\n', encoding="utf-8")
    with pytest.raises(DirectiveError, match="not followed by a code fence"):
        read_blocks(bad)
    bad.write_text('<!-- docs-test: skp typo -->\n```bash\ntrue\n```\n', encoding="utf-8")
    with pytest.raises(DirectiveError, match="unknown docs-test directive"):
        read_blocks(bad)
    bad.write_text('<!-- docs-test: replace "absent" "x" -->\n```bash\ntrue\n```\n', encoding="utf-8")
    with pytest.raises(DirectiveError, match="not in the block"):
        read_blocks(bad)[0].code_to_run()


def test_directives_are_read(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(
        "<!-- docs-test: env A=1 B='x y' -->\n"
        '<!-- docs-test: replace "--steps 1000" "--steps 2" -->\n'
        '<!-- docs-test: expect "done" -->\n'
        "<!-- docs-test: setup\nimport os\n-->\n"
        "```python\nprint('--steps 1000')\n```\n\n"
        "<!-- docs-test: skip needs a GPU here -->\n```bash\nnvidia-smi\n```\n"
        "<!-- docs-test: continue -->\n```python\nx = 1\n```\n"
        "<!-- docs-test: part second-half -->\n```bash\ntrue\n```\n```python\npass\n```\n",
        encoding="utf-8",
    )
    first, second, third, fourth, fifth = read_blocks(doc)
    assert first.env == {"A": "1", "B": "x y"} and first.expect == ["done"] and first.setup == "import os\n"
    assert first.code_to_run() == "print('--steps 2')\n"
    assert second.skip == "needs a GPU here" and not second.runnable
    assert third.cont and third.runnable
    assert fourth.part == "second-half" and fifth.part is None
    assert {k: [b.line for b in v] for k, v in parts([first, second, third, fourth, fifth]).items()} == {
        "": [first.line, second.line, third.line], "second-half": [fourth.line, fifth.line]}


def test_a_part_is_named_once_with_a_plain_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- docs-test: part a -->\n```bash\ntrue\n```\n<!-- docs-test: part a -->\n```bash\ntrue\n```\n",
                   encoding="utf-8")
    with pytest.raises(DirectiveError, match="named twice"):
        read_blocks(bad)
    bad.write_text('<!-- docs-test: part "Two words" -->\n```bash\ntrue\n```\n', encoding="utf-8")
    with pytest.raises(DirectiveError, match="part takes one name"):
        read_blocks(bad)


def test_parts_of_a_document_are_tests_of_their_own() -> None:
    ids = [_part_id(d, p) for d, p in DOC_PARTS]
    assert len(ids) == len(set(ids))
    assert {d for d, _ in DOC_PARTS} == set(DOCS)  # every document has a test
