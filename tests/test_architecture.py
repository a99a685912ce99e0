"""The layers hold: imports point down the floors, Qt stays in ui/, the engine knows no runtime,
no import cycle, no module over 500 lines in app/, backends/ or ui/, no test module importing
another. Read from the source (every import, also those inside functions), so a lazy import
cannot hide a wrong arrow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "backends", "ui")
QT = ("PySide6", "pyqtgraph", "shiboken6")
RUNTIMES = ("llama_cpp", "torch", "transformers")
MAX_LINES = 500
# modules and sub-packages at the engine's top level: the session, the judge, the controller,
# the trace and their records; each drafter family has its own room in app/engine/drafters/
MAX_ENGINE_ENTRIES = 20

# floor of each part, lowest first; a module may import its own floor and those below
FLOORS = [
    ("backends", 0),
    ("app.common", 1),  # app/__init__, errors, paths, versions, settings
    ("app.engine", 2),
    ("app.models", 3),
    ("app.runs", 4),
    ("app.analysis", 4),  # analyses over runs (cost model, sweeps, ranking, exactness)
    ("app.host", 5),  # the engine's child process and the parent's handle on it
    ("app.cli", 5),
    ("ui", 6),
]
# parts that must not import these, whatever the floors say
FORBIDDEN = {
    "app.common": ("backends",),
    "app.engine": ("backends",),
}


def part_of(module: str) -> str:
    for name, _ in sorted(FLOORS, key=lambda f: -len(f[0])):
        if module == name or module.startswith(name + "."):
            return name
    if module.startswith("app"):
        return "app.common"
    raise AssertionError(f"{module} belongs to no floor — add it to FLOORS")


def floor_of(module: str) -> int:
    return dict(FLOORS)[part_of(module)]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(path: Path, module: str) -> set[str]:
    """Every module named by an import statement anywhere in the file."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def project_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from app import x` counts as app.x when
    app.x is a module, else as app)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = set()
        for name in imports_of(path, module):
            if name in modules:
                found.add(name)
        graph[module] = found - {module}
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} (floor {floor_of(module)}) imports {target} (floor {floor_of(target)})"
        for module, targets in graph.items() for target in targets
        if floor_of(target) > floor_of(module)
    )


def forbidden_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items() for target in targets
        if any(part_of(target) == banned for banned in FORBIDDEN.get(part_of(module), ()))
    )


def layer_leaks(modules: dict[str, Path]) -> list[str]:
    """Qt imported outside ui/, a runtime imported outside backends/."""
    wrong = []
    for module, path in modules.items():
        tops = {name.split(".")[0] for name in imports_of(path, module)}
        if not module.startswith("ui") and tops & set(QT):
            wrong.append(f"{module} imports Qt ({', '.join(sorted(tops & set(QT)))})")
        if not module.startswith("backends") and tops & set(RUNTIMES):
            wrong.append(f"{module} imports a runtime ({', '.join(sorted(tops & set(RUNTIMES)))})")
    return wrong


def cross_test_imports(paths: list[Path]) -> list[str]:
    """Test modules that import another test module: fixtures they share belong in
    tests/conftest.py, helpers in tests/helpers.py."""
    wrong = set()
    for path in paths:
        module = "tests." + path.stem
        for name in imports_of(path, module):
            top = ".".join(name.split(".")[:2])
            if top.startswith("tests.test_") and top != module:
                wrong.add(f"{path.name} imports {top}")
    return sorted(wrong)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return project_imports(project_modules())


def test_imports_point_down_the_floors(graph):
    wrong = upward_imports(graph)
    assert not wrong, "imports that run back up a floor:\n" + "\n".join(wrong)


def test_engine_and_common_code_know_no_backend(graph):
    wrong = forbidden_imports(graph)
    assert not wrong, "\n".join(wrong)


