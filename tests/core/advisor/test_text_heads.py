"""Every Hugging Face task head the app opens is advisable (shape-only pass on meta)."""

from __future__ import annotations

import pytest

from workbench.core.advisor.advice import advise
from workbench.core.advisor.profile import AdvisorError, is_text_model, meta_batch

transformers = pytest.importorskip("transformers")

BERT = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 37, "max_position_embeddings": 64, "num_labels": 3}
GPT2 = {"vocab_size": 99, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64, "num_labels": 3, "pad_token_id": 0}
HEADS = ["AutoModelForSequenceClassification", "AutoModelForCausalLM", "AutoModelForMaskedLM",
         "AutoModelForTokenClassification", "AutoModelForQuestionAnswering"]


def _models() -> list[tuple[str, str]]:
    return [(kind, head) for kind in ("bert", "gpt2") for head in HEADS if not (kind == "gpt2" and head.endswith("MaskedLM"))]


@pytest.mark.parametrize("kind, head", _models())
def test_each_head_is_advisable(kind: str, head: str) -> None:
    labels = 2 if head.endswith("QuestionAnswering") else 3  # start and end logits
    config = (transformers.BertConfig(**BERT) if kind == "bert" else transformers.GPT2Config(**GPT2))
    config.num_labels = labels
    model = getattr(transformers, head).from_config(config)
    assert is_text_model(model)
    advice = advise(model, 1 << 30, (4, 16))
    assert advice.front, type(model).__name__


def test_gpt2_sequence_classification_reads_no_token_values() -> None:
    """GPT-2's pad-token warning (``pad_token_id in input_ids``) used to call .item() on meta tensors."""
    model = transformers.GPT2ForSequenceClassification(transformers.GPT2Config(**GPT2))
    advice = advise(model, 1 << 30, (2, 8))
    assert advice.front
    assert not hasattr(model.transformer, "warn_if_padding_and_no_attention_mask") or \
        "warn_if_padding_and_no_attention_mask" not in vars(model.transformer)


def test_token_and_qa_batches() -> None:
    tok = transformers.BertForTokenClassification(transformers.BertConfig(**BERT))
    b = meta_batch(tok, (2, 8), None)  # type: ignore[arg-type]
    assert isinstance(b, dict) and tuple(b["labels"].shape) == (2, 8)
    qa = transformers.BertForQuestionAnswering(transformers.BertConfig(**dict(BERT, num_labels=2)))
    b = meta_batch(qa, (2, 8), None)  # type: ignore[arg-type]
    assert isinstance(b, dict) and tuple(b["start_positions"].shape) == (2,)
    with pytest.raises(AdvisorError, match="seq-len"):
        meta_batch(qa, (2, 3, 8, 8), None)  # type: ignore[arg-type]
