"""kernel_agent.agent.datafiles.data: checking and copying data files, their summaries, the setup cell."""

from __future__ import annotations

import builtins
import json
import keyword
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import kernel_agent.agent.datafiles.data as data_module
from kernel_agent.agent.datafiles import summaries
from kernel_agent.agent.datafiles.data import (
    MAX_COLUMNS,
    MAX_SECTION_CHARS,
    MAX_SUMMARY_CHARS,
    DataFile,
    check_data,
    data_attributes,
    data_summary,
    file_kind,
    identifier,
    preload_code,
    preload_description,
    prepare_data,
    summarize,
)
from kernel_agent.errors import ConfigError, DataFileError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def sales_csv(tmp_path: Path) -> Path:
    return write(
        tmp_path / "in" / "sales.csv",
        "date,region,units,price\n2024-01-01,North,3,9.5\n2024-01-02,,4,\n2024-01-03,South,5,7.25\n",
    )


# --- every DataFileError case, checked before anything is copied ------------------------------


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(DataFileError, match="not found") as caught:
        prepare_data([missing], tmp_path / "ws")
    assert caught.value.path == str(missing)
    assert "nope.csv" in str(caught.value)
    assert not (tmp_path / "ws").exists()


def test_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(DataFileError, match="is a directory"):
        prepare_data([tmp_path / "folder.csv"], tmp_path / "ws")


def test_fifo_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)  # opening it would block: it must be refused before any read
    with pytest.raises(DataFileError, match="not a regular file"):
        prepare_data([fifo], tmp_path / "ws")


def test_unreadable_file_is_refused(tmp_path: Path, sales_csv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sales_csv.chmod(0)
    if os.geteuid() == 0:  # root reads anything: give the module the denial a user would get

        def denying_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
            if Path(file) == sales_csv:
                raise PermissionError(13, "Permission denied", str(file))
            return builtins.open(file, *args, **kwargs)

        monkeypatch.setattr(data_module, "open", denying_open, raising=False)
    try:
        with pytest.raises(DataFileError, match="cannot read data file .*sales.csv: Permission denied"):
            prepare_data([sales_csv], tmp_path / "ws")
    finally:
        sales_csv.chmod(0o644)
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("broken.csv", 'a,b\n1,2\n3,4,5,6\n"unterminated\n'),
        ("empty.csv", ""),
        ("broken.json", '{"a": [1, 2'),
        ("broken.parquet", "not a parquet file"),
        ("broken.xlsx", "not a workbook"),
        ("broken.npy", "\x93NUMPYxx not really"),
    ],
)
def test_unparseable_file_is_refused_and_nothing_is_copied(
    tmp_path: Path, sales_csv: Path, name: str, content: str
) -> None:
    bad = write(tmp_path / "in" / name, content)
    with pytest.raises(DataFileError, match=f"cannot read {name} as") as caught:
        prepare_data([sales_csv, bad], tmp_path / "ws")
    assert caught.value.path == str(bad)
    assert isinstance(caught.value.__cause__, Exception)
    assert not (tmp_path / "ws").exists()


def test_same_file_name_twice_is_refused(tmp_path: Path, sales_csv: Path) -> None:
    other = write(tmp_path / "other" / "sales.csv", "a\n1\n")
    with pytest.raises(DataFileError, match="two data files are named 'sales.csv'"):
        prepare_data([sales_csv, other], tmp_path / "ws")
    assert not (tmp_path / "ws").exists()


def test_directory_in_the_workspace_blocks_the_copy(tmp_path: Path, sales_csv: Path) -> None:
    (tmp_path / "ws" / "sales.csv").mkdir(parents=True)
    with pytest.raises(DataFileError, match="is a directory"):
        prepare_data([sales_csv], tmp_path / "ws")


def test_workspace_that_is_a_file_is_a_config_error(tmp_path: Path, sales_csv: Path) -> None:
    blocker = write(tmp_path / "ws", "")
    with pytest.raises(ConfigError, match="cannot create the workspace"):
        prepare_data([sales_csv], blocker)


# --- copies --------------------------------------------------------------------------------


