"""Grammar fuzz test (issue 13 item 24): command lines made from the real vocabulary -- every key
of the schema, every config group and its options, Isaac Lab's flags, Hydra's flags, ``--``, forwarded
flags -- with odd values (empty, unicode, '=', quotes, NaN, huge numbers, paths). The invariant, for
every command line given ``dry_run=true``:

- exit 0 with a plan (or, for Hydra's --cfg/--help/--info/..., what they print), or
- exit 2 with exactly one line on stderr, ``train_multigpu: error: NAME=...`` where NAME is a key,
  a group or a flag (of the schema, or as typed), and nothing on stdout;
- never a traceback, never a process started, never a file written.

``main()`` runs in this process (tests/inproc.py): dozens of command lines a second, where a
subprocess each would manage two. test_in_process_is_faithful checks a few against the console script.

Bounded and repeatable for CI: derandomized (the same examples every run), ``TMG_FUZZ_EXAMPLES``
examples (default 200). To explore, run with ``TMG_FUZZ_EXAMPLES=2000 TMG_FUZZ_SEED=<n>``; a command
line that breaks the invariant goes into tests/fuzz_corpus.txt, which every run replays.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import shlex
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from inproc import environment, run_main
from launcher import paths
from launcher.config import grammar, schema

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "fuzz_corpus.txt"
PREFIX = "train_multigpu: error: "

# -- the vocabulary --------------------------------------------------------------------------------


# plausible values by key, for command lines that get far (past composition, into the checks)
SANE_BY_KEY = {
    "launcher.nproc_per_node": ["1", "2", "auto", "cpu"],
    "launcher.nnodes": ["1", "2", "1:2"],
    "launcher.node_rank": ["0", "1"],
    "launcher.master_addr": ["10.0.0.1", "127.0.0.1"],
    "launcher.rdzv_endpoint": ["10.0.0.1:29400", "[::1]:29400"],
    "launcher.coordinator_address": ["10.0.0.1:5000"],
    "launcher.rdzv_backend": ["c10d", "static"],
    "launcher.start_method": ["spawn", "fork"],
    "launcher.tee": ["3"],
    "launcher.redirects": ["3"],
    "launcher.local_ranks_filter": ["0"],
    "launcher.rdzv_conf": ["timeout=60"],
    "launcher.network_interface": ["lo"],
    "launcher.local_addr": ["127.0.0.1"],
    "launcher.cpu_binding": ["none", "node", "exclusive", "[0,1]"],
    "task": ["CartPole-v1", "Pendulum-v1"],
    "run_name": ["my_run"],
    "run_root": ["runs", "sub/dir"],
    "script": [str(paths.examples_dir() / "train.py")],
    "python": [sys.executable],
    "slurm.time": ["30", "4:00:00"],
}


def _schema_keys(kind, prefix: str = "") -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(dotted keys, dotted keys of free-form maps that take ``+key.NAME=``, plausible values by
    key) of a schema dataclass."""
    keys, maps, sane = [], [], {}
    hints = typing.get_type_hints(kind)
    for item in dataclasses.fields(kind):
        hint = hints[item.name]
        key = prefix + item.name
        if dataclasses.is_dataclass(hint):
            sub_keys, sub_maps, sub_sane = _schema_keys(hint, f"{key}.")
            keys, maps, sane = keys + sub_keys, maps + sub_maps, {**sane, **sub_sane}
            continue
        keys.append(key)
        inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        kind_ = inner[0] if typing.get_origin(hint) is typing.Union else hint
        if typing.get_origin(hint) is dict:
            maps.append(key)
        elif key in SANE_BY_KEY:
            sane[key] = SANE_BY_KEY[key]
        elif kind_ is bool:
            sane[key] = ["true", "false"]
        elif kind_ is int:
            sane[key] = ["1", "2", "8"]
        elif kind_ is float:
            sane[key] = ["1.5", "30"]
        elif isinstance(kind_, type) and issubclass(kind_, enum.Enum):
            sane[key] = [member.value for member in kind_]
    return keys, maps, sane


