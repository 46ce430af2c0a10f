"""``train_multigpu runs`` against whatever anyone can write into a shared run root, and the paths a
user names written through, never replaced (issue 18, items 1, 5, 6 and 11's SWEPT column).

Every hostile record here is real: a real FIFO (``os.mkfifo``), a real symbolic link to
``/dev/zero``, a sparse 200 MB file, a link out of the run root, ``/dev/null`` named as ``--out``
(root: the device node is checked to still be one), a full tmpfs. Commands that could block run as
subprocesses with a timeout (a hang fails the test instead of stalling the suite); the rest run
in-process through ``launcher.runs.cli.main``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from require import unavailable

pytestmark = pytest.mark.timeout(240)

# no profile.name: runs show's "chosen" compares with the schema's defaults (no Hydra composition per show)
CONFIG = "launcher:\n  topology: single_node\n  nnodes: '1'\n  nproc_per_node: '2'\ntask: CartPole-v1\n"
STATUS = {
    "started": "2026-01-01T10:00:00+00:00",
    "ended": "2026-01-01T10:00:02+00:00",
    "duration_s": 2.0,
    "exit_code": 0,
    "reason": "success",
    "failure": None,
}
METRICS = "iteration,env_steps,mean_return\n1,512,10.0\n2,1024,20.0\n3,1536,30.5\n"
FILES = ("status.json", "config.yaml", "composition.json", "command.sh", "metrics.csv", "run_info.json")
HOSTILE: list[str] = []  # every hostile case tried below (pytest -s prints how many)


@pytest.fixture(scope="module", autouse=True)
def _count_hostile_cases():
    yield
    print(f"\n{len(HOSTILE)} hostile cases tried")


def make_run(root: Path, name: str, **contents) -> Path:
    """A run directory as the launcher writes it (status, config, composition, rank logs, metrics);
    ``contents``: file name (``_`` for ``.``, ``__`` for ``/``) -> text, dict (JSON) or None (absent)."""
    run_dir = root / name
    (run_dir / "logs").mkdir(parents=True)
    files = {
        "status.json": STATUS,
        "config.yaml": CONFIG,
        "composition.json": {"overrides": ["seed=1"], "script_args": [], "order": [], "hydra_flags": [], "cwd": "/"},
        "command.sh": "#!/usr/bin/env bash\npython -m torch.distributed.run --nproc_per_node 2 train.py\n",
        "metrics.csv": METRICS,
        "logs/rank0.log": "rank 0 line 1\nrank 0 line 2\n",
        "logs/rank1.log": "rank 1 line 1\n",
    }
    files.update({key.replace("__", "/").replace("_", "."): value for key, value in contents.items()})
    for rel, value in files.items():
        if value is None:
            continue
        path = run_dir / rel
        path.write_text(json.dumps(value) if isinstance(value, (dict, list)) else value)
    return run_dir


def cli(*argv: str, root: Path, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``train_multigpu runs ARGV --root ROOT`` as a real process; a hang is a failure, not a stall."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", "runs", *argv, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
        cwd=cwd or root.parent,
    )


def strict_json(text: str):
    """JSON as the standard defines it: a bare NaN or Infinity fails."""

    def refuse(constant: str):
        raise AssertionError(f"not JSON: a bare {constant}")

    return json.loads(text, parse_constant=refuse)


def one_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.strip().removeprefix("train_multigpu: error: ")


# -- item 5: nothing in the run root blocks, eats memory or leaves it -----------------------------
def test_fifos_under_every_record_name_do_not_block_any_command(tmp_path):
    """A FIFO opened for reading blocks until a writer comes: the listing, show, logs and stacks
    must never open one. Every file a command reads is a FIFO here."""
    root = tmp_path / "runs"
    fifo_names = [*FILES, "submit.json", "env.json", "logs/rank0.log", "logs/progress.json", "logs/rank1.beat"]
    run_dir = make_run(
        root, "2026-01-01_10-00-00_fifo", **{n.replace(".", "_").replace("/", "__"): None for n in FILES}
    )
    (run_dir / "logs" / "rank0.log").unlink()
    for name in fifo_names:
        if name != "submit.json":  # submit.json makes it a SLURM job's directory: its own case below
            os.mkfifo(run_dir / name)
    slurm = make_run(root, "2026-01-01_10-00-01_slurm", status_json=None)
    os.mkfifo(slurm / "submit.json")
    alive = make_run(root, "2026-01-01_10-00-02_live", logs__progress_json=None)  # a running record
    own = {"started": "2026-01-01T10:00:02+00:00", "exit_code": None, "pid": os.getpid(), "host": os.uname()[1]}
    own["pid_start"] = int(Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    (alive / "status.json").write_text(json.dumps(own))
    os.mkfifo(alive / "logs" / "progress.json")
    os.mkfifo(alive / "logs" / "rank0.beat")
    HOSTILE.extend(f"FIFO {n}" for n in fifo_names + ["progress.json (running)", "rank0.beat (running)"])

    listing = cli(root=root)
    assert listing.returncode == 0, listing.stderr
    assert "2026-01-01_10-00-00_fifo" in listing.stdout and "2026-01-01_10-00-02_live" in listing.stdout
    data = strict_json(cli("--json", root=root).stdout)
    fifo = next(run for run in data if run["id"] == "2026-01-01_10-00-00_fifo")
    assert "status.json: not a regular file (a FIFO)" in fifo["problems"]
    assert "config.yaml: not a regular file (a FIFO)" in fifo["problems"]
    slurm_run = next(run for run in data if run["id"] == "2026-01-01_10-00-01_slurm")
    assert "submit.json: not a regular file (a FIFO)" in slurm_run["problems"]
    shown = cli("show", "2026-01-01_10-00-00_fifo", root=root)
    assert shown.returncode == 0 and "note:     status.json: not a regular file (a FIFO)" in shown.stdout, shown
    live = cli("show", "2026-01-01_10-00-02_live", root=root)
    assert live.returncode == 0, live.stderr
    assert "status:   running" in live.stdout and "live:" not in live.stdout  # no progress could be read
    logs = cli("logs", "2026-01-01_10-00-00_fifo", root=root)
    assert one_error(logs) == (
        f"--rank=0: its log {run_dir / 'logs' / 'rank0.log'} cannot be read: not a regular file (a FIFO)"
    )
    every = cli("logs", "2026-01-01_10-00-00_fifo", "--rank", "all", root=root)
    assert every.returncode == 0 and every.stdout == "[0:1] rank 1 line 1\n", every
    assert f"{run_dir / 'logs' / 'rank0.log'}: not a regular file (a FIFO): not read" in every.stderr
    stacks = cli("stacks", "2026-01-01_10-00-00_fifo", root=root)
    assert "is not running here (no status.json)" in one_error(stacks)


def test_a_link_to_dev_zero_is_not_read_without_end(tmp_path):
    """``/dev/zero`` never ends: a reader that reads to the end runs out of memory."""
    root = tmp_path / "runs"
    run_dir = make_run(root, "2026-01-01_10-00-00_zero", **{n.replace(".", "_"): None for n in FILES})
    for name in (*FILES, "logs/rank1.log", "logs/progress.json"):
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to("/dev/zero")
    HOSTILE.extend(f"{n} -> /dev/zero" for n in (*FILES, "logs/rank1.log", "logs/progress.json"))
    started = time.monotonic()
    data = strict_json(cli("--json", root=root).stdout)
    assert data[0]["problems"][:2] == [
        "status.json: not a regular file (a character device)",
        "config.yaml: not a regular file (a character device)",
    ]
    shown = cli("show", "last", root=root)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "rank 0 line 1" in cli("logs", "last", root=root).stdout
    assert "not a regular file (a character device)" in one_error(cli("logs", "last", "--rank", "1", root=root))
    assert time.monotonic() - started < 60
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


def test_sockets_under_record_names_are_named(tmp_path, capsys, monkeypatch):
    import socket

    from launcher.runs import cli as runs_cli

    root = tmp_path / "runs"
    run_dir = make_run(root, "2026-01-01_10-00-00_sock", status_json=None, config_yaml=None, logs__rank0_log=None)
    bound = []
    monkeypatch.chdir(run_dir)  # bound by relative paths: a socket's path has at most 107 bytes
    for name in ("status.json", "config.yaml", "logs/rank0.log"):
        server = socket.socket(socket.AF_UNIX)
        server.bind(name)
        bound.append(server)
    HOSTILE.extend(["socket status.json", "socket config.yaml", "socket rank0.log"])
    try:
        assert runs_cli.main(["--json", "--root", str(root)]) == 0
        problems = strict_json(capsys.readouterr().out)[0]["problems"]
        assert problems[:2] == [
            "status.json: not a regular file (a socket)",
            "config.yaml: not a regular file (a socket)",
        ]
        assert runs_cli.main(["logs", "last", "--root", str(root)]) == 2
        assert "cannot be read: not a regular file (a socket)" in capsys.readouterr().err
    finally:
        for server in bound:
            server.close()


def test_a_huge_record_is_refused_by_its_size_not_read(tmp_path):
    """A 200 MB status.json (sparse: no disk) and config.yaml: named, not read (it took 10 s and 838 MB)."""
    root = tmp_path / "runs"
    run_dir = make_run(root, "2026-01-01_10-00-00_huge")
    for name in ("status.json", "config.yaml", "composition.json", "logs/progress.json"):
        with open(run_dir / name, "wb") as handle:
            handle.truncate(200 << 20)
    HOSTILE.extend(f"200 MB {n}" for n in ("status.json", "config.yaml", "composition.json", "logs/progress.json"))
    started = time.monotonic()
    result = cli("--json", root=root)
    elapsed = time.monotonic() - started
    problems = strict_json(result.stdout)[0]["problems"]
    assert "status.json: larger than 1 MiB (200 MiB)" in problems
    assert "config.yaml: larger than 4 MiB (200 MiB)" in problems
    assert elapsed < 5.0, elapsed  # the whole command, interpreter start included (was 10 s)
    assert cli("show", "last", root=root).returncode == 0


def test_links_out_of_the_run_root_are_not_followed(tmp_path):
    """A record's link (or a path a record names) that leaves the run root is not read: a shared
    run root must not show anyone's files to whoever lists it."""
    root = tmp_path / "runs"
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.txt").write_text("the private line\n")
    (outside / "status.json").write_text(json.dumps({**STATUS, "reason": "from outside"}))
    (outside / "metrics.csv").write_text(METRICS.replace("30.5", "99.0"))
    run_dir = make_run(root, "2026-01-01_10-00-00_links", status_json=None, metrics_csv=None)
    (run_dir / "status.json").symlink_to(outside / "status.json")
    (run_dir / "metrics.csv").symlink_to(outside / "metrics.csv")
    (run_dir / "logs" / "rank1.log").unlink()
    (run_dir / "logs" / "rank1.log").symlink_to(outside / "secret.txt")
    failed = {
        **STATUS,
        "exit_code": 1,
        "reason": "rank failed",
        "failure": {"rank": 1, "log": str(outside / "secret.txt")},
    }
    make_run(root, "2026-01-01_10-00-01_names", status_json=failed)
    resumed = make_run(root, "2026-01-01_10-00-02_resumed", metrics_csv=None)
    (resumed / "composition.json").write_text(
        json.dumps({"overrides": [], "script_args": [], "cwd": "/", "trainer_dir": str(outside)})
    )
    (root / "2026-01-01_10-00-03_dirlink").symlink_to(outside, target_is_directory=True)
    HOSTILE.extend(["status.json -> outside", "metrics.csv -> outside", "rank1.log -> outside"])
    HOSTILE.extend(["failure.log names an outside file", "trainer_dir outside", "run directory -> outside"])

    data = {run["id"]: run for run in strict_json(cli("--json", root=root).stdout)}
    links = data["2026-01-01_10-00-00_links"]
    assert links["reason"] is None and links["last_return"] is None
    assert f"status.json: a symbolic link out of {root}" in links["problems"]
    assert data["2026-01-01_10-00-02_resumed"]["trainer_dir"] == str(resumed)
    assert data["2026-01-01_10-00-02_resumed"]["last_return"] is None
    assert data["2026-01-01_10-00-03_dirlink"]["status"] == "?"
    assert data["2026-01-01_10-00-03_dirlink"]["reason"] is None
    shown = cli("show", "2026-01-01_10-00-01", root=root)
    assert shown.returncode == 0 and "the private line" not in shown.stdout, shown.stdout
    assert "private line" not in cli("logs", "2026-01-01_10-00-00", "--rank", "all", root=root).stdout
    assert "a symbolic link out of" in one_error(cli("logs", "2026-01-01_10-00-00", "--rank", "1", root=root))


