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
import socket
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
PROFILE = re.compile(r"(^|\s)profile=")  # a cluster profile of the page's own names its script
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
        "checkpoints/iter_000003.ckpt": "a checkpoint",  # regular and not empty: what a resume takes
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
            elif ISAAC_TASK.search(" ".join(argv)) and not notes.get("isaaclab") and not PROFILE.search(" ".join(argv)):
                # under profile=examples the bundled trainer would get Isaac Lab's task (every back end)
                failures.append(f"{command}: an Isaac Lab task without Isaac Lab (<!-- doc-test: isaaclab -->)")
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


# -- the error messages the docs quote ----------------------------------------------------------------

ERRORS_PAGE = ROOT / "docs" / "errors.md"
PREFIX = "train_multigpu: error: "


def quoted_errors() -> list[str]:
    """Every message of docs/errors.md's tables (first column; ``a / b`` is two) and every
    ``train_multigpu: error: ...`` line of a fenced block anywhere in the docs."""
    found = []
    for row in ERRORS_PAGE.read_text().splitlines():
        if row.startswith("| `"):
            cell = row.split(" | ")[0][2:]
            found += re.findall(r"`([^`]+)`", cell.split(" (also ")[0])
    for page in PAGES:
        for block in blocks(page):
            found += [line[len(PREFIX) :] for line in block.text if line.startswith(PREFIX)]
    return list(dict.fromkeys(found))


def _derived(message: str) -> list[str] | None:
    """The command a message names itself: its ``key=value`` (or ``--flag=value``) before ``: ``."""
    head = message.split(": ", 1)[0]
    if "..." in head or "<" in head or "***" in head or "=" not in head:
        return None
    if head.startswith(("save_profile=", "--out=", "run_dir=", "run_root=/")):  # writes there: never outside tmp
        return None
    return [head]


