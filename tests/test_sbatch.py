"""Unit tests for launcher.slurm.batch (pure rendering from the schema's SlurmConfig; the real
cluster is in test_slurm_cluster)."""

import pytest

from launcher.config.schema import SlurmConfig
from launcher.errors import UserError
from launcher.slurm.batch import KEY_OPTIONS, SBATCH_LONG_OPTIONS, check, time_limit_seconds
from launcher.slurm.batch import render as render_batch


def render(
    slurm=None,
    command=("python", "train.py"),
    env=None,
    workdir="/work/run",
    job_name="train_multigpu",
    output="/work/run/slurm-%j.out",
):
    command = command if isinstance(command, str) else list(command)
    return render_batch(slurm or SlurmConfig(requeue=False), command, env or {}, workdir, job_name, output)


def directives(text):
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_minimal_script():
    text = render()
    assert text.startswith("#!/bin/bash\n")
    assert directives(text) == [
        "#SBATCH --job-name=train_multigpu",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --chdir=/work/run",
        "#SBATCH --output=/work/run/slurm-%j.out",
        "#SBATCH --signal=B:USR1@120",
        "#SBATCH --no-requeue",
    ]
    assert "set -euo pipefail" in text
    assert "trap forward_usr1 USR1" in text
    assert "srun --nodes 1 --ntasks-per-node=1 --kill-on-bad-exit=1 -- python train.py &" in text
    assert text.rstrip().endswith('exit "$status"')


def test_full_settings_in_order():
    s = SlurmConfig(
        nodes=4,
        gpus_per_node=8,
        gpu_type="h100",
        cpus_per_task=32,
        partition="gpu",
        time="1-00:00:00",
        account="rl",
        qos="high",
        mem="0",
        signal_seconds=300,
        requeue=True,
        extra={"exclusive": True, "--constraint": "a100&ib", "nice": 10, "hold": False},
    )
    assert directives(render(s, job_name="ppo-ant", output="/logs/%x-%j.out")) == [
        "#SBATCH --job-name=ppo-ant",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=h100:8",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --mem=0",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=rl",
        "#SBATCH --qos=high",
        "#SBATCH --time=1-00:00:00",
        "#SBATCH --chdir=/work/run",
        "#SBATCH --output=/logs/%x-%j.out",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --requeue",
        "#SBATCH --exclusive",
        '#SBATCH --constraint="a100&ib"',
        "#SBATCH --nice=10",
        "#SBATCH --open-mode=append",  # a requeued job appends to its log
    ]
    assert "--cpus-per-task=32 -- python train.py &" in render(s)


def test_gpus_without_type_and_no_signal():
    text = render(SlurmConfig(gpus_per_node=2, signal_seconds=None))
    assert "#SBATCH --gpus-per-node=2" in directives(text)
    assert "--signal" not in text and "trap forward_usr1" not in text


@pytest.mark.parametrize(
    "value, rendered",
    [
        ("my run", '"my run"'),
        ("a#b", '"a#b"'),  # unquoted, sbatch would cut the value at '#'
        ('say "hi"', r'"say \"hi\""'),
        ("back\\slash", r'"back\\slash"'),  # sbatch eats a bare backslash, even in '...'
        ("it's", '"it\'s"'),
        ("$HOME", '"$HOME"'),  # no expansion either way; quoted because '$' is not plain
    ],
)
def test_directive_quoting(value, rendered):
    assert f"#SBATCH --job-name={rendered}" in directives(render(job_name=value))


def test_env_and_command_are_shell_quoted():
    text = render(
        command=["python", "-c", "print('a b')", "--x=$y"],
        env={"OMP_NUM_THREADS": "1", "MSG": "it's $HOME", "EMPTY": ""},
        workdir="/tmp/run dir",
    )
    assert "export OMP_NUM_THREADS=1\n" in text
    assert "export MSG='it'\"'\"'s $HOME'\n" in text
    assert "export EMPTY=''\n" in text
    assert "cd '/tmp/run dir'\n" in text
    assert '#SBATCH --chdir="/tmp/run dir"' in text
    assert "-- python -c 'print('\"'\"'a b'\"'\"')' '--x=$y' &" in text


