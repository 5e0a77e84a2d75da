"""deploy/kubernetes/: every manifest is valid Kubernetes (the 1.30 schema, strict) and says only what the command
it runs accepts (`apportion worker`, `apportion rabbitmq consume`): its arguments and ``APPORTION_*`` variables are
the click command's own, its probe paths the ones the member's metrics server answers, on the port it is told to
serve. Offline: no cluster runs."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from apportion.cli._app import app
from apportion.metrics import MetricsTracer
from apportion.worker import DEFAULT_REVOKE_TIMEOUT_S

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"
Manifest = dict[str, Any]


def manifests() -> list[tuple[str, Manifest]]:
    """(file name, document) for every document of every manifest file."""
    found = [
        (path.name, doc)
        for path in sorted(DEPLOY.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]
    assert found, f"no manifests in {DEPLOY}"
    return found


def of_kind(kind: str) -> list[Manifest]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


MEMBER_COMMANDS = (("worker",), ("rabbitmq", "consume"))  # the commands that run one member of a group


def command_words(args: list[str]) -> tuple[str, ...] | None:
    """The member command ``args`` start with (``("rabbitmq", "consume")``), or None."""
    return next((words for words in MEMBER_COMMANDS if tuple(args[: len(words)]) == words), None)


def worker_containers() -> Iterator[tuple[Manifest, Manifest]]:
    """(workload, container) for every container that runs a group member: `apportion worker` or `apportion
    rabbitmq consume` (the same member options: ``cli/_member.py``)."""
    for workload in of_kind("StatefulSet") + of_kind("Deployment"):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            if command_words(container.get("args", [])) is not None:
                yield workload, container


def member_command(words: tuple[str, ...] = ("worker",)) -> click.Command:
    """The click command of ``words`` (``("rabbitmq", "consume")``)."""
    command: click.Command | None = app
    for word in words:
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(command), word)
    assert command is not None
    return command


def unaccepted(args: list[str], env: list[Manifest]) -> list[str]:
    """What of ``args`` (``worker --opt value ...``, ``rabbitmq consume ...``) and ``env`` that command does not
    accept: an unknown subcommand, option or variable, a value its option's type refuses, an option without its
    value."""
    words = command_words(args)
    if words is None:
        return [f"not a member command (apportion worker, apportion rabbitmq consume): {args[:2]}"]
    command = member_command(words)
    options = {opt: p for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}
    envvars = {p.envvar: p for p in command.params if isinstance(p, click.Option) and isinstance(p.envvar, str)}
    ctx = click.Context(command)
    wrong: list[str] = []
    rest = iter(args[len(words) :])
    for arg in rest:
        name, eq, inline = arg.partition("=")
        param = options.get(name)
        if param is None:
            wrong.append(f"unknown option {name}" if name.startswith("-") else f"unexpected argument {arg!r}")
            continue
        if param.is_flag:
            if eq:
                wrong.append(f"{name} is a flag: it takes no value")
            continue
        value = inline if eq else next(rest, None)
        if value is None:
            wrong.append(f"{name} needs a value")
            continue
        try:
            param.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            wrong.append(f"{name} {value!r}: {exc.message}")
    for var in env:
        param = envvars.get(var["name"])
        if param is None:
            wrong.append(f"unknown variable {var['name']}")
        elif "value" in var:
            try:
                param.type_cast_value(ctx, var["value"])
            except click.BadParameter as exc:
                wrong.append(f"{var['name']}={var['value']!r}: {exc.message}")
    return wrong


def option_value(container: Manifest, option: str) -> str | None:
    """The value ``option`` gets in ``container``: from its arguments, else from its ``APPORTION_*`` variable."""
    args = container["args"]
    for i, arg in enumerate(args):
        if arg == option:
            return str(args[i + 1])
        if arg.startswith(f"{option}="):
            return str(arg.split("=", 1)[1])
    words = command_words(args)
    assert words is not None
    param = next(p for p in member_command(words).params if option in p.opts)
    assert isinstance(param, click.Option)
    return next((str(v["value"]) for v in container.get("env", []) if v["name"] == param.envvar), None)


@pytest.mark.parametrize(("name", "doc"), manifests(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_manifest_is_valid_against_the_kubernetes_schema(name: str, doc: Manifest) -> None:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_strict_validation_refuses_a_misspelt_field() -> None:
    """Strict mode is what catches a typo: a misspelt field is otherwise ignored by the schema (and by kubectl)."""
    sts = of_kind("StatefulSet")[0]
    container = dict(sts["spec"]["template"]["spec"]["containers"][0], livenesProbe={})
    broken = {**sts, "spec": {**sts["spec"], "template": {**sts["spec"]["template"], "spec": {
        **sts["spec"]["template"]["spec"], "containers": [container]}}}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError, match="livenesProbe"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_manifests_run_the_worker_in_static_and_rounds_mode() -> None:
    modes = {(w["kind"], option_value(c, "--mode")) for w, c in worker_containers()}
    assert modes == {("StatefulSet", "static"), ("Deployment", "rounds")}


def test_a_statefulset_runs_the_rabbitmq_consumer_with_the_workers_member_options() -> None:
    """Issue 45.1: seed 3 as shipped ran `apportion worker`, which consumes no message. The queue consumer's
    StatefulSet takes its ordinal from its host name, its count from the StatefulSet (`kubectl scale` alone), serves
    its probes, and names the queues as the seed's producers do (OrderEvents-P<x>); its AMQP URL comes from a
    Secret, as the store's does."""
    consumers = [(w, c) for w, c in worker_containers() if command_words(c["args"]) == ("rabbitmq", "consume")]
    assert [w["kind"] for w, _ in consumers] == ["StatefulSet"]
    consumer, container = consumers[0]
    assert option_value(container, "--mode") == "static" and "--ordinal-from-hostname" in container["args"]
    assert option_value(container, "--replicas-from") == "kubernetes"
    assert option_value(container, "--queue-name") == "{prefix}-P{partition}"
    assert option_value(container, "--metrics-port") is not None
    amqp = [v for v in container["env"] if v["name"] == "APPORTION_AMQP"]
    assert amqp and "secretKeyRef" in amqp[0]["valueFrom"], "the AMQP URL (a password) belongs in a Secret"
    assert "--amqp" not in container["args"]
    name = consumer["metadata"]["name"]
    others = {option_value(c, "--group") for w, c in worker_containers() if w["metadata"]["name"] != name}
    assert option_value(container, "--group") not in others, "the queue consumers need a group of their own"


