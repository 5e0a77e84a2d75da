"""``apportion.kube`` (``apportion worker --replicas-from kubernetes``) with the real ``kubernetes`` client: its calls
go over HTTPS, verified against the service account's CA, to a local server that answers the Kubernetes API's
StatefulSet path and records every request. No cluster runs in these tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.errors import ApportionError, InvalidRequest
from apportion.group import GroupConfig, Static, stored_replicas
from apportion.group.internals import Keys, encode
from apportion.kube import KubernetesReplicas, ReplicasFollower, StatefulSetRef, statefulset_of
from apportion.store import connect
from apportion.waiting import wait_for
from apportion.worker import Group
from tests.cli.run import cli
from tests.kube_api import POD_COMMAND, TOKEN, FakeApiServer, fake_api

pytest.importorskip("kubernetes")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path, dict[str, str]]]:
    with fake_api(tmp_path) as found:
        yield found


def in_cluster(api: tuple[FakeApiServer, Path, dict[str, str]], hostname: str = "consumer-1") -> KubernetesReplicas:
    _, account, env = api
    return KubernetesReplicas.in_cluster(hostname, service_account_dir=str(account), environ=env)


def test_the_statefulset_is_named_by_the_host_name_in_the_service_accounts_namespace(tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("shop\n")
    ref = statefulset_of("order-consumer-12", str(tmp_path))
    assert ref == StatefulSetRef("shop", "order-consumer")
    assert ref.path == "/apis/apps/v1/namespaces/shop/statefulsets/order-consumer"
    with pytest.raises(InvalidRequest, match="does not look like a StatefulSet pod name"):
        statefulset_of("laptop", str(tmp_path))


def test_reads_spec_replicas_with_the_service_accounts_token(api: tuple[FakeApiServer, Path, dict[str, str]]) -> None:
    fake = api[0]
    fake.replicas[("shop", "consumer")] = 3
    assert in_cluster(api).read() == 3
    [(path, authorization)] = fake.requests
    assert path == "/apis/apps/v1/namespaces/shop/statefulsets/consumer"
    assert authorization is not None and authorization.lower() == f"bearer {TOKEN}"  # the client writes "bearer"


def test_forbidden_says_what_the_service_account_needs(api: tuple[FakeApiServer, Path, dict[str, str]]) -> None:
    api[0].forbidden.add(("shop", "consumer"))
    with pytest.raises(InvalidRequest, match=r"403 Forbidden reading StatefulSet shop/consumer: .* needs `get`") as e:
        in_cluster(api).read()
    assert e.value.exit_code == 2


def test_a_missing_statefulset_is_a_user_mistake(api: tuple[FakeApiServer, Path, dict[str, str]]) -> None:
    with pytest.raises(InvalidRequest, match="no StatefulSet shop/consumer") as e:
        in_cluster(api).read()
    assert e.value.exit_code == 2


def test_an_unreachable_api_is_a_runtime_fault(api: tuple[FakeApiServer, Path, dict[str, str]]) -> None:
    fake, account, env = api
    fake.replicas[("shop", "consumer")] = 3
    reader = in_cluster((fake, account, {**env, "KUBERNETES_SERVICE_PORT": "1"}))
    reader._api.api_client.configuration.retries = 0  # one refused connection, not urllib3's three
    with pytest.raises(ApportionError, match="cannot reach the API") as e:
        reader.read()
    assert not isinstance(e.value, InvalidRequest) and e.value.exit_code == 1


def test_outside_a_pod_there_is_no_in_cluster_configuration(tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("shop")
    with pytest.raises(InvalidRequest, match="no in-cluster configuration"):
        KubernetesReplicas.in_cluster("consumer-0", service_account_dir=str(tmp_path), environ={})


def static_group(tmp_path: Path, fake: FakeApiServer, replicas: int) -> str:
    """The URL of a store holding group ``g`` (no count yet), and ``replicas`` as the StatefulSet's spec."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with connect(url) as store:
        store.put(Keys("g").resource, encode(GroupConfig(partitions=12, mode=Static()).to_json()))
    fake.replicas[("shop", "consumer")] = replicas
    return url


