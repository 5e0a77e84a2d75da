"""Several "hosts" on one machine: Linux network namespaces joined by veth pairs to a bridge the test creates.

``Network.create(hosts=["e0", "e1", "w0"])`` (a context manager) makes one namespace per host, each with one veth
link to a private bridge and one address on a private /24 of 10.231.0.0/16 that no other live network of this machine
uses; no default route anywhere, so a host reaches only the other hosts of its network. The bridge holds the ``.1``
address: the test process (in the root namespace) is a "control host" that is never partitioned (it reads etcd's
status and history).

Faults, each undone by its pair:

- ``isolate(host)`` / ``heal(host)``: the bridge side of the host's link set down / up. Packets to and from the host
  are silently lost (the host's own end keeps its address and route, as a host behind a pulled cable does): TCP
  connections hang, nothing gets a quick "unreachable".
- ``cut(a, b)`` / ``mend(a, b)``: iptables DROP between two hosts only (in both namespaces), for partial partitions
  (a worker that reaches one etcd node but not the others).

Everything is removed on exit, even when the body raises; names carry a prefix with the creating process's pid
(``apn<pid><n>``), and :func:`remove_leftovers` deletes namespaces and links of processes that died without cleaning
up (a killed pytest). Needs root, ``ip`` (iproute2) and, for ``cut``, ``iptables``; :func:`unavailable` says why
namespaces cannot be made here (the tests fail with that reason in CI and skip elsewhere).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

PREFIX = "apn"
SUPERNET = ipaddress.ip_network("10.231.0.0/16")
_LOCK_PATH = Path("/tmp/apportion-netns.lock")
_counter = itertools.count()
_NAME = re.compile(rf"^{PREFIX}(\d+)([a-z])")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can (root, iproute2, a bridge and a veth)."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed: apt-get install -y iproute2"
    if shutil.which("iptables") is None and not Path("/usr/sbin/iptables").exists():
        return "iptables is not installed (scripts/ensure-test-tools.sh: apt-get install -y iptables)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run as root, as CI does"
    probe = f"{PREFIX}{os.getpid()}z"
    try:
        for args in (("netns", "add", probe), ("link", "add", probe + "b", "type", "bridge")):
            result = _ip(*args, check=False)
            if result.returncode != 0:
                return f"ip {' '.join(args)} failed: {result.stderr.strip()}"
        result = _ip("link", "add", probe + "v", "type", "veth", "peer", "name", probe + "p", check=False)
        if result.returncode != 0:
            return f"cannot create a veth pair: {result.stderr.strip()}"
    finally:
        _ip("link", "del", probe + "v", check=False)
        _ip("link", "del", probe + "b", check=False)
        _ip("netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Delete namespaces and links named ``apn<pid>...`` whose process is gone; the names removed."""
    removed: list[str] = []
    namespaces = [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]
    links = re.findall(r"^\d+: ([^:@\s]+)", _ip("-o", "link", "show").stdout, flags=re.M)
    for name in namespaces + links:
        match = _NAME.match(name)
        if match is None or _alive(int(match.group(1))):
            continue
        kind = "netns" if name in namespaces else "link"
        if _ip(kind, "del", name, check=False).returncode == 0:
            removed.append(name)
    return removed


