"""Why a rank died (launcher/run/postmortem/causes.py, oom.py), with real processes: a rank OOM-killed in a
memory cgroup the test sets up (its peer listed as a follower), os.abort(), and tracebacks with a
CUDA out-of-memory and an NCCL error text (raised by a CPU rank: the texts are what torch prints,
no GPU exists here). The classification of the other texts is checked on the texts themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.run.postmortem import causes, oom
from launcher.run.postmortem.failure import Failure
from require import unavailable, variable
from supervise_util import REPO, env, finish, run_dir, start, status

WORKER = REPO / "tests" / "workers" / "causes_worker.py"
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
JAX = ("launcher=skrl_jax", "launcher.nproc_per_node=2")


def launch(tmp: Path, mode: str, *overrides: str, args: tuple = ()) -> subprocess.Popen:
    return start(tmp, *JAX, f"script={WORKER}", *overrides, script_args=("--mode", mode, *args))


def launch_on_gpus(tmp: Path, mode: str, args: tuple = ()) -> subprocess.Popen:
    """A launch with device=cuda: GPUs cannot exist here, CUDA_VISIBLE_DEVICES declares two (the
    launcher only counts them; these worker modes use the standard library only)."""
    argv = [sys.executable, "-m", "launcher", "device=cuda", f"run_root={tmp / 'runs'}", *JAX, f"script={WORKER}"]
    argv += ["--", "--mode", mode, *args]
    environ = dict(env(), CUDA_VISIBLE_DEVICES="0,1")
    return subprocess.Popen(argv, cwd=tmp, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def torchrun_launch(tmp: Path, mode: str, args: tuple = ()) -> subprocess.Popen:
    """launcher=single_node (one torchrun, two workers) on CPU."""
    return start(tmp, "launcher.nproc_per_node=2", f"script={WORKER}", script_args=("--mode", mode, *args))


# -- real processes -----------------------------------------------------------------------------
REQUIRE_OOM_VAR = variable("OOM")


def cgroup_v2_memory() -> str:
    """Where cgroup v2 is mounted and whether it has the memory controller (it has not where the
    memory controller is bound to v1: this machine's hybrid layout)."""
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        try:
            controllers = (root / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        return f"cgroup v2 at {root} with controllers {' '.join(controllers) or '(none)'}"
    return "no cgroup v2 mounted"


@pytest.fixture
def memory_cgroup():
    """A cgroup v1 memory cgroup limited to 1.5 GiB, removed afterwards. Without one the test cannot
    run, loudly: a warning in the summary besides the skip, and a failure under
    TRAIN_MULTIGPU_REQUIRE_OOM=1. (cgroup v2's memory.events is read by the same code, tested on
    files only: test_the_memory_cgroup_is_found_from_proc.)"""
    path = CGROUP_V1 / f"tmg-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(1536 * 1024 * 1024))
    except OSError as err:
        reason = (
            f"the real OOM-kill test did not run: no writable cgroup v1 memory controller here ({err}); "
            f"{cgroup_v2_memory()}"
        )
        if os.environ.get(REQUIRE_OOM_VAR) != "1":  # a skip here is loud: a warning in the summary too
            import warnings

            warnings.warn(pytest.PytestWarning(reason), stacklevel=1)
        unavailable("OOM", reason)
    yield path
    deadline = time.monotonic() + 20
    while True:
        try:
            path.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.timeout(90)
def test_a_rank_past_its_memory_limit_is_oom_killed_confirmed_and_its_peer_is_a_follower(tmp_path, memory_cgroup):
    """The whole launch runs in the cgroup (as in a scheduler's job cgroup); rank 1 allocates past its
    limit and the kernel kills it; rank 0, in an all_reduce with it, fails with gloo's lost-peer error."""
    procs_file = str(memory_cgroup / "cgroup.procs")

    def enter() -> None:
        with open(procs_file, "w") as handle:
            handle.write(str(os.getpid()))

    argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp_path / 'runs'}"]
    argv += ["launcher.nproc_per_node=2", f"script={WORKER}", "--", "--mode", "oom"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=enter
    )
    code, out, err = finish(proc, timeout=80)
    assert code == 137, err
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 137 (SIGKILL)" in err
    assert "cause: oom-killed: confirmed: the kernel's OOM killer sent the SIGKILL" in err, err
    assert f"{memory_cgroup}/memory.oom_control counted oom_kill 0 -> 1" in err
    assert "fix: the node ran out of host memory" in err
    assert "followers (failed because of it, not causes): rank 0 (" in err and "Connection" in err
    failure = status(tmp_path)["failure"]
    assert failure["rank"] == 1 and failure["class"] == "oom-killed" and failure["hint"].startswith("the node ran")
    assert [f["rank"] for f in failure["followers"]] == [0]


@pytest.mark.timeout(60)
def test_os_abort_is_named_sigabrt_with_its_python_frame(tmp_path):
    code, out, err = finish(launch(tmp_path, "abort"))
    assert code == 134, err
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 134 (SIGABRT)" in err
    assert "cause: SIGABRT: Fatal Python error: Aborted; last Python frame causes_worker.py:" in err, err
    assert " in crash_here" in err
    assert "fix: the process aborted itself" in err
    assert status(tmp_path)["failure"]["class"] == "SIGABRT"


CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which "
    "1.25 GiB is free. Of the allocated memory 20.1 GiB is allocated by PyTorch"
)
NCCL_ERROR = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text, cls, fix",
    [(CUDA_OOM, "cuda-oom", "the GPU ran out of memory"), (NCCL_ERROR, "nccl", "rerun with +worker_env.NCCL_DEBUG")],
    ids=["cuda-oom", "nccl"],
)
def test_a_traceback_with_a_known_error_gets_its_fix(tmp_path, text, cls, fix):
    code, out, err = finish(launch_on_gpus(tmp_path, "raise", args=("--text", text)))
    assert code == 1, err
    assert f"cause: {cls}: RuntimeError: {text[:40]}" in err, err
    assert f"fix: {fix}" in err
    failure = status(tmp_path)["failure"]
    assert failure["class"] == cls and failure["hint"].startswith(fix) and failure["followers"] == []


