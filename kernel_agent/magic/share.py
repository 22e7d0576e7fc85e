"""Variables shared from the user's notebook into the agent's kernel (``%%agent --share``).

Owns writing each variable into the run's workspace as a file (a DataFrame as
``NAME.parquet``, ``NAME.pkl`` where parquet cannot hold it; a numeric array as
``NAME.npy``; a JSON value as ``NAME.json``; anything else picklable as
``NAME.pkl``), read-only like every input, and the setup code that loads
them under their names. Every name is checked before anything is written, so
a bad name leaves no files. Pickles are only ever read back from files this
module wrote. It does not run the agent (``cell.py``) or draw (``view.py``).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError

__all__ = ["RESERVED", "SharedVariables", "share_variables"]

# names the agent's setup cell defines: sharing one would be overwritten or overwrite it
RESERVED = frozenset({"data", "pd", "np", "plt", "sns", "random", "SimpleNamespace", "DataFiles"})


@dataclass(frozen=True)
class SharedVariables:
    """Variables written into a workspace: their files, the code that loads them, and a line for the task."""

    files: tuple[Path, ...]
    code: str
    note: str


def share_variables(namespace: dict[str, Any], names: list[str], workspace: Path) -> SharedVariables:
    """Write each named variable into ``workspace``. Raises ``UsageError`` for a name that cannot be shared."""
    check_names(namespace, names)
    workspace.mkdir(parents=True, exist_ok=True)
    files, loads, described, imports = [], [], [], set()
    for name in names:
        path, module, load, what = _write_variable(name, namespace[name], workspace)
        os.chmod(path, 0o444)  # an input, like every data file: the agent reads it, never changes it
        files.append(path)
        imports.update([module, "pathlib"] if "pathlib" in load else [module])
        loads.append(f"{name} = {load}")
        described.append(f"`{name}` ({what}, from `{path.name}`)")
    header = "# Variables shared from the user's notebook by %%agent --share, loaded from their files"
    import_lines = sorted(f"import {module}" for module in imports)
    code = "\n".join([header, *import_lines, *loads]) + "\n"
    note = f"Already defined in the kernel, shared from the user's notebook: {', '.join(described)}."
    return SharedVariables(tuple(files), code, note)


def check_names(namespace: dict[str, Any], names: list[str]) -> None:
    """Raise ``UsageError`` for a name that is not a variable of ``namespace`` or is reserved."""
    for name in names:
        if not name.isidentifier() or name in RESERVED:
            raise UsageError(f"cannot share {name!r}: not a name, or one the agent's setup defines")
        if name not in namespace:
            raise UsageError(f"cannot share {name!r}: no such variable in this notebook")


def _write_variable(name: str, value: Any, folder: Path) -> tuple[Path, str, str, str]:
    """Write ``value``; return (file, module to import, load expression, description)."""
    for earlier in folder.glob(f"{name}.*"):  # a read-only copy from an earlier run in this workspace
        if earlier.suffix in (".parquet", ".pkl", ".npy", ".json"):
            earlier.unlink()
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    if pandas is not None and isinstance(value, pandas.DataFrame):
        what = f"DataFrame, {value.shape[0]:,} rows × {value.shape[1]} columns"
        path = folder / f"{name}.parquet"
        try:
            value.to_parquet(path)
            return path, "pandas as pd", f'pd.read_parquet("{path.name}")', what
        except Exception:  # parquet engines refuse some columns (mixed objects, non-string names)
            path.unlink(missing_ok=True)
    elif numpy is not None and isinstance(value, numpy.ndarray) and not value.dtype.hasobject:
        path = folder / f"{name}.npy"
        numpy.save(path, value, allow_pickle=False)
        return path, "numpy as np", f'np.load("{path.name}")', f"ndarray {value.shape} {value.dtype}"
    else:
        try:
            if json.loads(json.dumps(value)) == value:
                path = folder / f"{name}.json"
                path.write_text(json.dumps(value), encoding="utf-8")
                load = f'json.loads(pathlib.Path("{path.name}").read_text(encoding="utf-8"))'
                return path, "json", load, type(value).__name__
        except (TypeError, ValueError):
            pass
    return _pickle(name, value, folder)


def _pickle(name: str, value: Any, folder: Path) -> tuple[Path, str, str, str]:
    if type(value).__module__ == "__main__":
        raise UsageError(
            f"cannot share {name!r}: its class is defined in this notebook, which the agent's kernel cannot import"
        )
    try:
        payload = pickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise UsageError(f"cannot share {name!r}: it cannot be pickled ({exc})") from None
    path = folder / f"{name}.pkl"
    path.write_bytes(payload)
    what = type(value).__name__ + (f", {len(value):,} items" if hasattr(value, "__len__") else "")
    return path, "pickle", f'pickle.loads(pathlib.Path("{path.name}").read_bytes())', what
