"""The documentation's pages and their samples, as the docs tests read them.

A page is the README or a Markdown file of the site (``docs/``). A sample is a fenced block. How a block runs is said
by its language and, where it does not run in the docs tests, by an HTML comment on the line right above it:

- ``console``: every ``$ `` line runs (``bash -c``) and must exit 0 and print something;
- ``python``: runs as written (``/tmp/`` paths moved into the test's own directory) and must exit 0;
  ``<!-- sample: runs until stopped ... -->`` above it: it must join its group and own partitions, then exit 0 on
  SIGTERM;
- ``<!-- sample: not run: WHY; WHAT RUNS IT INSTEAD -->``: shown, not run here (it needs a broker, a JVM, a terminal
  per worker, ...); ``<!-- sample: run by tests/PATH.py ... -->``: another test runs exactly this; ``<!--
  examples/NAME.py -->``: the block is that file, which its own test runs;
- ``shell`` (or ``sh``, ``bash``): commands shown, never run here, so one of the comments above is required;
- anything else (``text``, ``toml``, ``json``, ...): output or data, not run. A bare fence is not allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

MARKER = re.compile(r"^<!-- (sample: (?P<how>.+?)|(?P<example>examples/[\w./-]+\.py)) -->$")
RUN_BY = re.compile(r"^run by (tests/[\w/]+\.py)")
SHELL = {"shell", "sh", "bash"}


def site_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def pages() -> list[Path]:
    """Every page whose samples the docs tests read: the README (its console commands are tests/test_readme.py's)
    and the site's pages."""
    return [README, *site_pages()]


def page_text(relative: str) -> str:
    """A page of the site by its path under docs/ (``guides/library.md``)."""
    return (DOCS / relative).read_text()


@dataclass(frozen=True, slots=True)
class Sample:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    marker: str | None  # the comment's text after "sample: ", or "examples/NAME.py"
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        """A Python sample the docs tests run (to its end, or until stopped)."""
        return self.lang == "python" and (self.marker is None or self.marker.startswith("runs until stopped"))


def samples(page: Path) -> list[Sample]:
    lines = page.read_text().split("\n")
    found: list[Sample] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            lang = lines[i][3:].strip()
            end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
            above = MARKER.match(lines[i - 1]) if i else None
            marker = None if above is None else above.group("how") or above.group("example")
            found.append(Sample(page, i + 1, lang, marker, "\n".join(lines[i + 1 : end]) + "\n"))
            i = end
        i += 1
    return found


def all_samples() -> list[Sample]:
    return [sample for page in pages() for sample in samples(page)]


def console_commands(page: Path) -> list[str]:
    return [
        line[2:]
        for sample in samples(page)
        if sample.lang == "console"
        for line in sample.code.splitlines()
        if line.startswith("$ ")
    ]


def marked_block(page: Path, example: str) -> str:
    """The block a page marks as ``examples/NAME.py`` (the file, as written there)."""
    for sample in samples(page):
        if sample.marker == example:
            return sample.code
    raise AssertionError(f"{page.relative_to(ROOT)} lost its {example} block")