def test_copies_are_read_only_and_described(tmp_path: Path, sales_csv: Path) -> None:
    workspace = tmp_path / "deep" / "ws"
    (file,) = prepare_data([str(sales_csv)], workspace)
    copy = workspace / "sales.csv"
    assert copy.read_bytes() == sales_csv.read_bytes()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o444
    assert stat.S_IMODE(sales_csv.stat().st_mode) != 0o444  # the original is untouched
    assert (file.name, file.source, file.kind, file.size) == ("sales.csv", str(sales_csv), "csv", copy.stat().st_size)
    assert "3 rows × 4 columns" in file.summary
    assert repr(file) == f"<DataFile sales.csv [csv, {file.size} B]>"
    with pytest.raises(AttributeError):
        file.name = "other.csv"  # type: ignore[misc]


def test_rerun_replaces_an_earlier_read_only_copy(tmp_path: Path, sales_csv: Path) -> None:
    prepare_data([sales_csv], tmp_path / "ws")
    write(sales_csv, "a,b\n1,2\n")
    (file,) = prepare_data([sales_csv], tmp_path / "ws")
    assert (tmp_path / "ws" / "sales.csv").read_text() == "a,b\n1,2\n"
    assert stat.S_IMODE((tmp_path / "ws" / "sales.csv").stat().st_mode) == 0o444
    assert "1 row × 2 columns" in file.summary
    assert [p.name for p in (tmp_path / "ws").iterdir()] == ["sales.csv"]  # no partial copy left


def test_a_file_already_in_the_workspace_is_not_copied_onto_itself(tmp_path: Path) -> None:
    inside = write(tmp_path / "ws" / "sales.csv", "a\n1\n2\n")
    before = inside.stat()
    (file,) = prepare_data([inside], tmp_path / "ws")
    assert inside.read_text() == "a\n1\n2\n"
    assert inside.stat().st_mtime_ns == before.st_mtime_ns
    assert stat.S_IMODE(inside.stat().st_mode) == stat.S_IMODE(before.st_mode)
    assert file.source == str(inside)


def test_a_single_path_is_accepted(tmp_path: Path, sales_csv: Path) -> None:
    (file,) = prepare_data(str(sales_csv), tmp_path / "ws")
    assert file.name == "sales.csv"


def test_no_paths_gives_no_files_and_creates_the_workspace(tmp_path: Path) -> None:
    assert prepare_data([], tmp_path / "ws") == ()
    assert (tmp_path / "ws").is_dir()


# --- summaries -----------------------------------------------------------------------------


def test_csv_summary(sales_csv: Path) -> None:
    text = summarize(sales_csv)
    assert text.startswith("CSV · ")
    assert "3 rows × 4 columns" in text
    assert "`date` str, `region` str, `units` int64, `price` float64" in text
    assert "Missing values: `region` 1, `price` 1" in text
    assert "| date | region | units | price |" in text
    assert "| 2024-01-01 | North | 3 | 9.5 |" in text


def test_tsv_and_semicolon_csv(tmp_path: Path) -> None:
    tsv = summarize(write(tmp_path / "t.tsv", "a\tb\n1\tx\n2\ty\n"))
    assert tsv.startswith("TSV · ") and "2 rows × 2 columns" in tsv
    semi = summarize(write(tmp_path / "eu.csv", "a;b;c\n1,5;2;3\n"))
    assert "semicolon-separated" in semi and "1 row × 3 columns" in semi


def test_latin1_csv_is_read_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "legacy.csv"
    path.write_bytes("city,temp\nZürich,3\nMálaga,18\n".encode("latin-1"))
    text = summarize(path)
    assert "encoding latin-1 (not UTF-8)" in text and "| Málaga | 18 |" in text
    assert "read it with encoding='latin-1'" in text


def test_a_mixed_encoding_csv_keeps_its_utf8_text_and_names_the_lines_that_are_not(tmp_path: Path) -> None:
    """UTF-8 with one cp1252 line (a file appended to on another machine): latin-1 would turn every Zürich into
    ZÃ¼rich without a word; the real describer keeps the UTF-8 text, names the line and gives advice that holds."""
    from kernel_agent.agent.datafiles.describer import describe

    path = tmp_path / "cities.csv"
    path.write_bytes("city,temp\nZürich,3\n".encode() + "Málaga,18\n".encode("cp1252") + "Köln,5\n".encode())
    text = describe(path)
    first = text.splitlines()[0]
    assert "mixed encodings: UTF-8 but for 1 line(s) in another (line 3; likely cp1252)" in first
    assert "read it with encoding_errors='replace'" in first and "encoding='latin-1'" not in text
    assert "| Zürich | 3 |" in text and "| Köln | 5 |" in text and "| ZÃ¼rich" not in text
    read = pd.read_csv(path, encoding_errors="replace")  # the advice, taken as given
    assert list(read["city"]) == ["Zürich", "M\ufffdlaga", "Köln"]