def test_every_argument_and_variable_is_one_apportion_worker_accepts() -> None:
    for workload, container in worker_containers():
        wrong = unaccepted(container["args"], container.get("env", []))
        assert not wrong, f"{workload['kind']} {workload['metadata']['name']}: {wrong}"


def test_a_renamed_option_or_variable_is_caught() -> None:
    """The check above is the click command's: an option renamed in the code (or misspelt in a manifest) fails it."""
    assert unaccepted(["worker", "--metrics-prt=9100"], []) == ["unknown option --metrics-prt"]
    assert unaccepted(["worker", "--metrics-port", "many"], [])[0].startswith("--metrics-port 'many'")
    assert unaccepted(["worker", "--ordinal-from-hostname"], [{"name": "APPORTION_STORE_URL", "value": "x"}]) == [
        "unknown variable APPORTION_STORE_URL"
    ]


def test_the_static_pod_takes_its_ordinal_from_its_host_name_and_its_id_from_it() -> None:
    for workload, container in worker_containers():
        if workload["kind"] == "StatefulSet":
            assert "--ordinal-from-hostname" in container["args"]
            assert option_value(container, "--id") is None  # the member id is the pod's host name


def test_the_rounds_pods_id_is_the_pod_name() -> None:
    for workload, container in worker_containers():
        if workload["kind"] == "Deployment":
            ids = [v for v in container.get("env", []) if v["name"] == "APPORTION_ID"]
            assert ids and ids[0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_the_store_url_comes_from_the_secret() -> None:
    secrets = {s["metadata"]["name"]: s for s in of_kind("Secret")}
    for workload, container in worker_containers():
        assert "--store" not in container["args"], "the store URL (a password) belongs in the Secret"
        store = [v for v in container.get("env", []) if v["name"] == "APPORTION_STORE"]
        assert store, f"{workload['metadata']['name']}: no APPORTION_STORE"
        ref = store[0]["valueFrom"]["secretKeyRef"]
        assert ref["key"] in secrets[ref["name"]]["stringData"]
        for var in container.get("env", []):
            secret = var.get("valueFrom", {}).get("secretKeyRef")
            if secret is not None:
                assert secret["key"] in secrets[secret["name"]]["stringData"], var["name"]


def probe_port(container: Manifest, port: int | str) -> int:
    """A probe's port as a number (a named port is the container's port of that name)."""
    if isinstance(port, int):
        return port
    return next(int(p["containerPort"]) for p in container["ports"] if p.get("name") == port)


def test_probes_are_on_the_port_and_address_the_worker_serves_them() -> None:
    for workload, container in worker_containers():
        metrics_port = option_value(container, "--metrics-port")
        assert metrics_port is not None, f"{workload['metadata']['name']}: no --metrics-port, so no probes"
        host = option_value(container, "--metrics-host")
        assert host == "0.0.0.0", "the kubelet probes the pod's address, not its loopback"
        for probe in ("livenessProbe", "readinessProbe"):
            assert probe_port(container, container[probe]["httpGet"]["port"]) == int(metrics_port)


def test_probe_paths_are_the_ones_the_worker_answers() -> None:
    """Each probe's path, asked of the worker's own metrics server: liveness answers the worker's liveness,
    readiness its readiness (a path it does not know would get the metrics page, 200, and never fail)."""
    tracer = MetricsTracer("g", "w")
    tracer.set_probes(live=lambda: "liveness-answer", ready=lambda: "readiness-answer")
    port = tracer.serve(0)

    def answer(path: str) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                return str(response.read().decode())
        except urllib.error.HTTPError as exc:
            return str(exc.read().decode())

    for workload, container in worker_containers():
        name = workload["metadata"]["name"]
        assert "liveness-answer" in answer(container["livenessProbe"]["httpGet"]["path"]), name
        assert "readiness-answer" in answer(container["readinessProbe"]["httpGet"]["path"]), name


def test_termination_grace_outlasts_the_revoke_timeout() -> None:
    revoke_timeout_s = DEFAULT_REVOKE_TIMEOUT_S  # Group.join's default (JoinOptions)
    for workload, _ in worker_containers():
        grace_s = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace_s > revoke_timeout_s, f"{workload['metadata']['name']}: {grace_s} s"


def test_the_statefulset_has_its_headless_service_and_may_read_itself() -> None:
    services = {s["metadata"]["name"]: s for s in of_kind("Service")}
    accounts = {a["metadata"]["name"] for a in of_kind("ServiceAccount")}
    for sts in of_kind("StatefulSet"):
        name = sts["metadata"]["name"]
        assert services[sts["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
        account = sts["spec"]["template"]["spec"]["serviceAccountName"]
        assert account in accounts
        bound = {
            b["roleRef"]["name"]
            for b in of_kind("RoleBinding")
            if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"])
        }
        rules = [r for role in of_kind("Role") if role["metadata"]["name"] in bound for r in role["rules"]]
        assert any(
            "apps" in r["apiGroups"]
            and "statefulsets" in r["resources"]
            and "get" in r["verbs"]
            and name in r.get("resourceNames", [name])
            for r in rules
        ), f"ServiceAccount {account} may not get StatefulSet {name}"