def test_a_sweep_linked_out_of_the_run_root_is_not_listed(tmp_path):
    """Before: ``multirun/<sweep>`` (or ``multirun`` itself) as a link to a folder outside the root
    listed every directory there as a job (a link to /proc: one "job" per process, each read; a link
    to a dead network mount would stall the listing)."""
    root = tmp_path / "runs"
    outside = tmp_path / "private"
    for name in ("alice", "bob"):
        make_run(outside, name)
    make_run(root, "multirun/2026-01-01_10-00-00/0")
    (root / "multirun" / "2026-01-01_10-00-01").symlink_to(outside, target_is_directory=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "multirun").symlink_to(outside.parent, target_is_directory=True)  # multirun itself leaves
    make_run(other, "2026-01-01_10-00-02_own")
    HOSTILE.extend(["a sweep -> outside", "multirun -> outside"])
    listed = [run["id"] for run in strict_json(cli("--json", root=root).stdout)]
    assert listed == ["multirun/2026-01-01_10-00-00/0"]
    assert [run["id"] for run in strict_json(cli("--json", root=other).stdout)] == ["2026-01-01_10-00-02_own"]
    assert "no run under" in one_error(cli("show", "multirun/2026-01-01_10-00-01/alice", root=root))


# -- item 6: malformed records -------------------------------------------------------------------
MALFORMED = {
    "nested 100,000 deep": '{"failure": ' + "[" * 100_000 + "]" * 100_000 + ', "exit_code": 1}',
    "duration NaN": '{"exit_code": 0, "duration_s": NaN, "started": "2026-01-01T10:00:00+00:00"}',
    "duration Infinity": '{"exit_code": 0, "duration_s": Infinity}',
    "duration -Infinity": '{"exit_code": 0, "duration_s": -Infinity}',
    "duration 1e999": '{"exit_code": 0, "duration_s": 1e999}',
    "duration 10**400": '{"exit_code": 0, "duration_s": 1' + "0" * 400 + "}",
    "started year 1": '{"exit_code": 0, "started": "0001-01-01T00:00:00+00:00"}',
    "started year 9999, -12:00": '{"exit_code": 0, "started": "9999-12-31T23:59:59-12:00"}',
    "started not a date": '{"exit_code": 0, "started": "yesterday"}',
    "started a number": '{"exit_code": 0, "started": 5}',
    "a straggler NaN": '{"exit_code": 0, "stragglers": [{"rank": 1, "iteration_s": NaN}]}',
    "failure NaN code": '{"exit_code": 1, "failure": {"rank": 1, "exit_code": NaN, "log": "a\\u0000b"}}',
    "failure a string": '{"exit_code": 1, "failure": "boom"}',
    "exit code a string": '{"exit_code": "1"}',
    "exit code a float": '{"exit_code": 1.5}',
    "pid a string": '{"exit_code": null, "pid": "1"}',
    "pid huge": '{"exit_code": null, "pid": 99999999999999999999}',
    "not an object": "[1, 2]",
    "not JSON": "{",
    "empty": "",
    "binary": "\x00\xff\x01",
    "a line break in the reason": '{"exit_code": 1, "reason": "a\\nb\\u001b[31m"}',
}


