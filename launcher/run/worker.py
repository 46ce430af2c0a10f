"""Runs one rank's training script: ``python <this file> script.py args...``.

Started by torchrun (one per local rank) or by the supervisor (JAX ranks), in front of the user's
script, so that users never decorate their code. Standard library only, no imports from the
package: the worker interpreter (``python=``) may not have train_multigpu installed.

- Dies with its parent: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so a rank never outlives the
  torchrun agent (or the launcher) that started it.
- With ``TRAIN_MULTIGPU_LOG_DIR`` set (and ``TRAIN_MULTIGPU_RANK_LOGS`` not ``0``), stdout and stderr
  (file descriptors 1 and 2, so child processes too) go to ``<dir>/rank<R>.log``; the supervisor
  shows the console from these files.
- With a log dir, ``TRAIN_MULTIGPU_HEARTBEAT_FILE=<dir>/rank<R>.beat`` is exported to the script:
  writing (or touching) it is a heartbeat the launcher's hang watchdog sees (run/monitor/beats.py).
- Lets the launcher's py-spy read its stack under Yama's ``ptrace_scope=1`` (``PR_SET_PTRACER``).
- A non-zero exit leaves ``<dir>/rank<R>.exit.json`` (rank, exit code, exception, traceback) for
  the launcher's failure summary (``os._exit(code)`` in the rank's own process too: it skips every
  handler, and torchrun reports a rank's exit only at its next poll, seconds after the other
  ranks failed of the lost connection), and an uncaught exception is also written to torch elastic's
  ``TORCHELASTIC_ERROR_FILE`` in the format its ``record`` decorator uses, so torchrun's own report
  carries the traceback.
- ``launcher.cpu_binding`` (docs/cpu_placement.md): with ``TRAIN_MULTIGPU_CPU_BIND`` (each local
  rank's CPU list, ``;`` between ranks) it binds itself to its list before the script starts (its
  threads and children inherit it); with ``TRAIN_MULTIGPU_OMP_THREADS`` it sets ``OMP_NUM_THREADS``
  to its own entry; with a log dir it writes the mask it starts with to ``<dir>/rank<R>.cpus`` (as the
  kernel spells it: torchrun's numactl may have set it), which ``runs show`` prints. A list the kernel
  refuses (the CPUs were taken away since the launcher looked) ends the rank with exit code 2 and one
  line saying so.
- ``TRAIN_MULTIGPU_TRACKER_RANKS=0`` (tracker=wandb): W&B is disabled on every rank but global rank 0.
- A fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) prints every thread's Python stack to the
  rank's stderr first (``faulthandler``): the failure summary names the innermost frame.
"""

import faulthandler
import json
import os
import signal
import sys
import time
import traceback

LOG_DIR_VAR = "TRAIN_MULTIGPU_LOG_DIR"
RANK_LOGS_VAR = "TRAIN_MULTIGPU_RANK_LOGS"
NODE_RANK_VAR = "TRAIN_MULTIGPU_NODE_RANK"
HEARTBEAT_VAR = "TRAIN_MULTIGPU_HEARTBEAT_FILE"
LAUNCH_ID_VAR = "TRAIN_MULTIGPU_LAUNCH_ID"
CPU_BIND_VAR = "TRAIN_MULTIGPU_CPU_BIND"
OMP_THREADS_VAR = "TRAIN_MULTIGPU_OMP_THREADS"
EXIT_USAGE = 2
TRACKER_RANKS_VAR = "TRAIN_MULTIGPU_TRACKER_RANKS"
PR_SET_PDEATHSIG = 1
PR_SET_PTRACER = 0x59616D61  # Yama: this process and its descendants may ptrace me


def _die_with_parent() -> None:
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(128 + signal.SIGKILL)