KEYS, MAP_KEYS, SANE_VALUES = _schema_keys(schema.TrainConfig)
SANE_VALUES.pop("dry_run", None)
KEYS = [k for k in KEYS if k != "dry_run"]  # given once, first, by the test itself
GROUPS = {g: sorted(p.stem for p in (paths.conf_dir() / g).glob("*.yaml")) for g in grammar.GROUPS}
ISAACLAB_FLAGS = sorted({*grammar.FLAG_TO_KEY, "rl_library", "ml_framework"})
HYDRA_VALUES = {
    "--cfg": ["job", "hydra", "all", "bogus", ""],
    "-c": ["job"],
    "--package": ["launcher", "_global_"],
    "-p": ["launcher"],
    "--config-dir": ["cfgdir", "/proc/x", "", "afile"],
    "-cd": ["cfgdir"],
    "--config-path": ["cfgdir"],
    "-cp": ["cfgdir"],
    "--config-name": ["x"],
    "-cn": ["x"],
    "--experimental-rerun": ["x.pickle"],
    "--info": [*grammar.INFO_TOPICS, "bogus"],
}
# flags after which a run prints what Hydra shows, not a plan
INFO_FLAGS = {"--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc"}
ODD = [
    "",
    " ",
    "0",
    "1",
    "2",
    "-5",
    "3.5",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "99999999999999999999999",
    "²",
    "٣",
    "café",
    "日本",
    "a=b",
    "it's",
    "'",
    '"',
    "a b",
    "${x}",
    "${oc.env:HOME}",
    "\\",
    "[1,2]",
    "[]",
    "{a:1}",
    "1,2",
    "null",
    "true",
    "false",
    "auto",
    "gpu",
    "cpu",
    "jax",
    "torch",
    "skrl",
    "debug",
    "examples",
    "/proc/x",
    "/proc/x.yaml",
    "../../escape",
    "a/b",
    "afile",
    "afile/sub",
    "sub/dir",
    "~",
    "-",
    "--",
    "=",
    ":",
    "host:1",
    "::1",
    "[::1]:29400",
    "10.0.0.1:29400",
    "localhost:0",
    "x" * 300,
    "\t",
    "a\nb",
]
# values that often pass: without them nearly every example would stop at its first odd value
SANE = [
    "1",
    "2",
    "3",
    "auto",
    "cpu",
    "true",
    "false",
    "null",
    "debug",
    "Isaac-Cartpole-v0",
    "CartPole-v1",
    "127.0.0.1:29400",
    "my_run",
    "runs",
    "c10d",
    "static",
    "0",
    "spawn",
    "30",
]
SAVE_VALUES = ["", "/proc/x.yaml", "a/b", "café", "../x", "afile/x.yaml"]  # each must fail: a valid one writes


def _value() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(SANE), st.sampled_from(SANE), st.sampled_from(ODD), st.text(max_size=8))


def _override() -> st.SearchStrategy[list[str]]:
    keys = st.sampled_from(KEYS)
    free = st.builds(
        lambda m, n: f"{m}.{n}", st.sampled_from(MAP_KEYS), st.sampled_from(["X", "HF_TOKEN", "BAD-NAME", "a.b", "1"])
    )
    prefix = st.sampled_from(["", "", "", "+", "++", "~"])
    plain = st.builds(
        lambda p, k, v: [f"{p}{k}={v}"],
        prefix,
        st.one_of(keys, keys, free, st.sampled_from(["foo", "env.x", "agent.y"])),
        _value(),
    )
    group = st.builds(
        lambda g, v: [f"{g}={v}"],
        st.sampled_from(sorted(GROUPS)),
        st.one_of(
            st.sampled_from([o for options in GROUPS.values() for o in options]),
            st.sampled_from(ODD),
            st.sampled_from(["[debug]", "[debug,newton_mjwarp]", "slurm", "../../x", "examples,isaaclab"]),
        ),
    )
    save = st.builds(lambda v: [f"save_profile={v}"], st.sampled_from(SAVE_VALUES))
    return st.one_of(plain, plain, plain, plain, plain, plain, plain, plain, group, group, save)