def test_time_limit_seconds():
    assert time_limit_seconds("30") == 1800
    assert time_limit_seconds("30:15") == 1815
    assert time_limit_seconds("2:00:00") == 7200
    assert time_limit_seconds("1-2") == 93600
    assert time_limit_seconds("1-2:30") == 95400
    assert time_limit_seconds("1-0:0:5") == 86405
    assert time_limit_seconds("UNLIMITED") is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nodes": 0}, "slurm.nodes=0: must be >= 1"),
        ({"gpus_per_node": -1}, "slurm.gpus_per_node=-1: must be >= 0"),
        ({"cpus_per_task": 0}, "slurm.cpus_per_task=0: must be >= 1"),
        ({"gpu_type": "a100"}, "slurm.gpu_type=a100: needs gpus_per_node >= 1"),
        ({"gpu_type": "a 100", "gpus_per_node": 1}, "slurm.gpu_type=a 100: letters, digits"),
        ({"job_name": "a\nb"}, "slurm.job_name=a\\nb: control character '\\n'"),
        ({"partition": ""}, "slurm.partition=: must not be empty"),
        ({"mem": "64GB"}, "slurm.mem=64GB: expected a number with optional K/M/G/T suffix"),
        ({"time": "2h"}, "slurm.time=2h: expected minutes, MM:SS"),
        ({"time": "2", "signal_seconds": 120}, "slurm.signal_seconds=120: must be shorter than time='2'"),
        ({"signal_seconds": 0}, "slurm.signal_seconds=0: must be between 1 and 65535"),
        ({"signal_seconds": 70000}, "slurm.signal_seconds=70000: must be between 1 and 65535"),
        # issue 19: launcher.nnodes is the node count on every back end (slurm.nodes: its alias)
        ({"extra": {"nodes": 2}}, "slurm.extra.nodes=2: set launcher.nnodes instead"),
        ({"extra": {"array": "0-3"}}, "slurm.extra.array=0-3: set the launcher (a -m sweep is one job array"),
        ({"extra": {"--no-requeue": True}}, "slurm.extra.no-requeue=True: set slurm.requeue"),
        ({"extra": {"chdir": "/x"}}, "slurm.extra.chdir=/x: set the launcher (the directory"),
        (
            {"extra": {"gpus-per-nod": 1}},
            "slurm.extra.gpus-per-nod=1: not a known sbatch long option "
            "(did you mean: gpus, gpus-per-socket, gpus-per-task?)",
        ),
        ({"extra": {"frobnicate": 1}}, "slurm.extra.frobnicate=1: not a known sbatch long option"),
        ({"extra": {"wrap": "ls"}}, "slurm.extra.wrap=ls: not a known sbatch long option"),
        ({"extra": {"comment": "a\nb"}}, "slurm.extra.comment=a\\nb: control character"),
    ],
)
def test_settings_errors(kwargs, message):
    with pytest.raises(UserError) as info:
        check(SlurmConfig(**kwargs))
    assert str(info.value).startswith(message), str(info.value)
    assert str(info.value).endswith("(docs/slurm.md lists the slurm.* keys)")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "call, message",
    [
        ({"command": []}, "command: expected a non-empty list"),
        ({"command": "python x.py"}, "command: expected a non-empty list"),
        ({"command": ["a\x00"]}, "command[0]='a\\x00': NUL character"),
        ({"workdir": "rel/dir"}, "workdir='rel/dir': must be an absolute path"),
        ({"workdir": "/a\nb"}, "workdir='/a\\nb': must be an absolute path without control characters"),
        ({"env": {"1BAD": "x"}}, "env: '1BAD' is not a valid variable name"),
        ({"env": {"A-B": "x"}}, "env: 'A-B' is not a valid variable name"),
    ],
)
def test_render_errors(call, message):
    args = {"command": ["python"], "env": {}, "workdir": "/w", **call}
    with pytest.raises(UserError) as info:
        render(command=args["command"], env=args["env"], workdir=args["workdir"])
    assert str(info.value).startswith("submit=slurm: cannot write the batch script: " + message), str(info.value)


def test_options_the_keys_own_are_not_extra_options():
    assert not SBATCH_LONG_OPTIONS & set(KEY_OPTIONS)