def test_a_tab_separated_csv_says_so_in_its_first_line(tmp_path: Path) -> None:
    """statsmodels' anes96.csv is tab-separated: read as commas it is one column (944 x 1)."""
    text = summarize(write(tmp_path / "anes96.csv", "popul\tTVnews\tage\n0\t7\t36\n190\t1\t20\n"))
    first = text.splitlines()[0]
    assert first.startswith("CSV · ") and "tab-separated" in first and "read it with sep='\\t'" in first
    assert "2 rows × 3 columns" in first and "`TVnews` int64" in text


def test_a_european_csv_gives_its_encoding_decimal_comma_and_date_order(tmp_path: Path) -> None:
    """latin-1, ';' between fields, decimal commas and day-first dates: every fact in the lines the model reads."""
    path = tmp_path / "messwerte.csv"
    path.write_bytes("Ort;Datum;Wert\nZürich;23/01/2024;3,5\nMünchen;02/02/2024;-12,25\n".encode("latin-1"))
    text = summarize(path)
    first = text.splitlines()[0]
    assert "semicolon-separated" in first and "encoding latin-1" in first and "decimal comma" in first
    assert "read it with sep=';', encoding='latin-1', decimal=','" in first
    assert "`Wert` float64" in text and "| München | 02/02/2024 | -12.25 |" in text
    assert "`Datum` day first (e.g. 23/01/2024)" in text
    plain = summarize(write(tmp_path / "ids.csv", "code;n\n1,2;3\nx;4\n"))  # not every value a number
    assert "decimal comma" not in plain


def test_excel_summary_lists_sheets_and_describes_the_first_few(tmp_path: Path) -> None:
    path = tmp_path / "book.xlsx"
    with pd.ExcelWriter(path) as writer:
        for n in range(5):
            pd.DataFrame({"k": [n, n + 1], "name": ["a", None]}).to_excel(writer, sheet_name=f"s{n}", index=False)
    text = summarize(path)
    assert "5 sheet(s): `s0`, `s1`, `s2`, `s3`, `s4`" in text
    assert text.count("Sheet `") == 3 and "Sheet `s3`" not in text
    assert "2 more sheet(s) not described" in text
    assert "Missing values: `name` 1" in text


def test_parquet_summary(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"x": [1.5, None, 3.0], "when": pd.to_datetime(["2024-01-01"] * 3)}).to_parquet(path)
    text = summarize(path)
    assert text.startswith("Parquet · ") and "3 rows × 2 columns" in text
    assert "`x` float64, `when` datetime64" in text and "`x` 1" in text


def test_json_records_nested_and_lines(tmp_path: Path) -> None:
    records = summarize(write(tmp_path / "r.json", json.dumps([{"id": 1, "v": 2.5}, {"id": 2, "v": None}])))
    assert records.startswith("JSON records") and "2 rows × 2 columns" in records and "`v` 1" in records
    nested = {"meta": {"version": "1"}, "items": [{"id": 1, "tags": ["a"]}] * 4, "count": 4}
    outline = summarize(write(tmp_path / "n.json", json.dumps(nested)))
    assert "nested; outline" in outline
    assert "`meta`: object with 1 key(s)" in outline and "`items`: list of 4 object" in outline
    assert "`tags`: list of 1 str" in outline and "`count`: int" in outline
    lines = summarize(write(tmp_path / "e.jsonl", '{"a": 1}\n{"a": 2}\n{"a": null}\n'))
    assert lines.startswith("JSON Lines") and "3 rows × 1 column" in lines


def test_npy_summary(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(3, 4))
    text = summarize(tmp_path / "a.npy")
    assert "shape (3, 4) · dtype float64" in text and "min 0 · max 11 · mean 5.5" in text
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "allow_pickle=True" in summarize(tmp_path / "o.npy")
    np.save(tmp_path / "e.npy", np.array([]))
    assert "shape (0,)" in summarize(tmp_path / "e.npy")