@pytest.mark.timeout(60)
def test_a_slow_rank_is_named_a_straggler_once(tmp_path):
    args = ("--seconds", "4", "--dt", "0.05", "--slow_dt", "0.3")
    code, out, err = finish(launch(tmp_path, "beat", args=args))
    assert code == 0, err
    lines = [line for line in out.splitlines() if "straggler" in line]
    assert len(lines) == 1, out
    assert lines[0].startswith("[train_multigpu] straggler on node 0: rank 1 takes 0.3"), lines
    assert "the other ranks' median 0.05" in lines[0] and "launcher.straggler_factor=2)" in lines[0]
    (entry,) = status(tmp_path)["stragglers"]
    assert entry["rank"] == 1 and 0.25 < entry["iteration_s"] < 0.45 and 0.04 < entry["median_s"] < 0.1
    progress = json.loads((run_dir(tmp_path) / "logs" / "progress.json").read_text())
    assert [s["rank"] for s in progress["stragglers"]] == [1]
    shown = subprocess.run(
        [sys.executable, "-m", "launcher", "runs", "--root", str(tmp_path / "runs"), "show", "last"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0 and "straggler: rank 1, 0.3" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.timeout(60)
def test_stragglers_off(tmp_path):
    args = ("--seconds", "2.5", "--dt", "0.05", "--slow_dt", "0.3")
    code, out, err = finish(launch(tmp_path, "beat", "launcher.straggler_factor=null", args=args))
    assert code == 0, err
    assert "straggler on node" not in out and "stragglers" not in status(tmp_path)


# -- the texts, one class each ------------------------------------------------------------------
def classify(tmp_path: Path, text: str, signal: str | None = None, exception: str = "") -> causes.Diagnosis:
    log_dir = tmp_path / "logs"
    log_dir.mkdir(exist_ok=True)
    (log_dir / "rank0.log").write_text(text)
    failure = Failure(node=0, rank=0, local_rank=0, exit_code=1, signal=signal, exception=exception)
    return causes.diagnose(failure, causes.Context(log_dir, torchrun=False), oom.Counters())


@pytest.mark.parametrize(
    "text, cls",
    [
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, "
            "NCCL version 2.19.3\nncclUnhandledCudaError: Call to CUDA function failed.\n"
            "Last error:\nCuda failure 'an illegal memory access was encountered'",
            "illegal-memory-access",
        ),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal-memory-access"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.", "cuda-oom"),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
            "cuda-oom",
        ),
        (
            "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=8, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600081 milliseconds",
            "nccl-timeout",
        ),
        ("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, internal error", "nccl"),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. "
            "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
            "port-in-use",
        ),
        ("OSError: [Errno 98] Address already in use", "port-in-use"),
        (
            "F0101 client.h:80] Terminating process because the JAX distributed service detected fatal errors. "
            "This most likely indicates that another task died; see the other task logs for more details. "
            "Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. "
            "absl::Status: DEADLINE_EXCEEDED: Deadline Exceeded\n"
            "RPC: /xla.coordination.CoordinationService/RegisterTask",
            "jax-init-timeout",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            "[127.0.0.1]:29614",
            "follower",
        ),
        (
            "jax.errors.JaxRuntimeError: UNKNOWN: Gloo all-reduce failed: [pair.cc:547] Connection reset by peer",
            "follower",
        ),
        ("ValueError: a bug", "exit-code"),
    ],
)
def test_each_text_gets_its_class(tmp_path, text, cls):
    assert classify(tmp_path, text).cls == cls


