"""Bad input, as a hostile user types it (issue 13 items 3, 4, 12, 13, 14): every case is one line
naming the key or flag, exit code 2, no traceback, nothing created, nothing started.

Most cases run ``main()`` in this process (tests/inproc.py); those about processes, signals and the
run directory of a real launch run the console script in a subprocess.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from inproc import environment, run_main
from require import unavailable
from test_cli import assert_usage_error

PREFIX = "train_multigpu: error: "
EXTENDS_EXAMPLES = "# @package _global_\ndefaults:\n  - /profile/examples\n  - _self_\n"


@pytest.fixture
def cli(tmp_path):
    """``main(argv)`` in ``tmp_path/work``; ``cli.files()`` lists what exists under tmp_path afterwards."""
    work = tmp_path / "work"
    work.mkdir()

    def run(*argv: str, **env: str):
        return run_main(argv, str(work), environment(str(tmp_path), **env))

    run.work = work
    run.files = lambda: sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p != work)
    return run


def one_line_error(result, expected: str) -> None:
    """Exit 2, one line on stderr equal to ``expected`` (after the prefix), nothing on stdout."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [PREFIX + expected], result.stderr
    assert result.stdout == ""


# -- item 3: Hydra's flags in the "=" form -----------------------------------------------------


def test_hydra_flags_in_equals_form_are_hydras(cli, tmp_path):
    result = cli("--cfg=job", "seed=3")
    assert result.returncode == 0, result.stderr
    assert "seed: 3" in result.stdout and "--cfg" not in result.stdout and "torch.distributed.run" not in result.stdout

    mine = tmp_path / "mine"
    (mine / "profile").mkdir(parents=True)
    (mine / "profile" / "mine.yaml").write_text(EXTENDS_EXAMPLES + "task: Pendulum-v1\n")
    for flag in (f"--config-dir={mine}", f"-cd={mine}"):
        result = cli(flag, "profile=mine", "dry_run=true")
        assert result.returncode == 0, result.stderr
        command = result.stdout.splitlines()[-1]
        assert "--task=Pendulum-v1" in command and "--config-dir" not in command and "-cd" not in command
    result = cli("--info=searchpath")
    assert result.returncode == 0 and "Config search path" in result.stdout and "--info" not in result.stdout


def test_empty_hydra_flag_starts_nothing(run_cli, tmp_path):
    """``--cfg=`` used to reach the training script, and a real training started."""
    result = run_cli("--cfg=", "presets=debug")
    assert result.returncode == 2 and result.stderr.splitlines() == [
        PREFIX + "--cfg=: Hydra's flag needs a value (e.g. --cfg job)"
    ]
    assert result.stdout == "" and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config-dir="], "--config-dir=: Hydra's flag needs a value (e.g. --config-dir ~/my_profiles)"),
        (["--cfg=bogus"], "--cfg=bogus: one of job, hydra, all (e.g. --cfg job)"),
        (["--cfg", "dry_run=true"], "--cfg=dry_run=true: one of job, hydra, all (e.g. --cfg job)"),
        (
            ["--info=bogus"],
            "--info=bogus: one of all, config, defaults, defaults-tree, plugins, searchpath (or --info alone)",
        ),
        (["-m=1", "seed=1"], "-m=1: a Hydra switch without a value (write -m)"),
        (["--multirun=yes", "seed=1"], "--multirun=yes: a Hydra switch without a value (write --multirun)"),
        (["--cfg", "job", "--cfg=hydra"], "--cfg=hydra: contradicts --cfg job (give each flag once)"),
        (
            ["-m", "seed=1,2", "--cfg", "hydra"],
            "--cfg=hydra: contradicts --multirun (Hydra does one of --run, --multirun, --cfg, --info, --shell-completion at a time)",  # noqa: E501
        ),
        (
            ["--info", "--cfg=job"],
            "--cfg=job: contradicts --info (Hydra does one of --run, --multirun, --cfg, --info, --shell-completion at a time)",  # noqa: E501
        ),
        (
            ["-cp", "/tmp"],
            "-cp=/tmp: not supported by train_multigpu (train_multigpu's primary config is built in; add a config directory with --config-dir DIR)",  # noqa: E501
        ),
        (
            ["--config-name=other"],
            "--config-name=other: not supported by train_multigpu (train_multigpu's primary config is built in; choose a profile with profile=NAME)",  # noqa: E501
        ),
        (
            ["--experimental-rerun", "x.pickle"],
            "--experimental-rerun=x.pickle: not supported by train_multigpu (train_multigpu writes no Hydra pickle; each run directory's command.sh re-runs its launch)",  # noqa: E501
        ),
        (["--resolve", "dry_run=true"], "--resolve=: only with --cfg or --help (e.g. --cfg job --resolve)"),
        (
            ["-sc", "dry_run=true"],
            '--shell-completion=: needs one of install=SHELL, uninstall=SHELL or query=SHELL (e.g. eval "$(train_multigpu -sc install=bash)")',  # noqa: E501
        ),
        (
            ["-sc", "query=bash"],
            '--shell-completion=query: is run by the shell\'s completion function (COMP_LINE is not set) (install it: eval "$(train_multigpu -sc install=bash)")',  # noqa: E501
        ),
        (
            ["--config-dir", "/nonexistent/dir", "dry_run=true"],
            "--config-dir=/nonexistent/dir: not a directory (a config directory, with your profiles in its profile/ folder)",  # noqa: E501
        ),
    ],
)
def test_hydra_flag_mistakes_are_one_line(cli, argv, message):
    one_line_error(cli(*argv), message)
    assert cli.files() == []


