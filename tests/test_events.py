"""The one worker event format: written by `apportion worker` and `apportion pipeline run`, read back by parse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from apportion import events


def test_an_emitted_event_is_one_json_line_kind_then_time_then_fields(capsys: pytest.CaptureFixture[str]) -> None:
    events.emit("assigned", partitions=[0, 3])
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1
    assert out.startswith('{"event": "assigned", "time": ')
    parsed = events.parse(out)
    assert parsed is not None and parsed["partitions"] == [0, 3] and isinstance(parsed["time"], float)
    assert events.parse(out.encode()) == parsed


@pytest.mark.parametrize(
    "text",
    ["", "INFO spark started", '{"event": "commit"', '{"level": "info"}', '{"event": 3}', "[1, 2]", b"\xff\xfe"],
)
def test_a_line_that_is_not_an_event_parses_as_none(text: str | bytes) -> None:
    assert events.parse(text) is None


def test_every_line_of_a_kind_begins_with_its_head() -> None:
    assert events.line("commit", partitions=[1]).encode().startswith(events.head("commit"))
    assert not events.line("committed").encode().startswith(events.head("commit"))


# the words on the wire, as every release wrote them: logs, the nemesis checker and the demo read these
WIRE_WORDS = {
    "assigned", "revoked", "lost", "commit", "fenced", "commit_failed", "stopped", "started", "batch", "written",
    "pausing", "commit_unknown", "batch_done", "batch_aborted", "batch_failed", "cleaned", "store_unavailable",
    "store_answers", "idle_exit", "restored", "replicas", "replica_lag", "consuming", "message", "acked", "cancelled",
    "requeued", "committed", "released", "dropped",
}  # fmt: skip


def test_every_kind_is_written_as_the_word_it_always_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """``WorkerEvent`` types the kinds without changing a byte of the line (format ``EVENT_LINE_FORMAT`` 1)."""
    monkeypatch.setattr(events.time, "time", lambda: 1718000000.1234)
    assert events.EVENT_LINE_FORMAT == 1
    assert {kind.value for kind in events.WorkerEvent} == WIRE_WORDS
    for kind in events.WorkerEvent:
        assert events.line(kind, partitions=[0, "orders-3"]) == events.line(kind.value, partitions=[0, "orders-3"])
        assert events.line(kind, x=1) == f'{{"event": "{kind.value}", "time": 1718000000.123, "x": 1}}'
        assert events.head(kind) == events.head(kind.value)
        assert events.parse(events.line(kind)) == {"event": kind.value, "time": 1718000000.123}


def test_every_emit_site_in_src_names_its_kind_with_the_enum() -> None:
    """No ``emit("...")``/``line("...")`` with a plain string in src/: a misspelt kind is then a type error."""
    plain = []
    for path in sorted((Path(__file__).resolve().parents[1] / "src" / "apportion").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            first = node.args[0]
            if (
                name in ("emit", "line", "callback")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                plain.append(f"{path.name}:{node.lineno} {name}({first.value!r})")
    assert plain == []