def _isaaclab_flag() -> st.SearchStrategy[list[str]]:
    name = st.sampled_from(ISAACLAB_FLAGS)
    return st.one_of(
        st.builds(lambda n, v: [f"--{n}", v], name, _value()),
        st.builds(lambda n, v: [f"--{n}={v}"], name, _value()),
        st.builds(lambda n, v: [f"--{n}", v], name, _value()),
        st.builds(lambda n, v: [f"--{n}={v}"], name, _value()),
        st.builds(lambda n: [f"--{n}"], st.sampled_from([*ISAACLAB_FLAGS, *grammar.SWITCHES])),
        st.builds(lambda n, v: [f"--{n}={v}"], st.sampled_from(list(grammar.SWITCHES)), st.sampled_from(ODD)),
    )


def _hydra_flag() -> st.SearchStrategy[list[str]]:
    def form(flag: str, value: str, eq: bool) -> list[str]:
        return [f"{flag}={value}"] if eq else [flag, value]

    valued = st.sampled_from(sorted(HYDRA_VALUES)).flatmap(
        lambda f: st.builds(form, st.just(f), st.sampled_from(HYDRA_VALUES[f]), st.booleans())
    )
    switches = st.sampled_from(
        [[f] for f, takes in grammar.HYDRA_FLAGS.items() if not takes] + [["-sc", "install=bash"], ["-m", "seed=1,2"]]
    )
    return st.one_of(
        valued, switches, st.builds(lambda f, v: [f"{f}={v}"], st.sampled_from(["-m", "--help", "--resolve"]), _value())
    )


def _other() -> st.SearchStrategy[list[str]]:
    return st.one_of(
        st.sampled_from(
            [["--"], ["--", "--seed", "1"], ["--headless"], ["--foo", "bar"], ["stray"], ["-x"], ["=x"], ["a b=1"]]
        ),
        st.builds(lambda v: [v], _value()),
    )


def _sane() -> st.SearchStrategy[list[str]]:
    """A token that usually passes: a key with a value of its type, a group option, an Isaac Lab flag."""
    key = st.sampled_from(sorted(SANE_VALUES))
    return st.one_of(
        key.flatmap(lambda k: st.sampled_from(SANE_VALUES[k]).map(lambda v: [f"{k}={v}"])),
        key.flatmap(lambda k: st.sampled_from(SANE_VALUES[k]).map(lambda v: [f"{k}={v}"])),
        st.sampled_from([[f"{g}={o}"] for g, options in GROUPS.items() for o in options]),
        st.sampled_from(
            [
                ["--num_gpus", "2"],
                ["--task=CartPole-v1"],
                ["--seed", "7"],
                ["--ml_framework", "jax"],
                ["--nnodes", "2", "--master_addr", "10.0.0.1"],
                ["--", "--headless"],
                ["-m", "seed=1,2"],
                ["+worker_env.HF_TOKEN=secret"],
                ["presets=[debug]"],
                ["--cfg", "job"],
            ]
        ),
    )


TOKENS = st.one_of(_override(), _override(), _override(), _isaaclab_flag(), _isaaclab_flag(), _hydra_flag(), _other())
# half the command lines are plausible ones with at most one odd token: they reach the checks and the
# plan; the other half mix anything
MOSTLY_SANE = st.tuples(st.lists(_sane(), min_size=1, max_size=4), st.lists(TOKENS, max_size=1)).map(
    lambda t: t[0] + t[1]
)
COMMAND_LINES = (
    st.one_of(MOSTLY_SANE, st.lists(TOKENS, min_size=1, max_size=4))
    .flatmap(st.permutations)
    .map(lambda parts: [t for part in parts for t in part])
)

# -- the invariant ---------------------------------------------------------------------------------


def _known_names(argv: list[str]) -> set[str]:
    names = {*KEYS, "dry_run", *GROUPS, "argument", "save_profile", "TRAIN_MULTIGPU_CONFIG_PATH"}
    names |= {f"--{n}" for n in (*ISAACLAB_FLAGS, *grammar.SWITCHES)} | set(grammar.HYDRA_FLAGS)
    for token in argv:
        key = token.split("=", 1)[0]
        names.add(key.lstrip("+~"))
    return names


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size if p.is_file() else -1 for p in sorted(root.rglob("*"))}


