"""The asyncio service example of the library guide (docs/guides/library.md), as written there: two instances
on one SQLite file, each serving the keys of the partitions it owns (200) and redirecting the others to their owner
(307)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from apportion import connect
from apportion._ports import free_ports
from apportion.group import owners
from apportion.routing import partition_for
from apportion.waiting import wait_for
from tests.doc_samples import DOCS, marked_block

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 16  # the example's group


def readme_example() -> str:
    """The example as the library guide shows it (the docs' block marked ``examples/aio_service.py``)."""
    return marked_block(DOCS / "guides" / "library.md", "examples/aio_service.py")


def test_the_readme_example_is_examples_aio_service_py() -> None:
    assert readme_example() == (ROOT / "examples" / "aio_service.py").read_text()


@contextlib.contextmanager
def instances(script: Path, store_url: str, ports: list[int]) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen([sys.executable, str(script), "--store", store_url, "--port", str(port)], env=env)
        for port in ports
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown: the lifespan's worker leaves
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_two_instances_serve_their_keys_and_redirect_the_others_to_the_owner(tmp_path: Path) -> None:
    script = tmp_path / "aio_service.py"
    script.write_text(readme_example())
    store_url = f"sqlite:///{tmp_path / 'keys.db'}"
    ports = free_ports(2)
    ids = [f"127.0.0.1-{port}" for port in ports]
    with instances(script, store_url, ports) as procs, connect(store_url) as store:

        def alive() -> None:
            for proc in procs:
                assert proc.poll() is None, f"an instance exited with {proc.returncode}"

        def owner_counts() -> dict[str | None, int]:
            counts: dict[str | None, int] = {}
            with contextlib.suppress(Exception):  # the group is not defined until the first worker stores it
                for owner in owners(store, "keys").values():
                    counts[owner] = counts.get(owner, 0) + 1
            return counts

        wait_for("the two instances to own 8 partitions each", lambda: owner_counts() == dict.fromkeys(ids, 8), 20,
                 alive=alive)  # fmt: skip
        table = owners(store, "keys")
        keys = {owner: next(f"user-{i}" for i in range(1000) if table[partition_for(f"user-{i}", 16)] == owner)
                for owner in ids}  # fmt: skip
        first, second = (f"http://127.0.0.1:{port}" for port in ports)
        with httpx.Client(timeout=5) as http:
            # the router's copy follows the store's watch: poll until the first instance has seen the plan
            wait_for("a redirect from the first instance", lambda: http.get(f"{first}/keys/{keys[ids[1]]}").status_code
                     == 307, 10, alive=alive)  # fmt: skip
            mine = http.get(f"{first}/keys/{keys[ids[0]]}")
            assert mine.status_code == 200, mine.text
            assert mine.json()["by"] == ids[0] and mine.json()["partition"] == partition_for(keys[ids[0]], PARTITIONS)
            other = http.get(f"{first}/keys/{keys[ids[1]]}")
            assert other.status_code == 307
            assert other.headers["location"] == f"{second}/keys/{keys[ids[1]]}"
            followed = http.get(other.headers["location"])
            assert followed.status_code == 200 and followed.json()["by"] == ids[1]
    assert [proc.returncode for proc in procs] == [0, 0]