def test_a_follower_alone_points_to_the_other_nodes(tmp_path):
    found = classify(tmp_path, "RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.2]:1234")
    assert found.cls == "follower" and "the cause is on another node" in found.hint


def test_a_sigkill_without_a_counted_oom_kill_is_not_called_oom(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    failure = Failure(node=0, rank=1, local_rank=1, exit_code=137, signal="SIGKILL")
    before = oom.Counters({"/cg/memory.oom_control:oom_kill": 2, "/proc/vmstat:oom_kill": 5})
    found = causes.diagnose(failure, causes.Context(log_dir, torchrun=False, oom_before=before), before)
    assert found.cls == "SIGKILL" and "no OOM kill was counted (/cg/memory.oom_control, /proc/vmstat)" in found.detail
    found = causes.diagnose(failure, causes.Context(log_dir, torchrun=False), oom.Counters())
    assert found.cls == "oom-killed" and found.detail.startswith("likely: ") and "no OOM counter" in found.detail
    after = oom.Counters({"/cg/memory.oom_control:oom_kill": 2, "/proc/vmstat:oom_kill": 6})
    found = causes.diagnose(failure, causes.Context(log_dir, torchrun=False, oom_before=before), after)
    assert found.cls == "oom-killed" and found.detail.startswith("likely: ") and "/proc/vmstat" in found.detail


def test_the_memory_cgroup_is_found_from_proc(tmp_path):
    (tmp_path / "cgroup").write_text("4:memory:/job/step\n0::/job/step\n")
    (tmp_path / "v1" / "job" / "step").mkdir(parents=True)
    (tmp_path / "v2" / "job" / "step").mkdir(parents=True)
    (tmp_path / "mountinfo").write_text(
        f"30 25 0:26 / {tmp_path}/v1 rw,nosuid - cgroup cgroup rw,memory\n"
        f"31 25 0:27 / {tmp_path}/v2 rw,nosuid - cgroup2 cgroup2 rw\n"
    )
    found = oom.memory_cgroups(str(tmp_path / "cgroup"), str(tmp_path / "mountinfo"))
    assert found == [f"{tmp_path}/v1/job/step", f"{tmp_path}/v2/job/step"]
    (tmp_path / "v2" / "job" / "step" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert oom.read(found).values[f"{tmp_path}/v2/job/step/memory.events:oom_kill"] == 1


def test_errors_md_lists_the_straggler_factor_message():
    text = (REPO / "docs" / "errors.md").read_text()
    assert "`launcher.straggler_factor=1.0: a finite number > 1 and <= 1000 (times the other ranks' median" in text


TORCHRUN_REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/pkg/launcher/run/worker.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_01:05:29
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4223)
  error_file: /tmp/torchelastic_x/error.json
  traceback : RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:20173
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_01:05:28
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 4222)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 4222
============================================================
"""


def test_a_follower_that_recorded_first_gives_way_to_the_rank_in_torchruns_report(tmp_path):
    """The detector takes exit records first: rank 0's lost-peer error can be the first one seen."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "torchrun.log").write_text(TORCHRUN_REPORT)
    error = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
    (log_dir / "rank0.exit.json").write_text(json.dumps({"rank": 0, "exit_code": 1, "exception": error, "time": 1.0}))
    (log_dir / "rank1.log").write_text(
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent "
        'call first):\n  File "/x/sim.py", line 7 in step\n  File "/x/train.py", line 3 in <module>\n'
    )
    detected = Failure(node=0, rank=0, local_rank=0, exit_code=1, exception=error, source="exit record", time=1.0)
    found = causes.diagnose(detected, causes.Context(log_dir, torchrun=True), oom.Counters())
    assert (found.failure.rank, found.failure.exit_code, found.cls) == (1, 139, "SIGSEGV")
    assert found.detail == "Fatal Python error: Segmentation fault; last Python frame sim.py:7 in step"
    assert found.followers == ((0, "RuntimeError: [.../pair.cc:553] Connection closed by peer"),)


