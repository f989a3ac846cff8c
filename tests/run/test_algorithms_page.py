"""docs/algorithms.md lists the table of algorithms as it is: the page cannot drift from
:data:`~marljoint.run.algorithms.ALGORITHMS`."""

from __future__ import annotations

from pathlib import Path

from marljoint.run.algorithms import ALGORITHMS, table_markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"
REGENERATE = "python -c 'from marljoint.run.algorithms import table_markdown; print(table_markdown())'"


def test_the_algorithms_page_holds_the_table_of_every_algorithm():
    page = PAGE.read_text()
    assert table_markdown() in page, f"docs/algorithms.md differs from the table; paste the output of {REGENERATE}"


def test_the_table_on_the_page_has_one_line_per_row():
    lines = [line for line in table_markdown().splitlines() if line.startswith("| [")]
    assert [line.split("]")[0][3:] for line in lines] == list(ALGORITHMS)


def test_every_row_names_a_docs_page_that_exists():
    missing = [row.name for row in ALGORITHMS.values() if not (PAGE.parent / row.docs).is_file()]
    assert not missing, f"rows naming a docs page that does not exist: {missing}"