# -- item 4: paths, profiles that cannot be read, Ctrl+C -----------------------------------------


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry_run", "real"])
@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "run_root=afile",
            "run_root=afile: cannot hold run directories: {work}/afile is not a directory (choose a directory you can write, e.g. run_root=runs)",  # noqa: E501
        ),
        (
            "run_root=afile/sub",
            "run_root=afile/sub: cannot hold run directories: {work}/afile is not a directory (choose a directory you can write, e.g. run_root=runs)",  # noqa: E501
        ),
        (
            "run_root=/proc/x",
            "run_root=/proc/x: cannot hold run directories: /proc is on the proc file system (made by the kernel, not a place for files) (choose a directory you can write, e.g. run_root=runs)",  # noqa: E501
        ),
        (
            "run_root=/sys/runs",
            "run_root=/sys/runs: cannot hold run directories: /sys is on the sysfs file system (made by the kernel, not a place for files) (choose a directory you can write, e.g. run_root=runs)",  # noqa: E501
        ),
        (
            "run_root=",
            "run_root=: cannot hold run directories: an empty path (choose a directory you can write, e.g. run_root=runs)",  # noqa: E501
        ),
        (
            "run_name=a/b",
            "run_name=a/b: a name without '/' or control characters, at most 200 bytes (it names the run directory <run_root>/<date>_<time>_<run_name>; run_root= chooses where)",  # noqa: E501
        ),
        (
            "run_name=../../escape",
            "run_name=../../escape: a name without '/' or control characters, at most 200 bytes (it names the run directory <run_root>/<date>_<time>_<run_name>; run_root= chooses where)",  # noqa: E501
        ),
        (
            "run_name=" + "n" * 201,
            "run_name="
            + "n" * 201
            + ": a name without '/' or control characters, at most 200 bytes (it names the run directory <run_root>/<date>_<time>_<run_name>; run_root= chooses where)",  # noqa: E501
        ),
        (
            "python=/nonexistent/python",
            "python=/nonexistent/python: no such interpreter: not an executable file, nor a command on PATH (set python= to an interpreter that exists, or leave it unset)",  # noqa: E501
        ),
    ],
)
def test_paths_that_cannot_work_are_refused_before_anything_is_created(cli, override, message, dry_run):
    (cli.work / "afile").write_text("")
    before = cli.files()
    # script= a file that does not exist: were the check missed, nothing could train anyway
    result = cli(override, "presets=debug", *(["dry_run=true"] if dry_run else []))
    expected = message.format(work=cli.work)
    if dry_run and not override.startswith("run_name="):
        # a fact of this host (issue 18 item 9): the dry run prints the plan, then warns on its last line
        assert result.returncode == 0, result.stderr
        assert (
            result.stderr.splitlines()[-1]
            == f"train_multigpu: warning: {expected}; a real launch on this host refuses it"
        )
        assert "torch.distributed.run" in result.stdout
    else:
        one_line_error(result, expected)
    assert cli.files() == before


