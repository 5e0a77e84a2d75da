"""The namespace harness itself: hosts reach each other over the bridge, an isolated host is unreachable until it
heals, a cut drops only the traffic between its two hosts, no host has a default route, and nothing is left behind."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from apportion.waiting import wait_for
from tests.nemesis.netns import Host, Network, _ip

pytestmark = pytest.mark.usefixtures("netns_ok")

PORT = 7000
SERVER = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64); print('ready', flush=True)\n"
    "while True: s.accept()[0].close()\n"
)
CLIENT = "import socket,sys\nsocket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))"


def connects(source: Host, target: Host, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection from ``source`` to ``target``'s listener is set up within ``timeout_s``."""
    args = source.command(sys.executable, "-c", CLIENT, target.address, str(PORT), str(timeout_s))
    return subprocess.run(args, capture_output=True, timeout=30).returncode == 0


@pytest.fixture
def network() -> Iterator[Network]:
    with Network.create(["a", "b", "c"]) as network:
        servers = []
        try:
            for host in network.hosts.values():
                server = subprocess.Popen(
                    host.command(sys.executable, "-c", SERVER, host.address, str(PORT)),
                    stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                servers.append(server)
                assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            yield network
        finally:
            for server in servers:
                server.kill()
                server.wait(10)


def test_hosts_reach_each_other_only_over_their_links(network: Network) -> None:
    a, b, c = network["a"], network["b"], network["c"]
    assert connects(a, b) and connects(b, c) and connects(c, a)
    for host in (a, b, c):
        routes = _ip("-n", host.netns, "route", "show").stdout
        assert "default" not in routes, f"{host.name} must have no default route: {routes}"
        assert routes.strip().startswith(str(network.subnet)), routes


def test_an_isolated_host_is_unreachable_until_it_heals(network: Network) -> None:
    a, b, c = network["a"], network["b"], network["c"]
    network.isolate("b")
    assert not connects(a, b), "a reached b while b was isolated"
    assert not connects(b, c), "b reached c while b was isolated"
    assert connects(a, c), "isolating b cut a from c"
    network.heal("b")
    # the first packets after healing may still meet the neighbour entries that failed while b was away (a quick
    # "no route to host"): b must answer again within a few seconds, as a host whose cable is plugged back does
    wait_for("b reachable from a and c after healing", lambda: connects(a, b) and connects(c, b), 15)


def test_a_cut_drops_only_the_traffic_between_its_two_hosts(network: Network) -> None:
    a, b, c = network["a"], network["b"], network["c"]
    network.cut("a", "b")
    assert not connects(a, b) and not connects(b, a)
    assert connects(a, c) and connects(b, c)
    network.heal_all()
    wait_for("a and b reachable again after mending the cut", lambda: connects(a, b) and connects(b, a), 15)


def test_everything_is_removed_on_exit_even_after_a_failure() -> None:
    names: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), Network.create(["x", "y"]) as network:
        names = [
            network.bridge,
            *(h.netns for h in network.hosts.values()),
            *(h.bridge_port for h in network.hosts.values()),
        ]
        network.isolate("x")
        raise RuntimeError("boom")
    listing = _ip("netns", "list").stdout + _ip("-o", "link", "show").stdout
    assert names and not [name for name in names if name in listing], f"left behind: {listing}"