def test_the_follower_writes_spec_replicas_as_apportion_scale_does(
    api: tuple[FakeApiServer, Path, dict[str, str]], tmp_path: Path
) -> None:
    fake = api[0]
    url = static_group(tmp_path, fake, 3)
    follower = ReplicasFollower(in_cluster(api).read, url, "g")
    with connect(url) as store:
        group = Group(store, "g")
        assert follower.follow(group) == 3
        assert stored_replicas(store, "g") == 3
        assert follower.follow(group) is None  # already right: nothing written
        fake.replicas[("shop", "consumer")] = 2  # kubectl scale --replicas 2
        assert follower.follow(group) == 2
        assert stored_replicas(store, "g") == 2
        fake.forbidden.add(("shop", "consumer"))  # a failed read keeps the stored count
        assert follower.follow(group) is None
        assert stored_replicas(store, "g") == 2


def test_the_follower_polls_on_its_own_thread_until_stopped(
    api: tuple[FakeApiServer, Path, dict[str, str]], tmp_path: Path
) -> None:
    fake = api[0]
    url = static_group(tmp_path, fake, 4)
    follower = ReplicasFollower(in_cluster(api).read, url, "g", poll_s=0.05)

    def stored() -> int | None:
        with connect(url) as store:
            return stored_replicas(store, "g")

    follower.start()
    try:
        wait_for("the stored count to follow spec.replicas 4", lambda: stored() == 4, 30)
        fake.replicas[("shop", "consumer")] = 6
        wait_for("the stored count to follow spec.replicas 6", lambda: stored() == 6, 30)
    finally:
        follower.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "rounds", "--id", "a"], "replicas-from: only with --mode static (this is --mode rounds)"),
        (["--mode", "static", "--ordinal", "0"], "needs the pod's host name"),
    ],
)
def test_replicas_from_kubernetes_misused_is_one_line_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    result = cli("worker", "--store", url, "--group", "g", "--partitions", "4", "--replicas-from", "kubernetes", *args)
    assert result.code == 2
    assert message in result.one_error_line()
    assert not (tmp_path / "a.db").exists()


def test_replicas_from_kubernetes_outside_a_pod_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    result = cli("worker", "--store", url, "--group", "g", "--partitions", "4", "--mode", "static",
                 "--hostname", "consumer-0", "--replicas-from", "kubernetes")  # fmt: skip
    assert result.code == 2
    assert "kubernetes:" in result.one_error_line()


@pytest.mark.slow
def test_a_static_worker_follows_kubectl_scale_through_the_api(
    api: tuple[FakeApiServer, Path, dict[str, str]], tmp_path: Path
) -> None:
    """The CLI's hook end to end: the worker process reads spec.replicas at start and writes it, follows a change,
    and stops on SIGTERM (exit 0) with its follower."""
    fake, account, env = api
    url = static_group(tmp_path, fake, 3)
    args = ["--store", url, "--group", "g", "--mode", "static", "--hostname", "consumer-0", "--replicas-from",
            "kubernetes"]  # fmt: skip
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.Popen(
        [sys.executable, "-c", POD_COMMAND, str(account), "worker", *args],
        env={**os.environ, **env, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def stored() -> int | None:
        with connect(url) as store:
            return stored_replicas(store, "g")

    try:
        wait_for("the worker to write spec.replicas 3", lambda: stored() == 3 or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.communicate()[1]
        fake.replicas[("shop", "consumer")] = 2  # kubectl scale statefulset consumer --replicas 2
        wait_for("the worker to follow spec.replicas 2 (polled every 5 s)", lambda: stored() == 2, 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "replica count 2 (from Kubernetes)" in stderr
    assert all(path == "/apis/apps/v1/namespaces/shop/statefulsets/consumer" for path, _ in fake.requests)
