"""The documentation site builds strictly (a broken link, reference or anchor fails), every sample in it runs as the
README's do (tests/doc_samples.py says how a block says how it runs), and a figure quoted anywhere is the figure
written on the benchmark page it links to."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from apportion import ApportionError, connect
from apportion.group import owners
from apportion.waiting import wait_for
from tests.doc_samples import (
    DOCS,
    README,
    ROOT,
    RUN_BY,
    SHELL,
    Sample,
    all_samples,
    console_commands,
    page_text,
    pages,
    site_pages,
)

ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: every page, link and anchor resolves, the API reference renders from the
    docstrings and the CLI reference from click; any warning fails (as `make docs` would)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=dict(ENV, NO_MKDOCS_2_WARNING="1"), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0 and warnings == [], "\n".join(warnings) or output[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").read_text().count("apportion.Group") > 0


def test_every_page_of_the_site_is_in_its_navigation() -> None:
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: |\"[^\"]+\": )?([\w./-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {path.relative_to(DOCS).as_posix() for path in site_pages()}
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages == set(), "the nav names pages that do not exist"


def test_every_sample_says_how_it_runs() -> None:
    """A block has a language; a shell block, never run here, says why and what runs it instead; a block marked as
    a file of examples/ is that file; a "run by" names a test that exists."""
    problems = []
    for sample in all_samples():
        if not sample.lang:
            problems.append(f"{sample.id}: a bare fence (type it: console, python, shell, text, ...)")
        elif sample.lang in SHELL and sample.marker is None:
            problems.append(f"{sample.id}: a {sample.lang} block without a <!-- sample: ... --> comment above it")
        if sample.marker is None:
            continue
        if sample.marker.startswith("examples/"):
            if (ROOT / sample.marker).read_text() != sample.code:
                problems.append(f"{sample.id}: not the same as {sample.marker}")
        elif (run_by := RUN_BY.match(sample.marker)) is not None:
            if not (ROOT / run_by.group(1)).is_file():
                problems.append(f"{sample.id}: {run_by.group(1)} does not exist")
        elif not re.match(r"(runs until stopped|not run)\b", sample.marker):
            problems.append(f"{sample.id}: unknown sample comment {sample.marker!r}")
    assert problems == []


def _runnable() -> list[Sample]:
    return [sample for sample in all_samples() if sample.runs]


def _in(tmp_path: Path, code: str) -> str:
    """The sample with its /tmp/ paths in this test's own directory (``sqlite:////tmp/x.db`` stays absolute)."""
    return code.replace("/tmp/", f"{tmp_path}/")


def test_the_docs_have_python_samples_that_run() -> None:
    pages = {sample.page for sample in _runnable()}
    assert README in pages and DOCS / "guides" / "library.md" in pages and len(_runnable()) >= 8


@pytest.mark.parametrize("sample", _runnable(), ids=lambda sample: sample.id)
def test_python_sample_runs(sample: Sample, tmp_path: Path) -> None:
    script = tmp_path / "sample.py"
    script.write_text(_in(tmp_path, sample.code))
    if sample.marker is None:
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert proc.returncode == 0, f"{sample.id} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        return
    # runs until stopped: it joins its group and owns partitions; SIGTERM makes it leave, exit 0
    url = re.search(r'connect\("([^"]+)"\)', script.read_text())
    group = re.search(r'Group\(store, "([^"]+)"', sample.code)
    assert url is not None and group is not None, f"{sample.id}: which store and group does it run?"
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True)
    try:

        def owns() -> bool:
            assert proc.poll() is None, f"{sample.id} ended by itself ({proc.returncode})"
            if not Path(url.group(1).removeprefix("sqlite:///")).exists():
                return False
            try:  # the file may exist before its tables (NoSuchStore), the group before its definition
                with connect(url.group(1), read_only=True) as store:
                    return any(owner is not None for owner in owners(store, group.group(1)).values())
            except ApportionError:
                return False

        wait_for(f"{sample.id} to own partitions of {group.group(1)}", owns, 60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{sample.id} on SIGTERM: exit {proc.returncode}\n{err[-3000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _site_commands() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), command) for page in site_pages() for command in console_commands(page)]


def test_the_site_shows_commands() -> None:
    assert len(_site_commands()) >= 10


@pytest.mark.parametrize(("page", "command"), _site_commands(), ids=[f"{p}:{c[:60]}" for p, c in _site_commands()])
def test_site_command_runs(page: str, command: str, tmp_path: Path) -> None:
    """As tests/test_readme.py runs the README's: in an empty directory, exit 0, something printed."""
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{page}: {command!r} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{page}: {command!r} printed nothing"


# ------------------------------------------------------------------------------------------------ figures

LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _words(text: str) -> str:
    return " ".join(text.split())


def _benchmark_page(page: Path, target: str) -> Path | None:
    path = (page.parent / target.split("#")[0]).resolve()
    return path if path.parent == (DOCS / "benchmarks").resolve() and path.suffix == ".md" else None


def test_a_figure_quoted_anywhere_is_the_one_on_the_page_it_links_to() -> None:
    """A figure outside its benchmark page is written as a link to that page whose text is the figure
    (``[19,500](benchmarks/rabbitmq.md#current)``: a link text that starts with a digit); the page must say the same
    figure in its own words (not only in a link), so the two cannot disagree."""
    wrong = []
    for page in pages():
        for text, target in LINK.findall(page.read_text()):
            bench = _benchmark_page(page, target)
            if bench is None or bench == page.resolve() or not text[:1].isdigit():
                continue
            written = _words(LINK.sub("", bench.read_text()))
            if _words(text) not in written:
                wrong.append(f"{page.relative_to(ROOT)}: {text!r} is not on {bench.relative_to(ROOT)}")
    assert wrong == []


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_current_figures_are_each_pages_current_figures() -> None:
    """The summary table of the Benchmarks (what the README points to) is made of rows each benchmark page opens
    with, word for word: a figure changed on its page and not in the summary, or the reverse, fails here."""
    summary = _section(page_text("benchmarks/index.md"), "## The current figures")
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| what |")]
    assert len(rows) >= 15
    for row in rows:
        links = LINK.findall(row)
        assert len(links) == 1 and links[0][1].endswith(".md#current"), f"a summary row links its result: {row}"
        page = links[0][1].removesuffix("#current")
        current = _section(page_text(f"benchmarks/{page}"), "## Current")
        assert LINK.sub(r"\1", row) in current.splitlines(), f"benchmarks/{page} does not open with: {row}"


def test_every_benchmark_page_opens_with_its_current_figures_and_is_listed() -> None:
    listed = (ROOT / "bench" / "README.md").read_text() + page_text("benchmarks/index.md")
    for path in sorted((DOCS / "benchmarks").glob("*.md")):
        if path.name == "index.md":
            continue
        headings = re.findall(r"^## (.+)$", path.read_text(), re.M)
        assert headings[:1] == ["Current"], f"{path.name}: the first section is not Current"
        assert f"docs/benchmarks/{path.name})" in listed and f"]({path.name})" in listed, path.name
