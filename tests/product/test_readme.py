"""The README's Python example runs as printed."""

import math
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_python_example_trains(capsys):
    pytest.importorskip("mpe2")
    blocks = _python_blocks()
    assert blocks, "README.md has no python example"
    histories = []
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, str(README), "exec"), namespace)
        histories.append(namespace.get("history"))
    history = next(h for h in histories if h is not None)
    assert history[-1]["env_steps"] >= 20_000
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed and math.isfinite(float(printed[-1]))


PYPROJECT = README.parent / "pyproject.toml"
# The package an env's top-level module comes from, and the extra of that package it needs ({family}: the
# module after the package, as PettingZoo's env families).
_ENV_PACKAGES = {"mpe2": ("mpe2", None), "pettingzoo": ("pettingzoo", "{family}"), "openspiel": ("shimmy", "openspiel")}


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)


def _install_extras() -> set[str]:
    """The extras of the README's first install command (``pip install ... -e ".[a,b]"``)."""
    found = re.search(r'pip install [^\n]*-e "\.\[([^\]]*)\]"', _bash_blocks()[0])
    assert found, "the README's first bash block installs no extras"
    return {extra.strip() for extra in found.group(1).split(",")}


def _requirements(extras: set[str]) -> list[str]:
    from marljoint.run import _toml

    optional = _toml.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return [req for extra in extras for req in optional[extra]]


def _needed(env: str) -> tuple[str, str | None] | None:
    """(package, extra) the README's install must hold for ``env``; None for bundled envs."""
    from marljoint.run.registry import BUNDLED_ENVS

    if env in BUNDLED_ENVS:
        return None
    top, _, rest = env.replace(":", ".").partition(".")
    package, extra = _ENV_PACKAGES.get(top, (top, None))
    return package, None if extra is None else extra.format(family=rest.split(".")[0])


def _covered(need: tuple[str, str | None], requirements: list[str]) -> bool:
    package, extra = need
    for requirement in requirements:
        found = re.match(r"([\w.-]+)(?:\[([^\]]*)\])?", requirement)
        extras = {e.strip() for e in (found.group(2) or "").split(",")}
        if found.group(1) == package and (extra is None or extra in extras):
            return True
    return False


def test_the_readme_install_command_installs_what_its_examples_use():
    """Every env of the README's commands and Python example, and the plotting, come with its first install."""
    text = README.read_text()
    envs = set(re.findall(r"--env\s+([\w.:]+)", "\n".join(_bash_blocks())))
    envs |= set(re.findall(r"^from (\w+) import", "\n".join(_python_blocks()), flags=re.M)) - {"marljoint"}
    assert "mpe2.simple_spread_v3" in envs  # the examples are found at all
    installed = _requirements(_install_extras())
    needed = {_needed(env) for env in envs} - {None}
    if "marljoint plot" in text or "learning_curve.png" in text:
        needed.add(("matplotlib", None))
    missing = sorted(need for need in needed if not _covered(need, installed))
    assert not missing, f"the README's install command does not install {missing}"


def test_the_readme_check_notices_an_env_the_install_lacks():
    assert not _covered(_needed("mpe2.simple_spread_v3"), _requirements({"plot"}))
    assert _covered(_needed("mpe2.simple_spread_v3"), _requirements({"plot", "mpe"}))
    assert _needed("pettingzoo.sisl.multiwalker_v9") == ("pettingzoo", "sisl")
    assert _covered(_needed("pettingzoo.sisl.multiwalker_v9"), _requirements({"envs"}))
    assert not _covered(_needed("pettingzoo.atari.pong_v3"), _requirements({"envs"}))
    assert _needed("bucket_brigade_v0") is None
