"""Run the CLI in this process (fast enough for fuzzing): ``main(argv)`` with stdin, stdout and stderr swapped."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

from apportion.cli import main


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str

    def one_error_line(self) -> str:
        """The error line: exactly one, ``apportion: error: ...``, and no traceback anywhere."""
        assert "Traceback" not in self.stderr, self.stderr
        lines = self.stderr.splitlines()
        assert len(lines) == 1, f"expected one stderr line, got {len(lines)}: {self.stderr!r}"
        assert lines[0].startswith("apportion: error: "), lines[0]
        return lines[0]


def cli(*args: str, stdin: bytes | str | None = b"") -> Result:
    """``apportion ARGS`` in-process; ``stdin=None`` runs it with stdin closed."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    fake_in = None if data is None else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = fake_in  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = saved
    return Result(code, out.getvalue(), err.getvalue())


def check_exit(result: Result) -> None:
    """What every run must satisfy: exit 0, 1 or 2; no traceback; exactly one ``apportion: error:`` line on error,
    and never an internal error (a bug the catch-all in ``main`` hid)."""
    assert result.code in (0, 1, 2), (result.code, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal error" not in result.stderr, result.stderr
    if result.code != 0:
        result.one_error_line()
