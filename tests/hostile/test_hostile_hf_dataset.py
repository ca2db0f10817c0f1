"""Hostile ``hf-dataset:PATH`` folders: each is one DataError line, nothing hangs, no code runs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("datasets")

from tests.hostile.makers import nested_json
from tests.integrations.hf_data import image_dataset, text_dataset
from workbench.core.training.data import DataError
from workbench.core.training.data_sources import make_dataset

ARROW = "data-00000-of-00001.arrow"


def _open(path: Path | str, **kw):
    return make_dataset(f"hf-dataset:{path}", image_size=16, num_classes=2, **kw)


def _one_line(exc: pytest.ExceptionInfo[DataError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return image_dataset(tmp_path / "pets")


def test_missing_folder_and_empty_spec(tmp_path):
    with pytest.raises(DataError, match="does not exist") as e:
        _open(tmp_path / "nope")
    _one_line(e)
    with pytest.raises(DataError, match="needs a folder"):
        make_dataset("hf-dataset:", image_size=16, num_classes=2)


def test_a_file_and_a_plain_folder(tmp_path):
    (tmp_path / "f.arrow").write_bytes(b"x")
    with pytest.raises(DataError, match="is not a folder"):
        _open(tmp_path / "f.arrow")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a dataset saved to disk"):
        _open(tmp_path / "empty")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_arrow_file(saved, damage):
    arrow = saved / ARROW
    data = arrow.read_bytes()
    arrow.write_bytes({"garbage": b"\x00not arrow\xff" * 50, "truncated": data[: len(data) // 3], "empty": b""}[damage])
    with pytest.raises(DataError, match="could not read") as e:
        ds = _open(saved)
        ds[0]  # a damage found only when a record is read is a DataError too
    _one_line(e)


def test_wrong_columns(saved):
    with pytest.raises(DataError, match=r"no image column 'picture' \(its columns: image, label\)"):
        _open(saved, columns={"image_column": "picture"})
    with pytest.raises(DataError, match=r"no label column 'y'.*--label-column"):
        _open(saved, columns={"label_column": "y"})
    with pytest.raises(DataError, match="unknown column option"):
        _open(saved, columns={"colour": "x"})


def test_text_data_for_an_image_model(tmp_path):
    data = text_dataset(tmp_path / "t")
    with pytest.raises(DataError, match="no image column 'image'"):
        _open(data)


@pytest.mark.parametrize("name", ["state.json", "dataset_info.json"])
def test_non_utf8_and_nested_and_huge_json(saved, name):
    (saved / name).write_bytes(b'{"_data_files": "\xff\xfe"}')
    with pytest.raises(DataError, match="not UTF-8"):
        _open(saved)
    (saved / name).write_text(nested_json(10_000))
    with pytest.raises(DataError, match="unreadable"):
        _open(saved)
    with (saved / name).open("wb") as f:
        f.truncate(17 * 1024 * 1024)  # sparse: a huge file without writing it
    with pytest.raises(DataError, match="bytes, more than"):
        _open(saved)


def test_non_utf8_folder_name(tmp_path):
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    image_dataset(odd)
    with pytest.raises(DataError, match="is not UTF-8, which datasets cannot open") as e:
        _open(odd)
    _one_line(e)
    link = tmp_path / "plain"
    link.symlink_to(odd, target_is_directory=True)
    assert len(_open(link)) == 5  # what the message suggests works


def test_symlinked_arrow_file_is_refused(saved, tmp_path):
    outside = tmp_path / "outside.arrow"
    shutil.move(str(saved / ARROW), outside)
    (saved / ARROW).symlink_to(outside)
    with pytest.raises(DataError, match="symbolic link") as e:
        _open(saved)
    _one_line(e)


def test_symlinked_dataset_folder_is_followed(saved, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(saved, target_is_directory=True)
    assert len(_open(link)) == 5


def test_paths_that_leave_the_folder(saved, tmp_path):
    state = json.loads((saved / "state.json").read_text())
    state["_data_files"] = [{"filename": "../../etc/passwd"}]
    (saved / "state.json").write_text(json.dumps(state))
    with pytest.raises(DataError, match="not a file of that folder"):
        _open(saved)
    d = text_dataset(tmp_path / "dd", splits=True)
    (d / "dataset_dict.json").write_text(json.dumps({"splits": ["../pets"]}))
    with pytest.raises(DataError, match="not a folder name"):
        _open(d)
    (d / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "missing"]}))
    with pytest.raises(DataError, match="split folder .*missing"):
        _open(d)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("name", [ARROW, "state.json"])
def test_fifo_does_not_hang(saved, name):
    (saved / name).unlink()
    os.mkfifo(saved / name)
    with pytest.raises(DataError, match="not a regular file|pipe"):
        _open(saved)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_as_the_folder(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(DataError, match="not a folder"):
        _open(tmp_path / "pipe")


SCRIPT = """
from pathlib import Path
Path({marker!r}).write_text("ran")
import datasets
class Evil(datasets.GeneratorBasedBuilder):
    pass
