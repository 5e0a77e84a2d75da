"""Seed 3's replica count from Kubernetes: ``apportion worker --mode static --replicas-from kubernetes`` (the
``kubernetes`` extra, the official client).

A static member in a StatefulSet pod reads its StatefulSet's ``spec.replicas`` through the Kubernetes API, as the
seed's own design does, and writes it as the group's replica count whenever the two differ: the same write as
``apportion scale`` (:meth:`apportion.Group.scale`), so ``kubectl scale`` alone scales the group, down as well as up.
The pod's identity is all it needs (in-cluster configuration): the API's address from ``KUBERNETES_SERVICE_HOST`` and
``KUBERNETES_SERVICE_PORT``, the service account's token, CA and namespace from
``/var/run/secrets/kubernetes.io/serviceaccount/``, and the StatefulSet's name from the pod's host name
``<name>-<ordinal>``. The service account needs ``get`` on that StatefulSet (``deploy/kubernetes/rbac.yaml``).

:class:`ReplicasFollower`'s states::

    CHECKING   before the worker starts (:meth:`KubernetesReplicas.in_cluster`, then one read): no in-cluster
               configuration, a host name that is not <name>-<ordinal>, 401/403 (the service account may not get the
               StatefulSet), 404 (no such StatefulSet) --> InvalidRequest, one line, exit 2; the API unreachable or
               another status --> ApportionError, one line, exit 1
    FOLLOWING  once the worker runs (it has defined the group): read spec.replicas now and every poll_s (5 s); when
               it differs from the stored count, Group.scale(n). A failed read or write is one warning line (again
               only when the reason changes) and the stored count stays as it is until a later poll succeeds;
               spec.replicas 0 (every pod is leaving) is not written (a group has at least one replica)
    STOPPED    when the worker stops (its own store connection is closed before the worker's)

Every member of the StatefulSet follows, so the count is written by whichever pod polls first after a change and the
others find it written; all of them read the same spec, so they agree.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apportion.errors import ApportionError, InvalidRequest
from apportion.group import stored_replicas
from apportion.group.internals import ordinal_from_hostname
from apportion.store import connect
from apportion.worker import Group

log = logging.getLogger("apportion.kube")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_POLL_S = 5.0
_REQUEST_TIMEOUT_S = 5.0
_FIELD = "replicas-from"


@dataclass(frozen=True, slots=True)
class StatefulSetRef:
    """One StatefulSet: its namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def path(self) -> str:
        """Its path in the Kubernetes API."""
        return f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/{self.name}"


def statefulset_of(hostname: str, service_account_dir: str = SERVICE_ACCOUNT_DIR) -> StatefulSetRef:
    """The StatefulSet of the pod ``hostname`` (``<name>-<ordinal>``), in the service account's namespace.
    InvalidRequest for another host name or a missing namespace file (not in a pod with a service account)."""
    ordinal_from_hostname(hostname)
    path = Path(service_account_dir, "namespace")
    try:
        namespace = path.read_text().strip()
    except OSError as exc:
        raise InvalidRequest(
            _FIELD, f"kubernetes: cannot read the pod's namespace from {path} ({exc.strerror or exc}): not in a pod?"
        ) from exc
    return StatefulSetRef(namespace, hostname.rsplit("-", 1)[0])


class KubernetesReplicas:
    """Reads one StatefulSet's ``spec.replicas`` through the official client (``apps/v1``, ``get`` only)."""

    def __init__(self, ref: StatefulSetRef, api: Any) -> None:
        self.ref = ref
        self._api = api  # kubernetes.client.AppsV1Api

    @classmethod
    def in_cluster(
        cls,
        hostname: str,
        *,
        service_account_dir: str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> KubernetesReplicas:
        """The pod's own StatefulSet, with the pod's service account (in-cluster configuration; the directory is
        :data:`SERVICE_ACCOUNT_DIR` unless given); InvalidRequest (exit 2) outside a pod."""
        from kubernetes import client
        from kubernetes.config import ConfigException
        from kubernetes.config.incluster_config import InClusterConfigLoader

        service_account_dir = service_account_dir or SERVICE_ACCOUNT_DIR
        ref = statefulset_of(hostname, service_account_dir)
        configuration = client.Configuration()
        loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=os.path.join(service_account_dir, "token"),
            cert_filename=os.path.join(service_account_dir, "ca.crt"),
            environ=environ,
        )
        try:
            loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise InvalidRequest(_FIELD, f"kubernetes: no in-cluster configuration ({exc}): not in a pod?") from exc
        return cls(ref, client.AppsV1Api(client.ApiClient(configuration)))

    def read(self) -> int:
        """``spec.replicas`` now (an unset one is Kubernetes' default, 1). InvalidRequest for 401/403/404 (the
        deployment is wrong), ApportionError (exit 1) when the API cannot be reached or answers otherwise."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            found = self._api.read_namespaced_stateful_set(
                self.ref.name, self.ref.namespace, _request_timeout=_REQUEST_TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status in (401, 403):
                raise InvalidRequest(
                    _FIELD,
                    f"kubernetes: {exc.status} {exc.reason} reading StatefulSet {self.ref}: the pod's service account "
                    "needs `get` on it (deploy/kubernetes/rbac.yaml)",
                ) from exc
            if exc.status == 404:
                raise InvalidRequest(
                    _FIELD, f"kubernetes: no StatefulSet {self.ref} (named after the pod's host name)"
                ) from exc
            raise ApportionError(f"kubernetes: reading StatefulSet {self.ref}: {exc.status} {exc.reason}") from exc
        except (HTTPError, OSError) as exc:
            raise ApportionError(f"kubernetes: cannot reach the API to read StatefulSet {self.ref}: {exc}") from exc
        replicas = found.spec.replicas
        return 1 if replicas is None else int(replicas)


class ReplicasFollower:
    """Keeps group ``group``'s stored replica count equal to ``source()`` (states in the module docstring), on its
    own thread and its own connection to ``store_url``."""

    def __init__(
        self, source: Callable[[], int], store_url: str, group: str, *, poll_s: float = DEFAULT_POLL_S
    ) -> None:
        self._source = source
        self._store_url = store_url
        self._group = group
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reason: str | None = None

    def follow(self, group: Group) -> int | None:
        """One poll: the count written, or None (it was already right, or the read or write failed: logged)."""
        try:
            replicas = self._source()
            if replicas < 1 or stored_replicas(group.store, group.name) == replicas:
                self._reason = None
                return None
            group.scale(replicas)
        except ApportionError as exc:
            if str(exc) != self._reason:
                self._reason = str(exc)
                log.warning("replica count not followed: %s", exc)
            return None
        self._reason = None
        log.info("group %s: replica count %d (from Kubernetes)", group.name, replicas)
        return replicas

    def start(self, *_: object) -> None:
        """Follow from now on (``run_worker``'s ``on_started``: the group is defined by then)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="apportion-replicas-from", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop following; returns once the thread has closed its store connection."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_REQUEST_TIMEOUT_S * 3)

    def _run(self) -> None:
        try:
            with connect(self._store_url) as store:
                group = Group(store, self._group)
                while True:
                    self.follow(group)
                    if self._stop.wait(self._poll_s):
                        return
        except ApportionError as exc:
            log.warning("replica count not followed any more: %s", exc)


__all__ = [
    "DEFAULT_POLL_S",
    "SERVICE_ACCOUNT_DIR",
    "KubernetesReplicas",
    "ReplicasFollower",
    "StatefulSetRef",
    "statefulset_of",
]
