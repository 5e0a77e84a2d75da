"""`apportion worker` — run one worker of a group; log each assignment change; SIGINT/SIGTERM leave gracefully.

Parses the options (command line, ``APPORTION_*`` environment, ``--config`` TOML) and prints each change as one JSON
line; the run itself — waiting for the store, the committer, metrics — is :func:`apportion.runner.run_worker`. The
member's options are the shared set of ``_member`` (`apportion rabbitmq consume` takes the same); ``--resources``,
``--subscribe``, ``--commit-every`` and the Kafka topics are the worker's own.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from apportion import events
from apportion.cli._app import app
from apportion.cli._common import option, seconds
from apportion.cli._kafka_options import KafkaTopics, kafka_options
from apportion.cli._member import MemberArgs, member_options
from apportion.cli._options import resource_names
from apportion.errors import InvalidRequest
from apportion.runner import run_worker

if TYPE_CHECKING:
    from apportion.kafka import TopicWatcher
    from apportion.kube import ReplicasFollower


@app.command()
@member_options(id_help="This worker's id")
@option(
    "--resources",
    env=True,
    default=None,
    help="Several resources instead of --partitions: NAME:PARTITIONS,... (orders:6,payments:4); partition ids are "
    "then <resource>-<index>.",
)
@option(
    "--subscribe",
    "subscriptions",
    env=True,
    default=None,
    help="The resources this worker consumes, NAME,... (default: all of the group's).",
)
@option(
    "--commit-every", env=True, type=seconds(), default=0.0, help="Commit a checkpoint for owned partitions every N s."
)
@kafka_options()
def worker(
    member: MemberArgs,
    resources: str | None,
    subscriptions: str | None,
    commit_every: float,
    kafka: KafkaTopics | None,
) -> None:
    """Run a worker until SIGINT/SIGTERM. Each change is one JSON line on stdout
    ({"event": "assigned"|"revoked"|"lost"|"commit"|"fenced"|"commit_failed", "partitions": [...], "time": t}; a
    commit also has its epoch and the store revision) and a log line.

    Every option can also come from the environment (APPORTION_STORE, APPORTION_GROUP, APPORTION_ID, ...) or from
    --config FILE.toml; precedence: command line > environment > file > defaults."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    watcher = None
    if kafka is not None:
        if member.partitions is not None or resources is not None:
            raise InvalidRequest("topic", "the topics are the group's resources: give no --partitions or --resources")
        watcher, resources = _topics_watcher(
            kafka.within(member.connect_timeout_s), member.store_url, member.group_name
        )
    requested = member.requested(resources)
    follower = member.replicas_follower()
    run_worker(
        member.store_url,
        member.group_name,
        member.id,
        requested,
        emit=events.emit,
        options=member.join_options(
            subscriptions=None if subscriptions is None else resource_names(subscriptions, "subscribe")
        ),
        commit_every_s=commit_every,
        on_started=_both(follower, watcher),
        **member.process(),
    )
    if watcher is not None and watcher.error is not None:
        raise watcher.error  # a topic deleted (or the broker gone for good) while the worker ran: exit 1


def _topics_watcher(kafka: KafkaTopics, store_url: str, group_name: str) -> tuple[TopicWatcher, str]:
    """``--kafka``/``--topic``: the topics' partition counts read from the broker, the stored definition grown to
    them (a topic that grew while the group was down), and the watcher that follows them while the worker runs; and
    the topics as ``--resources``. An unreachable broker, refused credentials or an unknown topic: one line, exit 1."""
    from apportion.kafka import TopicWatcher, resources_text, sync_definition, topic_partitions
    from apportion.store import connect

    counts = topic_partitions(kafka.config, kafka.topics)
    store = connect(store_url)
    click.get_current_context().call_on_close(store.close)
    sync_definition(store, group_name, counts)
    watcher = TopicWatcher(kafka.config, kafka.topics, store, group_name)
    click.get_current_context().call_on_close(watcher.stop)
    return watcher, resources_text(counts)


def _both(follower: ReplicasFollower | None, watcher: TopicWatcher | None) -> Callable[[Any], None] | None:
    """One ``on_started`` for the replicas follower and the topic watcher, either of which may be absent."""
    starts = [part.start for part in (follower, watcher) if part is not None]
    if not starts:
        return None

    def started(worker: Any) -> None:
        for start in starts:
            start(worker)

    return started
