"""The package's shape: no import cycles (function-level imports included), no print() in the
library, and no model family or parameter names outside `irbm/models/`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
from _cli_helpers import REPOSITORY, subprocess_environment

PACKAGE = REPOSITORY / "irbm"
# Modules that talk to the user on stdout: the command line, and the scikit-learn estimators,
# whose ``verbose=True`` prints as scikit-learn's own BernoulliRBM does.
PRINTING_MODULES = {"irbm.cli", "irbm.commands", "irbm.sklearn._base"}
MODEL_NAMES = re.compile(
    r'isinstance\([^)]*(OrderedRBM|InfiniteRBM|\bRBM)\b|== *"(rbm|orbm|irbm)"|\.(W|b|c)\b')
# Being rewritten as the `irbm.plotting` subpackage on another branch: checked once merged.


def module_name(path: Path) -> str:
    parts = path.relative_to(REPOSITORY).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path) -> set[str]:
    """The package modules that ``name`` imports anywhere in its file (inside functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            # `from . import runs` imports the module irbm.runs; `from .models import RBM`
            # the package irbm.models.
            found.update(f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES
                         else target for alias in node.names)
    return {module for module in found if module in MODULES and module != name}


def import_graph() -> dict[str, set[str]]:
    return {name: imported_modules(name, path) for name, path in MODULES.items()}


def test_import_graph_finds_the_known_edges():
    graph = import_graph()
    assert "irbm.commands" in graph["irbm.cli"]
    assert "irbm.runs" in graph["irbm.workflows"]
    assert "irbm.models._registry" in graph["irbm.models.rbm"]


def test_package_imports_have_no_cycles():
    try:
        order = list(TopologicalSorter(import_graph()).static_order())
    except CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")
    assert set(order) == set(MODULES)


def test_command_line_modules_import_in_one_direction():
    graph = import_graph()
    for module in MODULES:
        if module not in ("irbm.cli",):
            assert "irbm.cli" not in graph[module], f"{module} imports irbm.cli"
        if module not in ("irbm.cli", "irbm.commands"):
            assert "irbm.commands" not in graph[module], f"{module} imports irbm.commands"
    assert not {"irbm.cli", "irbm.commands"} & graph["irbm.demo"]


def test_cli_imports_in_a_fresh_interpreter():
    completed = subprocess.run([sys.executable, "-c", "import irbm.cli"], capture_output=True,
                               text=True, env=subprocess_environment(), timeout=120)
    assert completed.returncode == 0, completed.stderr


def test_no_print_in_library_modules():
    offenders = []
    for name, path in MODULES.items():
        if name in PRINTING_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "print"):
                offenders.append(f"{path.relative_to(REPOSITORY)}:{node.lineno}")
    assert not offenders, f"print() in library code (use logging or an echo callable): {offenders}"


def test_no_family_or_parameter_names_outside_models():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPOSITORY).as_posix()
        if relative.startswith("irbm/models/"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if MODEL_NAMES.search(line):
                offenders.setdefault(relative, []).append(f"{number}: {line.strip()}")
    assert not offenders, f"family or parameter names outside irbm/models/: {offenders}"


def test_every_documented_submodule_is_reachable_after_a_plain_import():
    """Every `irbm.NAME.attribute` the README names (irbm.tempering.estimate_..., irbm.bracket.
    rejudge, irbm.runs.ValidateWithAIS, ...) works after `import irbm` only: a fresh
    interpreter, so no other test has imported the submodule first."""
    import re
    import subprocess
    import sys
    readme = (REPOSITORY / "README.md").read_text()
    references = sorted({m for m in re.findall(r"\birbm\.([a-z]\w*\.[A-Za-z]\w*)", readme)
                         if (REPOSITORY / "irbm" / f"{m.split('.')[0]}.py").exists()
                         or (REPOSITORY / "irbm" / m.split(".")[0]).is_dir()})
    assert {"tempering", "bracket", "runs", "strategies"} <= {r.split(".")[0] for r in references}
    code = "import irbm\n" + "".join(f"irbm.{reference}\n" for reference in references)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPOSITORY)


def test_the_public_modules_say_what_a_star_import_gives():
    """`from irbm.evaluate import *` brought torch, numpy, tqdm and private helpers (an API
    review): the user-facing modules name their public names, and each exists."""
    import importlib
    for name in ("evaluate", "sampling", "tempering", "floor", "training", "workflows", "ais",
                 "reverse", "runs", "bracket", "sweep", "checkpoint"):
        module = importlib.import_module(f"irbm.{name}")
        assert module.__all__ and all(hasattr(module, item) for item in module.__all__), name
        namespace = {}
        exec(f"from irbm.{name} import *", namespace)
        assert not {"torch", "np", "tqdm", "math"} & set(namespace), name
    # What the README tells users to call from a module with __all__ is among its names.
    import re
    readme = (REPOSITORY / "README.md").read_text()
    for name, attribute in set(re.findall(r"\birbm\.([a-z]\w*)\.([A-Za-z]\w*)", readme)):
        if (REPOSITORY / "irbm" / f"{name}.py").exists():
            exported = getattr(importlib.import_module(f"irbm.{name}"), "__all__", None)
            assert exported is None or attribute in exported, (name, attribute)