def test_malformed_status_files_are_named_not_fatal(tmp_path, capsys):
    from launcher.runs import cli as runs_cli

    root = tmp_path / "runs"
    for number, text in enumerate(MALFORMED.values()):
        make_run(root, f"2026-01-01_10-00-{number:02d}_case", status_json=text)
    config = CONFIG.replace("nproc_per_node: '2'", "nproc_per_node: auto\n  node_rank: \u00b2")
    make_run(root, "2026-01-01_10-01-00_config", config_yaml=config, command_sh="--nproc_per_node ²")
    (root / "2026-01-01_10-01-01_crlf\nname").mkdir()
    (root / "0001-01-01_00-00-00_year1").mkdir()
    (root / "multirun" / "2026-01-01_10-02-00" / "\u00b2").mkdir(parents=True)
    HOSTILE.extend(
        [f"status.json: {c}" for c in MALFORMED]
        + ["node_rank ²", "directory name with a line break", "directory stamp year 1", "sweep job named ²"]
    )

    assert runs_cli.main(["--root", str(root)]) == 0
    table, err = capsys.readouterr()
    assert "Traceback" not in err and err == "", err
    assert len(table.splitlines()) == 1 + len(MALFORMED) + 1 + 3 + 1  # header, runs, the sweep's line + job
    year1 = next(line for line in table.splitlines() if "10-00-06_case" in line)
    assert year1.split()[1] == "?"  # a date out of range shows as ?
    assert "2026-01-01_10-01-01_crlf\\nname" in table  # the name's line break escaped: one row
    assert "\x1b" not in table
    assert runs_cli.main(["--json", "--root", str(root)]) == 0
    data = {run["id"]: run for run in strict_json(capsys.readouterr().out)}
    assert data["2026-01-01_10-00-01_case"]["duration_s"] is None  # NaN: null
    assert "status.json: nested deeper than 32 levels" in data["2026-01-01_10-00-00_case"]["problems"]
    assert data["2026-01-01_10-00-06_case"]["started"] == "0001-01-01T00:00:00+00:00"
    for ident in (*data, "multirun/2026-01-01_10-02-00"):
        code = runs_cli.main(["show", ident, "--root", str(root)])
        out, err = capsys.readouterr()
        assert code == 0 and err == "", (ident, err)
        assert runs_cli.main(["show", ident, "--json", "--root", str(root)]) == 0, ident
        strict_json(capsys.readouterr().out)


