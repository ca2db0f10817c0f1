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
from workbench.core.training.data import DataError, make_dataset

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
