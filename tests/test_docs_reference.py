"""The documentation's shape, checked (issue 52): the CLI reference is generated from the app and
current, every relative link resolves (files and headings), the README's first screen stays a
first screen, and the tutorial / how-to / reference / explanation pages carry no dated diary.
Their examples run in tests/test_docs_examples.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Markdown whose relative links must resolve.
LINKED = [ROOT / "README.md", ROOT / "DEVELOP.md", *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "lab" / "notes").glob("*.md"))]
#: The pages of the four kinds that hold no dated record (docs/changelog.md and lab/notes/ do).
UNDATED = [DOCS / "index.md", DOCS / "tutorial.md", DOCS / "architecture.md", *sorted((DOCS / "howto").glob("*.md")),
           *sorted((DOCS / "reference").glob("*.md")), *sorted((DOCS / "explanation").glob("*.md"))]


def test_the_cli_reference_is_generated_from_the_app_and_current():
    """docs/reference/cli.md is what docs/_gen_cli.py renders from the Typer app now: a changed
    command or option fails here until `python docs/_gen_cli.py` is run. A fresh interpreter: the
    help texts are made at import, from the manifest installed then."""
    env = {k: v for k, v in os.environ.items() if k != "GSPRESTORE_WEIGHTS"}
    proc = subprocess.run([sys.executable, str(DOCS / "_gen_cli.py"), "--check"], capture_output=True, text=True,
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    from gsprestore.cli.app import _register
    from gsprestore.cli.command_table import COMMANDS

    _register()
    for name, fn, _ in COMMANDS:
        assert f"## `gsprestore {name or fn.__name__}`" in text
    assert "| `--method`, `-m` | `METHOD` |" in text and "| `--tile` | `N` | `0` |" in text


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, blanks
    to ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M):
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("doc", LINKED, ids=[p.relative_to(ROOT).as_posix() for p in LINKED])
def test_relative_links_resolve(doc):
    broken = []
    for target in _links(doc):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: {broken}"


def test_the_readme_first_screen():
    """What it is, how to install it and the main job first: no paragraph (or block) before Usage
    over 500 characters, a quick start without developer commands, the default rule's table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = text[:text.index("\n## Usage")]
    blocks = [b for b in re.split(r"\n\s*\n", first) if b.strip()]
    longest = max(blocks, key=len)
    assert len(longest) <= 500, f"{len(longest)} characters: {longest[:80]!r}..."
    quick = first[first.index("## Quick start"):]
    quick = quick[:quick.index("\n## ")] if "\n## " in quick else quick
    commands = [re.sub(r"\s+#.*$", "", line).strip() for body in re.findall(r"```[a-z]*\n(.*?)```", quick, re.S)
                for line in body.splitlines()]
    commands = [c for c in commands if c]
    assert commands and all(c.startswith("gsprestore ") for c in commands), \
        f"the quick start shows only what a user runs (make, pytest, lint: DEVELOP.md): {commands}"
    assert "## Install" in first and first.index("## Install") < first.index("## Quick start")
    assert "| you ask for | demosaicking | 2x |" in first


@pytest.mark.parametrize("doc", UNDATED, ids=[p.relative_to(ROOT).as_posix() for p in UNDATED])
def test_no_dated_diary_in_the_four_kinds(doc):
    """A date belongs to a record: docs/changelog.md, lab/notes/. The tutorial, the how-tos, the
    references and the explanations say what is, not when it was measured."""
    dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", doc.read_text(encoding="utf-8"))
    assert not dates, f"{doc.relative_to(ROOT)} holds dates {dates}: move the dated record to docs/changelog.md"
