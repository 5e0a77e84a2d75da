"""Issue 45.1: seed 3 deployed as shipped — a StatefulSet of `apportion rabbitmq consume` pods with the worker's
member surface (``--replicas-from kubernetes``, ``--metrics-port`` and its probes), scaled with `kubectl scale`
alone: the pods read the StatefulSet's ``spec.replicas`` from the (local, fake) Kubernetes API as
``tests/test_kube.py``'s worker does, on a real RabbitMQ node and a SQLite store, while a producer publishes. Checked
by ``tests/rabbitmq/harness.py``: every message processed, each key's in order, no duplicate (only planned
handoffs), never two consumers on one queue, the fence."""

from __future__ import annotations

import re
import signal
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.fleet import Fleet
from apportion.group import stored_replicas
from apportion.store import connect
from tests.kube_api import POD_COMMAND, FakeApiServer, fake_api
from tests.rabbitmq.harness import GROUP, Publisher, Run, Sampler, consume_args, env
from tests.rabbitmq_server import RabbitServer

pytest.importorskip("kubernetes")
pytestmark = [pytest.mark.slow, pytest.mark.rabbitmq, pytest.mark.xdist_group("rabbitmq")]

STATEFULSET = ("shop", "order-consumer")
PARTITIONS = 6


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path, dict[str, str]]]:
    with fake_api(tmp_path) as found:
        yield found


def probe(worker_log: str, path: str) -> int:
    """The HTTP status of ``path`` on the metrics port the consumer logged (``--metrics-port 0``: any free one)."""
    found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", worker_log)
    assert found, f"no metrics line in the log:\n{worker_log[-2000:]}"
    with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}{path}", timeout=10) as response:
        return int(response.status)


@pytest.mark.parametrize("up_first", [False, pytest.param(True, marks=pytest.mark.soak)], ids=["down", "up-down"])
def test_a_rabbitmq_consumer_statefulset_follows_kubectl_scale_alone_with_nothing_lost_and_one_consumer_per_queue(
    rabbit: RabbitServer,
    prefix: str,
    store_url: str,
    tmp_path: Path,
    api: tuple[FakeApiServer, Path, dict[str, str]],
    up_first: bool,
) -> None:
    """`kubectl scale --replicas 2` of three pods (the spec, then SIGTERM to the last pod): order-consumer-2 cancels
    its queues and acks what it handled, and the others take them once their followers have written the count
    (within a poll, 5 s). Every pod also serves its probes on --metrics-port. ``up-down`` (``make soak``; a pod's
    start costs ~5 s on a loaded 2-core machine) first starts two pods at spec.replicas 2 and scales up to 3 with
    kubectl alone (the spec, then the new pod): the count follows and order-consumer-2 gets queues 4 and 5."""
    fake, account, kube_env = api
    fake.replicas[STATEFULSET] = 2 if up_first else 3
    pod = [sys.executable, "-c", POD_COMMAND, str(account), *consume_args(rabbit, prefix, store_url, PARTITIONS,
           "static")[3:], "--replicas-from", "kubernetes", "--metrics-port", "0"]  # fmt: skip
    fleet = Fleet(tmp_path / "logs", pod, env={**env(), **kube_env})
    publisher = Publisher(rabbit.url, prefix, PARTITIONS)  # declares the queues
    sampler = Sampler(rabbit, prefix, PARTITIONS)
    sampler.start()
    three = {"c0": [0, 1], "c1": [2, 3], "c2": [4, 5]}
    two = {"c0": [0, 1, 2], "c1": [3, 4, 5]}
    with fleet:
        r = Run(rabbit, prefix, store_url, PARTITIONS, fleet, publisher, sampler)

        def start(ordinal: int) -> None:
            fleet.start(f"c{ordinal}", "--hostname", f"order-consumer-{ordinal}")

        def count() -> int | None:
            with connect(store_url) as store:
                return stored_replicas(store, GROUP)

        for ordinal in range(2 if up_first else 3):
            start(ordinal)
        r.wait_consumed("every pod consuming its queues", by=two if up_first else three)
        assert count() == (2 if up_first else 3)
        assert probe(fleet["c0"].log.text(), "/readyz") == probe(fleet["c1"].log.text(), "/healthz") == 200
        publisher.start()
        r.wait_processed_more(200)
        if up_first:
            fake.replicas[STATEFULSET] = 3  # kubectl scale statefulset order-consumer --replicas 3
            start(2)
            r.wait_consumed("three pods, two queues each", by=three)
            r.wait_processed_more(200)

        fake.replicas[STATEFULSET] = 2  # kubectl scale statefulset order-consumer --replicas 2
        leaving = fleet["c2"]
        leaving.signal(signal.SIGTERM)  # the StatefulSet controller terminates the highest ordinal
        assert leaving.proc.wait(30) == 0, leaving.tail()
        r.wait_consumed("two pods, three queues each", by=two, timeout_s=30)
        assert count() == 2
        r.wait_processed_more(200)
        counts = r.check(r.finish(), max_duplicates=0)
    requests = {path for path, _ in fake.requests}
    assert requests == {"/apis/apps/v1/namespaces/shop/statefulsets/order-consumer"}
    print(counts)