def test_qt_only_in_ui_and_runtimes_only_in_backends():
    wrong = layer_leaks(project_modules())
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def oversized(root: Path) -> list[str]:
    """Modules of the project's packages over MAX_LINES lines."""
    return [f"{p.relative_to(root)}: {n} lines" for pkg in PACKAGES
            for p in sorted((root / pkg).rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]


def test_no_module_in_app_backends_or_ui_is_over_the_size_limit(tmp_path):
    big = oversized(ROOT)
    assert not big, "\n".join(big)
    # a planted module one line over the limit is named, in each package
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
        (tmp_path / pkg / "fits.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(tmp_path) == [f"{pkg}/long.py: {MAX_LINES + 1} lines" for pkg in PACKAGES]


def top_level_entries(folder: Path) -> list[str]:
    """The modules and sub-packages directly in a package (its __init__ not counted)."""
    return sorted(p.name for p in folder.iterdir()
                  if (p.suffix == ".py" and p.name != "__init__.py")
                  or (p.is_dir() and (p / "__init__.py").is_file()))


def test_engine_top_level_stays_small_with_drafters_in_their_rooms(tmp_path):
    entries = top_level_entries(ROOT / "app" / "engine")
    assert len(entries) <= MAX_ENGINE_ENTRIES, (
        f"app/engine holds {len(entries)} modules and packages (at most {MAX_ENGINE_ENTRIES}): "
        + ", ".join(entries))
    assert "drafters" in entries
    # the count sees a planted module and a planted package, and nothing else
    (tmp_path / "one.py").write_text("")
    (tmp_path / "room").mkdir()
    (tmp_path / "room" / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / "__init__.py").write_text("")
    assert top_level_entries(tmp_path) == ["one.py", "room"]


def settings_imports(graph: dict[str, set[str]], settings: str = "app.engine.decode_config"
                     ) -> list[str]:
    """What the settings module imports of the drafters it configures (none: they are plain
    data, and every user of the settings would otherwise load every drafter)."""
    return sorted(m for m in graph.get(settings, ())
                  if m == "app.engine.drafters" or m.startswith("app.engine.drafters."))


def test_the_settings_import_no_drafter(graph):
    assert settings_imports(graph) == []
    planted = {"app.engine.decode_config": {"app.engine.sampling",
                                            "app.engine.drafters.registry"}}
    assert settings_imports(planted) == ["app.engine.drafters.registry"]


def test_no_test_module_imports_another():
    wrong = cross_test_imports(sorted((ROOT / "tests").glob("test_*.py")))
    assert not wrong, "move what they share to conftest.py or helpers.py:\n" + "\n".join(wrong)


def test_each_check_reports_what_it_is_for(tmp_path):
    """Power check: planted faults (a lazy upward import, a cycle, Qt in the engine, a
    backend in the engine, a test module importing two others) are each reported by the check
    that owns them."""
    planted = tmp_path / "app" / "engine" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        "from app.engine import session\n\n\n"
        "def later():\n    from app.cli import main\n    from PySide6.QtCore import QObject\n"
        "    import backends.llamacpp\n"
    )
    names = imports_of(planted, "app.engine.planted")
    graph = {"app.engine.planted": {n for n in names if n in project_modules()}}
    graph["app.engine.session"] = {"app.engine.planted"}
    assert upward_imports(graph) == [
        "app.engine.planted (floor 2) imports app.cli (floor 5)",
        "app.engine.planted (floor 2) imports app.cli.main (floor 5)"]
    assert forbidden_imports(graph) == ["app.engine.planted imports backends.llamacpp"]
    assert layer_leaks({"app.engine.planted": planted}) == [
        "app.engine.planted imports Qt (PySide6)"]
    assert find_cycle(graph) == ["app.engine.planted", "app.engine.session",
                                 "app.engine.planted"]
    test = tmp_path / "tests" / "test_planted.py"
    test.parent.mkdir()
    test.write_text("from tests import helpers, test_host\nfrom tests.tiny_gguf import Tiny\n\n\n"
                    "def test_it():\n    from .test_cli import run_cli\n")
    assert cross_test_imports([test]) == ["test_planted.py imports tests.test_cli",
                                           "test_planted.py imports tests.test_host"]
