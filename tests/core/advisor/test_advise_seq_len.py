"""A sequence longer than the model's positions: ``advise`` says so in one line, ``train`` says it capped."""

from __future__ import annotations

import pytest

from workbench.cli import main

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    cfg = transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                  vocab_size=50, max_position_embeddings=16, num_labels=2)
    transformers.BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder


def test_advise_names_the_limit_in_one_line(bert_folder, capsys):
    assert main(["advise", f"hf:{bert_folder}", "--memory", "1GB", "--seq-len", "128"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.endswith("its position embeddings hold 16 tokens; give --seq-len 16 or less"), err


def test_advise_at_the_limit_works(bert_folder, capsys):
    assert main(["advise", f"hf:{bert_folder}", "--memory", "1GB", "--seq-len", "16"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_train_says_it_capped_the_sequence(bert_folder, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--model", f"hf:{bert_folder}", "--steps", "1", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "16 tokens (the model's limit: its position embeddings)" in out, out


def test_the_header_counts_the_rows_it_prints(bert_folder, capsys):
    import re

    assert main(["advise", "resnet18", "--memory", "200MB", "--batch-size", "8"]) in (0, 1)
    lines = capsys.readouterr().out.splitlines()
    shown, total = map(int, re.search(r"Pareto front: (\d+) of (\d+) candidates", lines[0]).groups())
    sep = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("-  --"))
    rows = 0
    for ln in lines[sep + 1:]:
        if not (ln.startswith(("   ", "→"))) or not ln.strip():
            break
        if "auto-freeze (up to" not in ln:  # the auto-freeze row under the front (the header says so)
            rows += 1
    assert rows == shown <= total, lines
    assert "and auto-freeze" in lines[0] and sum("auto-freeze (up to" in ln for ln in lines) == 1
