"""Big models under FSDP2: built on meta, sharded, each rank's slice read from safetensors shards."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from tests.fixtures.ranks import run_ranks
from tests.fixtures.torchrun import torchrun
from tests.timeouts import SUBPROCESS_LONG_S
from workbench.core.training.fsdp import FsdpError
from workbench.core.training.fsdp_materialize import checkpoint_files, materialize

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

CONFIG = {"n_layer": 3, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 16, "bos_token_id": 0, "eos_token_id": 0,
              "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}

WORKER = textwrap.dedent(
    '''
    import json, sys
    from pathlib import Path

    import torch
    import torch.distributed as dist
    import transformers
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from workbench.core.freezing.apply import apply_plan
    from workbench.core.training.fsdp import ShardVerifier, local, resolve_blocks, shard_model
    from workbench.core.training.fsdp_materialize import materialize

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**json.loads(sys.argv[2])))
    applied = apply_plan(model, {"rules": [{"select": "*", "frozen": True},
                                           {"select": "transformer.h.2", "frozen": False}]})
    blocks = resolve_blocks(model, None)
    shard_model(model, torch.device("cpu"), blocks)
    read = materialize(model, out / "hf", torch.device("cpu"))
    local_numel = sum(local(p).numel() for p in model.parameters())
    shards = ShardVerifier(applied, model)
    ids = torch.arange(12).view(2, 6) % 64
    with torch.no_grad():
        logits = model(ids).logits
    model.reshard()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    report = shards.verify()
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    torch.save({"logits": logits, "full": full}, out / f"rank{rank}.pt")
    json.dump({"blocks": blocks, "read": len(read), "local_numel": local_numel,
               "total_numel": sum(p.numel() for p in model.parameters()), "verify_ok": report.ok,
               "checked": report.checked}, open(out / f"rank{rank}.json", "w"))
    dist.barrier()
    dist.destroy_process_group()
    '''
)


def _reference(tmp_path: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    model.save_pretrained(tmp_path / "hf", safe_serialization=True, max_shard_size="20KB")
    return model


def test_missing_tensors_are_one_line(tmp_path: Path):
    ref = _reference(tmp_path)
    assert len(checkpoint_files(tmp_path / "hf")) > 1  # a sharded checkpoint
    with torch.device("meta"):
        other = transformers.GPT2LMHeadModel(transformers.GPT2Config(**dict(CONFIG, n_layer=4)))
    with pytest.raises(FsdpError, match=r"not in .*transformer\.h\.3.*buffers=") as e:
        materialize(other, tmp_path / "hf", torch.device("cpu"))
    assert "\n" not in str(e.value)
    with pytest.raises(FsdpError, match="holds no .safetensors"):
        checkpoint_files(tmp_path)
    # one process, nothing sharded: every tensor read whole; one built on the CPU keeps its values
    with torch.device("meta"):
        same = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    same.transformer.ln_f = torch.nn.LayerNorm(32)
    torch.nn.init.constant_(same.transformer.ln_f.weight, 3.0)
    read = materialize(same, tmp_path / "hf", torch.device("cpu"))
    assert "transformer.ln_f.weight" not in read and "transformer.h.0.attn.c_attn.weight" in read
    for (k, a), b in zip(ref.state_dict().items(), same.state_dict().values(), strict=True):
        assert torch.equal(b, torch.full_like(b, 3.0) if k == "transformer.ln_f.weight" else a), k


@pytest.mark.slow
def test_meta_build_shard_then_read_each_ranks_slice(tmp_path: Path):
    ref = _reference(tmp_path)
    ids = torch.arange(12).view(2, 6) % 64
    with torch.no_grad():
        want = ref(ids).logits
    (tmp_path / "worker.py").write_text(WORKER)
    proc = run_ranks(tmp_path / "worker.py", [str(tmp_path), json.dumps(CONFIG)], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    start = ref.state_dict()
    for rank in range(2):
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert r["blocks"] == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]
        # each rank allocated and read about half of the parameters, never the whole model
        assert r["local_numel"] <= r["total_numel"] // 2 + 64 and r["read"] >= len(start) - 1
        assert r["verify_ok"] and r["checked"]["frozen"] > 0 and r["checked"]["trainable"] == 12
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.allclose(got["logits"], want, atol=1e-5)  # the sharded model is the saved one
        for k, t in start.items():
            trains = k.startswith("transformer.h.2.")
            assert torch.equal(got["full"][k], t) != trains, k


@pytest.mark.slow
def test_torchrun_cli_builds_a_hugging_face_model_on_meta_and_reads_its_shards(tmp_path: Path):
    from safetensors.torch import load_file

    from workbench.core.plan.rules import FreezePlan, Rule

    ref = _reference(tmp_path)
    plan = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("transformer.h.2", frozen=False)]).save(plan)
    proc = torchrun(["-m", "workbench", "train", "--model", f"hf:{tmp_path / 'hf'}", "--strategy", "fsdp",
                     "--steps", "2", "--batch-size", "2", "--data", "synthetic:16", "--plan", str(plan),
                     "--device", "cpu", "--no-progress", "--json", "--save", str(tmp_path / "run")], tmp_path, timeout_s=SUBPROCESS_LONG_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.count("each rank read only its shards from") == 1  # the meta path, said once
    result = json.loads(proc.stdout)
    assert result["status"] == "completed" and result["verify"]["ok"], result["message"]
    saved = load_file(str(tmp_path / "run" / "model.safetensors"))
    for k, t in ref.state_dict().items():  # read from the shards: frozen tensors as saved, the rest trained
        if k in saved:
            assert torch.equal(saved[k], t) != k.startswith("transformer.h.2."), k
    assert any(k.startswith("transformer.h.2.") for k in saved)
