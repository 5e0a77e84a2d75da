"""Every command the README shows in its `console` blocks runs and succeeds (a newcomer can follow it); what the
documentation says about the by-hand group, the seed map, the static mode and the demo's sample run is what the code
does (each read from the page of the site it lives on: tests/doc_samples.py; the site's own samples run in
tests/test_docs.py)."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.doc_samples import ROOT, page_text, pages


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```console\n(.*?)```", text, flags=re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def test_the_readme_shows_commands() -> None:
    assert len(readme_commands()) >= 3


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs(command: str, tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{command!r} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{command!r} printed nothing"


def by_hand_block() -> list[str]:
    """The commands of the "A group on one machine, by hand" block (Getting started)."""
    text = page_text("getting-started.md")
    block = re.search(r"by hand[^\n]*\n\n(?:<!--[^\n]*-->\n)?```shell\n(.*?)```", text, flags=re.S)
    assert block is not None, "Getting started lost its by-hand group"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.startswith("apportion ")]


def test_every_sqlite_url_in_the_examples_is_absolute() -> None:
    """``sqlite:///tmp/x.db`` is tmp/x.db under the current directory: copied elsewhere it fails (the README's
    examples and the site's)."""
    text = "\n".join(page.read_text() for page in pages())
    blocks = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S))
    urls = re.findall(r"sqlite:///[^\s\"']*", blocks)
    assert urls, "no sqlite URL in the examples"
    assert [u for u in urls if not u.startswith("sqlite:////")] == []


