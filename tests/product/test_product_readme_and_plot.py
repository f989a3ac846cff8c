"""The README's commands work in order on a fresh clone (each run they read was written by an earlier command),
``marljoint plot`` names a missing run directory in one line, and the docs' equations are rendered as maths."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from _product_helpers import run_cli, tiny_config, train_args

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[list[str]]:
    """The README's ``marljoint`` command lines (comments dropped), in order."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["marljoint"]:
                commands.append(words[1:])
    return commands


def test_every_run_a_readme_command_reads_was_written_by_an_earlier_one():
    written: set[str] = set()
    for words in _readme_commands():
        command, rest = words[0], words[1:]
        if command == "train":
            out = rest[rest.index("--out") + 1] if "--out" in rest else None
            if "--resume" in rest:
                assert out in written, f"marljoint {' '.join(words)} resumes {out}, which no earlier command wrote"
            elif out is not None:
                written.add(out)
        elif command in ("eval", "plot", "export"):
            runs = [w for w in rest if w.startswith("runs/")]
            for run in runs:
                assert run in written, f"marljoint {' '.join(words)} reads {run}, which no earlier command wrote"
    assert written, "the README trains no run"


def test_plot_names_a_missing_run_directory_in_one_line(capsys, tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out, tiny_config(tmp_path), 64)) == 0
    capsys.readouterr()
    missing = tmp_path / "other"
    assert run_cli(["plot", str(out), str(missing), "--out", str(tmp_path / "compare.png")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        f"marljoint plot: error: run directory {missing} does not exist; give the --out directory of a marljoint "
        "train run"
    ]
    assert not (tmp_path / "compare.png").exists()


def test_plot_names_every_missing_run_directory(capsys, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert run_cli(["plot", str(first), str(second), "--out", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"marljoint plot: error: run directories {first}, {second} do not exist; give the --out directories of "
        "marljoint train runs"
    )


def test_the_docs_render_dollar_maths_with_arithmatex_and_mathjax():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    extensions = {
        (e if isinstance(e, str) else next(iter(e))): (None if isinstance(e, str) else next(iter(e.values())))
        for e in config["markdown_extensions"]
    }
    assert extensions["pymdownx.arithmatex"] == {"generic": True}
    scripts = config["extra_javascript"]
    assert any("mathjax" in s.lower() and s.endswith(".js") and s.startswith("https://") for s in scripts)
    for script in scripts:
        if not script.startswith("https://"):
            assert (ROOT / "docs" / script).is_file(), script
    page = (ROOT / "docs" / "value_decomposition.md").read_text()
    assert re.search(r"^\$\$\n.*\\sum.*\n\$\$$", page, flags=re.S | re.M)
