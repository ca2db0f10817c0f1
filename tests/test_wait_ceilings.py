"""Every wait of the suite takes its ceiling from tests/timeouts.py, never a number of its own.

A literal ``timeout=120_000`` in one test (or pytest-qt's unnamed default of 5 s) is a ceiling
nobody scales for a slow machine (``WORKBENCH_TEST_TIMEOUT_SCALE``) and nobody finds when the
suite's ceilings are reviewed.
Poll intervals (a second or less) are not ceilings and may stay literal.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: pytest-qt's waits, whose timeouts are milliseconds (5,000 when none is given: a ceiling too)
QT_WAITS = {"waitSignal", "waitSignals", "waitUntil", "waitCallback", "waitExposed", "waitActive"}
#: waits whose timeouts are seconds: subprocess and process waits, futures, the launch fixtures
WAITS = {"run", "Popen", "check_output", "check_call", "wait", "communicate", "join", "result", "torchrun",
         "run_ranks"}
POLL_S = 1.0


def _literal_seconds(node: ast.expr, unit: float) -> float | None:
    """The seconds a timeout argument spells out (``600``, ``120_000`` ms, ``ms(30)``), or None
    when it names its value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value) * unit
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ms" and node.args:
        return _literal_seconds(node.args[0], 1.0)
    return None


def _literal_ceilings(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in QT_WAITS | WAITS:
            continue
        if name in QT_WAITS and not any(kw.arg == "timeout" for kw in node.keywords):
            found.append((node.lineno, f"{name}(...) with pytest-qt's default of 5 s"))
        for kw in node.keywords:
            if kw.arg in ("timeout", "timeout_s"):
                seconds = _literal_seconds(kw.value, 1e-3 if name in QT_WAITS else 1.0)
                if seconds is not None and seconds > POLL_S:
                    found.append((node.lineno, f"{name}(... {kw.arg}={ast.unparse(kw.value)})"))
    return sorted(found)


def test_no_wait_has_a_ceiling_of_its_own() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}: {call}"
        for path in sorted(TESTS.rglob("*.py"))
        if "benchmarks" not in path.parts and path.name != "timeouts.py"
        for line, call in _literal_ceilings(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "use a ceiling from tests/timeouts.py:\n" + "\n".join(offenders)


def test_the_check_finds_literal_ceilings() -> None:
    source = (
        "qtbot.waitSignal(sig, timeout=120_000)\n"
        "subprocess.run(cmd,\n    timeout=600)\n"
        "qtbot.waitUntil(done, timeout=500)\n"
        "qtbot.waitExposed(widget)\n"
        "qtbot.waitUntil(done, timeout=ms(30))\n"
        "qtbot.waitUntil(done, timeout=ms(GUI_EVENT_S))\n"
        "connection.wait(sentinels, timeout=0.1)\n"
        "socket.create_connection(addr, timeout=3)\n"
    )
    assert [line for line, _ in _literal_ceilings(source)] == [1, 2, 5, 6]  # 4: a poll of 0.5 s
