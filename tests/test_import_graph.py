"""The modules of workbench import each other without cycles, in the package order of
docs/architecture.md (type-only imports counted), and core/gui use real imports only."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "workbench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the checks of this file (none changes a tree)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, name: str, is_package: bool, known: set[str], *, typing: bool = False) -> set[str]:
    """Workbench modules imported anywhere in the module (functions too); TYPE_CHECKING blocks
    only with ``typing``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:  # from pkg import module
                    found.add(sub)
                elif base in known:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def _graph(*, typing: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {
        name: _imports(_tree(path), name, path.name == "__init__.py", known, typing=typing)
        for name, path in mods.items()
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == grey:
                return stack[stack.index(nxt) :] + [nxt]
            if colour[nxt] == white:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = black
        return None

    for start in sorted(graph):
        if colour[start] == white:
            found = dfs(start)
            if found:
                return found
    return None


def test_the_graph_sees_function_level_imports_and_skips_type_checking():
    graph = _graph()
    assert "workbench.core.freezing.plan_handle" in graph["workbench.core.plan.rules"]
    assert "workbench.core.plan.rules" not in graph["workbench.core.plan.specs"]  # TYPE_CHECKING only
    tree = ast.parse("def f():\n    from workbench.core import errors\nif TYPE_CHECKING:\n    import workbench.cli\n")
    known = {"workbench.core", "workbench.core.errors", "workbench.cli"}
    assert _imports(tree, "x", False, known) == {"workbench.core.errors"}


def test_a_cycle_is_found():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_workbench_modules():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


#: The package order (docs/architecture.md): a package imports lower ranks only, never a
#: sibling of its rank. ``workbench.core`` itself (errors, atomic writes, the optimizer table,
#: the version) is the floor; the script API facade ``workbench`` sits on core, the entry points
#: (``cli``, ``__main__``) on everything.
RANKS: dict[str, int] = {
    "core": 0,
    "core.plan": 1,
    "core.models": 2,
    "core.freezing": 3,
    "core.training": 4,
    "core.checks": 5, "core.advisor": 5, "core.export": 5, "core.runs": 5,
    "workbench": 6,  # the script API facade (lazy); the GUI reads its __version__
    "gui": 7, "integrations": 7,
    "commands": 8,  # the ``gui`` command starts the GUI
    "cli": 9,
    "__main__": 10,
}
#: Imports against the order, each with its reason. FreezePlan.apply / FreezePlan.from_model
#: are the one convenience: the plan hands itself to the freezing layer.
ALLOWED: dict[tuple[str, str], str] = {
    ("workbench.core.plan.rules", "workbench.core.freezing.plan_handle"): "FreezePlan.apply",
    ("workbench.core.plan.rules", "workbench.core.freezing.state_reader"): "FreezePlan.from_model",
    ("workbench.core.training.engine", "workbench.core.runs.record"): "the engine writes the run record (run.json) "
    "into the save folder; record.py imports nothing of training",
    ("workbench.core.export.from_run", "workbench.core.runs.store"): "export --run reads a run folder with the "
    "reader `workbench runs` uses (one reader, one set of refusals); core/runs imports nothing of export",
    ("workbench.core.export.from_run", "workbench.core.runs.record"): "the reader's refusal (RunStoreError)",
    ("workbench.core.advisor.sweep", "workbench.core.runs.sweeps"): "the sweep writes the folder core/runs reads: "
    "one set of file names; core/runs imports nothing of the advisor",
    ("workbench.core.advisor.sweep_study", "workbench.core.runs.sweeps"): "the study's file name in the sweep folder",
}


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["workbench", "core"]:
        return f"core.{parts[2]}" if len(parts) > 2 and (ROOT / "core" / parts[2]).is_dir() else "core"
    return parts[1] if len(parts) > 1 else "workbench"


def _against_the_order(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in sorted(graph.items()):
        a = _package(src)
        for dst in sorted(targets):
            b = _package(dst)
            if a == b or (src, dst) in ALLOWED:
                continue
            if RANKS[b] >= RANKS[a]:
                bad.append(f"{src} ({a}) imports {dst} ({b})")
    return bad


def test_every_package_has_a_rank():
    assert {_package(m) for m in _modules()} <= set(RANKS)


def test_packages_import_only_below_them_type_only_imports_counted():
    bad = _against_the_order(_graph(typing=True))
    assert not bad, "imports against the package order of docs/architecture.md:\n" + "\n".join(bad)


def test_the_allow_list_holds_only_edges_that_exist():
    graph = _graph(typing=True)
    stale = [f"{a} -> {b}" for a, b in ALLOWED if b not in graph.get(a, set())]
    assert not stale, "remove from the allow-list: " + ", ".join(stale)


def test_the_order_check_can_fail():
    assert _against_the_order({"workbench.core.models.memory": {"workbench.core.freezing.apply"}})
    assert _against_the_order({"workbench.core.checks.doctor": {"workbench.core.advisor.profile"}})  # siblings
    assert not _against_the_order({"workbench.core.freezing.apply": {"workbench.core.plan.rules"}})


def test_architecture_doc_writes_the_order():
    text = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "plan < models < freezing < training < {checks, advisor, export, runs} < {commands, gui, integrations}" in text


def _string_imports(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        arg = node.args[0]
        if (name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                and arg.value.startswith("workbench")):
            out.append((node.lineno, arg.value))
    return out


def test_core_and_gui_import_workbench_modules_for_real():
    found = []
    for sub in ("core", "gui"):
        for path in sorted((ROOT / sub).rglob("*.py")):
            for line, target in _string_imports(_tree(path)):
                found.append(f"{path.relative_to(ROOT.parent)}:{line}: import_module({target!r})")
    assert not found, "string-path imports of workbench modules:\n" + "\n".join(found)


def _unit(module: str) -> str:
    """A package of core (``core.plan``: the layers), else the module itself."""
    return _package(module) if module.startswith("workbench.core.") else module


def test_no_cycle_between_packages_even_through_type_only_imports():
    """Type-only imports count too: a dialog that names the main window's type while the window
    imports the dialog is a cycle a reader has to untangle (gui/advisor <-> gui/main_window was
    one). Units are core's packages (inside one, a checker may be typed with the plan it checks)
    and every other module."""
    units: dict[str, set[str]] = {}
    for src, dsts in _graph(typing=True).items():
        for dst in dsts:
            units.setdefault(_unit(dst), set())
            if (src, dst) not in ALLOWED and _unit(src) != _unit(dst):
                units.setdefault(_unit(src), set()).add(_unit(dst))
    cycle = _find_cycle(units)
    assert cycle is None, "import cycle through type-only imports: " + " -> ".join(cycle)


#: The most lines a module of workbench/ may have (one concept per file).
MAX_LINES = 1000


def test_no_module_is_over_the_line_limit():
    long = [f"{p.relative_to(ROOT.parent)}: {n} lines" for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split them by concept):\n" + "\n".join(long)


def _private_imports(tree: ast.AST, name: str) -> list[str]:
    """Private names (``_x``, not dunders) a module imports by name from another workbench module."""
    return [f"{node.lineno}: {alias.name} from {node.module}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench") and node.module != name
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_no_private_name_is_imported_across_modules():
    found = [f"{path.relative_to(ROOT.parent)}:{hit}" for name, path in sorted(_modules().items())
             for hit in _private_imports(_tree(path), name)]
    assert not found, "private names used across modules (make them public, or move them):\n" + "\n".join(found)


def test_the_size_and_private_checks_can_fail():
    tree = ast.parse("from workbench.a import _x, y, __version__\nfrom workbench.c import _own\n")
    assert _private_imports(tree, "workbench.c") == ["1: _x from workbench.a"]
    assert "test_no_module_is_over_the_line_limit" in globals() and MAX_LINES == 1000


def test_no_cycle_inside_the_plan_even_through_type_only_imports():
    """The plan's checkers are typed with protocols (``specs.ResolvedPlan``,
    ``checkpoint_fit.StagedRules``, ``fast.resolve.RulePlan``), not with the plan class that
    imports them."""
    plan = {src: {d for d in dsts if d.startswith("workbench.core.plan")}
            for src, dsts in _graph(typing=True).items() if src.startswith("workbench.core.plan")}
    cycle = _find_cycle(plan)
    assert cycle is None, "type-only import cycle in core/plan: " + " -> ".join(cycle)


# ---------------------------------------------------------------- model-source names
SOURCE_TABLE = ROOT / "core" / "models" / "sources.py"

#: Where a spec's source is still compared with a source's name, and how often: nowhere. None
#: may be added: a new switch on a source name is a field of the row in
#: ``core/models/sources.py`` instead (``weights_preset``, ``safetensors_folder``, ...), and the
#: checkpoint spec, which is not a row, is asked through ``ModelSpec.architecture_source`` and
#: ``ModelSpec.from_checkpoint_file``.
SOURCE_NAME_SWITCHES: dict[str, int] = {}


def _source_names() -> set[str]:
    """The table's source keys and the named constants beside it (read from its source)."""
    tree = ast.parse(SOURCE_TABLE.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        values: list[ast.expr] = []
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ModelSource":
            values = [k.value for k in node.keywords if k.arg == "key"]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.endswith("_SOURCE") for t in node.targets
        ):
            values = [node.value]
        names |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return names


def _source_switches(tree: ast.AST, names: set[str]) -> int:
    """Comparisons of ``source`` or ``x.source`` with a source's name (``== "hf"``, ``in ("timm", ...)``)."""

    def is_source(e: ast.AST) -> bool:
        return (isinstance(e, ast.Attribute) and e.attr == "source") or (isinstance(e, ast.Name) and e.id == "source")

    def constants(e: ast.AST) -> list[ast.AST]:
        return list(e.elts) if isinstance(e, (ast.Tuple, ast.List, ast.Set)) else [e]

    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        if any(is_source(p) for p in parts) and any(
            isinstance(c, ast.Constant) and c.value in names for p in parts for c in constants(p)
        ):
            count += 1
    return count


def test_no_new_switch_on_model_source_names():
    names = _source_names()
    assert {"torchvision", "timm", "hf", "py", "checkpoint"} <= names
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path == SOURCE_TABLE:
            continue
        n = _source_switches(_tree(path), names)
        if n:
            found[path.relative_to(ROOT).as_posix()] = n
    grown = {p: n for p, n in found.items() if n > SOURCE_NAME_SWITCHES.get(p, 0)}
    assert not grown, f"switches on model-source names (make them fields of the source table's rows): {grown}"


def test_the_source_switch_check_can_fail():
    bad = ast.parse('if spec.source == "hf":\n    pass\nok = kind in ("py", "hf")\nx = source in ("timm",)')
    assert _source_switches(bad, {"hf", "timm", "py"}) == 2
