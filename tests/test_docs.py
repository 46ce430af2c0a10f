"""The docs hold together: every relative link in README.md and docs/ points at a file that exists,
and every shipped config group option is named in the docs."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = [
        link for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        if not link.startswith(("http://", "https://")) and not (page.parent / link).exists()
    ]
    assert not broken, f"{page.name}: broken links {broken}"


def test_every_shipped_option_is_documented():
    text = "\n".join(page.read_text() for page in PAGES)
    for group in ("launcher", "rl_library", "presets", "profile"):
        for option in sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")):
            assert option in text, f"{group}={option} is not mentioned in README.md or docs/"