def _environ(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    return dict(entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return 0
    return int(text[text.rfind(b")") + 2 :].split()[1])


def launcher_pid() -> int:
    """The launcher: the first ancestor that does not carry this launch's marker (torchrun does)."""
    marker = os.environ.get(LAUNCH_ID_VAR, "").encode()
    pid = os.getppid()
    for _ in range(8):
        if not marker or _environ(pid).get(LAUNCH_ID_VAR.encode()) != marker:
            return pid
        pid = _parent_of(pid)
    return pid


def _allow_stacks() -> None:
    """Under Yama's ptrace_scope=1 (Ubuntu's default) only an ancestor may attach to a process, and
    py-spy, started by the launcher to take this rank's stack, is not one: name the launcher (and so
    its children) as allowed. Without Yama the call fails and nothing changes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PTRACER, launcher_pid(), 0, 0, 0)
    except (OSError, AttributeError, ValueError):
        return


def _ranks() -> dict:
    env = os.environ
    rank = env.get("RANK", env.get("JAX_RANK", "0"))
    local = env.get("LOCAL_RANK", env.get("JAX_LOCAL_RANK", "0"))
    node = env.get(NODE_RANK_VAR, env.get("GROUP_RANK", "0"))
    return {"node": int(node), "rank": int(rank), "local_rank": int(local)}


def _local_index() -> int:
    """This rank's place among the node's ranks: JAX_LOCAL_RANK, else torchrun's LOCAL_RANK -- which
    --virtual_local_rank sets to 0 for every worker: there RANK - GROUP_RANK * LOCAL_WORLD_SIZE."""
    env = os.environ
    if "JAX_LOCAL_RANK" in env:
        return int(env["JAX_LOCAL_RANK"])
    local = int(env.get("LOCAL_RANK", "0"))
    try:
        derived = int(env["RANK"]) - int(env["GROUP_RANK"]) * int(env["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return local
    return derived if local == 0 and 0 <= derived < int(env["LOCAL_WORLD_SIZE"]) else local


def _cpus(text: str) -> set:
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _spelled(cpus) -> str:
    ordered, parts = sorted(cpus), []
    for cpu in ordered:
        if parts and parts[-1][1] == cpu - 1:
            parts[-1][1] = cpu
        else:
            parts.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def _place(ranks: dict, log_dir: "str | None") -> None:
    """launcher.cpu_binding: bind to this rank's CPUs, OMP_NUM_THREADS from the mask, the mask recorded."""
    local = _local_index()
    lists = os.environ.get(CPU_BIND_VAR)
    if lists:
        entries = lists.split(";")
        if not 0 <= local < len(entries):
            return
        try:
            os.sched_setaffinity(0, _cpus(entries[local]))
        except (OSError, ValueError) as err:
            sys.stderr.write(
                f"train_multigpu: error: launcher.cpu_binding: local rank {local} cannot run on CPUs "
                f"{entries[local]}: {err}\n"
            )
            sys.stderr.flush()
            _record(ranks, EXIT_USAGE, None, "")
            os._exit(EXIT_USAGE)
    threads = os.environ.get(OMP_THREADS_VAR, "").split(";")
    if 0 <= local < len(threads) and threads[local].isdigit():
        os.environ["OMP_NUM_THREADS"] = threads[local]
    if log_dir and hasattr(os, "sched_getaffinity"):
        try:
            with open(os.path.join(log_dir, f"rank{ranks['rank']}.cpus"), "w") as handle:
                handle.write(_spelled(os.sched_getaffinity(0)) + "\n")
        except OSError:
            pass


def _redirect(log_dir: str, rank: int) -> None:
    os.makedirs(log_dir, exist_ok=True)
    fd = os.open(os.path.join(log_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as handle:
            json.dump(data, handle, indent=2)
        os.replace(tmp, path)
    except OSError:  # a full disk: nothing half written left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_recorded = []  # the exit this process recorded (one at most: the first says why)


def _record(ranks: dict, code: int, error: "BaseException | None", stack: str) -> None:
    if _recorded:
        return
    _recorded.append(code)
    log_dir = os.environ.get(LOG_DIR_VAR)
    message = f"{type(error).__name__}: {error}" if error is not None else ""
    if log_dir:
        data = dict(ranks, pid=os.getpid(), exit_code=code, time=time.time(), exception=message, traceback=stack)
        try:
            _write_json(os.path.join(log_dir, f"rank{ranks['rank']}.exit.json"), data)
        except OSError:
            pass
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file and error is not None:
        extra = {"py_callstack": stack, "timestamp": str(int(time.time()))}
        try:
            _write_json(error_file, {"message": {"message": message, "extraInfo": extra}})
        except OSError:
            pass


def _record_hard_exits(ranks: dict) -> None:
    """``os._exit(code)`` with a non-zero code in this process (not in a process forked from it)
    writes the exit record first, unless the process recorded its exit already: an exit handler that
    leaves with ``os._exit`` after the script failed (the bundled JAX trainer's) keeps the record that
    names the exception."""
    hard_exit, pid = os._exit, os.getpid()

    def _exit(code: int) -> None:
        status = code & 0xFF  # what the process's parent sees
        if status != 0 and os.getpid() == pid:
            _record(ranks, status, None, "")
        hard_exit(code)

    os._exit = _exit


def _tracker_ranks(rank: int) -> None:
    """tracker=wandb (launcher/trackers/): only global rank 0 logs (W&B disabled on the others: one
    run, not one per rank); with tracker.wandb.all_ranks every rank logs, each to its own run id
    ``<id>-rank<R>`` in the launch's group."""
    who = os.environ.get(TRACKER_RANKS_VAR)
    if rank == 0 or who is None:
        return
    if who == "0":
        os.environ["WANDB_MODE"] = "disabled"
    elif os.environ.get("WANDB_RUN_ID"):
        os.environ["WANDB_RUN_ID"] += f"-rank{rank}"
        os.environ["WANDB_NAME"] = os.environ.get("WANDB_NAME", "") + f"-rank{rank}"


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return 1  # sys.exit("message") prints the message and exits 1


def main(argv: list) -> None:
    if not argv:
        print("usage: worker.py SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(2)
    _die_with_parent()
    _allow_stacks()
    ranks = _ranks()
    log_dir = os.environ.get(LOG_DIR_VAR)
    if log_dir and os.environ.get(RANK_LOGS_VAR, "1") == "1":
        _redirect(log_dir, ranks["rank"])
    faulthandler.enable(all_threads=True)  # writes to fd 2: the rank's log
    _place(ranks, log_dir)
    _tracker_ranks(ranks["rank"])
    if log_dir:
        os.environ[HEARTBEAT_VAR] = os.path.join(log_dir, f"rank{ranks['rank']}.beat")
    script = argv[0]
    sys.argv = list(argv)
    # the script's directory, not this package's, comes first on the path (as `python script.py`)
    sys.path[0] = os.path.dirname(os.path.abspath(script))

    import runpy

    _record_hard_exits(ranks)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        code = _exit_code(done.code)
        if code != 0:
            _record(ranks, code, None, "")
        raise
    except KeyboardInterrupt:
        raise  # stopped by a signal the launcher forwarded: not a failure of this rank
    except BaseException as error:  # noqa: BLE001 - every uncaught error ends the rank
        stack = traceback.format_exc()
        sys.stderr.write(stack)
        sys.stderr.flush()
        _record(ranks, 1, error, stack)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
