"""The docs run as written (issue 25, "docs that do not run"): every ``train_multigpu`` command of a
fenced block in README.md and docs/*.md runs, and every error message the docs quote is produced.

Each page runs in a folder of its own, top to bottom, as a reader would type it there:

- a ``train_multigpu ...`` line (continued with ``\\``, ``NAME=value`` prefixes as its environment,
  ``~`` as the page's home) runs in this process (tests/inproc.py: dozens a second), with
  ``dry_run=true`` added where it would start a launch (``--dry_run`` for ``runs rerun|resume``):
  the docs' clusters, hosts and GPUs do not exist here, and a dry run refuses what the config
  itself gets wrong while it only warns about what this host lacks (docs/errors.md);
- a ``yaml`` block whose first line names its file (``# ~/tmg/profile/mycluster.yaml``) is written
  there, as the page asks the reader to;
- ``mkdir`` and ``cp`` lines run (``examples/`` is the checkout's); every other command (``bash``,
  ``pip``, ``srun``, ``ssh``, ``cd``, ``python ...``) is skipped by rule;
- ``runs`` commands find a finished run, a failed one and a sweep of two jobs, with the ids the
  docs use (:func:`_runs_fixture`).

Expected outcomes: exit 0, unless an HTML comment right before the block says otherwise, one line of
space-separated words (markdown shows nothing of it)::

    <!-- doc-test: exit=2 expect="launcher.node_rank=2: an integer in 0..1" -->
    <!-- doc-test: isaaclab gpus=4 -->          an Isaac Lab checkout (ISAACLAB_PATH), 4 GPUs visible
    <!-- doc-test: skip="why it cannot run here" -->

``expect`` is looked for in stdout + stderr (``...`` matches anything). Skips are counted and
listed (test_skips_are_few). The quoted errors: every ``train_multigpu: error: ...`` line of a fenced
block and every message of docs/errors.md's tables is produced by a command of ``ERRORS`` (or named
in ``NOT_HERE`` with the reason it cannot be produced here) and matched, ``...`` and ``<...>`` as
wildcards.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT
from inproc import environment, run_main

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
ANNOTATION = re.compile(r"^\s*<!--\s*doc-test:(.*?)-->\s*$")
INFO_FLAGS = ("--cfg", "--help", "-h", "--info", "-i", "-sc", "--shell-completion", "--version", "--hydra-help")
ISAAC_TASK = re.compile(r"(^|\s)-{0,2}task=Isaac-")
SETUP = ("mkdir", "cp")  # the shell commands a page's reader runs that the commands after them need
# the docs' placeholders, as a reader fills them in; an ``ID`` is each of _runs_fixture's runs in turn
PLACEHOLDERS = {"launcher.node_rank=R": "launcher.node_rank=0", "seed=S": "seed=1"}
IDS = ("2026-12-01_10", "2026-12-01_11")
DROPPED = ("[overrides...]", "...", "&")  # "more of the same" and a shell's "in the background"


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: list[str]
    notes: dict = field(default_factory=dict)


@dataclass
class Command:
    page: Path
    line: int
    argv: list[str]
    env: dict
    notes: dict

    def __str__(self) -> str:
        return f"{self.page.name}:{self.line}: {shlex.join(self.argv)}"


def _notes(text: str) -> dict:
    notes = {}
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        notes[key] = value if value else True
    return notes


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page (indented ones in lists too), each with the doc-test annotation
    on the lines right before it."""
    lines = page.read_text().splitlines()
    found, at = [], 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if not opening:
            at += 1
            continue
        indent, lang = opening.groups()
        end = at + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        notes, back = {}, at - 1
        while back >= 0 and not lines[back].strip():
            back -= 1
        if back >= 0 and (note := ANNOTATION.match(lines[back])):
            notes = _notes(note.group(1))
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[at + 1 : end]]
        found.append(Block(page, at + 1, lang, body, notes))
        at = end + 1
    return found


def _logical_lines(block: Block):
    """(line number, text) with ``\\`` continuations joined."""
    pending, first = "", None
    for offset, line in enumerate(block.text, start=block.line + 1):
        if first is None:
            first = offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield first, pending + line
        pending, first = "", None


def _is_command(words: list[str]) -> int | None:
    """Where ``train_multigpu`` stands in a line (after ``NAME=value`` prefixes), or None."""
    at = 0
    while at < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[at]):
        at += 1
    return at if at < len(words) and words[at] == "train_multigpu" else None


def _applies(key: str, index: int) -> bool:
    """``exit`` applies to every command of the block, ``exit@2,3`` to its second and third."""
    _, _, which = key.partition("@")
    return not which or str(index) in which.split(",")


