"""Unit tests for launcher.sbatch (pure rendering; the real cluster is in test_slurm_cluster)."""

import dataclasses

import pytest

from launcher.slurm.batch import (
    SBATCH_LONG_OPTIONS,
    SbatchError,
    SlurmSettings,
    _FIELD_OPTIONS,
    render_sbatch,
    time_limit_seconds,
)


def render(settings=None, command=("python", "train.py"), env=None, workdir="/work/run"):
    return render_sbatch(settings or SlurmSettings(), list(command), env or {}, workdir)


def directives(text):
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_minimal_script():
    text = render()
    assert text.startswith("#!/bin/bash\n")
    assert directives(text) == [
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --chdir=/work/run",
        "#SBATCH --signal=B:USR1@120",
        "#SBATCH --no-requeue",
    ]
    assert "set -euo pipefail" in text
    assert "trap forward_usr1 USR1" in text
    assert "srun --nodes 1 --ntasks-per-node=1 --kill-on-bad-exit=1 -- python train.py &" in text
    assert text.rstrip().endswith('exit "$status"')


def test_full_settings_in_order():
    s = SlurmSettings(nodes=4, gpus_per_node=8, gpu_type="h100", cpus_per_task=32,
                      ntasks_per_node=1, partition="gpu", time="1-00:00:00", account="rl",
                      qos="high", job_name="ppo-ant", mem="0", output="logs/%x-%j.out",
                      error="logs/%x-%j.err", signal_seconds=300, requeue=True,
                      extra={"exclusive": True, "--constraint": "a100&ib", "nice": 10,
                             "hold": False})
    assert directives(render(s)) == [
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
        "#SBATCH --output=logs/%x-%j.out",
        "#SBATCH --error=logs/%x-%j.err",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --requeue",
        "#SBATCH --exclusive",
        '#SBATCH --constraint="a100&ib"',
        "#SBATCH --nice=10",
    ]
    assert "--cpus-per-task=32 -- python train.py &" in render(s)


def test_gpus_without_type_and_no_signal():
    text = render(SlurmSettings(gpus_per_node=2, signal_seconds=None))
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
    assert f"#SBATCH --job-name={rendered}" in directives(render(SlurmSettings(job_name=value)))


def test_env_and_command_are_shell_quoted():
    text = render(command=["python", "-c", "print('a b')", "--x=$y"],
                  env={"OMP_NUM_THREADS": "1", "MSG": "it's $HOME", "EMPTY": ""},
                  workdir="/tmp/run dir")
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
        ({"nodes": 0}, "nodes=0: must be >= 1"),
        ({"nodes": "2"}, "nodes: expected an integer, got '2'"),
        ({"nodes": True}, "nodes: expected an integer, got True"),
        ({"gpus_per_node": -1}, "gpus_per_node=-1: must be >= 0"),
        ({"ntasks_per_node": 0}, "ntasks_per_node=0: must be >= 1"),
        ({"cpus_per_task": 0}, "cpus_per_task=0: must be >= 1"),
        ({"gpu_type": "a100"}, "gpu_type='a100' needs gpus_per_node >= 1"),
        ({"gpu_type": "a 100", "gpus_per_node": 1}, "gpu_type='a 100': letters, digits"),
        ({"job_name": "a\nb"}, "job_name='a\\nb': control character '\\n'"),
        ({"partition": ""}, "partition: must not be empty"),
        ({"account": 5}, "account: expected a string, got int 5"),
        ({"output": "x\r"}, "output='x\\r': control character"),
        ({"mem": "64GB"}, "mem='64GB': expected a number with optional K/M/G/T suffix"),
        ({"time": "2h"}, "time='2h': expected minutes, MM:SS"),
        ({"time": "2", "signal_seconds": 120}, "signal_seconds=120: must be shorter than time='2'"),
        ({"signal_seconds": 0}, "signal_seconds=0: must be between 1 and 65535"),
        ({"signal_seconds": 70000}, "signal_seconds=70000: must be between 1 and 65535"),
        ({"requeue": "yes"}, "requeue: expected true or false, got 'yes'"),
        ({"extra": ["exclusive"]}, "extra: expected a mapping"),
        ({"extra": {"nodes": 2}}, "extra.nodes: set SlurmSettings.nodes instead"),
        ({"extra": {"--no-requeue": True}}, "extra.no-requeue: set SlurmSettings.requeue"),
        ({"extra": {"chdir": "/x"}}, "extra.chdir: set SlurmSettings.workdir (render_sbatch"),
        ({"extra": {"gpus-per-nod": 1}}, "extra.gpus-per-nod: not a known sbatch long option "
                                         "(did you mean: gpus, gpus-per-socket, gpus-per-task?)"),
        ({"extra": {"frobnicate": 1}}, "extra.frobnicate: not a known sbatch long option"),
        ({"extra": {"wrap": "ls"}}, "extra.wrap: not a known sbatch long option"),
        ({"extra": {"comment": "a\nb"}}, "extra.comment='a\\nb': control character"),
        ({"extra": {3: "x"}}, "extra: option names must be strings, got 3"),
    ],
)
def test_settings_errors(kwargs, message):
    with pytest.raises(SbatchError) as info:
        SlurmSettings(**kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "call, message",
    [
        ({"command": []}, "command: expected a non-empty list"),
        ({"command": "python x.py"}, "command: expected a non-empty list"),
        ({"command": ["python", 3]}, "command[1]: expected a string, got 3"),
        ({"command": ["a\x00"]}, "command[0]='a\\x00': NUL character"),
        ({"workdir": "rel/dir"}, "workdir='rel/dir': must be an absolute path"),
        ({"workdir": "/a\nb"}, "workdir='/a\\nb': control character"),
        ({"env": {"1BAD": "x"}}, "env: '1BAD' is not a valid variable name"),
        ({"env": {"A-B": "x"}}, "env: 'A-B' is not a valid variable name"),
        ({"env": {"A": 1}}, "env.A: expected a string without NUL, got 1"),
    ],
)
def test_render_errors(call, message):
    args = {"command": ["python"], "env": {}, "workdir": "/w", **call}
    with pytest.raises(SbatchError) as info:
        render_sbatch(SlurmSettings(), args["command"], args["env"], args["workdir"])
    assert message in str(info.value)


def test_settings_are_frozen_and_options_consistent():
    s = SlurmSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.nodes = 3
    names = {f.name for f in dataclasses.fields(SlurmSettings)}
    assert {v for v in _FIELD_OPTIONS.values() if " " not in v} <= names
    assert not SBATCH_LONG_OPTIONS & set(_FIELD_OPTIONS)