def test_mat_summary_lists_variables_with_scipy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import scipy.io

    scipy.io.savemat(
        tmp_path / "m.mat",
        {"signal": np.arange(6.0).reshape(2, 3), "label": "run one", **{f"v{i:02d}": np.array([i]) for i in range(22)}},
    )
    text = summarize(tmp_path / "m.mat")
    assert text.startswith("MATLAB file") and "Header: MATLAB 5.0 MAT-file" in text
    assert "24 variables" in text and "- `signal`: double 2 x 3 · min 0 · max 5 · mean 2.5" in text
    assert "- `label`: char 1\n" in text and "- ... and 4 more" in text  # 20 listed of 24
    hdf5 = tmp_path / "new.mat"  # a v7.3 header: version 0x0200, then HDF5 (which scipy cannot read)
    hdf5.write_bytes(b"MATLAB 7.3 MAT-file".ljust(116) + b"\0" * 8 + b"\x00\x02IM" + b"\0" * 512)
    assert "v7.3 (HDF5)" in summarize(hdf5)
    broken = write(tmp_path / "broken.mat", "MATLAB 5.0 MAT-file but then nothing sensible at all")
    with pytest.raises(DataFileError, match="broken.mat as mat"):
        summarize(broken)
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # as if scipy were not installed (here: the parser in-process)
    assert "scipy is not installed" in summaries.describe(tmp_path / "m.mat")


def test_text_binary_and_other_files(tmp_path: Path) -> None:
    text = summarize(write(tmp_path / "notes.txt", "".join(f"line {n}\n" for n in range(50))))
    assert "50 line(s)" in text and "line 7" in text and "line 8" not in text
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    assert summarize(binary) == "Binary file · 1.0 KB (not previewed)"
    assert file_kind(binary) == "other" and file_kind("A.XLSX") == "excel" and file_kind("x.tab") == "tsv"


def test_big_csv_is_summarised_from_its_head_and_boundedly(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    row = b'2024-01-01,north,widget,3,9.99,"quoted, text"\n'
    rows = 50_000_000 // len(row)
    path.write_bytes(b"date,region,product,units,price,note\n" + row * rows)
    text = summarize(path)  # its speed is bench/bench_door.py's ``summary`` row
    assert len(text) <= MAX_SUMMARY_CHARS
    assert f"≈{rows:,} rows × 6 columns" in text
    assert "in the first 2,000 rows read" in text


def test_wide_and_long_summaries_are_cut(tmp_path: Path) -> None:
    wide = ",".join(f"column_{n}" for n in range(300))
    text = summarize(write(tmp_path / "wide.csv", wide + "\n" + ",".join("1" * 300) + "\n"))
    assert f"and {300 - MAX_COLUMNS} more columns (not listed)" in text
    assert "(first 10 of 300 columns shown)" in text
    verbose = ",".join(f"c{n}_" + "x" * 150 for n in range(40))
    long = summarize(write(tmp_path / "long.csv", verbose + "\n" + ",".join("1" * 40) + "\n"))
    assert len(long) <= MAX_SUMMARY_CHARS and "summary cut here" in long


# --- the prompt section ----------------------------------------------------------------------


def test_data_summary_names_files_and_attributes(tmp_path: Path, sales_csv: Path) -> None:
    notes = write(tmp_path / "in" / "2024 notes.txt", "hello\n")
    files = prepare_data([sales_csv, notes], tmp_path / "ws")
    text = data_summary(files)
    assert "2 data file(s)" in text
    assert "## sales.csv · `data.sales`\nCSV · " in text
    assert "## 2024 notes.txt · `data.file_2024_notes`\nText · " in text
    assert data_summary(()) == "No data files were given."


def test_data_summary_is_bounded() -> None:
    files = [DataFile(f"f{n}.csv", f"/x/f{n}.csv", "csv", 10, "y" * 2_900) for n in range(20)]
    text = data_summary(files)
    assert len(text) <= MAX_SECTION_CHARS + 50
    assert "## f0.csv · `data.f0`\n" + "y" * 2_900 in text
    assert "## f9.csv · `data.f9`\ncsv · 10 B (summary left out: prompt too long)" in text
    assert re.search(r"… and \d+ more file\(s\) not listed\.$", text)


# --- the setup cell ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [
        ("2024 sales-final.csv", "file_2024_sales_final"),
        ("class.csv", "class_"),
        ("Sales Q1 (final).xlsx", "sales_q1_final"),
        ("données.csv", "données"),
        ("___.csv", "file"),
        ("ﬁgures.npy", "figures"),  # NFKC: the "ﬁ" ligature is how Python itself would read it
        ("archive.tar.gz", "archive_tar"),
    ],
)
def test_identifier(file_name: str, expected: str) -> None:
    name = identifier(file_name)
    assert name == expected
    assert name.isidentifier() and not keyword.iskeyword(name)


