"""``--seq-len`` (``TrainConfig.seq_len``): zero, negative, huge, non-integer, a string or a float
in a config file: one line, exit 2, before a model is built; a length past the model's positions
is capped and said so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.makers import one_line_exit_2 as _one_line
from workbench.cli import main
from workbench.core.training.config import MAX_SEQ_LEN, ConfigError, TrainConfig

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bert")
    cfg = transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                  vocab_size=50, max_position_embeddings=24, num_labels=2)
    transformers.BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("value, needle", [
    ("0", "between 2 and"),
    ("1", "between 2 and"),
    ("-5", "between 2 and"),
    (str(MAX_SEQ_LEN + 1), f"between 2 and {MAX_SEQ_LEN:,}"),
    (str(10**30), "between 2 and"),
])
def test_bad_lengths_are_one_line(value: str, needle: str, bert_folder: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    _one_line(["train", "--model", f"hf:{bert_folder}", "--steps", "1", "--device", "cpu", "--seq-len", value],
              capsys, "'seq_len'", needle)
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("value", ["abc", "1.5", "1e3", "", "0x10"])
def test_non_integers_are_refused_by_the_parser(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["train", "--model", "resnet18", "--steps", "1", "--seq-len", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert "argument --seq-len: invalid int value" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("value", ["128", 12.0, True, [128], {"n": 1}, None])
def test_config_values(value: object) -> None:
    if value is None:
        assert TrainConfig(seq_len=None).validate().seq_len is None
        return
    with pytest.raises(ConfigError, match="'seq_len'"):
        TrainConfig(seq_len=value).validate()  # type: ignore[arg-type]


def test_config_file_with_a_bad_length_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({"model": "resnet18", "steps": 1, "seq_len": "long"}))
    _one_line(["train", "--config", str(cfg)], capsys, "'seq_len'")


def test_past_the_positions_is_capped_and_said(bert_folder: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--model", f"hf:{bert_folder}", "--steps", "1", "--batch-size", "2", "--device", "cpu",
                 "--seq-len", "100000"]) == 0
    out = capsys.readouterr().out
    assert "24 tokens (the model's limit: its position embeddings)" in out, out


def test_the_length_reaches_the_data(bert_folder: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--model", f"hf:{bert_folder}", "--steps", "1", "--batch-size", "2", "--device", "cpu",
                 "--seq-len", "7"]) == 0
    assert "7 tokens" in capsys.readouterr().out
