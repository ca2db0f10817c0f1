"""``workbench advise``: the JSON contract, the table, the choice, and one-line errors."""

import json

import pytest

from workbench.cli import main
from workbench.core.plan import FreezePlan

SMALL = ["resnet18", "--image-size", "64", "--batch-size", "8", "--device", "cpu"]


def _advise(capsys, *extra):
    rc = main(["advise", *SMALL, *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_contract(capsys, resnet18):
    rc, out, _ = _advise(capsys, "--memory", "180MB", "--json")
    assert rc == 0
    data = json.loads(out)
    assert set(data) == {"budget_bytes", "candidates", "chosen", "auto_freeze", "input_shape"}
    assert data["budget_bytes"] == 180 * 10**6
    for c in data["candidates"]:
        assert set(c) == {"name", "plan", "predicted", "trainable_params", "fits"}
        # the cache's figures where something frozen runs first
        assert set(c["predicted"]) in ({"peak_bytes", "step_ratio"},
                                       {"peak_bytes", "step_ratio", "cached_step_ratio", "cache_bytes_per_sample"})
        assert c["fits"] == (c["predicted"]["peak_bytes"] <= data["budget_bytes"])
        plan = FreezePlan.from_dict(c["plan"])  # a freeze plan v1
        assert c["plan"]["format"] == "freeze-plan" and c["plan"]["version"] == 1
        plan.validate(resnet18, strict=True)
    chosen = data["candidates"][data["chosen"]]
    assert chosen["fits"]
    assert chosen["trainable_params"] == max(c["trainable_params"] for c in data["candidates"] if c["fits"])
    # 180 MB fits head only and layer4 (~173 MB) with AdamW at this size, not full fine-tuning (~206 MB)
    assert not all(c["fits"] for c in data["candidates"])
    assert chosen["name"].startswith("last 1 block (layer4)")
    # DoRA and full-rank A+B are on the front although the cost does not rank them: the sweep measures them
    names = [c["name"] for c in data["candidates"]]
    assert "DoRA r=16 on the conv layers of 4 blocks + head" in names
    assert "full-rank A+B on the conv layers of 4 blocks + head" in names


def test_table_marks_the_chosen_plan(capsys):
    rc, out, _ = _advise(capsys, "--memory", "1GB")
    assert rc == 0
    chosen = [line for line in out.splitlines() if line.startswith("→")]
    assert len(chosen) == 1 and "full fine-tuning" in chosen[0]
    assert "chosen: full fine-tuning" in out


def test_measure_adds_measured_cost(capsys):
    # 32 px, batch 4: every candidate trains for real at a quarter of SMALL's pixels
    rc = main(["advise", "resnet18", "--image-size", "32", "--batch-size", "4", "--device", "cpu", "--memory", "1GB",
               "--optimizer", "sgd", "--measure", "2", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out)
    for c in data["candidates"]:
        m = c["measured"]
        assert set(m) == {"peak_bytes", "memory_source", "step_ratio", "step_ratio_range"}
        assert m["peak_bytes"] > 0 and m["step_ratio"] > 0 and m["memory_source"] == "peak tensor bytes"
        lo, hi = m["step_ratio_range"]
        assert lo <= m["step_ratio"] <= hi
        # the run's live tensor bytes: what the prediction is for, measured (never the prediction itself)
        assert m["peak_bytes"] != c["predicted"]["peak_bytes"]
        low = 0.5  # every candidate, low-rank A+B on convolutions included, within 2x either way
        assert low * m["peak_bytes"] <= c["predicted"]["peak_bytes"] <= 2 * m["peak_bytes"], c["name"]


def test_measured_table_has_every_column_on_every_row(capsys, monkeypatch):
    """--measure without --json: a measured row, rows not measured and the auto-freeze row share the columns."""
    from workbench.core.advisor import measure
    from workbench.core.advisor.advice import Measured

    def first_only(advice, config, steps, **kwargs):  # a real measurement is test_measure_adds_measured_cost's
        advice.assessed[advice.front[0]].measured = Measured(50 * 10**6, 1.0, 10.0, "peak RSS growth", (0.9, 1.1), steps)
        return 1

    monkeypatch.setattr(measure, "measure_front", first_only)
    rc, out, _ = _advise(capsys, "--memory", "1GB", "--optimizer", "sgd", "--measure", "2")
    assert rc == 0
    lines = out.splitlines()
    head = next(line for line in lines if "measured peak" in line)
    rows = lines[lines.index(head) + 2:]
    rows = rows[:next(i for i, r in enumerate(rows) if r.startswith("  measured peak:"))]
    assert len(rows) >= 3 and any("auto-freeze" in r for r in rows)
    assert sum(" 50 MB " in r for r in rows) == 1
    assert all(r.rstrip().endswith(("-", "1.00")) for r in rows)


def test_budget_below_the_weights_is_one_line_with_the_smallest_that_works(capsys):
    rc, out, err = _advise(capsys, "--memory", "10MB")
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "below the model's own weights" in lines[0] and "smallest plan needs about" in lines[0]


def test_nothing_fits_says_what_would(capsys):
    rc, out, err = _advise(capsys, "--memory", "50MB", "--json")
    assert rc == 1
    assert json.loads(out)["chosen"] is None
    assert "no candidate fits" in err and "smallest needs about" in err


@pytest.mark.parametrize(
    "argv, words",
    [(["advise", "resnet18", "--memory", "lots"], "not understood"),
     (["advise", "resnet19", "--memory", "8GB"], "resnet19")],
)
def test_bad_input_is_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err


def test_bench_json_reports_measured_peak_next_to_predicted(tmp_path, capsys):
    plan = tmp_path / "layer4.json"
    FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [
        {"select": "*", "frozen": True}, {"select": "layer4", "frozen": False}, {"select": "fc", "frozen": False}]}).save(plan)
    assert main(["bench", "resnet18", "--plan", str(plan), "--steps", "1", "--warmup", "0", "--batch-size", "4",
                 "--image-size", "64", "--device", "cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for r in rows:
        measured, predicted = r["measured_peak_bytes"], r["predicted_peak_bytes"]
        # live tensor bytes, not RSS: at least the weights, and what the advisor predicts within 15 %
        assert measured > 11_689_512 * 4
        assert abs(predicted - measured) <= 0.15 * measured, r["variant"]
    assert rows[1]["measured_peak_bytes"] < rows[0]["measured_peak_bytes"]