def test_unwritable_run_root_for_a_normal_user(tmp_path):
    """Permission bits do not stop root: the check runs as an unprivileged user -- nobody, or, where
    nobody cannot read this checkout or its interpreter (both under /root, say), root without any
    capability (setpriv: an empty bounding set), whom permission bits stop as they stop anyone.
    Before: skipped as root whenever nobody could not read the checkout (every CI run)."""
    import shutil
    import tempfile

    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        unavailable("ROOT", "needs root and setpriv to switch to an unprivileged user")
    probe = subprocess.run(
        [*nobody, "-c", "import launcher"], cwd="/", env=clean_env(), capture_output=True, timeout=60
    )
    if probe.returncode != 0:  # e.g. a checkout under /root, which nobody may not enter
        nobody = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable]
        capless = subprocess.run(
            [*nobody, "-c", "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert capless.stdout.strip() == "0000000000000000", capless

    open_dir = Path(tempfile.mkdtemp(prefix="tmg-locked-", dir="/tmp"))
    os.chmod(open_dir, 0o755)
    locked = open_dir / "locked"
    locked.mkdir(mode=0o555)

    def launch(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*nobody, "-m", "launcher", f"run_root={locked}/runs", *extra],
            cwd="/",
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    why = f"run_root={locked}/runs: cannot hold run directories: no permission to write in {locked}"
    try:
        real, dry = launch(), launch("dry_run=true")
        assert_usage_error(real, why)
        # a fact of this host: the dry run prints the plan and warns (issue 18 item 9)
        assert dry.returncode == 0 and dry.stdout, dry.stderr
        assert f"train_multigpu: warning: {why}" in dry.stderr, dry.stderr
        assert list(locked.iterdir()) == []
    finally:
        locked.rmdir()
        open_dir.rmdir()


def test_failed_start_leaves_no_run_directory(run_cli, tmp_path):
    """``python=/nonexistent/python`` used to leave runs/<t>/ with ``exit_code: null``."""
    result = run_cli("python=/nonexistent/python", "presets=debug")
    assert_usage_error(result, "python=/nonexistent/python: no such interpreter")
    assert not (tmp_path / "runs").exists()


def test_save_profile_where_nothing_can_be_written(cli):
    one_line_error(
        cli("save_profile=/proc/x.yaml"),
        "save_profile=/proc/x.yaml: cannot write /proc/x.yaml: /proc is on the proc file system (made by the kernel, not a place for files) (save it in a directory you can write)",  # noqa: E501
    )


@pytest.mark.parametrize("flag", ["--num_gpus", "--nnodes"])
def test_unicode_digits_are_not_integers(cli, flag):
    key = {"--num_gpus": "launcher.nproc_per_node", "--nnodes": "launcher.nnodes"}[flag]
    allowed = {
        "--num_gpus": "an integer >= 1, or auto (all visible GPUs, else all usable CPU cores), gpu or cpu",
        "--nnodes": "an integer >= 1, or MIN:MAX with 1 <= MIN <= MAX",
    }[flag]
    one_line_error(
        cli(flag, "²", "launcher=multinode", "launcher.rdzv_endpoint=10.0.0.1:29400", "dry_run=true"),
        f"{key}=²: {allowed}",
    )


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"bad": b"# @package _global_\nlauncher: [unclosed\n"},
            "profile=bad: {dir}/profile/bad.yaml is not valid YAML: expected ',' or ']', but got '<stream end>' (line 3, column 1) (fix the file)",  # noqa: E501
        ),
        (
            {"bad": b"# @package _global_\ntask: caf\xe9\n"},
            "profile=bad: {dir}/profile/bad.yaml is not UTF-8 text (invalid continuation byte at byte 29) (save the file as UTF-8)",  # noqa: E501
        ),
        (
            {"bad": b"# @package _global_\ndefaults:\n  - /profile/bad\n  - _self_\n"},
            "profile=bad: its defaults list includes itself: profile/bad -> profile/bad (remove the entry that leads back to it)",  # noqa: E501
        ),
        (
            {
                "bad": b"# @package _global_\ndefaults:\n  - /profile/other\n  - _self_\n",
                "other": b"# @package _global_\ndefaults:\n  - /profile/bad\n  - _self_\n",
            },
            "profile=bad: its defaults list includes itself: profile/bad -> profile/other -> profile/bad (remove the entry that leads back to it)",  # noqa: E501
        ),
    ],
    ids=["yaml_syntax", "not_utf8", "includes_itself", "include_loop"],
)
@pytest.mark.parametrize("multirun", [False, True], ids=["single", "multirun"])
def test_profiles_that_cannot_be_read(cli, files, message, multirun):
    project = cli.work / ".train_multigpu"
    (project / "profile").mkdir(parents=True)
    for name, data in files.items():
        (project / "profile" / f"{name}.yaml").write_bytes(data)
    one_line_error(cli(*(["-m"] if multirun else []), "profile=bad", "dry_run=true"), message.format(dir=project))


