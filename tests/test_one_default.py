"""Each setting is declared once, with one default: read with ast from every module of the package.

A default is a literal (a number, a string, ``None``, a tuple of them, ``math.inf``) given to a setting where it is
declared: a field of a settings class (the ``*Config`` dataclasses and :class:`~marljoint.run.spec.RunSpec`) or an
entry of a module-level table of defaults (a dict whose name ends in ``DEFAULTS``, ``SETTINGS`` or ``CHANGES``). A
field that reads its default from a table (``num_envs: int = SHARED_DEFAULTS["num_envs"]``) declares none.

A setting has one declared default. A family that wants another default for a setting it shares declares it once,
in its own table (:data:`OVERRIDE_TABLES`, each with its reason), and it must differ from the default it overrides
(an equal value would be the same default declared twice). :data:`SAME_NAME` lists the names two settings share.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[1] / "marljoint"

OVERRIDE_TABLES = {
    "marljoint/run/defaults.py:PRODUCT_CHANGES": "marljoint train's defaults where they differ from the library's, "
    "each with its reason (the one table of product defaults)",
    "marljoint/offpolicy/defaults.py:OFFPOLICY_DEFAULTS": "the off-policy family's defaults of the settings it "
    "shares with PPO (a shorter rollout, one gamma, the value methods' learning rate, clip and tau)",
    "marljoint/offpolicy/defaults.py:SAC_DEFAULTS": "the actor-critics' defaults where the value methods' differ "
    "(the soft actor-critic recipe's tau; one actor per agent for a SacConfig built directly)",
    "marljoint/ppo/derived.py:DISCRETE_ACTION_SETTINGS": "not a default: the value the action-space rule resolves "
    "a None default to when every action is discrete",
    "marljoint/ppo/derived.py:BOX_ACTION_SETTINGS": "not a default: the value the action-space rule resolves a "
    "None default to when some agent acts in a Box",
}
"""Tables that declare a family's own default of a shared setting (or a rule's value), with the reason."""

SAME_NAME = {
    "critic_lr": (
        {"marljoint/ppo/config.py:JointTrainerConfig", "marljoint/offpolicy/sac.py:SacConfig"},
        "two settings: PPO's split-critic rate (None: the critic steps at learning_rate) and the actor-critics' "
        "critic rate, offpolicy.sac.critic_lr",
    ),
}
"""Names that two different settings share, with the places of each and the reason."""

_TABLE_SUFFIXES = ("DEFAULTS", "SETTINGS", "CHANGES")


def _with_reason(node: ast.AST) -> bool:
    """A table's ``(value, reason)`` entry (the reason a string or an f-string)."""
    return (
        isinstance(node, ast.Tuple)
        and len(node.elts) == 2
        and isinstance(node.elts[1], (ast.JoinedStr, ast.Constant))
        and isinstance(getattr(node.elts[1], "value", ""), str)
    )


def _is_literal(node: ast.AST) -> bool:
    if _with_reason(node):
        return _is_literal(node.elts[0])
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math":
        return True  # math.inf, math.nan
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _value(node: ast.AST) -> object:
    """The literal's value (a table's ``(value, reason)`` entry gives the value)."""
    if _with_reason(node):
        return _value(node.elts[0])
    if isinstance(node, ast.Attribute):
        return f"math.{node.attr}"
    return ast.literal_eval(node)


def _settings_class(node: ast.ClassDef) -> bool:
    decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    return decorated and (node.name.endswith("Config") or node.name == "RunSpec")


def _field_default(statement: ast.AnnAssign) -> ast.AST | None:
    value = statement.value
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        return next((k.value for k in value.keywords if k.arg == "default"), None)
    return value


def declared_defaults(root: pathlib.Path = ROOT) -> dict[str, list[tuple[str, object]]]:
    """``{setting: [(place, literal default), ...]}`` over every module under ``root``."""
    found: dict[str, list[tuple[str, object]]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root.parent).as_posix()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and _settings_class(node):
                for statement in node.body:
                    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                        default = _field_default(statement)
                        if default is not None and _is_literal(default):
                            found[statement.target.id].append((f"{module}:{node.name}", _value(default)))
            name, value = _assigned(node)
            if name is not None and name.endswith(_TABLE_SUFFIXES) and isinstance(value, ast.Dict):
                for key, entry in zip(value.keys, value.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and _is_literal(entry):
                        found[key.value].append((f"{module}:{name}", _value(entry)))
    return found


def _assigned(node: ast.AST) -> tuple[str | None, ast.AST | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


def problems(found: dict[str, list[tuple[str, object]]]) -> list[str]:
    """Every setting whose default is declared more than once, as a line naming the places."""
    out = []
    for setting, places in sorted(found.items()):
        declared = [(p, v) for p, v in places if p not in OVERRIDE_TABLES]
        overrides = [(p, v) for p, v in places if p in OVERRIDE_TABLES]
        if setting in SAME_NAME:
            expected, _ = SAME_NAME[setting]
            if {p for p, _ in declared} != expected or len(declared) != len(expected):
                out.append(f"{setting}: declared in {declared}; the settings of this name are declared in {expected}")
            continue
        if len(declared) > 1:
            out.append(f"{setting}: a default declared in {len(declared)} places: {declared}")
        base = {repr(v) for _, v in declared}
        for place, value in overrides:
            if repr(value) in base:
                out.append(f"{setting}: {place} repeats the default {value!r} it would override")
    return out


def test_every_setting_has_one_declared_default():
    found = problems(declared_defaults())
    assert not found, "settings whose default is declared more than once:\n" + "\n".join(found)


def test_the_check_sees_a_default_declared_twice(tmp_path):
    package = tmp_path / "marljoint"
    package.mkdir()
    (package / "a.py").write_text(
        "from dataclasses import dataclass, field\n\n"
        "SHARED_DEFAULTS = {'num_envs': 8}\n\n"
        "@dataclass(frozen=True)\nclass AConfig:\n    num_envs: int = SHARED_DEFAULTS['num_envs']\n"
        "    seed: int = 0\n\n"
        "@dataclass(frozen=True)\nclass BConfig:\n    seed: int = field(default=0)\n    gamma: float = 0.99\n"
    )
    found = problems(declared_defaults(package))
    places = "[('marljoint/a.py:AConfig', 0), ('marljoint/a.py:BConfig', 0)]"
    assert found == [f"seed: a default declared in 2 places: {places}"]


def test_an_override_equal_to_the_default_is_seen(tmp_path):
    package = tmp_path / "marljoint" / "offpolicy"
    package.mkdir(parents=True)
    (package / "defaults.py").write_text("OFFPOLICY_DEFAULTS = {'gamma': 0.99, 'tau': 0.01}\n")
    (package / "config.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass(frozen=True)\nclass XConfig:\n    gamma: float = 0.99\n"
    )
    found = problems(declared_defaults(package.parent))
    table = "marljoint/offpolicy/defaults.py:OFFPOLICY_DEFAULTS"
    assert found == [f"gamma: {table} repeats the default 0.99 it would override"]


def test_every_listed_place_exists():
    places = {place for found in declared_defaults().values() for place, _ in found}
    assert set(OVERRIDE_TABLES) <= places, set(OVERRIDE_TABLES) - places
    for setting, (expected, _) in SAME_NAME.items():
        assert expected <= places, (setting, expected - places)
