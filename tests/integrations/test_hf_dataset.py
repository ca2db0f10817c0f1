"""``hf-dataset:PATH``: a datasets folder written by save_to_disk, in make_dataset and the CLI."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("datasets")
pytest.importorskip("transformers")

from tests.integrations.hf_data import bert_folder, image_dataset, text_dataset
from workbench.core.training.data import DataError, dataset_num_classes
from workbench.core.training.data_sources import make_dataset
from workbench.core.training.hf_dataset import HOLDOUT_FRACTION, HfDiskDataset


@pytest.fixture
def bert(tmp_path):
    from transformers import AutoModelForSequenceClassification

    folder = bert_folder(tmp_path)
    return AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True)


def test_text_dataset_is_tokenized_with_the_model_folders_tokenizer(bert, tmp_path):
    data = text_dataset(tmp_path / "reviews")
    train = make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=bert)
    val = make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=bert, train=False)
    assert isinstance(train, HfDiskDataset) and len(train) == 9 and len(val) == 1  # 10% held out
    assert round(10 * HOLDOUT_FRACTION) == 1
    assert not set(train._indices) & set(val._indices)  # held out: never trained on
    sample = train[0]
    assert sample["input_ids"].shape == (16,)  # the model's 16 positions
    assert sample["input_ids"][0].item() == 2  # [CLS] of the folder's tokenizer
    assert dataset_num_classes(train) == 2
    out = bert(**{k: v.unsqueeze(0) for k, v in sample.items()})
    assert torch.isfinite(out.loss)


def test_validation_split_and_string_labels_and_other_columns(bert, tmp_path):
    data = text_dataset(tmp_path / "d", splits=True, text="review", label="stars", string_labels=True)
    cols = {"text_column": "review", "label_column": "stars"}
    train = make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=bert, columns=cols)
    val = make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=bert, columns=cols, train=False)
    assert (len(train), len(val)) == (8, 2)
    assert train.classes == ["neg", "pos"] and int(train[0]["labels"]) == 1  # "good movie"
    with pytest.raises(DataError, match=r"no text column 'text' \(its columns: review, stars\).*--text-column"):
        make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=bert)


def test_image_dataset_for_an_image_model(tmp_path):
    data = image_dataset(tmp_path / "pets")
    ds = make_dataset(f"hf-dataset:{data}", image_size=32, num_classes=2)
    img, label = ds[0]
    assert img.shape == (3, 32, 32) and label in (0, 1)
    assert ds.classes == ["cat", "dog"] and len(ds) == 5
    gray = make_dataset(f"hf-dataset:{data}", image_size=32, num_classes=2, channels=1)
    assert gray[0][0].shape == (1, 32, 32)
    assert len(make_dataset(f"hf-dataset:{data}", image_size=32, num_classes=2, length=2)) == 2


def test_language_model_labels_are_the_tokens(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    folder = bert_folder(tmp_path)
    model = BertForMaskedLM(BertConfig.from_pretrained(folder))
    model.config.name_or_path = str(folder)
    data = text_dataset(tmp_path / "d")
    ds = make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=model)
    s = ds[0]
    assert torch.equal(s["labels"][s["attention_mask"] == 1], s["input_ids"][s["attention_mask"] == 1])
    assert (s["labels"][s["attention_mask"] == 0] == -100).all()


def test_train_cli_on_an_hf_dataset(tmp_path, capsys, monkeypatch):
    from workbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = bert_folder(tmp_path)
    data = text_dataset(tmp_path / "d", text="review")
    code = main(["train", "--model", f"hf:{folder}", "--data", f"hf-dataset:{data}", "--text-column", "review",
                 "--val", f"hf-dataset:{data}", "--val-every", "1", "--steps", "2", "--batch-size", "2", "--no-progress",
                 "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert '"val_samples": 1' in captured.out  # validated on the one held-out sample of 10
    code = main(["train", "--model", f"hf:{folder}", "--data", f"hf-dataset:{data}", "--steps", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "error: the dataset has no text column" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_loader_workers_get_picklable_samples(bert, tmp_path):
    import pickle

    data = text_dataset(tmp_path / "d")
    ds = make_dataset(f"hf-dataset:{data}", image_size=224, num_classes=10, model=bert)
    again = pickle.loads(pickle.dumps(ds))
    assert torch.equal(again[3]["input_ids"], ds[3]["input_ids"])
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=1)
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (3, 16)
