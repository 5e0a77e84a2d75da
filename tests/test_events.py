"""The one worker event format: written by `apportion worker` and `apportion pipeline run`, read back by parse."""

from __future__ import annotations

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
