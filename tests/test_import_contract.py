"""The layers import downwards only: every import of the package, those inside functions included, read with ast.

The rules (see ``docs/concepts.md``): the env layer imports no torch and nothing above it; policies import no ppo;
the redundancy losses import neither ppo nor env; ppo imports no best-response code, no Ray layer and no bundled
envs; only the product layer imports the bundled envs; packages form no cycle; no module takes a private name
from another package; the modules of a package, its front (``__init__.py``) included, form no cycle; no module
imports from the front of its own package (the front re-exports the modules, so a module that reads a name back
from it depends on every sibling the front imports); the package top holds only the library utilities.

The collection layer may use the Ray connection (``marljoint.distributed.ray``); the collection layer and both learners
(ppo, offpolicy) may use the process group of data-parallel ranks (``marljoint.distributed.ranks``, which imports
torch and the env layer's slicing rule only), never the Ray layer or its task engine; the distributed layer itself
imports nothing of the trainer, the collectors or the best-response code.
"""

from __future__ import annotations

import ast
import functools
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "marljoint"

# Packages of the product layer: the command line (cli) over runs, their directories and the registries of envs and
# games (run).
PRODUCT = {"cli", "run"}

FORBIDDEN = {
    "env": (
        "torch",
        "marljoint.policies",
        "marljoint.collect",
        "marljoint.ppo",
        "marljoint.distributed",
        "marljoint.best_response",
    ),
    "policies": (
        "marljoint.collect",
        "marljoint.ppo",
        "marljoint.distributed",
        "marljoint.best_response",
        "marljoint.redundancy",
    ),
    "collect": (
        "marljoint.ppo",
        "marljoint.distributed.tasks",
        "marljoint.best_response",
        "marljoint.redundancy",
        "marljoint_envs",
    ),
    "distributed": (
        "marljoint.policies",
        "marljoint.collect",
        "marljoint.ppo",
        "marljoint.redundancy",
        "marljoint.best_response",
    ),
    "redundancy": ("marljoint.ppo", "marljoint.env", "marljoint.distributed", "marljoint.best_response"),
    "auxiliary": ("marljoint.ppo", "marljoint.redundancy"),
    "ppo": (
        "marljoint.best_response",
        "marljoint.distributed.ray",
        "marljoint.distributed.tasks",
        "marljoint_envs",
        "marljoint.redundancy",
    ),
    # The off-policy path sits beside ppo, over env, policies and collect: neither learner imports the other.
    "offpolicy": (
        "marljoint.ppo",
        "marljoint.best_response",
        "marljoint.distributed.ray",
        "marljoint.distributed.tasks",
        "marljoint_envs",
    ),
}
LIBRARY_FORBIDDEN = ("marljoint_envs",)


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, module: str | None = None) -> list[tuple[str, str | None]]:
    """Every import of a module as ``(imported module, name taken from it or None)``, nested ones included."""
    tree = ast.parse(path.read_text())
    package = (module or _module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            found += [(base, alias.name) for alias in node.names]
    return found


def _package(module: str) -> str:
    """``marljoint.ppo.trainer`` -> ``ppo``; top-level modules are their own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _arrows() -> dict[str, list[tuple[str, str | None]]]:
    """Every module's imports (a new dict each call, for a test to add a probe to)."""
    return dict(_parsed_arrows())


@functools.cache
def _parsed_arrows() -> dict[str, list[tuple[str, str | None]]]:
    return {_module_name(p): _imports(p) for p in sorted(ROOT.rglob("*.py"))}


def _violations(arrows: dict[str, list[tuple[str, str | None]]]) -> set[tuple[str, str]]:
    found = set()
    for module, imports in arrows.items():
        package = _package(module)
        for target, name in imports:
            if f"{target}.{name}" in arrows:  # "from package import module"
                target, name = f"{target}.{name}", None
            banned = FORBIDDEN.get(package, ()) + (() if package in PRODUCT else LIBRARY_FORBIDDEN)
            if any(target == b or target.startswith(b + ".") for b in banned):
                found.add((module, target))
            private = name is not None and name.startswith("_") and not name.startswith("__")
            if private and target in arrows and _package(target) != package:
                found.add((module, f"{target}.{name}"))  # a private name of another package
    return found


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of a directed graph, each as a closed path (a depth-first walk; one cycle per back edge)."""
    cycles, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for target in sorted(edges.get(node, ())):
            if target in path:
                cycles.append([*path[path.index(target) :], target])
            elif target not in done:
                visit(target, [*path, target])
        done.add(node)

    for node in sorted(edges):
        if node not in done:
            visit(node, [node])
    return cycles


def _package_cycles(arrows: dict[str, list[tuple[str, str | None]]]) -> list[list[str]]:
    """The cycles among the packages and the top-level modules (``auxiliary``, ``checkpoint``, ...), of any length."""
    edges: dict[str, set[str]] = {}
    for module, imports in arrows.items():
        for name, _ in imports:
            if name.startswith("marljoint."):
                source, target = _package(module), _package(name)
                if source != target and target != "marljoint":
                    edges.setdefault(source, set()).add(target)
    return _cycles(edges)


def test_no_layer_imports_upwards_and_no_private_name_crosses_packages():
    found = sorted(_violations(_arrows()))
    assert not found, f"imports against the layering (docs/concepts.md): {found}"


def test_packages_import_each_other_in_one_direction_only():
    cycles = _package_cycles(_arrows())
    assert not cycles, f"packages or top-level modules importing each other (imports inside functions count): {cycles}"


def test_the_contract_sees_an_arrow_added_back(tmp_path):
    # An upward import buried in a function, and a private name of another package, are both seen.
    source = tmp_path / "probe.py"
    source.write_text(
        "def f():\n    from marljoint.ppo.trainer import JointMultiAgentTrainer\n"
        "    from marljoint.policies.layers import _private\n"
    )
    arrows = {**_arrows(), "marljoint.env.probe": _imports(source, "marljoint.env.probe")}
    found = _violations(arrows)
    assert found == {
        ("marljoint.env.probe", "marljoint.ppo.trainer"),
        ("marljoint.env.probe", "marljoint.policies.layers"),
        ("marljoint.env.probe", "marljoint.policies.layers._private"),
    }


def test_the_contract_sees_a_cycle_added_back(tmp_path):
    # The env worker running the collector again (the arrow this layout removed) makes env and collect a cycle.
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from marljoint.collect.slices import SliceWorker\n")
    arrows = {**_arrows(), "marljoint.env.probe": _imports(source, "marljoint.env.probe")}
    cycles = _package_cycles(arrows)
    assert any("env" in cycle and cycle[cycle.index("env") + 1] == "collect" for cycle in cycles), cycles


# Library utilities used by the layers below the product; everything else lives in a package.
TOP_LEVEL_LIMIT = 4
ENTRY_MODULES = {"__init__.py", "__main__.py"}


def _module_cycles(arrows: dict[str, list[tuple[str, str | None]]], package: str) -> list[list[str]]:
    """The import cycles among the modules of one package and its front (nested imports included), each as a
    closed path."""
    front = f"marljoint.{package}"

    def inside(module: str) -> bool:
        return module == front or module.startswith(front + ".")

    edges: dict[str, set[str]] = {}
    for module, imports in arrows.items():
        if not inside(module):
            continue
        for target, name in imports:
            if f"{target}.{name}" in arrows:  # "from marljoint.run import train"
                target = f"{target}.{name}"
            if inside(target) and target != module:
                edges.setdefault(module, set()).add(target)
    return _cycles(edges)


def _front_imports(arrows: dict[str, list[tuple[str, str | None]]]) -> set[tuple[str, str]]:
    """``(module, name)`` for every name a module of a package reads from the front (``__init__.py``) of its own
    package; ``from package import module`` imports the module, not the front, and is not one of them."""
    found = set()
    for module, imports in arrows.items():
        front = module.rpartition(".")[0]
        if module.count(".") < 2 or front not in arrows:  # a front itself, or a top-level module
            continue
        for target, name in imports:
            if target == front and f"{target}.{name}" not in arrows:
                found.add((module, f"{front}.{name or '*'}" if name else front))
    return found


def test_the_package_top_holds_only_the_library_utilities():
    modules = sorted(p.name for p in ROOT.glob("*.py") if p.name not in ENTRY_MODULES)
    assert len(modules) <= TOP_LEVEL_LIMIT, f"modules at the top of marljoint (put them in a package): {modules}"


PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))


def test_every_package_is_checked_for_cycles():
    # A package added later is checked without editing this file; the list only guards the glob itself.
    assert {"best_response", "collect", "env", "policies", "ppo", "run"} <= set(PACKAGES), PACKAGES


def test_no_package_has_an_import_cycle_among_its_modules():
    arrows = _arrows()
    cycles = {package: found for package in PACKAGES if (found := _module_cycles(arrows, package))}
    assert not cycles, f"modules of one package importing each other (imports inside functions count): {cycles}"


def test_the_cycle_check_sees_an_import_inside_a_function(tmp_path):
    # The arrow the learning curve once used to reach the confidence interval: plotting -> evaluate -> train ->
    # loop -> plotting, closed by an import inside a function.
    source = tmp_path / "plotting.py"
    source.write_text("def f():\n    from marljoint.run.evaluate import load_run\n")
    arrows = _arrows()
    arrows["marljoint.run.plotting"] = arrows["marljoint.run.plotting"] + _imports(source, "marljoint.run.plotting")
    cycles = _module_cycles(arrows, "run")
    expected = {"marljoint.run.evaluate", "marljoint.run.train", "marljoint.run.loop", "marljoint.run.plotting"}
    assert any(set(cycle) == expected for cycle in cycles), cycles


def test_the_cycle_check_sees_a_cycle_in_any_package(tmp_path):
    # The known game resolving an OpenSpiel name by itself again: games -> openspiel_game -> games.
    source = tmp_path / "games.py"
    source.write_text("def f():\n    from marljoint.best_response.openspiel_game import OpenSpielGame\n")
    arrows = _arrows()
    module = "marljoint.best_response.games"
    arrows[module] = arrows[module] + _imports(source, module)
    cycles = _module_cycles(arrows, "best_response")
    assert [module, "marljoint.best_response.openspiel_game", module] in cycles, cycles


def test_the_cycle_check_sees_a_ring_of_three():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}}) == [["a", "b", "c", "a"]]


def test_the_cycle_check_sees_a_top_level_module_in_a_cycle(tmp_path):
    # The thread utility reaching up into the trainer that sets its threads through it.
    source = tmp_path / "threads.py"
    source.write_text("def f():\n    from marljoint.ppo.trainer import JointMultiAgentTrainer\n")
    arrows = _arrows()
    arrows["marljoint.threads"] = arrows["marljoint.threads"] + _imports(source, "marljoint.threads")
    assert ["threads", "ppo", "threads"] in _package_cycles(arrows)


def test_no_module_imports_the_front_of_its_own_package():
    found = sorted(_front_imports(_arrows()))
    assert not found, f"modules reading names back from their own package's __init__.py (import the module): {found}"


def test_the_front_check_sees_an_import_back(tmp_path):
    # The tune command taking train's options from the command table again: cli/sweep.py -> cli/__init__.py, in a
    # function; importing a sibling module through the package (from marljoint.cli import args) is no such import.
    source = tmp_path / "sweep.py"
    source.write_text("from marljoint.cli import args\n\ndef f():\n    from marljoint.cli import build_parser\n")
    arrows = _arrows()
    arrows["marljoint.cli.sweep"] = arrows["marljoint.cli.sweep"] + _imports(source, "marljoint.cli.sweep")
    assert _front_imports(arrows) == {("marljoint.cli.sweep", "marljoint.cli.build_parser")}
    # ... and the cycle it closes, the front importing the module back, is a cycle of the package.
    assert ["marljoint.cli", "marljoint.cli.sweep", "marljoint.cli"] in _module_cycles(arrows, "cli")


def test_the_front_check_sees_a_relative_import_and_a_plain_import(tmp_path):
    source = tmp_path / "learner.py"
    source.write_text("import marljoint.ppo\nfrom . import JointStats\nfrom . import gae\n")
    arrows = _arrows()
    arrows["marljoint.ppo.learner"] = _imports(source, "marljoint.ppo.learner")
    assert _front_imports(arrows) == {
        ("marljoint.ppo.learner", "marljoint.ppo"),
        ("marljoint.ppo.learner", "marljoint.ppo.JointStats"),
    }
