"""Free TCP ports for the servers apportion starts on loopback (the demo's Kafka broker and Spark Connect server, a
Spark standalone cluster, and the tests' etcd, PostgreSQL and RabbitMQ): the ONE place that asks the kernel."""

from __future__ import annotations

import contextlib
import socket

LOCALHOST = "127.0.0.1"


def free_ports(count: int, host: str = LOCALHOST) -> list[int]:
    """``count`` distinct TCP ports on ``host`` that nobody listens on now (the kernel's choice). Every socket stays
    open until all ports are known: one socket at a time, the kernel may hand the same port out twice (a cluster
    once got one peer port twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def free_port(host: str = LOCALHOST) -> int:
    """One TCP port on ``host`` that nobody listens on now."""
    return free_ports(1, host)[0]


__all__ = ["LOCALHOST", "free_port", "free_ports"]