PAUSE_IN_COMPOSITION = """
import os, time
import hydra._internal.config_loader_impl as loader

_load = loader.ConfigLoaderImpl.load_configuration


def _paused(self, *args, **kwargs):  # the test's Ctrl+C lands here, in the middle of composition
    if not os.path.exists(os.environ["TMG_TEST_PAUSED"]):  # the first composition only
        open(os.environ["TMG_TEST_PAUSED"], "w").close()
        # a single launch: the KeyboardInterrupt ends it; a sweep notes the signal and goes on
        if os.environ.get("TMG_TEST_PAUSE_IN_EXEC"):  # as in dataclasses' generated methods
            exec("import time; time.sleep(5)")
        else:
            time.sleep(5)
    return _load(self, *args, **kwargs)


loader.ConfigLoaderImpl.load_configuration = _paused
"""


PAUSE_IN_IMPORT = """
import os, sys, time


class _PauseAtImport:  # the test's Ctrl+C lands here, while Python imports the launcher
    def find_spec(self, name, path=None, target=None):
        if name == "launcher.cli":
            sys.meta_path.remove(self)
            open(os.environ["TMG_TEST_PAUSED"], "w").close()
            time.sleep(5)
        return None


sys.meta_path.insert(0, _PauseAtImport())
"""


