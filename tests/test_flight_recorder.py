"""PyTorch's NCCL flight recorder on CUDA launches (launcher/plan.py, launcher/run/postmortem/flight_recorder.py).

No GPU exists here: the GPUs are faked as host facts (``gpus=2``, or ``CUDA_VISIBLE_DEVICES`` for the
dry run and the launch), nothing else. NCCL's flight recorder itself is GPU-only: in the launch below
each rank (tests/workers/hang.py, torch + gloo) plays its part as torch 2.13's ProcessGroupNCCL does it
(the pipe ``<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe``, the dump ``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``)."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import subprocess
import sys

import pytest

from conftest import build, clean_env, off_checkout
from launcher import plan
from launcher.addresses import Endpoint
from launcher.run.postmortem import causes, flight_recorder, oom
from launcher.run.postmortem.failure import Failure
from supervise_util import REPO, finish, run_dir

HANG = REPO / "tests" / "workers" / "hang.py"

WRAPPER = "/pkg/launcher/run/worker.py"
SWITCHES = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
FILES = {
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/runs/r1/nccl/trace_rank_",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/runs/r1/nccl/pipe_rank_",
}


def supervised(p: plan.LaunchPlan) -> dict[str, str]:
    return dict(plan.supervised(p, WRAPPER, "/runs/r1/logs", "id").env)


def test_a_cuda_torchrun_launch_turns_the_recorder_on_with_dumps_in_the_run_dir():
    p = build(["device=cuda"], gpus=2)  # faked: two GPUs
    assert {name: p.env.get(name) for name in SWITCHES} == SWITCHES
    env = supervised(p)
    assert {name: env.get(name) for name in FILES} == FILES


def test_the_users_values_win_under_either_name():
    p = build(
        ["device=cuda", "+worker_env.TORCH_FR_BUFFER_SIZE=100", "+worker_env.TORCH_FR_DUMP_TEMP_FILE=/scratch/fr_"],
        gpus=2,
    )
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in p.env and p.env["TORCH_FR_BUFFER_SIZE"] == "100"
    env = supervised(p)
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in env and env["TORCH_FR_DUMP_TEMP_FILE"] == "/scratch/fr_"
    assert env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == FILES["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"]
    # the launcher's own environment (exported in the shell) is inherited by the ranks: left alone too
    p = build(["device=cuda"], gpus=2, env={"TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/p"})
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in p.env and "TORCH_NCCL_DEBUG_INFO_PIPE_FILE" not in supervised(p)


def test_cpu_and_jax_launches_get_none_of_it():
    for p in (
        build(["device=cpu"]),
        build(
            ["device=cuda", "launcher=skrl_jax", "launcher.nproc_per_node=2"],
            gpus=2,
            coordinator=Endpoint("127.0.0.1", 1234),
        ),
    ):
        env = supervised(p)
        assert not [name for name in env if name.startswith(("TORCH_NCCL", "TORCH_FR"))]


def test_the_dry_run_shows_them(run_cli):
    result = run_cli("device=cuda", "--dry_run", env=clean_env(CUDA_VISIBLE_DEVICES="0,1"))  # faked GPUs
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in lines and "export TORCH_NCCL_DUMP_ON_TIMEOUT=1" in lines
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=<run dir>/nccl/trace_rank_" in result.stdout
    assert "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<run dir>/nccl/pipe_rank_" in result.stdout
    assert shlex.split(lines[-1])[1:3] == ["-m", "torch.distributed.run"]


def test_dumps_on_demand_write_to_every_open_pipe_and_never_block(tmp_path):
    stem = str(tmp_path / "nccl" / "pipe_rank_")
    env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": stem}
    assert flight_recorder.trigger_dumps({}) == []
    flight_recorder.prepare(env)
    assert flight_recorder.trigger_dumps(env) == []  # no rank opened one: a no-op
    os.mkfifo(stem + "0.pipe")
    os.mkfifo(stem + "1.pipe")  # rank 1 is gone: no reader
    reader = os.open(stem + "0.pipe", os.O_RDONLY | os.O_NONBLOCK)  # as torch's DumpPipe opens it
    try:
        assert flight_recorder.trigger_dumps(env) == [stem + "0.pipe"]
        assert os.read(reader, 128) != b""  # what makes the rank dump
        (line,) = flight_recorder.request_dumps(env, tmp_path, wait_s=0.3)  # the hang path's call
        assert line == "NCCL flight recorder: no dump from rank(s) 0 within 0.3 s of asking (through its pipe)"
        assert os.read(reader, 128) != b""
    finally:
        os.close(reader)


def test_the_summary_says_where_the_dumps_are_and_how_to_read_them(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "pipe_rank_0.pipe").write_text("")
    failure = Failure(node=0, rank=0, local_rank=0, exit_code=1)
    assert not causes.diagnose(failure, causes.Context(log_dir, torchrun=True), oom.Counters()).dumps
    (tmp_path / "nccl" / "trace_rank_0").write_bytes(b"\x80")
    lines = causes.diagnose(failure, causes.Context(log_dir, torchrun=True), oom.Counters()).lines()
    assert f"  NCCL flight recorder dumps: {tmp_path / 'nccl'} (read with: " in lines[-1]
    assert f"python -m torch.distributed.flight_recorder.fr_trace {tmp_path / 'nccl'})" in lines[-1]


@pytest.mark.timeout(120)
def test_a_hang_waits_for_every_ranks_dump_before_stopping_it_and_the_summary_names_them(tmp_path):
    """A real launch (faked GPUs: CUDA_VISIBLE_DEVICES=0,1 makes it a CUDA launch, which sets the
    flight recorder's variables); rank 1 sleeps before the 3rd all-reduce. Each rank answers its pipe
    about once a second, as torch does, so its dump is only there if the launch waited for it."""
    pids = tmp_path / "pids"
    pids.mkdir()
    argv = [
        sys.executable, "-m", "launcher", "device=cuda", "launcher.nproc_per_node=2", f"script={HANG}",
        f"run_root={tmp_path / 'runs'}", "launcher.hang_timeout=3", "--", "--mode", "torch", "--pid_dir", str(pids),
    ]  # fmt: skip
    env = {**off_checkout(os.environ), "CUDA_VISIBLE_DEVICES": "0,1"}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    code, out, err = finish(proc, timeout=90)
    assert code == 124, out + err
    run = run_dir(tmp_path)
    nccl = run / "nccl"
    dumps = [nccl / "trace_rank_0", nccl / "trace_rank_1"]
    for rank, dump in enumerate(dumps):
        assert pickle.loads(dump.read_bytes())["rank"] == rank
    said = (
        f"NCCL flight recorder: 2 dump(s) in {nccl}: trace_rank_0, trace_rank_1 "
        f"(read with: python -m torch.distributed.flight_recorder.fr_trace {nccl})"
    )
    record = json.loads((run / "status.json").read_text())
    assert record["reason"] == "hang" and said in record["failure"]["summary"].splitlines()
    assert said in err