# -- issue 18 item 7: the cause is what the rank died of -------------------------------------------


@pytest.mark.timeout(60)
def test_a_rank_that_printed_cuda_text_and_died_of_a_keyerror_died_of_the_keyerror(tmp_path):
    code, out, err = finish(launch(tmp_path, "printed", args=("--text", "checked: no CUDA out of memory so far")))
    assert code == 1, err
    assert "cause: exception: KeyError: 'step_count'" in err, err
    assert "cuda-oom" not in err and "nvidia-smi" not in err
    assert status(tmp_path)["failure"]["class"] == "exception"


@pytest.mark.timeout(60)
def test_a_cpu_launch_never_names_a_gpu_cause(tmp_path):
    """The same CUDA out-of-memory exception as above, raised on a launch with no GPU: an exception."""
    code, out, err = finish(launch(tmp_path, "raise", args=("--text", CUDA_OOM)))
    assert code == 1, err
    assert f"cause: exception: RuntimeError: {CUDA_OOM[:40]}" in err, err
    assert "nvidia-smi" not in err and "NCCL" not in err
    assert status(tmp_path)["failure"]["class"] == "exception"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "mode, signal, code, fatal, frame, fix",
    [
        ("segv", "SIGSEGV", 139, "Segmentation fault", "crash_segv", "a crash in native code"),
        ("sigbus", "SIGBUS", 135, "Bus error", "crash_sigbus", "a bad memory mapping"),
    ],
)
def test_a_rank_that_really_dies_of_a_signal_is_named_with_its_python_frame(
    tmp_path, mode, signal, code, fatal, frame, fix
):
    """Through torchrun: rank 1 really dies of the signal (no canned text); faulthandler, enabled by
    the worker wrapper, writes its Python stack to the rank's log."""
    rc, out, err = finish(torchrun_launch(tmp_path, mode), timeout=80)
    assert rc == code, err
    assert f"FAILED: node 0, rank 1 (local rank 1): exit code {code} ({signal})" in err, err
    assert f"cause: {signal}: Fatal Python error: {fatal}; last Python frame causes_worker.py:" in err, err
    assert f" in {frame}" in err and f"fix: {fix}" in err
    failure = status(tmp_path)["failure"]
    assert failure["class"] == signal and failure["rank"] == 1