def interrupted_while_paused(tmp_path: Path, hook: str, argv: list[str], **env_vars: str) -> tuple[int, str, str, Path]:
    """Start ``argv`` with ``hook`` as its sitecustomize (the only stand-in: it holds the launcher
    still, so that the signal lands in the same place every time rather than by luck of timing),
    Ctrl+C it once paused; (exit code, stdout, stderr, its working directory)."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(hook)
    paused, work = tmp_path / "paused", tmp_path / "work"
    work.mkdir()
    env = clean_env(TMG_TEST_PAUSED=str(paused), **env_vars)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "hook"), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not paused.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, work


@pytest.mark.parametrize(
    "argv", [["dry_run=true"], ["presets=debug"], ["-m", "seed=1,2"]], ids=["dry_run", "real", "multirun"]
)
@pytest.mark.parametrize("inside", ["", "exec"], ids=["plain", "inside_exec_of_a_string"])
def test_ctrl_c_during_composition_is_a_quiet_130(tmp_path, argv, inside):
    """Ctrl+C while Hydra composes: no KeyboardInterrupt traceback, exit 130, nothing created. Also
    when the interrupt leaves an ``exec`` of a string, which CPython 3.11 would turn into an end by
    SIGINT (a shell shows 130 for both; a parent's ``returncode`` is -2 for that)."""
    code, out, err, work = interrupted_while_paused(
        tmp_path, PAUSE_IN_COMPOSITION, [sys.executable, "-m", "launcher", *argv], TMG_TEST_PAUSE_IN_EXEC=inside
    )
    assert code == 130, err
    assert err == ""
    if "-m" in argv:  # the sweep notes the signal, composes, starts no job and says so
        assert out.count("skipped (interrupted)") == 2, out
    else:
        assert out == ""
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("how", ["python -m launcher", "console script"])
def test_ctrl_c_while_python_imports_the_launcher_is_a_quiet_130(tmp_path, how):
    """The first tenth of a second: Python is still importing the launcher (launcher.cli and what it
    imports; Hydra comes later, inside the entry's own guard)."""
    script = Path(sys.executable).parent / "train_multigpu"
    if how == "console script" and not script.exists():
        pytest.skip(f"{script}: the package is not installed in this environment")
    argv = [sys.executable, "-m", "launcher"] if how == "python -m launcher" else [str(script)]
    code, out, err, work = interrupted_while_paused(tmp_path, PAUSE_IN_IMPORT, [*argv, "dry_run=true"])
    assert (code, out, err) == (130, "", "")
    assert list(work.iterdir()) == []


# -- item 12: contradictions and impossible values ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--num_gpus", "2", "launcher.nproc_per_node=4"],
            "launcher.nproc_per_node=4: contradicts --num_gpus 2 (give each key once)",
        ),
        (
            ["launcher.nproc_per_node=4", "--nproc_per_node=2"],
            "launcher.nproc_per_node=2: contradicts launcher.nproc_per_node=4 (give each key once)",
        ),
        (["seed=1", "seed=2"], "seed=2: contradicts seed=1 (give each key once)"),
        (["--task", "A-v0", "task=B-v0"], "task=B-v0: contradicts --task A-v0 (give each key once)"),
        (
            ["launcher=single_node", "launcher=multinode"],
            "launcher=multinode: contradicts launcher=single_node (give each key once)",
        ),
        (["+worker_env.X=1", "worker_env.X=2"], "worker_env.X=2: contradicts +worker_env.X=1 (give each key once)"),
        (["--dry_run", "dry_run=false"], "dry_run=false: contradicts --dry_run (give each key once)"),
        (
            ["--ml_framework", "jax", "launcher=multinode"],
            "launcher=multinode: contradicts --ml_framework jax (JAX runs on launcher=skrl_jax (or slurm_jax); torch on the others)",  # noqa: E501
        ),
        (
            ["--ml_framework", "torch", "launcher=skrl_jax"],
            "launcher=skrl_jax: contradicts --ml_framework torch (JAX runs on launcher=skrl_jax (or slurm_jax); torch on the others)",  # noqa: E501
        ),
        (
            ["--ml_framework", "jax", "--ml_framework=torch"],
            "--ml_framework=torch: contradicts --ml_framework jax (give each flag once)",
        ),
        (
            ["script="],
            "script=: an empty path (give the training script's path, or leave script unset to run the profile's trainer)",  # noqa: E501
        ),
        (["num_envs=-5"], "num_envs=-5: an integer >= 1 (leave num_envs unset to use the training script's default)"),
        (
            ["--num_envs", "0"],
            "num_envs=0: an integer >= 1 (leave num_envs unset to use the training script's default)",
        ),
        (
            ["max_iterations=0"],
            "max_iterations=0: an integer >= 1 (leave max_iterations unset to use the training script's default)",
        ),
        (
            ["python="],
            "python=: no such interpreter: not an executable file, nor a command on PATH (set python= to an interpreter that exists, or leave it unset)",  # noqa: E501
        ),
    ],
)
def test_contradictions_and_impossible_values(cli, argv, message):
    one_line_error(cli(*argv, "dry_run=true"), message)