class _NoProcess:
    """subprocess.Popen for the length of a dry run: starting anything is a failure."""

    def __init__(self, *args, **kwargs):
        raise AssertionError(f"a dry run started a process: {args[0] if args else kwargs.get('args')}")


def check(argv: list[str], root: Path):
    """Run ``dry_run=true`` + argv in a fresh folder under ``root`` and assert the invariant."""
    work, home = root / "work", root / "home"
    for folder in (work, home, root / "cfgdir" / "profile"):
        folder.mkdir(parents=True, exist_ok=True)
    (work / "afile").write_text("")
    before = _snapshot(root)
    full = ["dry_run=true", *argv]
    saved = subprocess.Popen
    subprocess.Popen = _NoProcess
    try:
        result = run_main(full, str(work), environment(str(home), HOME=str(home)))
    finally:
        subprocess.Popen = saved
    shown = f"argv: {shlex.join(full)}\nexit {result.returncode}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}"  # noqa: E501
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, shown
    assert result.returncode in (0, 2), shown
    lines = result.stderr.splitlines()
    info = bool(INFO_FLAGS & {t.split("=", 1)[0] for t in argv})
    if result.returncode == 2:
        # --info prints its parts as it goes: what it printed before the config failed stays
        assert len(lines) == 1 and (result.stdout == "" or info), shown
        line = lines[0]
        assert line.startswith(PREFIX), shown
        name = line[len(PREFIX) :].split("=", 1)[0]
        assert "=" in line[len(PREFIX) :] and name in _known_names(full), (
            f"the message names no key or flag ({name!r})\n{shown}"
        )
    else:
        planned = "command(s):" in result.stdout or "#SBATCH" in result.stdout or "sweep summary" in result.stdout
        assert result.stdout.strip() and (info or planned), shown
    after = _snapshot(root)
    assert after == before, f"files written: {sorted(set(after) - set(before))}\n{shown}"
    return result


# -- the tests -------------------------------------------------------------------------------------

EXAMPLES = int(os.environ.get("TMG_FUZZ_EXAMPLES", "200"))
_SEED = os.environ.get("TMG_FUZZ_SEED")


def _seeded(test):
    return seed(int(_SEED))(test) if _SEED is not None else test


@_seeded
@settings(
    max_examples=EXAMPLES,
    derandomize=_SEED is None,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(argv=COMMAND_LINES)
def test_grammar_fuzz(argv, tmp_path_factory):
    result = check(argv, tmp_path_factory.mktemp("fuzz"))
    # --hypothesis-show-statistics: how the examples ended (a fuzz that only meets errors tests little)
    event("plan" if result.returncode == 0 else result.stderr[len(PREFIX) :].split(":", 1)[0].split("=", 1)[0])


def _corpus() -> list:
    cases = []
    for number, line in enumerate(CORPUS.read_text(encoding="utf-8").splitlines(), 1):
        text, _, reason = line.partition("  # xfail: ")
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
        cases.append(pytest.param(json.loads(text), marks=marks, id=f"line{number}"))
    return cases


@pytest.mark.parametrize("argv", _corpus())
def test_fuzz_corpus(argv, tmp_path):
    """Every command line the fuzzer (or a person) found breaking the invariant, replayed each run."""
    check(argv, tmp_path)


@pytest.mark.parametrize(
    "argv",
    [
        ["presets=debug"],
        ["--num_gpus", "0"],
        ["task=it's"],
        ["--cfg=job", "seed=3"],
        ["profile=../x"],
        ["run_root=/proc/x"],
        ["launcher.nproc_per_nod=2"],
    ],
)
def test_in_process_is_faithful(argv, tmp_path):
    """The in-process runner gives what the console script gives: exit code, stdout, stderr."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env = environment(str(tmp_path / "home"))
    inproc = run_main(["dry_run=true", *argv], str(tmp_path / "a"), env)
    real = subprocess.run(
        [sys.executable, "-m", "launcher", "dry_run=true", *argv],
        cwd=tmp_path / "b",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (inproc.returncode, inproc.stdout, inproc.stderr) == (real.returncode, real.stdout, real.stderr)