@pytest.mark.timeout(120)
def test_a_rank_that_calls_os_exit_leaves_its_exit_record_and_a_child_it_forked_does_not(tmp_path):
    """os._exit skips every handler: the worker wrapper records it itself, so the launcher sees the
    rank's own failure at once, not at torchrun's next poll (across nodes, the other node's ranks
    fail of the lost connection within that time and would be taken for the cause)."""
    started = time.monotonic()
    rc, out, err = finish(torchrun_launch(tmp_path, "hard_exit"), timeout=80)
    assert rc == 3, err
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 3" in err, err
    failure = status(tmp_path)["failure"]
    assert (failure["rank"], failure["source"], failure["class"]) == (1, "exit record", "exit-code"), failure
    record = json.loads((run_dir(tmp_path) / "logs" / "rank1.exit.json").read_text())
    assert record["exit_code"] == 3  # the parent's, not the forked child's 5
    assert time.monotonic() - started < 60  # rank 0 sleeps 120 s: ended by rank 1's record


@pytest.mark.timeout(120)
def test_torchrun_failing_in_its_rendezvous_is_not_the_scripts_exit(tmp_path):
    """A real c10d launch on a node whose own host name does not resolve (a network namespace whose
    hosts file lacks it): torch's is_host guess raises socket.gaierror inside torchrun, before any
    worker runs. One node, so the launcher leaves is_host to torch (across nodes it says it)."""
    from netns import Hosts

    with Hosts(1, hostnames=True, own_name_resolves=False) as (node,):
        argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp_path / 'runs'}", "launcher=multinode"]
        argv += ["launcher.nnodes=1", "launcher.nproc_per_node=1", f"launcher.rdzv_endpoint={node.addr}:29400"]
        argv += [f"script={WORKER}", "--", "--mode", "raise"]
        proc = node.run(argv, env=env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        code, out, err = finish(proc, timeout=100)
    assert code == 1, err
    assert "FAILED: node 0, torchrun: exit code 1" in err, err
    assert "cause: rendezvous: socket.gaierror: [Errno -3] Temporary failure in name resolution" in err, err
    assert "fix: this node's own host name does not resolve" in err and "/etc/hosts" in err
    assert "exited with 1 by itself" not in err
    assert status(tmp_path)["failure"]["class"] == "rendezvous"


def test_torchrun_failing_by_itself_is_named_torchrun(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "torchrun.log").write_text(
        'Traceback (most recent call last):\n  File "/x/torch/distributed/run.py", line 9, in main\n'
        "ValueError: invalid literal for int() with base 10: 'x'\n"
    )
    failure = Failure(node=0, rank=None, local_rank=None, exit_code=1, source="exit status")
    found = causes.diagnose(failure, causes.Context(log_dir, torchrun=True), oom.Counters())
    assert found.cls == "torchrun" and found.detail == "ValueError: invalid literal for int() with base 10: 'x'"
    assert "not the training script" in found.hint


def test_gpu_classes_need_a_gpu(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "rank0.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    failure = Failure(node=0, rank=0, local_rank=0, exit_code=1)
    on_gpu = causes.diagnose(failure, causes.Context(log_dir, torchrun=False), oom.Counters())
    assert on_gpu.cls == "illegal-memory-access" and "NCCL_SHM_DISABLE" in on_gpu.hint
    on_cpu = causes.diagnose(failure, causes.Context(log_dir, torchrun=False, gpu=False), oom.Counters())
    assert on_cpu.cls == "exit-code" and "NCCL" not in on_cpu.hint
