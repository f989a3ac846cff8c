"""The library keeps small rooms: no function is longer than 60 lines and no class longer than 400 lines, over the
whole package. The command line's argparse builders (``_add_*`` functions in ``cli/``, one add_argument per option)
are the only exception, for functions."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "marljoint"
FUNCTION_LIMIT = 60
CLASS_LIMIT = 400


def _nodes():
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            yield path, node


def _where(path, node, length):
    return f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({length} lines)"


def _long_functions():
    for path, node in _nodes():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            builder = path.parent.name == "cli" and node.name.startswith("_add_")
            if length > FUNCTION_LIMIT and not builder:
                yield _where(path, node, length)


def _long_classes():
    for path, node in _nodes():
        if isinstance(node, ast.ClassDef):
            length = node.end_lineno - node.lineno + 1
            if length > CLASS_LIMIT:
                yield _where(path, node, length)


def test_no_function_is_longer_than_60_lines():
    assert not list(_long_functions())


def test_no_class_is_longer_than_400_lines():
    assert not list(_long_classes())