@dataclass(frozen=True, slots=True)
class Host:
    """One namespace: ``name`` (the test's), ``netns`` (the kernel's), its address and its link on the bridge."""

    name: str
    netns: str
    address: str
    bridge_port: str

    def command(self, *args: str) -> list[str]:
        """``args`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *args]


class Network:
    """Hosts on one private bridge (see the module docstring). Build with :meth:`create`."""

    def __init__(self, tag: str, subnet: ipaddress.IPv4Network) -> None:
        self.tag = tag
        self.subnet = subnet
        self.bridge = f"{tag}b"
        self.hosts: dict[str, Host] = {}
        self.isolated: set[str] = set()
        self.cuts: set[tuple[str, str]] = set()
        self._hosts_made = 0

    @property
    def gateway(self) -> str:
        """The control host's address (the bridge's, in the root namespace)."""
        return str(self.subnet.network_address + 1)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # -- life cycle ----------------------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def create(cls, hosts: Sequence[str]) -> Iterator[Network]:
        remove_leftovers()
        tag = f"{PREFIX}{os.getpid()}{'abcdefghijklmnopqrstuvwxy'[next(_counter) % 25]}"
        network: Network | None = None
        try:
            with _LOCK_PATH.open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once must not pick the same subnet
                network = cls(tag, _free_subnet())
                _ip("link", "add", network.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0")
                _ip("addr", "add", f"{network.gateway}/{network.subnet.prefixlen}", "dev", network.bridge)
                _ip("link", "set", network.bridge, "up")
            for name in hosts:
                network.add_host(name)
            yield network
        finally:
            if network is not None:
                network.remove()
            else:
                _ip("link", "del", f"{tag}b", check=False)

    def add_host(self, name: str) -> Host:
        if name in self.hosts:
            raise ValueError(f"host {name} exists")
        index = self._hosts_made
        self._hosts_made += 1
        address = str(self.subnet.network_address + 2 + index)
        host = Host(name, f"{self.tag}-{name}", address, f"{self.tag}v{index}")
        inner = f"{self.tag}p{index}"
        self.hosts[name] = host
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.bridge_port, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", host.netns)
        _ip("-n", host.netns, "link", "set", inner, "name", "eth0")
        _ip("-n", host.netns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("link", "set", host.bridge_port, "master", self.bridge)
        _ip("link", "set", host.bridge_port, "up")
        return host

    def remove(self) -> None:
        """Delete every namespace (its end of the veth goes with it), every bridge port and the bridge."""
        for host in self.hosts.values():
            _ip("netns", "del", host.netns, check=False)
            _ip("link", "del", host.bridge_port, check=False)
        _ip("link", "del", self.bridge, check=False)
        self.hosts.clear()

    # -- faults --------------------------------------------------------------------------------------------

    def isolate(self, name: str) -> None:
        """Cut ``name`` off from every other host and the control host (its link's bridge side down)."""
        _ip("link", "set", self.hosts[name].bridge_port, "down")
        self.isolated.add(name)

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].bridge_port, "up")
        self.isolated.discard(name)

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between hosts ``a`` and ``b`` (iptables in both namespaces); others are unaffected."""
        self._iptables("-A", a, b)
        self.cuts.add((min(a, b), max(a, b)))

    def mend(self, a: str, b: str) -> None:
        self._iptables("-D", a, b)
        self.cuts.discard((min(a, b), max(a, b)))

    def _iptables(self, action: str, a: str, b: str) -> None:
        """``action`` (-A add, -D delete) the DROP rules between ``a`` and ``b`` in both namespaces."""
        for here, there in ((self.hosts[a], self.hosts[b]), (self.hosts[b], self.hosts[a])):
            for chain, flag in (("INPUT", "-s"), ("OUTPUT", "-d")):
                rule = ["iptables", "-w", action, chain, flag, there.address, "-j", "DROP"]
                subprocess.run(here.command(*rule), check=action == "-A", capture_output=True, timeout=30)

    def heal_all(self) -> None:
        for name in sorted(self.isolated):
            self.heal(name)
        for a, b in sorted(self.cuts):
            self.mend(a, b)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of SUPERNET that no route of this machine covers yet (called under the lock)."""
    used = set()
    for line in _ip("-4", "-o", "route", "show").stdout.splitlines():
        with contextlib.suppress(ValueError):
            used.add(ipaddress.ip_network(line.split()[0], strict=False))
    for subnet in SUPERNET.subnets(new_prefix=24):
        if subnet.network_address.packed[2] == 0:
            continue
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise RuntimeError(f"no free /24 left in {SUPERNET}")