"""


def test_a_loading_script_never_runs(tmp_path):
    marker = tmp_path / "ran.txt"
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "evil.py").write_text(SCRIPT.format(marker=str(marker)))
    (folder / "dataset_infos.json").write_text("{}")
    with pytest.raises(DataError, match=r"loading script \(evil.py\).*never runs") as e:
        _open(folder)
    _one_line(e)
    assert not marker.exists()
    # a saved dataset with a script beside it: the data opens, the script does not run
    saved = image_dataset(tmp_path / "pets")
    (saved / "pets.py").write_text(SCRIPT.format(marker=str(marker)))
    assert len(_open(saved)) == 5
    assert not marker.exists()


# ---------------------------------------------------------------- the limits text: data has (row_limits)
def _text_rows(folder: Path, texts: list[str], labels: list[int]) -> Path:
    import datasets

    datasets.Dataset.from_dict({"text": texts, "label": labels}).save_to_disk(str(folder))
    return folder


@pytest.mark.parametrize("label", [300_000_000, 2**62])
def test_a_huge_label_is_one_line_exit_2_naming_the_row(tmp_path, label, capsys):
    """Never a class list built up to the label: one line, exit 2, the row named."""
    from tests.hostile.makers import one_line_exit_2
    from tests.integrations.hf_data import bert_folder

    model = bert_folder(tmp_path / "bert")
    data = _text_rows(tmp_path / "d", ["good", "bad", "fine", "great"], [0, 1, label, 1])
    capsys.readouterr()  # the makers' progress bars
    one_line_exit_2(["train", "--model", f"hf:{model}", "--data", f"hf-dataset:{data}", "--steps", "1",
                     "--device", "cpu"], capsys, "hf-dataset row 2", f"label {label:,} is out of range", "0..99,999")


def test_a_huge_text_is_cut_before_tokenizing_and_said_once(tmp_path, monkeypatch):
    """A 20-million-character row reaches the tokenizer as seq_len x 64 characters, the same rule as text:."""
    import warnings

    from transformers import BertForSequenceClassification

    from tests.integrations.hf_data import bert_folder
    from workbench.core.training.hf_dataset import open_hf_dataset
    from workbench.core.training.row_limits import TextCutWarning, text_char_limit

    model = BertForSequenceClassification.from_pretrained(bert_folder(tmp_path / "bert"))
    huge = "good " * 4_000_000
    data = _text_rows(tmp_path / "d", [huge, "bad", huge, "fine"], [0, 1, 0, 1])
    ds = open_hf_dataset(data, task="classification", model=model, seq_len=16, train=False)
    ds = type(ds)(ds._ds, None, ds._encode, ds.classes)  # every row, in order
    seen: list[int] = []
    real = ds._encode.tokenizer.__class__.__call__
    monkeypatch.setattr(ds._encode.tokenizer.__class__, "__call__",
                        lambda self, text, **kw: (seen.append(len(text)), real(self, text, **kw))[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = [ds[i] for i in range(4)]
    assert max(seen) == text_char_limit(16) == 16 * 64
    cut = [w for w in caught if issubclass(w.category, TextCutWarning)]
    assert len(cut) == 1 and "hf-dataset row 0" in str(cut[0].message) and "\n" not in str(cut[0].message)
    assert all(s["input_ids"].shape == (16,) for s in samples)


def test_text_files_cut_their_texts_by_the_same_rule(tmp_path, monkeypatch):
    """text:PATH.jsonl meets the same limits: one reader of rows (row_limits) for both formats."""
    import warnings

    from tests.integrations.hf_data import bert_folder
    from workbench.core.training.row_limits import TextCutWarning, text_char_limit
    from workbench.core.training.text_jsonl import JsonlTextDataset, load_tokenizer

    tok = load_tokenizer(bert_folder(tmp_path / "bert"))
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"text": "good " * 150_000, "label": 0}) + "\n" + json.dumps({"text": "bad", "label": 1}) + "\n")
    ds = JsonlTextDataset(path, tok, seq_len=16)
    seen: list[int] = []
    real = tok.__class__.__call__
    monkeypatch.setattr(tok.__class__, "__call__", lambda self, text, **kw: (seen.append(len(text)), real(self, text, **kw))[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds[0], ds[1], ds[0]
    assert max(seen) == text_char_limit(16)
    cut = [w for w in caught if issubclass(w.category, TextCutWarning)]
    assert len(cut) == 1 and f"{path}:1: text of 750,000 characters cut" in str(cut[0].message)
