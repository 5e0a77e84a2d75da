"""`apportion kafka produce|consume` on bad input: each mistake is one ``apportion: error:`` line on stderr with its
exit code (2: the user's, 1: the broker's), never a traceback, and never the SASL password."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from apportion.group import GroupConfig
from apportion.group.internals import Keys
from apportion.store import connect
from apportion.waiting import wait_for
from tests.kafka.harness import body, create_topic, env, produce
from tests.kafka_server import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka")]


def apportion(*args: str, stdin: str = "", extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli", *args], input=stdin, capture_output=True, text=True, timeout=120,
        env={**env(), **(extra_env or {})},
    )  # fmt: skip


def one_error(done: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    """The one error line (log lines of a consumer that ran may precede it); no traceback."""
    assert done.returncode == code, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("apportion: error:")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def only_line(done: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    """A mistake found before anything ran: the error line is all of stderr."""
    line = one_error(done, code, *fragments)
    assert done.stderr.strip().splitlines() == [line]
    return line


def consume(kafka: str, topic: str, store_url: str, *more: str) -> list[str]:
    return ["kafka", "consume", "--kafka", kafka, "--topic", topic, "--store", store_url, "--group", "g", "--id", "a",
            *more]  # fmt: skip


def test_a_broker_that_cannot_be_reached_is_one_line_within_the_connect_timeout(topic: str, store_url: str) -> None:
    for args in (
        consume("127.0.0.1:1", topic, store_url, "--connect-timeout", "2"),
        ["kafka", "produce", "--kafka", "127.0.0.1:1", "--topic", topic, "--connect-timeout", "2"],
    ):
        started = time.monotonic()
        only_line(apportion(*args, stdin='{"key": "k"}\n'), 1, "cannot reach Kafka at 127.0.0.1:1 within 2 s")
        assert time.monotonic() - started < 15  # the timeout was kept (a Python start-up included)


def test_an_unknown_topic_is_one_line(kafka: KafkaCluster, store_url: str) -> None:
    only_line(apportion(*consume(kafka.bootstrap, "no-such-topic", store_url)), 1, "'no-such-topic' does not exist")
    done = apportion("kafka", "produce", "--kafka", kafka.bootstrap, "--topic", "no-such-topic", stdin='{"key": 1}\n')
    only_line(done, 1, "'no-such-topic' does not exist")


def test_a_topic_with_fewer_partitions_than_the_group_stored_is_one_line(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """The group stored the topic with 6 partitions; the broker has 3 (deleted and created again): exit 1, the
    stored definition left as it was."""
    create_topic(kafka, topic, 3)
    with connect(store_url) as store:
        store.put(Keys("g").resource, GroupConfig(resources=f"{topic}:6").record())
    only_line(apportion(*consume(kafka.bootstrap, topic, store_url)), 1,
              f"topic '{topic}' has 3 partitions on the broker but group 'g' stored 6")  # fmt: skip
    with connect(store_url) as store:
        assert GroupConfig.load(store, "g").resources[0].partitions == 6


def test_a_refused_password_is_one_line_that_never_shows_it(kafka: KafkaCluster, topic: str, store_url: str) -> None:
    create_topic(kafka, topic, 2)
    secret = {"APPORTION_KAFKA_PASSWORD": "not-the-password"}  # as a deployment passes it
    login = ["--kafka-username", "alice", "--connect-timeout", "3"]
    for args in (
        consume(kafka.sasl_bootstrap, topic, store_url, *login),
        ["kafka", "produce", "--kafka", kafka.sasl_bootstrap, "--topic", topic, *login],
    ):
        done = apportion(*args, stdin='{"key": "k"}\n', extra_env=secret)
        only_line(done, 1, "authentication failed", "'alice'")
        assert "not-the-password" not in done.stdout + done.stderr


def test_a_handler_that_raises_ends_the_consumer_with_one_line_and_its_record_uncommitted(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    create_topic(kafka, topic, 1)
    produce(kafka, topic, [("k", body("k", s, fail=s == 3)) for s in range(6)])
    done = apportion(*consume(kafka.bootstrap, topic, store_url, "--handler", "tests.kafka.handler:fail", "--ttl", "2"))
    line = one_error(done, 1)
    assert line == (
        f"apportion: error: the handler failed on {topic}-0 at offset 3: ValueError: cannot handle k/3 second line "
        "of the reason"
    )
    processed = [json.loads(x)["seq"] for x in done.stdout.splitlines() if x.startswith('{"event": "processed"')]
    assert processed == [0, 1, 2]
    with connect(store_url) as store:
        from apportion.group import committed

        assert committed(store, "g") == {f"{topic}-0": "3"}


def test_malformed_input_is_one_line_exit_2_before_anything_is_reached(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """In process (``tests.cli.run``): each mistake is found before a consumer or producer runs."""
    from tests.cli.run import cli

    def refused(args: list[str], fragment: str, stdin: str = "") -> None:
        line = cli(*args, stdin=stdin).one_error_line()  # exactly one line, no traceback
        assert fragment in line, line

    create_topic(kafka, topic, 2)
    mine = ["kafka", "produce", "--kafka", kafka.bootstrap, "--topic", topic]
    for args, fragment in [
        (consume("nohostport", topic, store_url), "kafka: expected HOST:PORT"),
        (consume(kafka.bootstrap, "bad topic", store_url), "'bad topic'"),
        (consume(kafka.bootstrap, topic, store_url, "--kafka-option", "nonsense"), "KEY=VALUE"),
        (consume(kafka.bootstrap, topic, store_url, "--kafka-option", "no.such.setting=1"), "kafka-option"),
        (consume(kafka.bootstrap, topic, store_url, "--handler", "nocolon"), "MODULE:FUNCTION"),
        (consume(kafka.bootstrap, topic, store_url, "--handler", "no_such_module:f"), "cannot import 'no_such_module'"),
        (consume(kafka.bootstrap, topic, store_url, "--settle", "5", "--min-interval", "1"), "min_interval_s"),
        (consume(kafka.bootstrap, topic, store_url, "--start", "middle"), "--start"),
        (consume(kafka.bootstrap, topic, store_url, "--batch", "0"), "--batch"),
        (["kafka", "consume", "--store", store_url, "--group", "g", "--id", "a"], "give --kafka"),
        ([*mine, "--topic", topic + "-b"], "give one --topic"),
    ]:
        refused(args, fragment)
        assert cli(*args).code == 2
    for line, fragment in [
        ('{"seq": 1}\n', "stdin: line 1: not a JSON object with 'key'"),
        ('{"key": true}\n', "'key' must be a string or an integer"),
        ("not json\n", "stdin: line 1"),
    ]:
        result = cli(*mine, stdin=line)
        assert result.code == 2 and fragment in result.one_error_line()


def test_the_produce_command_prints_one_summary_line_with_the_records_per_partition(
    kafka: KafkaCluster, topic: str
) -> None:
    from apportion.kafka._partitioner import partition_for_key

    create_topic(kafka, topic, 3)
    lines = "".join(json.dumps({"id": f"k{i}", "n": i}) + "\n" for i in range(30)) + "\n"
    done = apportion("kafka", "produce", "--kafka", kafka.bootstrap, "--topic", topic, "--key", "id", stdin=lines)
    assert done.returncode == 0, done.stderr
    counts = [sum(1 for i in range(30) if partition_for_key(f"k{i}", 3) == p) for p in range(3)]
    assert json.loads(done.stdout) == {"produced": 30, "topic": topic, "per_partition": counts}
    wait_for("nothing on stderr", lambda: done.stderr == "", 0)