def test_malformed_json_everywhere_else_is_named_not_fatal(tmp_path, capsys):
    """composition.json (SWEPT, show's typed line), run_info.json, submit.json, progress.json and
    beat files: the same cases, each file in turn (a run root per file: each show reads its root)."""
    from launcher.runs import cli as runs_cli

    own = {"started": "2026-01-01T10:00:02+00:00", "exit_code": None, "pid": os.getpid(), "host": os.uname()[1]}
    own["pid_start"] = int(Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    for number, text in enumerate(MALFORMED.values()):
        for name in ("composition_json", "run_info_json"):
            sweep = tmp_path / name / "multirun" / f"2026-01-01_10-00-{number:02d}"
            make_run(sweep, "0", **{name: text, "metrics_csv": None})
            make_run(sweep, "1", composition_json='{"overrides": [1, null, {"a": NaN}]}')
        make_run(tmp_path / "submit", f"2026-01-02_10-00-{number:02d}_slurm", status_json=None, submit_json=text)
        live = make_run(tmp_path / "live", f"2026-01-03_10-00-{number:02d}_live", status_json=own)
        (live / "logs" / "progress.json").write_text(text)
        (live / "logs" / "rank0.beat").write_text(text[:100])
    kinds = ("composition.json", "run_info.json", "submit.json", "progress.json and rank0.beat")
    HOSTILE.extend(f"{kind}: {case}" for kind in kinds for case in MALFORMED)

    for root, count in ((tmp_path / "composition_json", 44), (tmp_path / "run_info_json", 44)):
        assert runs_cli.main(["--json", "--root", str(root)]) == 0
        assert len(strict_json(capsys.readouterr().out)) == count
    for root in (tmp_path / "submit", tmp_path / "live"):
        assert runs_cli.main(["--json", "--root", str(root)]) == 0
        data = strict_json(capsys.readouterr().out)
        assert len(data) == len(MALFORMED)
        for run in data:
            assert runs_cli.main(["show", run["id"], "--root", str(root)]) == 0, run["id"]
            assert "Traceback" not in capsys.readouterr().err
            assert runs_cli.main(["show", run["id"], "--json", "--root", str(root)]) == 0, run["id"]
            strict_json(capsys.readouterr().out)
    root = tmp_path / "composition_json"
    for sweep in sorted((root / "multirun").iterdir())[:: len(MALFORMED) // 4]:
        for job in ("0", "1"):
            ident = f"multirun/{sweep.name}/{job}"
            assert runs_cli.main(["show", ident, "--root", str(root)]) == 0, ident
            assert "Traceback" not in capsys.readouterr().err


def test_a_hostile_config_yaml_is_named_not_fatal(tmp_path):
    """config.yaml is read without a YAML parser by the listing, and with one by runs show (its
    "chosen" differences): a YAML alias bomb, nesting without end, NaN, binary, a profile named like
    a path."""
    laughs = ["a0: &a0 [" + ", ".join(['"lol"'] * 9) + "]"]
    laughs += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    cases = {
        "alias bomb": CONFIG + "\n".join(laughs) + "\n",
        "nested 100,000 deep": CONFIG + "deep: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "nan and inf": CONFIG + "seed: .nan\nmax_iterations: .inf\n",
        "binary": "\x00\xff\x01launcher:\n\x00",
        "a profile named like a path": CONFIG + "profile:\n  name: ../../../../tmp/x\n",
        "not a mapping": "- 1\n- 2\n",
    }
    root = tmp_path / "runs"
    for number, text in enumerate(cases.values()):
        make_run(root, f"2026-01-01_10-00-{number:02d}_yaml", config_yaml=text)
    HOSTILE.extend(f"config.yaml: {case}" for case in cases)
    assert len(strict_json(cli("--json", root=root).stdout)) == len(cases)
    for number, case in enumerate(cases):
        shown = cli("show", f"2026-01-01_10-00-{number:02d}", "--json", root=root)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (case, shown.stderr[-2000:])
        data = strict_json(shown.stdout)
        if case == "alias bomb":
            assert data["chosen"]["a9"][1] == "(too large to show)"


# -- item 1: a path the user names is written through, never replaced ----------------------------
def _two_runs_with_curves(root: Path) -> None:
    make_run(root, "2026-01-01_10-00-00_a", composition_json={"overrides": ["seed=1"], "script_args": [], "cwd": "/"})
    make_run(root, "2026-01-01_10-00-01_b", composition_json={"overrides": ["seed=2"], "script_args": [], "cwd": "/"})


def test_compare_out_refuses_what_is_not_a_regular_file_and_leaves_it_as_it_was(tmp_path):
    import socket

    root = tmp_path / "runs"
    _two_runs_with_curves(root)
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "dir.png").mkdir()
    (tmp_path / "dangling.png").symlink_to(tmp_path / "nowhere" / "x.png")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.png"))
    before = {path: os.lstat(path) for path in ("/dev/null", "/dev/full")}
    cases = {
        "/dev/null": "not a regular file (a character device) (name a file path)",
        "/dev/full": "not a regular file (a character device) (name a file path)",
        str(tmp_path / "fifo.png"): "not a regular file (a FIFO) (name a file path)",
        str(tmp_path / "dir.png"): "not a regular file (a directory) (name a file path)",
        str(tmp_path / "sock.png"): "not a regular file (a socket) (name a file path)",
        str(tmp_path / "dangling.png"): "a symbolic link to nothing (name a file path, or remove the link)",
    }
    HOSTILE.extend(f"--out {path}" for path in cases)
    try:
        for path, why in cases.items():
            result = cli("compare", "2026-01-01_10-00-00", "2026-01-01_10-00-01", "--out", path, "--json", root=root)
            assert one_error(result) == f"--out={path}: {why}"
            assert result.stdout == ""
    finally:
        server.close()
    for path, was in before.items():
        now = os.lstat(path)
        assert stat.S_ISCHR(now.st_mode) and now.st_rdev == was.st_rdev, path  # still the device
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.png").st_mode)
    assert (tmp_path / "dangling.png").is_symlink() and not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.png", "dir.png", "fifo.png", "runs", "sock.png"]


def test_compare_out_writes_through_a_link_and_into_an_existing_file(tmp_path):
    from launcher.sweep.curves import curves_in_png

    root = tmp_path / "runs"
    _two_runs_with_curves(root)
    target = tmp_path / "shared" / "curves.png"
    target.parent.mkdir()
    target.write_bytes(b"old")
    target.chmod(0o640)
    os.link(target, tmp_path / "hardlink.png")
    (tmp_path / "link.png").symlink_to(target)
    inode = os.stat(target).st_ino

    result = cli(
        "compare", "2026-01-01_10-00-00", "2026-01-01_10-00-01", "--out", str(tmp_path / "link.png"), root=root
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "link.png").is_symlink() and os.readlink(tmp_path / "link.png") == str(target)
    assert os.stat(target).st_ino == inode and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    labels = [curve["label"] for curve in curves_in_png(target)]
    assert labels == ["2026-01-01_10-00-00_a: seed=1", "2026-01-01_10-00-01_b: seed=2"]
    assert (tmp_path / "hardlink.png").read_bytes() == target.read_bytes()  # the same file, written in place
    longer = target.read_bytes()
    target.write_bytes(longer + b"\0" * 100_000)  # a longer old file: cut to the new length
    assert cli("compare", "2026-01-01_10-00-00", "2026-01-01_10-00-01", "--out", str(target), root=root).returncode == 0
    assert target.read_bytes() == longer and os.stat(target).st_ino == inode
    assert sorted(p.name for p in target.parent.iterdir()) == ["curves.png"]  # no temporary file beside it


@pytest.fixture
def full_disk(tmp_path):
    """A real 16 KiB tmpfs (root only): writes of more than that fail with ENOSPC."""
    if os.geteuid() != 0:
        unavailable("ROOT", "mounting a small tmpfs needs root")
    where = tmp_path / "full"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_a_failed_write_leaves_nothing_half_written(full_disk):
    from launcher import files
    from launcher.errors import UserError

    data = os.urandom(256 << 10)
    with pytest.raises(UserError) as new:
        files.write_through(full_disk / "new.png", data, "--out")
    assert str(new.value) == f"--out={full_disk / 'new.png'}: cannot write it: No space left on device"
    assert list(full_disk.iterdir()) == []  # the new file is gone, not left half written
    (full_disk / "old.png").write_bytes(b"old content")
    with pytest.raises(UserError):
        files.write_through(full_disk / "old.png", data, "--out")
    assert (full_disk / "old.png").read_bytes() == b"old content"  # the space was not had: untouched
    from launcher.config import profiles

    with pytest.raises(UserError) as profile:
        profiles.write(full_disk / "profile" / "mine.yaml", "x: 1\n" * 10_000)
    assert str(profile.value).startswith(f"save_profile={full_disk / 'profile' / 'mine.yaml'}: cannot write it: ")
    assert list((full_disk / "profile").iterdir()) == []


def test_save_profile_refuses_what_is_not_a_file_in_one_line(tmp_path):
    from launcher.config import profiles
    from launcher.errors import UserError

    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "taken.yaml").write_text("x: 1\n")
    HOSTILE.extend(["save_profile= a FIFO", "save_profile= a link to nothing", "save_profile= a directory"])
    expected = {
        "fifo.yaml": f"save_profile={tmp_path / 'fifo.yaml'}: not a regular file (a FIFO) (name a file path)",
        "dangling.yaml": f"save_profile={tmp_path / 'dangling.yaml'}: a symbolic link to nothing "
        "(name a file path, or remove the link)",
        "dir.yaml": f"save_profile={tmp_path / 'dir.yaml'}: not a regular file (a directory) (name a file path)",
        "taken.yaml": f"save_profile=taken.yaml: {tmp_path / 'taken.yaml'} already exists "
        "(choose another name or delete the file)",
    }
    for name, message in expected.items():
        with pytest.raises(UserError) as err:
            profiles.save_target(name, str(tmp_path))
        assert str(err.value) == message
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "save_profile=fifo.yaml"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one_error(result) == expected["fifo.yaml"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.yaml").st_mode) and not (tmp_path / "nowhere.yaml").exists()


# -- rerun of a hand-edited composition.json ------------------------------------------------------
def test_rerun_of_a_hand_edited_composition_is_one_line(tmp_path, capsys):
    from launcher.runs import cli as runs_cli

    root = tmp_path / "runs"
    base = {"overrides": ["seed=1"], "script_args": [], "order": [], "hydra_flags": [], "cwd": str(tmp_path)}
    edits = {
        "overrides [1, null]": ({"overrides": [1, None]}, "overrides is not a list of strings ([1, null]; edited?)"),
        "order [5, {}]": ({"order": [5, {}]}, "order is not a list of strings ([5, {}]; edited?)"),
        "hydra_flags a string": (
            {"hydra_flags": "--cfg job"},
            'hydra_flags is not a list of strings ("--cfg job"; edited?)',
        ),
        "script_args [null]": ({"script_args": [None]}, "script_args is not a list of strings ([null]; edited?)"),
        "num_gpus {}": ({"num_gpus": {}}, "num_gpus is not a string ({}; edited?)"),
        "cwd 5": ({"cwd": 5}, "cwd is not a string (5; edited?)"),
        "trainer_dir NUL": ({"trainer_dir": "a\0b"}, 'trainer_dir is not a string ("a\\u0000b"; edited?)'),
    }
    HOSTILE.extend(f"composition.json for rerun: {case}" for case in edits)
    for number, (case, (edit, why)) in enumerate(edits.items()):
        run_dir = make_run(root, f"2026-01-01_10-00-{number:02d}_edited", composition_json={**base, **edit})

        def launch(*_args, case=case):
            raise AssertionError(f"launched: {case}")

        assert runs_cli.main(["rerun", run_dir.name, "--root", str(root)], launch=launch) == 2, case
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1, (case, err)
        assert err.strip() == (
            f"train_multigpu: error: id={run_dir.name}: {run_dir / 'composition.json'}: {why} (fix or remove it)"
        ), case
    os.mkfifo(root / "2026-01-01_10-00-00_edited" / "fifo")
    (root / "2026-01-01_10-00-00_edited" / "composition.json").unlink()
    os.mkfifo(root / "2026-01-01_10-00-00_edited" / "composition.json")
    assert runs_cli.main(["rerun", "2026-01-01_10-00-00", "--root", str(root)], launch=launch) == 2
    assert "composition.json cannot be read (not a regular file (a FIFO))" in capsys.readouterr().err


# -- item 11 (part): a sweep over secret values --------------------------------------------------
def test_a_sweep_over_secret_values_shows_which_value_each_job_had_never_the_value(tmp_path):
    args = ["-m", "+worker_env.HF_TOKEN=tok-aaa-1,tok-bbb-2", "presets=debug", "launcher.nproc_per_node=1"]
    args += ["max_iterations=1", "run_root=runs"]
    launch = subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    table = cli(root=tmp_path / "runs")
    jobs = [line for line in table.stdout.splitlines() if line.startswith("  multirun/")]
    assert [line.split()[-1] for line in jobs] == ["+worker_env.HF_TOKEN=***1", "+worker_env.HF_TOKEN=***2"]
    data = strict_json(cli("--json", root=tmp_path / "runs").stdout)
    assert [run["swept"] for run in data] == [["+worker_env.HF_TOKEN=***1"], ["+worker_env.HF_TOKEN=***2"]]
    for output in (table.stdout, json.dumps(data), cli("show", data[1]["id"], root=tmp_path / "runs").stdout):
        assert "tok-" not in output
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file() and not path.name.endswith((".png", ".ckpt")):
            assert b"tok-" not in path.read_bytes(), path
    from launcher.errors import UserError
    from launcher.runs import again

    composition = json.loads((Path(data[1]["run_dir"]) / "composition.json").read_text())
    assert "+worker_env.HF_TOKEN=***2" in composition["overrides"]
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", env)
        with pytest.raises(UserError) as missing:
            again.with_secrets(composition["overrides"])
        assert str(missing.value).startswith("worker_env.HF_TOKEN=***: the record keeps no secret values")
        env["HF_TOKEN"] = "from-the-environment"
        assert "+worker_env.HF_TOKEN='from-the-environment'" in again.with_secrets(composition["overrides"])
