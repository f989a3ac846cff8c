"""The metric tables of docs/best_response.md list exactly the metrics PSRO and NFSP report, with the same text."""

from pathlib import Path

from marljoint.best_response import NFSP_METRICS, PSRO_METRICS

DOC = Path(__file__).resolve().parents[2] / "docs" / "best_response.md"


def first_table_after(heading):
    """``{name: meaning}`` from the first Markdown table below ``heading``."""
    lines = DOC.read_text().splitlines()
    start = lines.index(heading)
    rows = {}
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def test_psro_metrics_table_matches():
    assert first_table_after("### PSRO metrics") == PSRO_METRICS


def test_nfsp_metrics_table_matches():
    assert first_table_after("### NFSP metrics") == NFSP_METRICS