K8S = ["submit=k8s", "k8s.image=img:1"]
SSH = ["submit=ssh", "ssh.hosts=[gpu-a,gpu-b]"]
MULTI = ["launcher=multinode", "launcher.nnodes=2"]
RAY = ["submit=ray", "ray.address=http://127.0.0.1:9", "launcher.nproc_per_node=1"]
BAD = ["--config-dir", "conf", "profile=bad"]
# the command that produces a quoted message, by the message's start, where its own key=value is not
# enough (dry_run=true is added; ``ISAACLAB``/``GPUS`` entries in the environment: as in run_page)
CONTEXT: dict[str, list[str]] = {
    "profile.script_root=: Environment variable": ["profile=isaaclab"],
    "--resolve=: only with": ["--resolve"],
    "--shell-completion=: needs one of": ["--shell-completion"],
    "run_root=runs: cannot hold": ["CWD:plain", "FILE:plain/runs=a file", "run_root=runs"],
    "worker_env.HF_TOKEN=***: one value (a ','": ["+worker_env.HF_TOKEN=s3cret1,s3cret2"],
    "worker_env.HF_TOKEN=***: not a value Hydra's": ["+worker_env.HF_TOKEN=a]b"],
    "worker_env.HF_TOKEN=***: a string": ["+worker_env.HF_TOKEN=[a]"],
    "worker_env.HF_TOKEN=***: one value, or values to sweep": ["-m", "+worker_env.HF_TOKEN=glob(*)"],
    "worker_env=***: secrets are given": ["worker_env={HF_TOKEN:x}"],
    "TRAIN_MULTIGPU_SSH_CHANNEL=1": ["ENV:TRAIN_MULTIGPU_SSH_CHANNEL=1"],
    "restart.classes=[]: names no failure class": ["restart.max=3", "restart.classes=[]"],
    "notify.url=***: an http:// or https:// URL": ["notify.url=ftp://hooks.example/T000"],
    "launcher.cpu_binding=[0]: 1 CPU list": ["launcher.cpu_binding=[0]", "launcher.nproc_per_node=2"],
    "launcher.cpu_binding=[0,x]: local rank 1": ["launcher.cpu_binding=[0,x]", "launcher.nproc_per_node=2"],
    "launcher.cpu_binding=[0,4095]: local rank 1": ["launcher.cpu_binding=[0,4095]", "launcher.nproc_per_node=2"],
    "launcher.cpu_binding=node: GPU 0 is not among": ["launcher.cpu_binding=node", "device=cuda", "GPUS=2"],
    "ssh.options=RequestTTY=force: the launch runs without": [*SSH, "ssh.options=RequestTTY=force"],
    "ssh.options=PermitLocalCommand=yes: the launch": [*SSH, "ssh.options=PermitLocalCommand=yes"],
    "ssh.options=RemoteCommand=bash: the launch": [*SSH, "ssh.options=RemoteCommand=bash"],
    "ssh.options=StdinNull=yes: the launch": [*SSH, "ssh.options=StdinNull=yes"],
    "ssh.options=ForkAfterAuthentication=yes: the launch": [*SSH, "ssh.options=ForkAfterAuthentication=yes"],
    "launcher.node_port=29401 (the rendezvous port + 1): port 29401": [
        *MULTI,
        "launcher.node_rank=0",
        "launcher.rdzv_endpoint=127.0.0.1:29400",
        "launcher.local_nodes=true",
        "PORT:29401",
    ],
    "launcher.master_port=29500: port 29500 is already in use": ["launcher.master_port=29500", "PORT:29500"],
    "...: expected [IPv6]:port, the ']' is missing": [*MULTI, "launcher.rdzv_endpoint='[::1:29400'"],
    "'node0' in brackets": [*MULTI, "launcher.rdzv_endpoint='[node0]:29400'"],
    "launcher.nnodes=1:2: MIN:MAX with restart.max": [
        "launcher=multinode",
        "launcher.nnodes=1:2",
        "restart.max=1",
        "launcher.master_addr=10.0.0.1",
    ],
    "launcher.node_timeout=None: seconds with": [
        *MULTI,
        "launcher.rdzv_endpoint=10.0.0.1:29400",
        "restart.max=1",
        "launcher.node_timeout=null",
    ],
    "restart.max=1: across nodes needs node 0's": [
        *MULTI,
        "launcher.rdzv_backend=etcd",
        "launcher.rdzv_endpoint=10.0.0.1:2379",
        "restart.max=1",
    ],
    "launcher.rdzv_conf=read_timeout=-5": ["launcher.rdzv_conf='read_timeout=-5'"],
    "TRAIN_MULTIGPU_CONFIG_PATH=/tmp:/y": ["ENV:TRAIN_MULTIGPU_CONFIG_PATH=/tmp:/y"],
    "save_profile=NAME: /.../NAME.yaml already": ["FILE:.train_multigpu/profile/NAME.yaml=a: 1", "save_profile=NAME"],
    "profile=bad: /.../profile/bad.yaml is not valid YAML": ["FILE:conf/profile/bad.yaml=a: 1\\nb: [\\n", *BAD],
    "profile=bad: /.../profile/bad.yaml is not UTF-8": ["FILE:conf/profile/bad.yaml=a: \\xff\\n", *BAD],
    "profile=bad: its defaults list includes itself": [
        "FILE:conf/profile/bad.yaml=defaults:\\n  - /profile/other\\n",
        "FILE:conf/profile/other.yaml=defaults:\\n  - /profile/bad\\n",
        *BAD,
    ],
    "ray.address=None: needs the Ray": ["submit=ray", "launcher.nproc_per_node=1"],
    "ray.runtime_env.env_vars=...: a map": [*RAY, "+ray.runtime_env.env_vars=[a]"],
    "ray.runtime_env.env_vars.TRAIN_MULTIGPU_RAY_CONFIG": [
        *RAY,
        "+ray.runtime_env.env_vars.TRAIN_MULTIGPU_RAY_CONFIG=x",
    ],
    "id=last: there are no runs under runs": ["CWD:plain", "runs", "show", "last"],
    "k8s.image=...: an image reference": ["submit=k8s", "k8s.image='a b'"],
    "worker_env.HF_TOKEN=***: a secret value cannot travel in a Kubernetes": [*K8S, "+worker_env.HF_TOKEN=x"],
    "k8s=TrainJob: the container command has 140": [*K8S, *(f"+worker_env.V{i}=1" for i in range(137))],
    "launcher.topology=single_node: launcher.from_k8s": ["launcher=k8s", "launcher.topology=single_node", "PET=2,0,4"],
    "ssh.hostfile=line 2": [
        "FILE:hosts.txt=gpu-a slots=4\\ngpu-b slots=four\\n",
        "submit=ssh",
        "ssh.hostfile=hosts.txt",
    ],
    "ssh.hostfile=hosts.txt: a hostfile naming": ["FILE:hosts.txt=# none\\n", "submit=ssh", "ssh.hostfile=hosts.txt"],
    "ssh.hostfile=gpu-a slots=4, gpu-b slots=2": [
        "FILE:hosts.txt=gpu-a slots=4\\ngpu-b slots=2\\n",
        "submit=ssh",
        "ssh.hostfile=hosts.txt",
    ],
    "ssh.hostfile=gpu-a slots=4: must agree": [
        "FILE:hosts.txt=gpu-a slots=4\\n",
        "submit=ssh",
        "ssh.hostfile=hosts.txt",
        "launcher.nproc_per_node=2",
    ],
    "k8s.job_name=...: too long for 12": [
        *K8S,
        "k8s.kind=PyTorchJob",
        "launcher.nnodes=12",
        "k8s.job_name=" + "a" * 60,
    ],
    "run_root=/proc/x": ["run_root=/proc/x"],  # refused: nothing is written (nor could be)
    "save_profile=a/b": ["save_profile=a/b"],
    "save_profile=/proc/x.yaml": ["save_profile=/proc/x.yaml"],
    "argument=stray": ["stray"],
    "foo=1: not a train_multigpu key": ["+foo=1"],
    "ssh.options=BatchMode=no": [*SSH, 'ssh.options=["BatchMode=no"]'],
    "ssh.options=ConnectTimeout=3": [*SSH, 'ssh.options=["ConnectTimeout=3"]'],
    "slurm.extra.export=NONE": ["submit=slurm", "+worker_env.HF_TOKEN=x", "+slurm.extra.export=NONE"],
    "worker_env.BAD-NAME=1": ["+worker_env.BAD-NAME=1"],
    "worker_env.TRAIN_MULTIGPU_LAUNCH_ID=x": ["+worker_env.TRAIN_MULTIGPU_LAUNCH_ID=x"],
    "profile.env.CUDA_VISIBLE_DEVICES=1": ["+profile.env.CUDA_VISIBLE_DEVICES=1"],
    "launcher.nnodes=3: the pod's PET_NNODES": ["launcher=k8s", "launcher.nnodes=3", "PET=2,0,4"],
    "launcher.node_rank=0: the pod's PET_NODE_RANK": ["launcher=k8s", "launcher.node_rank=0", "PET=2,1,4"],
    "launcher.nproc_per_node=2: the pod's PET_NPROC": ["launcher=k8s", "launcher.nproc_per_node=2", "PET=2,0,4"],
    "--cfg=hydra: contradicts --cfg job": ["--cfg", "job", "--cfg=hydra"],
    "--cfg=hydra: contradicts --multirun": ["-m", "--cfg=hydra"],
    "launcher.nproc_per_node=4: contradicts --num_gpus 2": ["--num_gpus", "2", "launcher.nproc_per_node=4", "GPUS=2"],
    "launcher=multinode: contradicts --ml_framework jax": ["--ml_framework", "jax", "launcher=multinode"],
    "launcher.nnodes=3: slurm.nodes=2 says otherwise": ["submit=slurm", "slurm.nodes=2", "launcher.nnodes=3"],
    "slurm.nodes=0: a node count": ["submit=slurm", "slurm.nodes=0"],
    "launcher.nnodes=1:2: submit=slurm asks": ["submit=slurm", "launcher.nnodes=1:2"],
    "slurm.array_parallelism=0": ["-m", "seed=1,2", "submit=slurm", "slurm.array_parallelism=0"],
    "launcher.nproc_per_node=4: more workers than the 2 visible": [
        "launcher.nproc_per_node=4",
        "device=cuda",
        "GPUS=2",
    ],
    "launcher.nnodes=0: an integer": ["launcher=multinode", "launcher.nnodes=0"],
    "launcher.nnodes=1:2: an integer >= 1 (elastic": ["launcher=skrl_jax", "launcher.nnodes=1:2"],
    "launcher.node_rank=2: an integer in 0..1": [*MULTI, "launcher.node_rank=2", "launcher.rdzv_endpoint=h:29400"],
    "launcher.rdzv_endpoint=None": MULTI,
    "launcher.coordinator_address=None": ["launcher=skrl_jax", "launcher.nnodes=2"],
    "launcher.node_port=29400: the rendezvous": [*MULTI, "launcher.rdzv_endpoint=h:29400", "launcher.node_port=29400"],
    "launcher.coordinator_address=node0: expected": ["launcher=skrl_jax", "launcher.coordinator_address=node0"],
    "launcher.rdzv_backend=static: static": [*MULTI, "launcher.rdzv_backend=static", "launcher.rdzv_endpoint=h:1"],
    "launcher.master_port=29500: torchrun only": ["launcher=skrl_jax", "launcher.master_port=29500"],
    "rl_library=rsl_rl: launcher=skrl_jax": ["launcher=skrl_jax", "rl_library=rsl_rl", "profile=isaaclab", "ISAACLAB"],
    "restart.max=2: cannot be combined": ["restart.max=2", "launcher.max_restarts=1"],
    "restart.max=1: a parallel sweep": ["-m", "seed=1,2", "sweep.parallel=2", "restart.max=1"],
    "sweep.parallel=3: at most 2": ["-m", "seed=1,2,3", "sweep.parallel=3"],
    "sweep.parallel=2: packs jobs on one node": [
        "-m",
        "seed=1,2",
        "sweep.parallel=2",
        *MULTI,
        "launcher.rdzv_endpoint=h:1",
    ],
    "save_profile=x: saves one composition": ["-m", "seed=1,2", "save_profile=x"],
    "seed=range(0)": ["-m", "seed=range(0)"],
    "launcher.nproc_per_node=auto: submit=ray": ["submit=ray", "ray.address=http://127.0.0.1:9"],
    "launcher.nnodes=1:2: submit=ray": [*RAY, "launcher.nnodes=1:2"],
    "launcher.rdzv_endpoint=h:1: submit=ray": [*RAY, "launcher.rdzv_endpoint=h:1"],
    "launcher.node_rank=1: submit=ray": [*RAY, "launcher.nnodes=2", "launcher.node_rank=1"],
    "launcher=slurm: reads its topology": [*RAY, "launcher=slurm"],
    "ray.num_cpus_per_rank=-1.0": [*RAY, "ray.num_cpus_per_rank=-1.0"],
    "ray.python=: the interpreter": [*RAY, "ray.python="],
    "ray.address=127.0.0.1:8265": ["submit=ray", "launcher.nproc_per_node=1", "ray.address=127.0.0.1:8265"],
    "id=nope": ["runs", "show", "nope"],
    "id=last: there are no runs": ["runs", "show", "last", "--root", "empty"],
    "runs=bogus": ["runs", "bogus"],
    "id=ID: already ended (success)": ["runs", "stop", "2026-12-01_10"],
    "--rank=one": ["runs", "logs", "last", "--rank", "one"],
    "--rank=5: no log of that rank": ["runs", "logs", "last", "--rank", "5"],
    "id=ID: is not running here": ["runs", "stacks", "2026-12-01_10"],
    "ID=A A: names the same run twice": ["runs", "compare", "2026-12-01_10", "2026-12-01_10"],
    "--out=/dev/null": ["runs", "compare", "2026-12-01_10", "2026-12-01_11", "--out", "/dev/null"],
    "k8s.image=None: required": ["submit=k8s"],
    **{
        start: [*K8S, start.split(": ")[0]]
        for start in (
            "k8s.job_name=PPO",
            "k8s.namespace=Team_A",
            "k8s.memory_per_node=64GB",
            "k8s.cpus_per_node=0",
            "k8s.gpu_resource=gpu",
            "k8s.nodes=0",
            "k8s.gpus_per_node=-1",
            "k8s.nodes=100000",
            "launcher.nnodes=5001",
            "k8s.runtime_kind=Runtime",
            "k8s.runtime=Torch",
            "k8s.secret_env=HF_TOKEN",
            "k8s.secret_env=PET_MASTER_ADDR:s/k",
            "k8s.secret_env=RANK:s/k",
            "launcher.nnodes=1:4: an elastic",
        )
    },
    "k8s.shm_size=64Gi": [*K8S, "k8s.memory_per_node=32Gi", "k8s.shm_size=64Gi"],
    "launcher.nnodes=2: k8s.nodes=3": [*K8S, "k8s.nodes=3", "launcher.nnodes=2"],
    "launcher.nproc_per_node=8: more workers than the 4": [*K8S, "k8s.gpus_per_node=4", "launcher.nproc_per_node=8"],
    "launcher.nproc_per_node=2: more workers than the 1 CPU": [
        *K8S,
        "k8s.cpus_per_node=1",
        "launcher.nproc_per_node=2",
    ],
    "ssh.hosts=[]": ["submit=ssh"],
    "ssh.hostfile=h.txt": [*SSH, "ssh.hostfile=h.txt"],
    "ssh.hosts=me@gpu-a": ["submit=ssh", "ssh.hosts=me@gpu-a"],
    "ssh.hosts=['a', 'a']": ["submit=ssh", "ssh.hosts=[a,a]"],
    "ssh.hostfile=nope.txt": ["submit=ssh", "ssh.hostfile=nope.txt"],
    "launcher.nnodes=3: submit=ssh": [*SSH, "launcher.nnodes=3"],
    "launcher.node_rank=1: submit=ssh": [*SSH, "launcher.node_rank=1"],
    "launcher.rdzv_endpoint=127.0.0.1:29400: a loopback": ["submit=ssh", "ssh.hosts=[127.0.0.1,gpu-b]"],
    **{
        start: [*SSH, start.split(": ")[0]]
        for start in (
            "ssh.connect_timeout=0",
            "ssh.port=0",
            "ssh.options=-v",
            "ssh.workdir=project",
        )
    },
    "ssh.command=train_multigpu": [*SSH, "ssh.command=train_multigpu", "ssh.python=python3"],
    "launcher.rdzv_endpoint=localhost:29400": [*MULTI, "launcher.rdzv_endpoint=localhost:29400"],
}


