"""Date columns stored as text: found, their day/month order told, named in the data summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kernel_agent.agent.datafiles.data import summarize
from kernel_agent.agent.datafiles.dates import DateColumn, date_columns


def test_day_first_month_first_year_first_and_ambiguous_columns(tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    pd.DataFrame(
        {
            "ordered": ["03/01/2024", "23/01/2024", "11/02/2024"],
            "shipped": ["01-05-24 10:30", "01-25-24 09:00", "02-13-24 17:45"],
            "billed": ["2024-01-03", "2024-01-23", "2024-02-11"],
            "unclear": ["01.02.2024", "03.04.2024", "05.06.2024"],
            "units": [1, 2, 3],
            "note": ["12/13 of stock", "x", "y"],
        }
    ).to_csv(path, index=False)
    frame = pd.read_csv(path)
    assert date_columns(frame) == [
        DateColumn("ordered", "day-first", "%d/%m/%Y", "23/01/2024"),
        DateColumn("shipped", "month-first", "%m-%d-%y %H:%M", "01-25-24 09:00"),
        DateColumn("billed", "year-first", "%Y-%m-%d", "2024-01-03"),
        DateColumn("unclear", "ambiguous", "", "01.02.2024"),
    ]
    assert pd.to_datetime(frame["ordered"], format="%d/%m/%Y").dt.day.tolist() == [3, 23, 11]  # the format is right
    summary = summarize(path)
    assert "`ordered` day first (e.g. 23/01/2024): parse with `dayfirst=True` or `format='%d/%m/%Y'`" in summary
    assert "`shipped` month first" in summary and "`unclear` day and month order cannot be told" in summary
    assert "`units`" not in summary.split("Dates stored as text:")[1].split("\n")[0]


def test_columns_that_are_mostly_not_dates_are_not_named() -> None:
    frame = pd.DataFrame({"mixed": ["01/02/2024", "soon", "later", "never"], "n": [1.0, 2.0, 3.0, 4.0]})
    assert date_columns(frame) == []
    assert date_columns(pd.DataFrame({"empty": pd.Series([None, None], dtype=object)})) == []
