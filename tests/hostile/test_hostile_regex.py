"""PEFT ``target_modules`` regular expressions: every pattern is answered (a match or one
refusal line) in time linear in the module path, whatever it nests, repeats or alternates."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torch import nn

from tests.preload import python_argv
from tests.timeouts import REGEX_FAMILY_S
from workbench.core.plan.peft_config import target_paths
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.plan.safe_regex import MAX_REGEX_PROGRAM

ROOT = Path(__file__).resolve().parents[2]

#: Patterns that make a backtracking matcher take exponential (or n**9) time on these paths.
CATASTROPHIC = [
    "(.*.*)*X", "(a+)+$", "((a*)*)*X", "(.*)*X", "(a|aa)+X",            # nested
    "(.*){30}X", "(.{0,99}){10}X", "(a?){99}a{99}X", "((.?){30}){30}X",  # {n}
    "(?>(.*.*)*X)", "(?>.*)*X",                                         # atomic
    ".*+X", "(.*)*+X", "(a++)+X",                                       # possessive
    "(a|a)*X", "(.|a)*X", r"(\w|\d|_|.)*X", "(a|ab|abc)*X",             # alternation overlaps
    ".*" * 8 + "X", ".*" * 30 + "X", "(.*a){20}X",                     # eight (and more) .* then X
    r"(.*)\1X", "(?=(.*)*X).*", "(a)?(?(1)a|b)*X",                      # what no linear matcher has
]
#: 200 module paths of 100 characters, none of which ends in X.
PATHS = ["a" * 97 + f"{i:03d}" for i in range(200)]

_FAMILY = textwrap.dedent("""
    import json, sys
    from torch import nn
    from workbench.core.plan.peft_config import target_paths
    from workbench.core.plan.rules import PlanError
    patterns, paths = json.loads(sys.stdin.read())
    model = nn.ModuleDict({p: nn.Linear(1, 1) for p in paths})
    for pattern in patterns:
        try:
            print(json.dumps(["matched", len(target_paths(model, pattern))]), flush=True)
        except PlanError as e:
            print(json.dumps(["refused", str(e)]), flush=True)
""")


def test_catastrophic_patterns_are_answered_within_the_bound() -> None:
    """The whole family, 200 paths each, in one process; a hang fails at the named ceiling."""
    r = subprocess.run(python_argv("-c", _FAMILY), input=json.dumps([CATASTROPHIC, PATHS]), capture_output=True,
                       text=True, cwd=ROOT, timeout=REGEX_FAMILY_S)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr  # nothing of the matcher's own on stderr
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(answers) == len(CATASTROPHIC)
    for pattern, (kind, detail) in zip(CATASTROPHIC, answers, strict=True):
        if kind == "matched":
            assert detail == 0, pattern  # no path ends in X
        else:
            assert "\n" not in detail and "target_modules" in detail, (pattern, detail)
    refused = {p for p, (kind, _) in zip(CATASTROPHIC, answers, strict=True) if kind == "refused"}
    assert refused == {"((.?){30}){30}X", "(.{0,99}){10}X", "(?>(.*.*)*X)", "(?>.*)*X", ".*+X", "(.*)*+X", "(a++)+X", r"(.*)\1X",
                       "(?=(.*)*X).*", "(a)?(?(1)a|b)*X"}


@pytest.mark.parametrize("pattern, needle", [
    ("(?>(.*.*)*X)", "an atomic group"), (".*+X", "a possessive quantifier"), (r"(0)\1", "a backreference"),
    ("(?=0)0", "a lookaround"), ("((.?){30}){30}X", f"more than the {MAX_REGEX_PROGRAM:,} accepted"),
    ("(?x) 0", "cannot be matched in linear time"), ("[", "not a valid regular expression"),
    ("x" * 5000, "5,000 characters"),
])
def test_refusals_are_one_line_naming_the_construct(pattern: str, needle: str) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    with pytest.raises(PlanError, match="target_modules") as info:
        FreezePlan.from_peft({"peft_type": "LORA", "r": 2, "target_modules": pattern}, model=model)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_patterns_people_write_still_resolve() -> None:
    model = nn.ModuleDict({"enc": nn.ModuleDict({"q_proj": nn.Linear(1, 1), "v_proj": nn.Linear(1, 1),
                                                 "o_proj": nn.Linear(1, 1)})})
    assert target_paths(model, r".*\.(q|v)_proj") == ["enc.q_proj", "enc.v_proj"]
    assert target_paths(model, r"(?i)ENC\.[qv]_PROJ") == ["enc.q_proj", "enc.v_proj"]
    assert target_paths(model, "enc.o_proj") == ["enc.o_proj"]  # whole-path match, as PEFT's re.fullmatch


def test_without_re2_every_pattern_is_refused_not_backtracked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing google-re2 (installed with --no-deps) never falls back to Python's re."""
    monkeypatch.setitem(sys.modules, "re2", None)  # import re2 -> ImportError
    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(PlanError, match=r"needs google-re2 .*pip install google-re2") as info:
        target_paths(model, "(.*){30}X")
    assert "\n" not in str(info.value)