def test_the_same_value_twice_is_no_contradiction(cli):
    result = cli("--seed", "3", "seed=3", "--nproc_per_node=2", "launcher.nproc_per_node='2'", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].count("--seed=3") == 1


def test_ml_framework_jax_with_slurm_jax_is_consistent(cli):
    one_line_error(
        cli("--ml_framework", "jax", "launcher=slurm_jax", "dry_run=true"),
        "launcher=slurm_jax: only runs inside a SLURM allocation (SLURM_JOB_ID is not set) "
        "(submit with submit=slurm, or start it under sbatch/salloc with srun --ntasks-per-node=1)",
    )


# -- item 13: messages ---------------------------------------------------------------------------


def shell_words(snippet: str) -> list[str]:
    """The arguments a POSIX shell makes of ``snippet`` (bash itself, not a re-implementation)."""
    out = subprocess.run(
        ["bash", "-c", f'for a in {snippet}; do printf "%s\\0" "$a"; done'], capture_output=True, text=True, check=True
    )
    return out.stdout.split("\0")[:-1]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "task=a=b",
            "task=a=b: Hydra's override grammar needs this value quoted (write --task a=b, or \"task='a=b'\")",
        ),
        (
            "task=it's",
            "task=it's: Hydra's override grammar needs this value quoted (write --task \"it's\", or \"task='it\\\\'s'\")",  # noqa: E501
        ),
        (
            "task=café",
            "task=café: Hydra's override grammar needs this value quoted (write --task 'café', or \"task='café'\")",
        ),
        (
            "launcher.rdzv_id=a=b",
            "launcher.rdzv_id=a=b: Hydra's override grammar needs this value quoted (write --rdzv_id a=b, or \"launcher.rdzv_id='a=b'\")",  # noqa: E501
        ),
        (
            "+worker_env.X=${",
            "worker_env.X=${: Hydra's override grammar needs this value quoted (write \"+worker_env.X='\\\\\\${'\")",
        ),
    ],
)
def test_values_the_override_grammar_cannot_read_name_the_key_and_the_quoting(cli, override, message):
    one_line_error(cli(override, "dry_run=true"), message)
    # what the message says to type works, every way it offers: the shell's words, then the launcher
    key, _, value = override.partition("=")
    offered = message[message.index("(write ") + len("(write ") : -1].split(", or ")
    # any task reaches a script given as script= (profile=examples' trainer knows its own tasks only)
    own = [f"script={Path(__file__).resolve().parents[1] / 'examples' / 'train.py'}"] if key == "task" else []
    for snippet in offered:
        result = cli(*shell_words(snippet), "dry_run=true", *own)
        if key == "launcher.rdzv_id":  # a torchrun key single_node does not take: the value arrived
            assert f"launcher.rdzv_id={value}" in result.stderr or result.returncode == 0, result.stderr
            continue
        assert result.returncode == 0, (snippet, result.stderr)
        command = shlex.split(result.stdout.splitlines()[-1])
        if key == "task":
            assert f"--task={value}" in command, (snippet, command)
        else:
            assert f"X={shlex.quote(value)}" in result.stdout or f"X={value}" in result.stdout, (snippet, result.stdout)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--master_port="], "--master_port=: this flag needs a value (e.g. --master_port=VALUE)"),
        (["--task="], "--task=: this flag needs a value (e.g. --task=VALUE)"),
        (
            ["launcher=slurm_jax"],
            "launcher=slurm_jax: only runs inside a SLURM allocation (SLURM_JOB_ID is not set) (submit with submit=slurm, or start it under sbatch/salloc with srun --ntasks-per-node=1)",  # noqa: E501
        ),
        (
            ["seed=1,2"],
            "seed=1,2: a comma list is a sweep: one job per value (add -m to sweep, or quote it as one string: \"seed='1,2'\")",  # noqa: E501
        ),
        (
            ["launcher=3"],
            "launcher=3: a launcher name, not a number, true/false or null (a name that reads as one needs quotes: '3')",  # noqa: E501
        ),
        (
            ["launcher=null"],
            "launcher=null: a launcher name, not a number, true/false or null (a name that reads as one needs quotes: 'null')",  # noqa: E501
        ),
        (
            ["launcher=[1,2]"],
            "launcher=[1,2]: a launcher name, not a number, true/false or null (a name that reads as one needs quotes: '1')",  # noqa: E501
        ),
        (["--master_addr", ""], "--master_addr=: this flag needs a value (e.g. --master_addr=VALUE)"),
        (["task=${x}"], "task=${x}: Interpolation key 'x' not found"),  # the value as typed, not an empty one
        (
            ["launcher.nproc_per_node=${oc.env:TMG_TEST_UNSET}"],
            "launcher.nproc_per_node=${oc.env:TMG_TEST_UNSET}: KeyError raised while resolving interpolation: "
            "\"Environment variable 'TMG_TEST_UNSET' not found\"",
        ),
    ],
)
def test_messages(cli, argv, message):
    one_line_error(cli(*argv, "dry_run=true"), message)