def test_data_attributes_deduplicate() -> None:
    names = data_attributes(["sales.csv", "sales.xlsx", "Sales.csv", "sales_xlsx.json", "SALES.CSV"])
    assert names == {
        "sales": "sales.csv",
        "sales_xlsx": "sales.xlsx",
        "sales_csv": "Sales.csv",
        "sales_xlsx_json": "sales_xlsx.json",
        "sales_2": "SALES.CSV",
    }


def run_setup(code: str) -> dict[str, object]:
    magics = [line for line in code.splitlines() if line.startswith("%")]
    assert code.splitlines()[: len(magics)] == magics, "magic lines must come first"
    namespace: dict[str, object] = {}
    exec(compile("\n".join(code.splitlines()[len(magics) :]), "<setup>", "exec"), namespace)
    return namespace


def test_preload_code_runs_and_defines_the_helpers() -> None:
    files = ["sales.csv", "2024 sales-final.csv", "class.csv", 'odd "quote".csv']
    code = preload_code(files)
    assert code.splitlines()[:2] == ["%matplotlib inline", '%config InlineBackend.figure_formats = ["png"]']
    namespace = run_setup(code)
    assert namespace["pd"] is pd and namespace["np"] is np
    assert namespace["plt"] is sys.modules["matplotlib.pyplot"]
    data: Any = namespace["data"]  # the setup cell's DataFiles: attributes made from the files' names
    assert data.sales == "sales.csv"
    assert data.file_2024_sales_final == "2024 sales-final.csv"
    assert data.class_ == "class.csv"
    assert data.odd_quote == 'odd "quote".csv'
    assert repr(data).startswith("DataFiles(sales='sales.csv', file_2024_sales_final='2024 sales-final.csv'")
    assert "import seaborn as sns" in code and "except ImportError" in code


def test_preload_code_fixes_the_seeds() -> None:
    run_setup(preload_code([]))
    first = np.random.random()
    run_setup(preload_code([]))
    assert np.random.random() == first == np.random.RandomState(0).random_sample()


def test_preload_code_is_short_without_seaborn_and_files() -> None:
    code = preload_code([], seaborn=False)
    assert "seaborn" not in code and "data = DataFiles()" in code
    assert len(code.splitlines()) <= 25
    assert repr(run_setup(code)["data"]) == "DataFiles()"


def test_preload_description_is_one_line() -> None:
    text = preload_description(["sales.csv"])
    assert "\n" not in text
    assert "pandas as pd" in text and "plt" in text and '`data.sales` == "sales.csv"' in text
    assert "seaborn" not in preload_description([], seaborn=False)
    assert "`data` is empty" in preload_description([])


def test_line_counts_are_exact_across_chunks_and_extrapolated_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernel_agent.agent.datafiles import reading

    lines = [b"x" * (n % 97) for n in range(60_000)]  # ~2.9 MB: three chunks counted by numpy
    ended, open_end = tmp_path / "ended.txt", tmp_path / "open.txt"
    ended.write_bytes(b"\n".join(lines) + b"\n")
    open_end.write_bytes(b"\n".join(lines))
    assert reading.count_lines(ended, ended.stat().st_size) == (60_000, True)
    assert reading.count_lines(open_end, open_end.stat().st_size) == (60_000, True)
    small = write(tmp_path / "small.txt", "a\nb\nc")  # under a chunk: counted by bytes.count
    assert reading.count_lines(small, small.stat().st_size) == (3, True)
    monkeypatch.setattr(reading, "COUNT_BYTES", 1 << 20)
    count, exact = reading.count_lines(ended, ended.stat().st_size)
    assert not exact and abs(count - 60_000) < 600


def test_warming_the_host_twice_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_agent.agent.run.agent import warm_host

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    warm_host()
    warm_host()
    assert list(tmp_path.iterdir()) == []


def test_a_data_file_that_changes_after_its_check_is_refused(sales_csv: Path, tmp_path: Path) -> None:
    """The copies and the description are read separately; a file changed meanwhile could make them
    differ, so the agent checks each file unchanged once they are made."""
    with check_data([sales_csv], tmp_path / "ws") as checked:
        checked.install()
        checked.check_unchanged()  # as checked
        with sales_csv.open("a") as handle:
            handle.write("2024-12-31,North,Widget,1,1.0\n")
        with pytest.raises(DataFileError, match="changed while it was being copied"):
            checked.check_unchanged()