def _file_of(block: Block) -> str | None:
    """The file a block is, where the page names it: ``file=PATH`` before it, or a ``# PATH.yaml``
    comment among a YAML block's first comment lines (after ``# @package``, which must come first)."""
    if block.notes.get("file"):
        return block.notes["file"]
    if block.lang not in ("yaml", "yml"):
        return None
    for line in block.text:
        if not line.startswith("#"):
            break
        if re.fullmatch(r"#\s*\S+\.ya?ml", line.strip()):
            return line.lstrip("#").strip()
    return None


def commands(page: Path):
    """What a reader of ``page`` types, in order: ("file", Block), ("shell", line, text),
    ("run", Command) and ("skip", line, text, reason)."""
    for block in blocks(page):
        if _file_of(block):
            yield ("file", block)
            continue
        if block.lang in ("yaml", "yml"):
            continue
        index = 0  # of the block's train_multigpu commands, from 1 (``exit@2=1``: the second's)
        for line, text in _logical_lines(block):
            stripped = text.strip()
            if not stripped or stripped.startswith("#"):
                continue
            try:
                words = shlex.split(stripped, comments=True)
            except ValueError:
                continue  # output, not a command
            if not words:
                continue
            if words[0] in SETUP:
                yield ("shell", line, stripped)
                continue
            start = _is_command(words)
            if start is None:
                continue  # another program (bash, pip, srun, ssh, cd, python) or a program's output
            env = dict(word.split("=", 1) for word in words[:start])
            ids = iter(IDS)
            argv = [
                next(ids) if word == "ID" else PLACEHOLDERS.get(word, word)
                for word in words[start + 1 :]
                if word not in DROPPED
            ]
            index += 1
            notes = {key.split("@")[0]: value for key, value in block.notes.items() if _applies(key, index)}
            if notes.get("skip"):
                yield ("skip", f"{page.name}:{line}", stripped, notes["skip"])
                continue
            yield ("run", Command(page, line, argv, env, notes))


def _home_path(word: str, home: Path) -> str:
    return str(home) + word[1:] if word == "~" or word.startswith("~/") else word


def dry(argv: list[str]) -> list[str]:
    """``argv`` as a dry run where it would start something."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:cut], argv[cut:]
    if head[:1] == ["runs"]:
        if head[1:2] in (["rerun"], ["resume"]) and "--dry_run" not in head:
            return head + ["--dry_run"] + tail
        return argv
    if any(word.split("=", 1)[0] in INFO_FLAGS for word in head) or "--dry_run" in head:
        return argv
    if any(re.fullmatch(r"dry_run=(true|True|1|yes)", word) for word in head):
        return argv
    return head + ["dry_run=true"] + tail


def _isaaclab(folder: Path) -> Path:
    root = folder / "IsaacLab"
    script = root / "scripts" / "reinforcement_learning" / "train.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("print('isaac lab train.py')\n")
    return root


RUN_CONFIG = "launcher:\n  topology: single_node\n  nnodes: '1'\n  nproc_per_node: '2'\ntask: CartPole-v1\n"


def _run_record(run_dir: Path, exit_code: int, overrides: list[str]) -> None:
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    status = {
        "started": "2026-12-01T10:00:00+00:00",
        "ended": "2026-12-01T10:00:12+00:00",
        "duration_s": 12.0,
        "exit_code": exit_code,
        "reason": "success" if exit_code == 0 else "failure",
        "failure": None,
    }
    files = {
        "status.json": json.dumps(status),
        "config.yaml": RUN_CONFIG,
        "composition.json": json.dumps(
            {"overrides": overrides, "script_args": [], "order": [], "hydra_flags": [], "cwd": str(run_dir.parent)}
        ),
        "command.sh": "#!/usr/bin/env bash\npython -m torch.distributed.run --nproc_per_node 2 train.py\n",
        "metrics.csv": "iteration,env_steps,mean_return\n1,512,10.0\n2,1024,20.0\n3,1536,30.5\n",
        "logs/rank0.log": "rank 0 line 1\n",
        "logs/rank1.log": "rank 1 line 1\n",
        "checkpoints/iter_000003.ckpt": "",
    }
    for rel, text in files.items():
        (run_dir / rel).write_text(text)


def _runs_fixture(folder: Path) -> None:
    """The runs the docs' ``runs`` commands name: two single launches and a sweep of two jobs."""
    runs = folder / "runs"
    _run_record(runs / "2026-12-01_10-00-00", 0, ["seed=1", "max_iterations=3"])
    _run_record(runs / "2026-12-01_11-00-00", 1, ["seed=2", "max_iterations=3"])
    for job in ("0", "1"):
        _run_record(runs / "multirun" / "2026-12-01_12-00-00" / job, 0, [f"seed={job}", "max_iterations=3"])


