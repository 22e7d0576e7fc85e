"""Data files built to exhaust whoever parses them, for tests: a parquet file declaring 100 M rows, an
xlsx whose real sheet unpacks to ~90 MB, an xlsx with an XML entity expansion ("billion laughs"); and kernel code
that exhausts a kernel's memory through its children (``memory_hog_children``)."""

from __future__ import annotations

import zipfile
from pathlib import Path

__all__ = ["memory_hog_children", "write_laughs_xlsx", "write_parquet_bomb", "write_xlsx_bomb"]


def memory_hog_children(megabytes: int, count: int = 3) -> str:
    """Kernel code: ``count`` child processes each holding ``megabytes`` (each under a per-process limit, together
    over the tree's memory cgroup) until one is killed or 30 s pass; prints their exit codes (-9: OOM-killed)."""
    return f"""
import subprocess, sys, time
hog = "import time; block = b'x' * ({megabytes} * 1024 * 1024); time.sleep(60)"
children = [subprocess.Popen([sys.executable, '-c', hog]) for _ in range({count})]
deadline = time.monotonic() + 30
while all(c.poll() is None for c in children) and time.monotonic() < deadline:
    time.sleep(0.05)
for c in children:
    c.kill()
print([c.wait() for c in children])
"""


_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/xl/workbook.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
    '<Override PartName="/xl/worksheets/sheet1.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="xl/workbook.xml"/></Relationships>'
)
_WORKBOOK = (
    '<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
)
_WORKBOOK_RELS = (
    '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
    'Target="worksheets/sheet1.xml"/></Relationships>'
)
_SHEET_START = '<?xml version="1.0" encoding="UTF-8"?>{doctype}<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
_SHEET_END = "</sheetData></worksheet>"


def _workbook(path: Path, sheet: zipfile.ZipFile | None = None) -> zipfile.ZipFile:
    archive = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9)
    archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
    archive.writestr("_rels/.rels", _RELS)
    archive.writestr("xl/workbook.xml", _WORKBOOK)
    archive.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS)
    return archive


def write_xlsx_bomb(path: Path, unpacked: int = 90_000_000) -> None:
    """A valid workbook whose one row holds cells adding up to ``unpacked`` bytes of sheet XML (~300 KB
    packed): a header row a sampler cannot stop in, and every cell a number to parse."""
    cell = b'<c t="n"><v>0</v></c>'
    with _workbook(path) as archive, archive.open("xl/worksheets/sheet1.xml", "w") as member:
        member.write(_SHEET_START.format(doctype="").encode() + b'<row r="1">')
        block = cell * 50_000
        for _ in range(unpacked // len(block)):
            member.write(block)
        member.write(b"</row>" + _SHEET_END.encode())


def write_laughs_xlsx(path: Path) -> None:
    """A workbook whose sheet defines nested XML entities expanding to ~3 GB ("billion laughs")."""
    entities = '<!ENTITY lol0 "lololololo">' + "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10)
    )
    doctype = f"<!DOCTYPE worksheet [{entities}]>"
    sheet = (
        _SHEET_START.format(doctype=doctype)
        + '<row r="1"><c t="inlineStr"><is><t>&lol9;</t></is></c></row>'
        + _SHEET_END
    )
    with _workbook(path) as archive:
        archive.writestr("xl/worksheets/sheet1.xml", sheet)


def write_parquet_bomb(path: Path, rows: int = 100_000_000) -> None:
    """A parquet file of ``rows`` int64 zeros (~430 KB: run-length encoded): 800 MB once read whole."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": pa.array(np.zeros(rows, dtype=np.int64))}), path, compression="zstd")
