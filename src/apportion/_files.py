"""Files apportion wrote, read back as input: the ONE place that keeps a path taken from a record under its root and
that tells a corrupt file from a failing disk.

Paths: a checkpoint's outputs and a manifest's segments are paths a record names, relative to a root (the output
directory, the partition directory). A record can be edited by hand or tampered with, so every such path goes
through ``plain_relpath`` when the record is parsed (no file system: relative, normalised, no ``.`` or ``..``) and
through ``inside`` when it is opened (every symlink resolved: the result must lie strictly under the resolved root).

Errors: a file that is not what apportion wrote (empty, truncated, not JSON, not Parquet, missing although a record
lists it) is ``CorruptFile`` (exit 2: the message names it and says what to do); a read the disk fails (an errno) is
a runtime fault (exit 1): ``OSError`` as it is, or ``ApportionError`` naming the file for pyarrow's errors.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apportion.errors import ApportionError, CorruptFile

if TYPE_CHECKING:
    import pyarrow as pa

_ARROW_PREFIX = re.compile(r"^Could not open Parquet input source '.*?': ")


def plain_relpath(rel: object) -> bool:
    """Whether ``rel`` is a relative, normalised POSIX path of at least one name, none of them ``.`` or ``..``."""
    return (
        isinstance(rel, str)
        and bool(rel)
        and "\0" not in rel
        and all(part not in ("", ".", "..") for part in rel.split("/"))
    )


def inside(root: str | os.PathLike[str], rel: str) -> Path | None:
    """``root / rel`` with every symlink resolved, or None when that is not strictly under ``root`` (resolved too):
    an absolute ``rel``, a ``..`` that climbs out, a symlink that points out."""
    try:
        base = Path(os.path.realpath(root))
        target = Path(os.path.realpath(base / rel))
    except (OSError, ValueError):  # a NUL byte, a symlink loop
        return None
    return target if target != base and target.is_relative_to(base) else None


def read_json(path: Path, remedy: str) -> Any:
    """The JSON value of a small file apportion wrote; None when the file does not exist. ``CorruptFile`` (naming
    ``remedy``) when it is empty or not JSON; other ``OSError`` as they are (the disk)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.strip():
        raise CorruptFile(path, "empty (truncated?)", remedy)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptFile(path, "not JSON (truncated?)", remedy) from exc


def read_parquet(path: str | os.PathLike[str], remedy: str, schema: pa.Schema | None = None) -> pa.Table:
    """A Parquet file, or a directory of them (names starting with ``.`` or ``_`` skipped), as a table.
    ``CorruptFile`` naming the bad file (in a directory: the first data file that fails) when it is missing,
    truncated or not Parquet; ``ApportionError`` (exit 1) when the disk fails to read it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, schema=schema)
    except (OSError, pa.ArrowException) as exc:
        raise _read_error(Path(path), exc, remedy, schema) from exc


def read_parquet_chunks(
    path: str | os.PathLike[str], remedy: str, columns: Sequence[str], rows: int
) -> Iterator[pa.Table]:
    """``read_parquet`` of ``columns`` in tables of at most ``rows`` rows (file by file, in name order): what it
    holds in memory at once is bounded by ``rows``, not by the file or the directory. The same errors."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(path)
    try:
        files = (
            [f for f in sorted(root.iterdir()) if not f.name.startswith((".", "_")) and f.is_file()]
            if root.is_dir()
            else [root]
        )
        for file in files:
            with pq.ParquetFile(file, pre_buffer=False, buffer_size=1 << 20) as parquet:  # streamed by pages
                for batch in parquet.iter_batches(batch_size=rows, columns=list(columns)):
                    yield pa.Table.from_batches([batch])
    except (OSError, pa.ArrowException) as exc:
        raise _read_error(root, exc, remedy, None) from exc


def _read_error(path: Path, exc: BaseException, remedy: str, schema: pa.Schema | None) -> ApportionError:
    """What a failed read of ``path`` (a file or a directory of them) is: ``CorruptFile`` naming the bad file, or
    ``ApportionError`` for a disk fault."""
    bad, error = _culprit(path, exc, schema)
    if isinstance(error, FileNotFoundError):
        return CorruptFile(bad, "missing", remedy)
    if isinstance(error, OSError) and (error.errno is not None or "errno" in str(error).lower()):
        return ApportionError(f"cannot read {bad}: {_arrow_reason(error)} (a disk fault?)")
    return CorruptFile(bad, f"not a whole Parquet file ({_arrow_reason(error)})", remedy)


def _culprit(path: Path, exc: BaseException, schema: pa.Schema | None) -> tuple[Path, BaseException]:
    """The file of the directory ``path`` that fails alone, with its error (else ``path`` and ``exc``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_dir():
        return path, exc
    for child in sorted(path.iterdir()):
        if child.name.startswith((".", "_")) or not child.is_file():
            continue
        try:
            pq.read_table(child, schema=schema)
        except (OSError, pa.ArrowException) as error:
            return child, error
    return path, exc


def _arrow_reason(exc: BaseException) -> str:
    """pyarrow's message without the path it repeats, first line only, bounded."""
    text = _ARROW_PREFIX.sub("", str(exc)).strip().splitlines()
    reason = text[0] if text else type(exc).__name__
    return reason if len(reason) <= 160 else reason[:157] + "..."


__all__ = ["inside", "plain_relpath", "read_json", "read_parquet", "read_parquet_chunks"]
