"""Docs a user can find (issue 23, item 8).

The README is a front page; every ``wrp`` command (read live from the ``wrp``
group, so a command added later fails here until it has a page) and
``wrp-replay`` has a page under docs/ that names every option the command
has; every relative link of the README and of docs/ resolves.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click
import pytest

from wrpkit.cli import main
from proc_helpers import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: The README's first two commands: they stay exactly as they are (users copy them).
FIRST_COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/python samples/saxpy.py out && "
    ".venv/bin/wrp inspect out/saxpy.wrp && .venv/bin/wrp replay out/saxpy.wrp --inputs out/saxpy_inputs.npz "
    "--check out/saxpy_expected.npz",
    "python3 -m venv .venv && .venv/bin/pip install -q '.[test]' && .venv/bin/pytest -q",
)


def command_pages() -> dict:
    """``{command name: page}``: docs/NAME.md, else a page whose title is ``# wrp NAME ...``."""
    out = {}
    for page in sorted(DOCS.glob("*.md")):
        first = page.read_text().splitlines()[0] if page.stat().st_size else ""
        m = re.match(r"# `?(wrp-replay|wrp [a-z][a-z-]*)", first)
        if m:
            out.setdefault(m.group(1).replace("wrp ", "", 1), page)
    for page in sorted(DOCS.glob("*.md")):
        out[page.stem] = page
    return out


def option_names(cmd: click.Command) -> list:
    """One entry per option: all its spellings (``("-o", "--output")``); a page may use any of them."""
    return [tuple(p.opts + p.secondary_opts) for p in cmd.params if isinstance(p, click.Option)]


def _named(text: str, opt: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) is not None


def test_readme_is_a_front_page_that_keeps_its_first_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 160, "the README is a front page: move detail into docs/"
    blocks = re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)
    assert tuple(blocks[:2]) == FIRST_COMMANDS


@pytest.mark.parametrize("name", main.list_commands(click.Context(main)))
def test_every_command_has_a_page_naming_every_option(name):
    pages = command_pages()
    assert name in pages, f"`wrp {name}` has no page: add docs/{name}.md (synopsis, options, examples, exit codes, JSON)"
    text = pages[name].read_text()
    cmd = main.get_command(click.Context(main), name)
    missing = [o[-1] for o in option_names(cmd) if not any(_named(text, x) for x in o)]
    assert not missing, f"{pages[name].name} does not describe {missing}"
    # Exit codes and the JSON shape are on every page (headings vary between pages' authors).
    for word in ("exit code", "json"):
        assert word in text.lower(), (pages[name].name, word)
    rel = pages[name].relative_to(ROOT).as_posix()
    assert f"]({rel})" in README.read_text(), f"the README's command table does not link {rel}"


def test_wrp_replay_has_a_page_naming_every_option():
    from wrpkit.run.replay.engines import native_paths  # noqa: PLC0415

    try:
        exe = native_paths().require_replayer()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"wrp-replay is not installed: {e}")
    help_text = subprocess.run([str(exe), "--help"], capture_output=True, text=True).stdout
    opts = sorted(set(re.findall(r"^  (--[a-z][a-z-]*)", help_text, flags=re.M)))
    assert opts, help_text
    text = command_pages()["wrp-replay"].read_text()
    missing = [o for o in opts if not _named(text, o)]
    assert not missing, missing


def _anchors(page: Path) -> set:
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_relative_link_resolves():
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