def test_the_by_hand_group_works_from_another_directory(tmp_path: Path) -> None:
    """The by-hand group, copied into a shell whose current directory is neither the repository nor ``/``: both
    workers share the 12 partitions and ``status`` sees them. The store lives in tmp_path instead of /tmp (same
    four-slash form); ``report`` needs Spark and is left to the Spark tests."""
    commands = by_hand_block()
    assert len(commands) == 4 and all("--store sqlite:////tmp/orders.db" in c for c in commands)
    store = tmp_path / "store"
    store.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    argv = [shlex.split(c.replace("/tmp/orders.db", f"{store}/orders.db")) for c in commands]
    # as a user in two terminals: w2 (no --partitions) joins once w1 has stored the group's definition
    workers = [subprocess.Popen(argv[0], cwd=elsewhere, env=env, stdout=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(argv[2], cwd=elsewhere, env=env, capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and workers[0].poll() is None, "w1 never created the group"
            time.sleep(0.2)
        workers.append(subprocess.Popen(argv[1], cwd=elsewhere, env=env, stdout=subprocess.DEVNULL))
        deadline = time.monotonic() + 120
        owners: dict[str, int] = {}
        while time.monotonic() < deadline:
            status = subprocess.run([*argv[2], "--json"], cwd=elsewhere, env=env, capture_output=True, text=True)
            if status.returncode == 0:
                parts = json.loads(status.stdout)["partitions"]
                owners = {}
                for info in parts.values():
                    if info["owner"]:
                        owners[info["owner"]] = owners.get(info["owner"], 0) + 1
                if owners == {"w1": 6, "w2": 6}:
                    break
            time.sleep(0.5)  # polling the page's own status command
        assert owners == {"w1": 6, "w2": 6}, f"expected w1 and w2 to own 6 partitions each, got {owners}"
        table = subprocess.run(argv[2], cwd=elsewhere, env=env, capture_output=True, text=True)
        assert table.returncode == 0 and "w1" in table.stdout, table.stderr
        assert not (elsewhere / "tmp").exists() and list(elsewhere.iterdir()) == []
    finally:
        for w in workers:
            w.send_signal(signal.SIGINT)
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()


def seed_map_row(seed: int) -> str:
    text = page_text("design.md")
    row = re.search(rf"^\| {seed} \| .*$", text, flags=re.M)
    assert row is not None, f"the seed map lost seed {seed}'s row"
    return row.group(0)


def test_the_seed_map_says_how_the_static_range_formula_differs_from_seed_3() -> None:
    """apportion balances the blocks; the seed gives the remainder to the last consumer. Say so, with the numbers
    the code gives, instead of calling the balanced formula the seed's."""
    from apportion.assign import range_block

    text = "\n".join(page.read_text() for page in pages())
    assert "seed 3's formula" not in text and "seed 3's ordinal formula" not in text
    balanced = ",".join(str(len(range_block(k, 4, 10))) for k in range(4))
    q, r = divmod(10, 4)
    seed = ",".join(str(q + (r if k == 3 else 0)) for k in range(4))  # the seed: the last one takes the remainder
    row = seed_map_row(3)
    assert f"10 over 4 → {balanced}" in row and f"({seed})" in row, row
    assert (balanced, seed) == ("3,3,2,2", "2,2,2,4")


def test_the_docs_document_static_scaling_and_the_probes() -> None:
    text = page_text("guides/static.md") + page_text("guides/kubernetes.md") + page_text("guides/cli.md")
    for needed in (
        "apportion scale --store URL --group G --replicas N",
        "group.scale(n)",
        "--ordinal-from-hostname",
        "waiting for ordinal 2",
        "`/healthz`",
        "`/readyz`",
    ):
        assert needed in text, f"the static mode's pages do not say {needed!r}"


def test_the_docs_document_the_mode_of_every_command_that_runs_members() -> None:
    """`worker`, `pipeline run` and `simulate` take `--mode` (issue 17, "every mode everywhere"): each one's row in
    the command table says so."""
    text = page_text("guides/cli.md")
    for command in ("apportion worker", "apportion pipeline produce / run / verify", "apportion simulate"):
        row = re.search(rf"^\| `{re.escape(command)}[^|]*\| .*$", text, flags=re.M)
        assert row is not None and "--mode rounds|coordinator|static" in row.group(0), command


def _pattern(node: ast.expr) -> str:
    """A regex for the text an expression of the demo's source prints: literal parts as they are (rich's markup
    tags removed), every value it formats as any text."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(re.sub(r"\[/?[a-z ]*\]", "", node.value))
    if isinstance(node, ast.JoinedStr):
        return "".join(_pattern(value) for value in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pattern(node.left) + _pattern(node.right)
    if isinstance(node, ast.IfExp):
        return f"(?:{_pattern(node.body)}|{_pattern(node.orelse)})"
    return ".+?"


def demo_lines() -> tuple[list[re.Pattern[str]], set[str]]:
    """What `make demo` can print: a pattern per line its source writes (``step(...)``, ``console.print(...)``), and
    the names of its checks (``Check("name", ...)``)."""
    patterns, checks = [], set()
    for path in sorted((ROOT / "src" / "apportion" / "demo").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("step", "print"):
                patterns.append(re.compile(_pattern(node.args[0]) + "$"))
            elif name == "Check" and isinstance(node.args[0], ast.Constant):
                checks.add(str(node.args[0].value))
    return patterns, checks


def test_the_quick_start_sample_is_in_the_shape_the_demo_prints() -> None:
    """Each line of the sample run in Getting started is one the demo's source prints (a timed step, the closing
    lines), and each row of its checks table names a check the demo makes: a changed wording fails here, not in a
    reader's eyes."""
    text = page_text("getting-started.md")
    sample = re.search(r"What you will see[^\n]*\n(?:[^\n]+\n)*?\n```text\n(.*?)```", text, flags=re.S)
    assert sample is not None, "Getting started lost its sample run"
    patterns, checks = demo_lines()
    rows: list[str] = []
    timed = 0
    for line in sample.group(1).splitlines():
        if line.startswith("│"):  # a row of the checks table, or the continuation of a wrapped one
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            if cells[1]:
                rows.append(cells[0])
            else:
                rows[-1] = f"{rows[-1]} {cells[0]}".strip()
            continue
        if line[:1] in "┏┃┡└" or line.strip() == "apportion demo: checks":
            continue
        step = re.match(r"\[\s*\d+\.\d+s\] (.*)$", line)
        timed += step is not None
        shown = step.group(1) if step else line
        assert any(p.match(shown) for p in patterns), f"the demo prints no line like this one: {line!r}"
    assert timed >= 15, "the sample should show the demo's run, step by step"
    assert rows and set(rows) <= checks, f"checks the demo does not make: {set(rows) - checks}"
    assert len(rows) == len(checks), f"the sample's table leaves out checks: {checks - set(rows)}"
