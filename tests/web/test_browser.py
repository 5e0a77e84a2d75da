"""The dashboard in a real browser: headless Chromium (Debian's package, driven by playwright; installed by
scripts/ensure-test-tools.sh) opens the page of `apportion dashboard` while real `apportion worker` processes run on
a SQLite store; one worker is killed (SIGKILL) and the test reads, through the DOM, what a person would see change:
the member turning dead, its partitions getting new owners, the round advancing, the fault listed, and explain
saying where a partition came from. A screenshot of the page after the crash is saved in the test's tmp dir
(``dashboard.png``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.fleet import Fleet, worker_args
from apportion.waiting import wait_for

pytestmark = pytest.mark.xdist_group("dashboard-browser")

PARTITIONS = 12
TTL_S = 2.0
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]  # fmt: skip  (no network here: without the background-networking flags Chromium keeps dialling out)


def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: run scripts/ensure-test-tools.sh (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI installs it and runs this test")
    return found


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[str, Fleet]]:
    """Three workers on a SQLite store and `apportion dashboard --port 0` over their group: (page URL, fleet)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    options = ["--partitions", str(PARTITIONS), "--settle", "0.3", "--min-interval", "0.6", "--ttl", str(TTL_S)]
    with Fleet(tmp_path / "logs", worker_args(url, "g", *options)) as fleet:
        for mid in ("w1", "w2", "w3"):
            fleet.start(mid)
        wait_for("the group to exist", lambda: any(w.of("assigned") for w in fleet.workers.values()), 30,
                 alive=lambda: fleet.check(["w1", "w2", "w3"]))  # fmt: skip
        out = tmp_path / "dashboard.out"
        with out.open("wb") as sink:
            server = subprocess.Popen(
                [sys.executable, "-m", "apportion.cli", "dashboard", "--store", url, "--group", "g", "--port", "0",
                 "--refresh", "0.5"],
                stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            wait_for("the dashboard to print its address", lambda: "http://" in out.read_text(), 30,
                     alive=lambda: _running(server, out))  # fmt: skip
            page = out.read_text().split("http://", 1)[1].split()[0]
            yield f"http://{page}", fleet
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)
        assert server.returncode in (0, -15), out.read_text()


def _running(server: subprocess.Popen[bytes], out: Path) -> None:
    if server.poll() is not None:
        raise AssertionError(f"apportion dashboard exited ({server.returncode}): {out.read_text()}")


def test_a_person_sees_a_killed_worker_die_and_its_partitions_move(
    dashboard: tuple[str, Fleet], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    address, fleet = dashboard
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(30_000)
            page.goto(address)
            page.wait_for_selector('#status[data-status="live"]')

            def owners() -> dict[int, str]:
                rows = page.locator("#partitions tr").evaluate_all(
                    "rows => rows.map(r => [Number(r.dataset.partition), r.dataset.owner])"
                )
                return {int(p): str(o) for p, o in rows}

            def settled() -> bool:
                found = owners()
                counts = [list(found.values()).count(m) for m in ("w1", "w2", "w3")]
                return len(found) == PARTITIONS and min(counts) == PARTITIONS // 3

            wait_for("the page to show 12 partitions balanced over w1, w2, w3", settled, 30,
                     alive=lambda: fleet.check(["w1", "w2", "w3"]), context=lambda: str(owners()))  # fmt: skip
            assert page.get_attribute('#members tr[data-member="w2"]', "data-alive") == "true"
            round_before = int(page.get_attribute("#round", "data-round") or 0)  # the plan's round
            moved = sorted(p for p, o in owners().items() if o == "w2")

            fleet["w2"].kill()  # SIGKILL: no goodbye, its lease must expire

            page.wait_for_selector('#members tr[data-member="w2"][data-alive="false"]')
            assert "dead since" in page.inner_text('#members tr[data-member="w2"]')

            def taken_over() -> bool:
                found = owners()
                return all(found.get(p) in ("w1", "w3") for p in moved)

            wait_for(f"w2's partitions {moved} to show new owners", taken_over, 30, context=lambda: str(owners()))

            def round_shown() -> int:
                return int(page.get_attribute("#round", "data-round") or 0)

            wait_for("the round to advance", lambda: round_shown() > round_before, 30)
            page.wait_for_selector('#faults tr[data-fault="expired"][data-member="w2"]')
            assert page.inner_text("#alive-count") == "2 / 3"
            assert page.inner_text("#owned-count") == f"{PARTITIONS} / {PARTITIONS}"

            page.click(f'#partitions tr[data-partition="{moved[0]}"]')
            decision = page.wait_for_selector("#explain .decision")
            assert decision is not None and "from w2" in decision.inner_text()
            assert page.locator('#timeline rect[data-member="w2"]').count() >= len(moved)
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