def _matches(expected: str, text: str) -> bool:
    """``expected`` in ``text``, ``...`` and ``<...>`` matching anything."""
    parts = re.split(r"\.\.\.|<[^<>]+>", expected)
    pattern = ".*?".join(re.escape(part) for part in parts)
    return re.search(pattern, text, re.S) is not None


def run_page(page: Path, folder: Path) -> tuple[list[str], int]:
    """Every command of ``page`` run in ``folder``: (the failures, how many ran)."""
    home = folder / "home"
    home.mkdir()
    (folder / "examples").symlink_to(ROOT / "examples")
    _runs_fixture(folder)
    isaaclab = _isaaclab(folder)
    failures, ran = [], 0
    items = list(commands(page))
    for kind, *item in items:  # the files a page shows first: a command may come before its hostfile
        if kind == "file":
            path = Path(_home_path(_file_of(item[0]), home))
            path = path if path.is_absolute() else folder / path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(item[0].text) + "\n")
    for item in items:
        kind = item[0]
        if kind == "shell":
            done = subprocess.run(["bash", "-c", item[2]], cwd=folder, capture_output=True, text=True, timeout=30)
            if done.returncode:
                failures.append(f"{page.name}:{item[1]}: {item[2]}: exit {done.returncode}: {done.stderr.strip()}")
        elif kind == "run":
            command: Command = item[1]
            notes = command.notes
            extra = {"HOME": str(home), **command.env}
            if notes.get("isaaclab"):
                extra["ISAACLAB_PATH"] = str(isaaclab)
            if notes.get("gpus"):
                extra["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(int(notes["gpus"])))
            argv = dry([_home_path(word, home) for word in command.argv])
            result = run_main(argv, cwd=str(folder), env=environment(str(home), **extra))
            ran += 1
            want = int(notes.get("exit", 0))
            output = result.stdout + result.stderr
            if result.returncode != want:
                last = (result.stderr.strip().splitlines() or result.stdout.strip().splitlines() or [""])[-1]
                failures.append(f"{command}: exit {result.returncode}, the doc says {want}: {last[:400]}")
            elif notes.get("expect") and not _matches(notes["expect"], output):
                failures.append(f"{command}: no {notes['expect']!r} in its output: {output[-400:]}")
            elif ISAAC_TASK.search(" ".join(argv)) and "# profile: examples " in result.stdout:
                failures.append(f"{command}: an Isaac Lab task under profile=examples (the bundled trainer's)")
    return failures, ran


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_of_the_page_runs_as_documented(page, tmp_path):
    failures, ran = run_page(page, tmp_path)
    assert not failures, f"{len(failures)} of {ran} command(s) do not run as documented:\n" + "\n".join(failures)


def test_skips_are_few():
    skipped = [item for page in PAGES for item in commands(page) if item[0] == "skip"]
    listing = "\n".join(f"{where}: {text} ({reason})" for _, where, text, reason in skipped)
    print(f"\n{len(skipped)} documented command(s) not run here:\n{listing}")
    assert len(skipped) <= 5, listing


def test_the_extractor_sees_what_a_reader_types():
    """Continuations, environment prefixes, comments, placeholders and setup lines."""
    page = Path("page.md")
    lines = [
        '<!-- doc-test: exit=2 expect="a b" -->',
        "```bash",
        "XLA_FLAGS=--x train_multigpu launcher=multinode \\",
        "  launcher.node_rank=R   # node R",
        "mkdir -p a && cp b a/",
        "pip install x",
        "[train_multigpu] output",
        "```",
    ]
    found = list(_commands_of(page, lines))
    run = [item[1] for item in found if item[0] == "run"]
    assert [(c.line, c.argv, c.env, c.notes) for c in run] == [
        (3, ["launcher=multinode", "launcher.node_rank=0"], {"XLA_FLAGS": "--x"}, {"exit": "2", "expect": "a b"})
    ]
    assert [item[0] for item in found] == ["run", "shell"]
    assert dry(["a=1", "--", "--headless"]) == ["a=1", "dry_run=true", "--", "--headless"]
    assert dry(["--cfg", "job"]) == ["--cfg", "job"]
    assert dry(["runs", "rerun", "last", "--", "x"]) == ["runs", "rerun", "last", "--dry_run", "--", "x"]
    assert _matches("a=1: ... not <x> here", "error: a=1: it is not 'y' here")
    assert not _matches("a=1: not here", "a=1: here")


def _commands_of(page: Path, lines: list[str]):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / page.name
        path.write_text("\n".join(lines) + "\n")
        yield from (
            (item[0], Command(page, item[1].line, item[1].argv, item[1].env, item[1].notes))
            if item[0] == "run"
            else item
            for item in commands(path)
        )
