"""Every reader is bounded: PEFT adapter configs and weights, ``text:PATH.jsonl``.

Each case asserts the promise of docs/bad-input.md: one line (a ``PlanError``, ``ReparamError``
or ``DataError``; exit 2 from the command line), at once for a FIFO or a device, in bounded
memory (measured under ``RLIMIT_AS`` in a subprocess), and no ``RecursionError`` or
catastrophic regex backtracking.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from torch import nn

from tests.core.models.hf_fixtures import save_folder, tiny_bert
from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_S
from workbench.cli import main
from workbench.core.freezing.reparam import ReparamError
from workbench.core.plan.problems import PlanError
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.data_common import DataError

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "great", "awful", "the", "was"]
LORA = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["0"]}


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def _adapter(tmp_path: Path, config: object | str) -> Path:
    folder = tmp_path / "adapter"
    folder.mkdir(exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    (folder / "adapter_config.json").write_text(text)
    return folder


def _bounded(code: str, *, extra_mb: int = 512, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter whose address space may grow ``extra_mb`` past what
    its imports took (``RLIMIT_AS``): an unbounded reader dies with MemoryError there."""
    prologue = textwrap.dedent(f"""
        import resource, torch, transformers, workbench.core.training.text_jsonl
        used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + {extra_mb} * 2**20, resource.RLIM_INFINITY))
    """)
    return subprocess.run(python_argv("-c", prologue + textwrap.dedent(code)), capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


# ---------------------------------------------------------------- PEFT adapter_config.json
def test_adapter_config_fifo_is_refused_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "adapter"
    folder.mkdir()
    os.mkfifo(folder / "adapter_config.json")  # nobody writes: a blocking read would hang
    r = subprocess.run(python_argv("-c", "import sys\nfrom workbench.core.plan.rules import FreezePlan\n"
                                   "from workbench.core.plan.problems import PlanError\ntry:\n FreezePlan.from_peft(sys.argv[1])\n"
                                   "except PlanError as e:\n print(e)\n", str(folder)),
                       capture_output=True, text=True, cwd=ROOT, timeout=SUBPROCESS_S)
    assert r.returncode == 0 and "not a regular file" in r.stdout, r.stdout + r.stderr


def test_adapter_config_linked_to_dev_zero_is_refused(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").symlink_to("/dev/zero")
    with pytest.raises(PlanError, match="not a regular file"):
        FreezePlan.from_peft(folder)


@pytest.mark.parametrize("text, needle", [("[" * 100_000 + "]" * 100_000, "nested"), ("{", "adapter config"),
                                          (b"\xff\xfe{}", "UTF-8")])
def test_adapter_config_nesting_truncation_and_bytes(tmp_path: Path, text: str | bytes, needle: str) -> None:
    folder = _adapter(tmp_path, "{}")
    if isinstance(text, bytes):
        (folder / "adapter_config.json").write_bytes(text)
    else:
        (folder / "adapter_config.json").write_text(text)
    with pytest.raises(PlanError, match=needle) as info:
        FreezePlan.from_peft(folder)
    assert "\n" not in str(info.value)


def test_adapter_config_huge_file_is_refused(tmp_path: Path) -> None:
    folder = _adapter(tmp_path, "{}")
    with (folder / "adapter_config.json").open("wb") as f:
        f.truncate(17 * 1024 * 1024)  # sparse
    with pytest.raises(PlanError, match="bytes"):
        FreezePlan.from_peft(folder)


@pytest.mark.parametrize("pattern, needle", [
    (r"(0)\1", "backreference"),  # the catastrophic family: test_hostile_regex.py
    ("[", "not a valid regular expression"), ("(", "not a valid regular expression"),
    ("x" * 5000, "characters"),
])
def test_target_modules_regex_is_bounded(tmp_path: Path, pattern: str, needle: str) -> None:
    folder = _adapter(tmp_path, {**LORA, "target_modules": pattern})
    with pytest.raises(PlanError, match=needle) as info:
        FreezePlan.from_peft(folder, model=_model())
    assert "\n" not in str(info.value)


def test_a_plain_target_modules_regex_still_resolves(tmp_path: Path) -> None:
    plan = FreezePlan.from_peft(_adapter(tmp_path, {**LORA, "target_modules": r"(0|2)"}), model=_model())
    assert [r.select for r in plan.rules if r.reparam] == ["0", "2"]


@pytest.mark.parametrize("content", [b"", b"\x00" * 7, b"\xff" * 64, b"\x08\x00\x00\x00\x00\x00\x00\x00{}",
                                     b"\x40\x00\x00\x00\x00\x00\x00\x00" + b'{"x": {"dtype": "F32", "shape": [1000], '
                                     b'"data_offsets": [0, 4000]}}' + b" " * 8])
def test_corrupt_adapter_weights_raise_reparam_error(tmp_path: Path, content: bytes) -> None:
    model = _model()
    folder = _adapter(tmp_path, LORA)
    applied = FreezePlan.from_peft(folder, model=model).apply(model)
    (folder / "adapter_model.safetensors").write_bytes(content)
    with pytest.raises(ReparamError, match="adapter"):
        applied.load_peft(folder)


# ---------------------------------------------------------------- text:PATH.jsonl
@pytest.fixture
def tok_folder(tmp_path: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    folder = save_folder(tiny_bert(num_labels=2), tmp_path / "bert")
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(folder)
    return folder


def _open(path: Path, folder: Path) -> object:
    from workbench.core.training.text_jsonl import open_text_dataset

    return open_text_dataset(f"text:{path}", folder, seq_len=8)


@pytest.mark.parametrize("lines, needle", [
    ([b'{"text": "good", "label": 0}', b'{"text": "bad \xff\xfe", "label": 1}'], ":2: not UTF-8"),
    ([b'{"text": "good", "label": 0}', b"\x00\x01\x02\x89PNG\r\n\x1a"], ":2: not UTF-8"),
    ([b'{"text": "good", "label": 300000000}'], ":1: label 300,000,000 is out of range"),
    ([b'{"text": "good", "label": 0}', b'{"text": "good", "label": -1}'], ":2: label -1 is out of range"),
    ([b'{"text": "good", "label": 1e30}'], ":1: classification needs a 'label'"),
    ([b'{"text": "good", "label": true}'], ":1: classification needs a 'label'"),
    ([b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"], "nested"),
])
def test_bad_text_lines_are_one_line_with_the_line_number(tmp_path: Path, tok_folder: Path, lines: list[bytes],
                                                          needle: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=needle.replace("(", r"\(")) as info:
        _open(path, tok_folder)
    assert "\n" not in str(info.value)


def test_bad_text_label_from_the_command_line(tmp_path: Path, tok_folder: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "good movie", "label": 1}\n{"text": "awful", "label": -3}\n')
    rc = main(["train", "--model", f"hf:{tok_folder}", "--data", f"text:{path}", "--steps", "1", "--device", "cpu"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and ":2: label -3 is out of range" in err[0], err


def test_text_fifo_and_device_are_refused_at_once(tmp_path: Path, tok_folder: Path) -> None:
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)
    r = subprocess.run(python_argv("-c", "import sys\nfrom workbench.core.training.text_jsonl import open_text_dataset\n"
                                   "from workbench.core.training.data_common import DataError\ntry:\n"
                                   " open_text_dataset('text:' + sys.argv[1], sys.argv[2])\nexcept DataError as e:\n print(e)\n",
                                   str(fifo), str(tok_folder)), capture_output=True, text=True, cwd=ROOT, timeout=SUBPROCESS_S)
    assert "not a regular file" in r.stdout, r.stdout + r.stderr
    if os.path.exists("/dev/zero"):
        with pytest.raises(DataError, match="not a regular file"):
            _open(Path("/dev/zero"), tok_folder)


def test_a_50_mb_line_is_refused_in_bounded_memory(tmp_path: Path, tok_folder: Path) -> None:
    path = tmp_path / "d.jsonl"
    with path.open("wb") as f:
        f.write(b'{"text": "good", "label": 0}\n{"text": "')
        f.write(b"good " * (10 * 2**20))
        f.write(b'", "label": 1}\n')
    r = _bounded(f"""
        from workbench.core.training.text_jsonl import open_text_dataset
        from workbench.core.training.data_common import DataError
        try:
            open_text_dataset("text:{path}", "{tok_folder}", seq_len=8)
        except DataError as e:
            print(e)
    """, extra_mb=256)
    assert r.returncode == 0 and ":2: line longer than 1,048,576 bytes" in r.stdout, r.stdout + r.stderr[-2000:]


def test_memory_per_line_is_bounded(tmp_path: Path, tok_folder: Path) -> None:
    """300k lines open within 64 MB more address space (the old reader took ~12 KB a line: 3.6 GB)."""
    path = tmp_path / "d.jsonl"
    with path.open("w") as f:
        for i in range(300_000):
            f.write(f'{{"text": "the movie was good", "label": {i % 3}}}\n')
    r = _bounded(f"""
        from workbench.core.training.text_jsonl import open_text_dataset
        ds = open_text_dataset("text:{path}", "{tok_folder}", seq_len=8)
        print(len(ds), ds.num_classes, ds[299_999]["labels"].item(), tuple(ds[5]["input_ids"].shape))
    """, extra_mb=64)
    assert r.returncode == 0 and r.stdout.split() == ["300000", "3", "2", "(8,)"], r.stdout + r.stderr[-2000:]