# -- item 14: profile names are plain names -----------------------------------------------------


@pytest.mark.parametrize("group", ["profile", "presets", "launcher", "rl_library"])
def test_config_group_options_are_names_not_paths(cli, tmp_path, group):
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "evil.yaml").write_text("# @package _global_\ntask: EVIL-v0\n")
    relative = os.path.relpath(evil / "evil", cli.work / ".train_multigpu" / group)
    for value in (relative, f"[debug,{relative}]", str(evil / "evil")):
        if value.startswith("[") and group != "presets":
            continue
        one_line_error(
            cli(f"{group}={value}", "dry_run=true"),
            f"{group}={value}: a {group} name, not a path "
            f"(put the directory in --config-dir DIR or TRAIN_MULTIGPU_CONFIG_PATH, then select {group}=NAME)",
        )


def test_a_profile_directory_is_given_with_config_dir(cli, tmp_path):
    evil = tmp_path / "elsewhere"
    (evil / "profile").mkdir(parents=True)
    (evil / "profile" / "mine.yaml").write_text(EXTENDS_EXAMPLES + "task: Pendulum-v1\n")
    result = cli("--config-dir", str(evil), "profile=mine", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "--task=Pendulum-v1" in result.stdout


# -- docs/errors.md lists every message above --------------------------------------------------


@pytest.mark.parametrize(
    "phrase",
    [
        "Hydra's flag needs a value",
        "a Hydra switch without a value",
        "one of job, hydra, all",
        "not supported by train_multigpu",
        "--config-dir=/x: not a directory",
        "only with --cfg or --help",
        "needs one of install=SHELL, uninstall=SHELL or query=SHELL",
        "this flag needs a value",
        "contradicts --num_gpus 2 (give each key once)",
        "contradicts --ml_framework jax",
        "contradicts --cfg job (give each flag once)",
        "Hydra does one of --run, --multirun, --cfg, --info, --shell-completion at a time",
        "Hydra's override grammar needs this value quoted",
        "a comma list is a sweep: one job per value",
        "launcher=3: a launcher name, not a number",
        "a profile name, not a path",
        "num_envs=-5: an integer >= 1",
        "max_iterations=0: an integer >= 1",
        "script=: an empty path",
        "a name without '/' or control characters, at most 200 bytes",
        "cannot hold run directories",
        "is on the proc file system",
        "cannot create the run directory",
        "no such interpreter: not an executable file, nor a command on PATH",
        "is not valid YAML",
        "is not UTF-8 text",
        "its defaults list includes itself",
        "save_profile=/proc/x.yaml: cannot write",
        "launcher=slurm_jax: only runs inside a SLURM allocation",
        "exits quietly with code 130",
    ],
)
def test_errors_md_lists_the_message(phrase):
    text = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    assert phrase in text