def _produce(message: str, folder: Path, home: Path, isaaclab: Path):
    """Run the command that produces ``message``: (its argv, its Result), or None. Words of CONTEXT
    that are not the command's: ISAACLAB, GPUS=N, PET=NNODES,RANK,NPROC (a Kubeflow pod),
    ENV:NAME=VALUE, FILE:PATH=TEXT (written first; ``\\n``, ``\\xff`` escapes), CWD:SUB (run in a
    folder of its own), PORT:N (held by a listening socket while it runs)."""
    argv = next((argv for start, argv in CONTEXT.items() if message.startswith(start)), None) or _derived(message)
    if argv is None:
        return None
    extra, cwd, ports = {"HOME": str(home)}, folder, []
    for word in argv:
        kind, _, rest = word.partition(":")
        if word == "ISAACLAB":
            extra["ISAACLAB_PATH"] = str(isaaclab)
        elif word.startswith("GPUS="):
            extra["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(int(word[5:])))
        elif word.startswith("PET="):  # a Kubeflow pod: PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE
            nnodes, rank, nproc = word[4:].split(",")
            extra.update(PET_NNODES=nnodes, PET_NODE_RANK=rank, PET_NPROC_PER_NODE=nproc, PET_MASTER_ADDR="h")
            extra.update(PET_MASTER_PORT="29400")
        elif kind == "ENV":
            name, _, value = rest.partition("=")
            extra[name] = value
        elif kind == "FILE":
            rel, _, text = rest.partition("=")
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(text.encode("latin-1").decode("unicode_escape").encode("latin-1"))
        elif kind == "CWD":
            cwd = folder / rest
            cwd.mkdir(exist_ok=True)
        elif kind == "PORT":
            held = socket.socket()
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.bind(("0.0.0.0", int(rest)))
            held.listen()
            ports.append(held)
    argv = [
        w for w in argv if w != "ISAACLAB" and not w.startswith(("GPUS=", "PET=", "ENV:", "FILE:", "CWD:", "PORT:"))
    ]
    try:
        return argv, run_main(dry(argv), cwd=str(cwd), env=environment(str(home), **extra))
    finally:
        for held in ports:
            held.close()


# reasons a quoted message is not produced here
PREFLIGHT = "a real host's answer to submit=ssh's preflight (tests/test_ssh_preflight.py)"
RUNTIME = "a running launch's line (the launch tests)"
KUBECTL = "kubectl against a cluster (tests/test_k8s_submit.py)"
RAY = "a Ray cluster's answer (tests/test_ray.py)"
RECORD = "a run record in that state, or a placeholder id (tests/test_runs*.py)"
DRY = "a config mistake a submit=ray dry run does not refuse (issue 25: the product's, not the doc's)"
SUBMIT = "checked when submitting, not by a dry run (it connects to nothing): tests/test_ray.py"
RACE = "what the checks cannot foresee: a path that changes between the check and the start"
FSPATH = "a FIFO, a full disk or a missing directory at the doc's example path (tests/test_runs_records.py)"
HOSTNAME = "this host's own name not resolving (tests/test_multinode_netns.py)"
RESOLVER = "a resolver that does not answer (tests/test_checks.py)"
LOCAL = "a real launch's refusal (a dry run only warns): tests/test_local_nodes.py"
CPUS = "this machine's CPUs and GPUs decide it: tests/test_cpu_binding.py, tests/test_cpu_topology.py"
CONTAINER = (
    "the container group's refusals, each checked with its message where its context exists: "
    "tests/test_container.py (the keys, per back end), tests/test_container_podman.py (a real image)"
)
TODO = "not produced by this test yet: give it a command in CONTEXT"
# the quoted messages not produced here, by their start (70 characters), each with its reason; one
# that errors.md no longer quotes must leave this list (test_every_quoted_error_is_produced)
NOT_HERE: dict[str, str] = {
    "container.image=None: required: the container image the pods run (k8s.": CONTAINER,
    "container.image=a: k8s.image=b says otherwise: k8s.image is the old sp": CONTAINER,
    "container.runtime=podman: submit=k8s runs each pod in container.image": CONTAINER,
    "container.image=...: an image: a registry reference, a local image, a": CONTAINER,
    "container.runtime=pyxis: pyxis is SLURM's plugin: srun --container-ima": CONTAINER,
    "container.image=x.sif: a .sif file runs under apptainer or singularity": CONTAINER,
    "container.mounts=data:/data: SRC:DST[:ro\\|rw] with absolute paths (SRC": CONTAINER,
    "container.mounts=...: cannot make its source folder: Permission denied": CONTAINER,
    "container.env=1BAD: NAME (passed through from this environment) or NAM": CONTAINER,
    "container.env=HF_TOKEN=***: a secret's value does not belong in contai": CONTAINER,
    "container.workdir=work: an absolute path inside the container": CONTAINER,
    "container.runtime_flags=runc: the runtime's global flags (before run/e": CONTAINER,
    "container.image=IMG: python3 does not run in the image (podman exit 12": CONTAINER,
    "container.image=IMG: podman could not start a container from it (exit": CONTAINER,
    "container.image=IMG: python3 in the image cannot import torch": CONTAINER,
    "container.image=IMG: the training script /path/train.py is not in the": CONTAINER,
    "container.image=IMG: podman did not start it within 600 s": CONTAINER,
    "container.runtime=podman: cannot start podman: No such file or directo": CONTAINER,
    "podman is not installed here": CONTAINER,
    "container.image=img: submit=ray does not run a launch in a container i": CONTAINER,
    "run_dir=<job dir>/node1: a launcher that still runs (pid N) records he": RECORD,
    "launcher.local_nodes=true: 3 nodes on this host share its 2 usable CPU": LOCAL,
    "launcher.cpu_binding=exclusive: 3 local ranks share NUMA node 0's 2 us": CPUS,
    "launcher.cpu_binding=node: binds each rank near its GPU, and CUDA_VISI": CPUS,
    "launcher.cpu_binding=node: GPU 4's NUMA node 1 has none of the CPUs th": CPUS,
    "launcher.cpu_binding: local rank 1 cannot run on CPUs 4095: [Errno 22]": CPUS,
    "id=ID: pid N does not hold this run directory open: it is not the laun": RECORD,
    "id=ID: its record (pid N) is of an older form that cannot prove its la": RECORD,
    "id=ID: its record names pid 1, which is no launcher's: not signalled": RECORD,
    "id=ID: pid N belongs to uid U, neither you nor the record's owner (uid": RECORD,
    "id=ID: cannot check that pid N is its launcher (/proc/N/fd: Permission": RECORD,
    "id=ID: nothing to resume: the run finished all its 5 iterations (newes": RECORD,
    "id=ID: its record names a trainer directory outside <run root> (/elsew": RECORD,
    "id=ID: its record (submit.json) belongs to uid U, not to you (uid W):": RECORD,
    "id=ID: its record (composition.json) belongs to uid U, not to you (uid": RECORD,
    "run_root=...: cannot create the run directory: <reason>": RACE,
    "tracker.mlflow.tracking_uri=http://127.0.0.1:5000: the MLflow tracking": LOCAL.replace(
        "tests/test_local_nodes.py", "tests/test_trackers.py"
    ),
    "[train_multigpu] node 0's launcher is not reachable at 10.0.0.10:29401": RUNTIME,
    "[train_multigpu] node 0's launcher refused this node (node 1 is connec": RUNTIME,
    "[train_multigpu] FAILED: node 1 (10.0.0.11) lost: ...": RUNTIME,
    "exit code 125 (node lost)": RUNTIME,
    "FAILED: node 0, torchrun: exit code 1": RUNTIME,
    "cause: rendezvous: socket.gaierror: [Errno -3] Temporary failure in na": RUNTIME,
    "cause: torchrun: ...": RUNTIME,
    "python=/opt/py: cannot start it: No such file or directory (set python": RACE,
    "...: the host 'x' does not resolve on this machine (no answer from the": RESOLVER,
    "launcher.coordinator_address=10.0.0.1:5123: this host's name 'node1' d": HOSTNAME,
    "save_profile=/x/p.yaml: not a regular file (a FIFO) (name a file path)": FSPATH,
    "save_profile=/x/p.yaml: cannot write it: No space left on device": FSPATH,
    "submit=ray: Ray's Job Submission API is not installed (No module named": RAY,
    "ray.address=None: needs the Ray dashboard's address (or RAY_ADDRESS) (": SUBMIT,
    "ray.address=http://HEAD:8265: no Ray Job Submission API answers there": RAY,
    "ray.address=127.0.0.1:8265: the Ray dashboard's HTTP address, http://H": DRY,
    "ray.address=http://HEAD:8265: stopped answering about job raysubmit_..": RAY,
    "train_multigpu: error: TRAIN_MULTIGPU_RAY_SECRETS: the job's secret va": RAY,
    "submit=ray: Ray refused the job: ... (address ...)": RAY,
    "launcher.rdzv_endpoint=h:1: submit=ray chooses node 0's address and a": DRY,
    "TRAIN_MULTIGPU_RAY_CONFIG is not set: this module runs inside a Ray jo": RAY,
    "id=2026: matches 3 runs (a, b, c, ...) (give more of the id)": RECORD,
    "train_multigpu runs show: the following arguments are required: id (tr": RECORD,
    "id=ID: already ended (success): nothing to stop": RECORD,
    "id=ID: has no launcher record and no submitted job in <run dir>: nothi": RECORD,
    "id=ID: was launched on HOST: stop it there (this is HOST2)": RECORD,
    "id=ID: its ray back end cannot be reached: <urlopen error [Errno 111]": RECORD,
    "--rank=9: no node of this launch has a log for rank 9 (nodes: node 0 (": RECORD,
    "id=ID: no rank logs in <run dir>/logs": RECORD,
    "id=ID: is not running here (success): only a running launch on this ho": RECORD,
    "id=ID: its launcher (pid N) does not take stack requests (SIGUSR2 not": RECORD,
    "id=ID: its launcher (pid N) takes no stack requests now (SIGUSR2 ignor": RECORD,
    "id=ID: the launch ended before its stacks were written": RECORD,
    "--timeout=60.0: no new directory under <run dir>/stacks in time": RECORD,
    "--rank=0: its log <run dir>/logs/rank0.log cannot be read: not a regul": RECORD,
    "worker_env.HF_TOKEN=***: the record keeps no secret values: set them i": RECORD,
    "id=ID: its record has no composition.json (launched by an older train_": RECORD,
    "id=ID: .../composition.json cannot be read (...)": RECORD,
    "id=ID: .../composition.json has no overrides/script_args lists (edited": RECORD,
    "cwd=/x: the recorded working directory no longer exists (recreate it,": RECORD,
    "id=ID: is still running; resume continues a run that ended (wait, or s": RECORD,
    "id=ID: has no checkpoint to resume from (none in .../checkpoints) (rer": RECORD,
    "id=ID: has no checkpoint to resume from (no model_*.pt in <Isaac Lab r": RECORD,
    "id=ID: its rank 0 log does not say where Isaac Lab logged the run (no": RECORD,
    "rl_library=sb3: Isaac Lab resumes rsl_rl, skrl and rl_games runs (reru": RECORD,
    "ID=A A: names the same run twice (give each run once)": RECORD,
    "ID=A B: none of these runs has a learning curve (metrics.csv)": RECORD,
    "--out=/x/y.png: cannot write it: No such file or directory": FSPATH,
    "--out=x.png: a symbolic link to nothing (name a file path, or remove t": RECORD,
    "id=ID: .../composition.json: overrides is not a list of strings ([1, n": RECORD,
    "runs compare=matplotlib: is needed to draw the PNG (pip install matplo": RECORD,
    "runs timeline=matplotlib: is needed to draw the PNG (pip install matpl": RECORD,
    "ID=x: has no status.json to draw a timeline from (a run that has start": RECORD,
    "ID=x: cannot write <run dir>/timeline.png: Permission denied (give --o": RECORD,
    "submit=k8s: kubectl is not on PATH (install kubectl and choose a conte": KUBECTL,
    "submit=k8s: kubectl has no current context (error: current-context is": KUBECTL,
    "submit=k8s: kubectl create failed in context lab: <kubectl's last word": KUBECTL,
    "submit=k8s: kubectl create did not answer within 120 s": KUBECTL,
    "kubectl config": KUBECTL,
    "logs=NAME: kubectl logs failed: <kubectl's last words>": KUBECTL,
    "cancel=NAME: kubectl delete failed: ...": KUBECTL,
    "run_dir=/data/mine/trainjob.yaml: not a regular file (a FIFO) (choose": FSPATH,
    "launcher=k8s: cannot read the operator's environment: PET_NODE_RANK=1": KUBECTL,
    "[train_multigpu] stopped: no progress (restart.max_without_progress=1)": RUNTIME,
    "exit code 3 (no progress)": RUNTIME,
    "ssh.hosts=gpu-b: cannot log in (ssh: connect to host gpu-b port 22: Co": PREFLIGHT,
    "ssh.hosts=gpu-b: cannot log in (ssh: Could not resolve hostname gpu-b:": PREFLIGHT,
    "ssh.hosts=gpu-b: cannot log in (Host key verification failed.) (its ho": PREFLIGHT,
    "ssh.hosts=gpu-b: cannot log in (rl@gpu-b: Permission denied (publickey": PREFLIGHT,
    "ssh.hosts=gpu-b: ssh fails (...) (try ssh gpu-b by hand)": PREFLIGHT,
    "ssh.hosts=gpu-b: no directory /home/rl/proj there, where the launcher": PREFLIGHT,
    "ssh.hosts=gpu-b: '/opt/rl/venv/bin/python -m launcher' is not found th": PREFLIGHT,
    "ssh.hosts=gpu-b: '/opt/rl/venv/bin/python -m launcher' fails there (ex": PREFLIGHT,
    "ssh.hosts=gpu-b: runs train_multigpu 0.0.9 (Hydra 1.3.8), this machine": PREFLIGHT,
    "ssh.hosts=gpu-b: node 1's launcher there would refuse to start: script": PREFLIGHT,
    "ssh.hosts=gpu-b: node 1's launcher there refuses its command: <its one": PREFLIGHT,
    "ssh.hosts=gpu-b: no answer within 130 s (is it up, and does its launch": PREFLIGHT,
    "py-spy cannot attach to pid 4242: permission denied (ptrace); run as r": RUNTIME,
    "py-spy not found: pip install py-spy (a dependency of train_multigpu:": RUNTIME,
    "py-spy failed on pid 4242: Failed to get stack traces: Failed to suspe": RUNTIME,
    "py-spy did not answer within 10 s": RUNTIME,
    "pid 4242 exited before its stack was taken": RUNTIME,
    "NCCL flight recorder: no dump from rank(s) 1 within 5 s of asking (thr": RUNTIME,
}


def test_every_quoted_error_is_produced(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    _runs_fixture(tmp_path)
    (tmp_path / "empty").mkdir()
    isaaclab = _isaaclab(tmp_path)
    quoted = quoted_errors()
    failures, produced = [], 0
    for message in quoted:
        if message[:70].rstrip() in NOT_HERE:
            continue
        done = _produce(message, tmp_path, home, isaaclab)
        if done is None:
            failures.append(f"{message}: no command produces it (CONTEXT) and NOT_HERE does not name it")
            continue
        argv, result = done
        if not _matches(message, result.stdout + result.stderr):
            said = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:]
            failures.append(f"{message}\n    {shlex.join(argv)}: exit {result.returncode}: {said}")
        else:
            produced += 1
    starts = {message[:70].rstrip() for message in quoted}
    stale = [start for start in NOT_HERE if start not in starts]
    reasons = {reason: list(NOT_HERE.values()).count(reason) for reason in set(NOT_HERE.values())}
    print(f"\n{produced} quoted message(s) produced and matched; not here: {reasons}")
    assert not failures, f"{len(failures)} quoted message(s) not produced as quoted:\n" + "\n".join(failures)
    assert not stale, f"NOT_HERE names messages the docs no longer quote: {stale}"


# a mistake, and the fixes its message (and errors.md's row) gives, each of which must then run
FIXES = [
    (
        ["submit=slurm", "+worker_env.HF_TOKEN=x", "+slurm.extra.export=NONE"],
        "slurm.extra.export=NONE: must pass HF_TOKEN",
        re.compile(r"e\.g\. (\S+), or '([^']+)'"),
    ),
]


@pytest.mark.parametrize("mistake, message, fixes", FIXES, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_the_fix_a_message_gives_runs(mistake, message, fixes, tmp_path):
    env = environment(str(tmp_path))
    refused = run_main(dry(mistake), cwd=str(tmp_path), env=env)
    assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    hinted = fixes.search(refused.stderr)
    assert hinted, refused.stderr
    row = next(row for row in ERRORS_PAGE.read_text().splitlines() if f"`{message}" in row)
    for fix in hinted.groups():
        assert f"`{fix}`" in row or f"`'{fix}'`" in row, f"errors.md's row does not give {fix}: {row}"
        fixed = [word for word in mistake if not word.startswith("+slurm.extra.export")] + [fix]
        done = run_main(dry(fixed), cwd=str(tmp_path), env=env)
        assert done.returncode == 0, f"{shlex.join(fixed)}: {done.stderr.strip()}"


@pytest.mark.parametrize("jobs", [["0"], ["0", "1"]], ids=["one job", "two jobs"])
def test_a_sweeps_png_is_next_to_its_job_directories(jobs, tmp_path):
    """docs/sweeps.md: the PNG goes "into the sweep's directory next to the job directories", also
    when only one job ran (fail_fast, an interrupted sweep), never into job 0's own directory."""
    from launcher.sweep import curves

    sweep = tmp_path / "runs" / "multirun" / "2026-12-01_12-00-00"
    for job in jobs:
        _run_record(sweep / job, 0, [f"seed={job}"])
    path, note = curves.sweep_png([(str(sweep / job), f"seed={job}") for job in jobs])
    assert path == sweep / curves.PNG, note


def test_the_quoted_name_errors_md_gives_reaches_the_launcher(tmp_path):
    """errors.md: "a name that reads as one needs quotes": the fix, typed in a shell as shown, must
    reach the launcher still quoted (``launcher='3'`` unquoted by the shell is ``launcher=3`` again)."""
    row = next(row for row in ERRORS_PAGE.read_text().splitlines() if row.startswith("| `launcher=3: a launcher name"))
    (typed,) = re.findall(r"`([^`]*'3'[^`]*)`", row.split(" | ")[1])
    result = run_main(dry(shlex.split(typed)), cwd=str(tmp_path), env=environment(str(tmp_path)))
    assert "launcher=3: no such launcher option" in result.stderr, result.stderr
