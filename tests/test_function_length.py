"""No function of the library is longer than 90 lines; the command line's argparse builders (one add_argument per
option) are the exception."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "marljoint"
LIMIT = 90


def _long_functions():
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                builder = path.parent.name == "cli" and node.name.startswith("_add_")
                if length > LIMIT and not builder:
                    yield f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({length} lines)"


def test_no_function_is_longer_than_90_lines():
    assert not list(_long_functions())
