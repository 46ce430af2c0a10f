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
        link
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        if not link.startswith(("http://", "https://")) and not (page.parent / link).exists()
    ]
    assert not broken, f"{page.name}: broken links {broken}"


# What the product ships, written down here independently of conf/ (a conf file that disappears, or
# one that appears, changes the product: it must change this list and the docs too).
SHIPPED = {
    "launcher": ["k8s", "k8s_jax", "multinode", "single_node", "skrl_jax", "slurm", "slurm_jax"],
    "rl_library": ["rl_games", "rsl_rl", "sb3", "skrl"],
    "presets": ["debug", "newton_mjwarp"],
    "profile": ["examples", "isaaclab"],
    "container": ["isaaclab"],
}


def _documented(text: str, group: str, option: str) -> bool:
    """Named as ``group=option`` (``presets=[debug,...]`` too), or in backticks as `option`."""
    pattern = rf"{group}=\[?(?:[\w-]+,)*{re.escape(option)}\b|`{re.escape(option)}`"
    return re.search(pattern, text) is not None


@pytest.mark.parametrize("group, option", [(g, o) for g, options in SHIPPED.items() for o in options])
def test_every_shipped_option_is_documented(group, option):
    assert (ROOT / "conf" / group / f"{option}.yaml").is_file(), f"{group}={option} is no longer shipped"
    text = "\n".join(page.read_text() for page in PAGES)
    assert _documented(text, group, option), f"{group}={option} is not named in README.md or docs/"


def test_no_option_is_shipped_unlisted():
    for group, options in SHIPPED.items():
        shipped = sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))
        assert [o for o in shipped if o not in options] == [], f"conf/{group}: add it to SHIPPED and the docs"


def test_documented_needs_the_group_or_backticks():
    assert _documented("train_multigpu presets=[debug,newton_mjwarp]", "presets", "newton_mjwarp")
    assert _documented("`rsl_rl`, `skrl`", "rl_library", "skrl")
    assert not _documented("a debug run of the examples", "presets", "debug")
