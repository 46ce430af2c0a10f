"""Why a rank died: the class of the first failure, what to do about it, and which other ranks
failed only because of it (followers).

Works on what detection found (:class:`~launcher.run.postmortem.failure.Failure`) and what the launch left:
the ranks' exit records and logs, torchrun's report, the JAX ranks' exit statuses when the failure
was seen, and the OOM-kill counters read before and after the launch (run/postmortem/oom.py). It never
changes how a failure is detected; it may name another rank as the cause when the one detected
first only reported a lost peer.

A failure is classified, in this order:

1. killed by SIGKILL (which the launcher had not sent: failures are only detected before it stops
   anything) → ``oom-killed`` when an OOM counter moved ("confirmed" from the launch's memory
   cgroup, "likely" from the machine's count or a cgroup at its limit) or none is readable
   ("likely"); ``SIGKILL`` when the counters were readable and none moved;
2. the exception the rank died of (its exit record: the exception and the exception lines of its
   traceback, never the source lines quoted there) against :data:`CLASSES`, else a lost peer
   (:data:`FOLLOWER`), else ``exception``: a rank that died of an exception is never classified by
   text its log printed before;
3. only when no exception was recorded: the log's last lines against :data:`CLASSES`, a lost peer;
4. torchrun itself failed (no rank: the traceback is torchrun's, no worker ran or failed):
   ``rendezvous`` when it failed in torch elastic's rendezvous (``socket.gaierror`` in
   ``_matches_machine_hostname``: this node's own host name does not resolve), else, after a signal,
   ``torchrun``; never ``exit-code``, which says the script exited by itself;
5. another signal: its name (``SIGSEGV``, ``SIGBUS``, ``SIGABRT`` ...), with the innermost Python
   frame that faulthandler (enabled by the worker wrapper) wrote to the rank's log;
6. else ``exit-code``.

The classes of GPU failures (:data:`GPU_CLASSES`: CUDA out of memory, illegal memory access, NCCL)
and their hints (nvidia-smi, the NCCL workaround) are never given on a launch without a GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...restarts import FOLLOWER as FOLLOWER_CLASS
from ...rundir import Source, exit_record_name
from .. import logs
from . import flight_recorder, oom
from .failure import Failure, exit_code_of, parse_torchrun_entries, read_exit_records, signal_name

# a rank's exit code 2: a usage error (argparse's), class "usage" as for restarts (launcher/restarts.py)
USAGE_EXIT = 2
TEXT_LINES = 60

IMA_FIX = (
    "NCCL's transports on some multi-GPU Linux systems (Isaac Lab's documented workaround: "
    "+worker_env.NCCL_SHM_DISABLE=1 +worker_env.NCCL_IB_DISABLE=1 +worker_env.NCCL_ALGO=Ring); "
    "else CUDA_LAUNCH_BLOCKING=1 names the kernel at fault"
)

# (class, pattern, one-line fix), first match wins: the specific before the general
CLASSES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "illegal-memory-access",
        re.compile(r"illegal memory access|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS"),
        "a CUDA kernel read or wrote memory it does not own; when ProcessGroupNCCL reports it, suspect " + IMA_FIX,
    ),
    (
        "cuda-oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
            r"|RESOURCE_EXHAUSTED: Out of memory"
        ),
        "the GPU ran out of memory: lower num_envs (or the minibatch size), check nvidia-smi for other "
        "processes on the GPU; torch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
        "fragmentation, JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false",
    ),
    (
        "nccl-timeout",
        re.compile(r"Watchdog caught collective operation timeout|ProcessGroupNCCL's watchdog got stuck"),
        "a collective waited past the process-group timeout: another rank never reached it (see the "
        "other ranks' logs and the NCCL flight recorder dumps in <run_dir>/nccl/)",
    ),
    (
        "nccl",
        re.compile(
            r"NCCL error|nccl(?:Internal|System|UnhandledCuda|InvalidUsage|InvalidArgument)Error"
            r"|DistBackendError|NCCL communicator was aborted"
        ),
        "rerun with +worker_env.NCCL_DEBUG=INFO to see which transport failed; across nodes set "
        "launcher.network_interface to the interface the nodes share; NCCL_P2P_DISABLE=1 rules out peer-to-peer",
    ),
    (
        "port-in-use",
        re.compile(r"Address already in use|EADDRINUSE"),
        "another process holds a port this rank binds (ss -ltnp names it): a leftover launch, or a fixed "
        "launcher.master_port / coordinator_address; on one node leave them unset and free ports are chosen",
    ),
    (
        "jax-init-timeout",
        re.compile(
            r"DEADLINE_EXCEEDED[\s\S]{0,600}?(?:RegisterTask|Connect)|Barrier timed out"
            r"|Failed to connect to (?:the )?coordination service"
        ),
        "not every JAX process reached the coordinator in time: launcher.coordinator_address must be node 0's "
        "address, reachable from every node (port open), every node must start, hostnames must resolve",
    ),
)

# failures only a GPU launch can have: never named on a launch with no GPU (a CPU rank may print the text)
GPU_CLASSES = frozenset(("illegal-memory-access", "cuda-oom", "nccl-timeout", "nccl"))

# torchrun's own failure in torch elastic's rendezvous (before or while starting the workers)
RENDEZVOUS = re.compile(r"Rendezvous\w*Error|torch/distributed/elastic/rendezvous/")
OWN_NAME = re.compile(r"_matches_machine_hostname[\s\S]*?(socket\.gaierror[^\n]*)")
RENDEZVOUS_FIX = (
    "torchrun failed in the rendezvous before any worker ran (the script did not fail): check that "
    "launcher.rdzv_endpoint is node 0's address as this node reaches it, that every node uses the same "
    "rdzv_endpoint, rdzv_id and nnodes, and that the port is open; the detail is torch's own error"
)
OWN_NAME_FIX = (
    "this node's own host name does not resolve, and torch resolves it to guess whether this node hosts "
    "the c10d store: add it to /etc/hosts (or DNS), or set launcher.is_host (true on node 0's machine, "
    "false elsewhere; the launcher sets it by itself across nodes)"
)
TORCHRUN_FIX = (
    "torchrun itself failed, not the training script: its traceback is in logs/torchrun.log "
    "(a bad torchrun flag or value, an unusable --log_dir, or torch's launcher at fault)"
)
_EXCEPTION_LINE = re.compile(r"^(?!Traceback \(most recent call last\))\S.*$", re.M)

# a rank that failed because a peer went away: gloo, TCPStore, NCCL and JAX's coordination service
FOLLOWER = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|ncclRemoteError|remote process exit"
    r"|Failed to recv, got 0 bytes|Connection was likely closed|stopped sending heartbeats|[Hh]eartbeat timeout"
    r"|tasks are unhealthy"
)
FOLLOWER_FIX = "this rank lost a peer; the cause is the peer's failure"
FOLLOWER_ALONE_FIX = (
    "this rank lost a peer and no rank here failed with an error first: a peer here ended early (read the "
    "other ranks' logs), the cause is on another node (its run directory's status.json), or a link went down"
)

SIGNAL_FIX = {
    "SIGSEGV": "a crash in native code (a simulator, a driver, an extension); for its native frames rerun "
    "with `ulimit -c unlimited` and read the core with `gdb python core`",
    "SIGBUS": "a bad memory mapping: often /dev/shm too small (containers: --shm-size) or a mapped file "
    "that shrank; read the log's last lines",
    "SIGABRT": "the process aborted itself (a C++ exception or failed assertion, e.g. 'terminate called "
    "after throwing'): the log's last lines say which",
    "SIGFPE": "an arithmetic fault in native code (integer division by zero)",
    "SIGILL": "an illegal instruction: a binary built for another CPU or GPU architecture",
}
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
# the failures a rank's own end shows (run/postmortem/detect.py); a hang or a lost node has its own summary
DIAGNOSED_SOURCES = (Source.EXIT_RECORD, Source.TORCHRUN_REPORT, Source.EXIT_STATUS)
GONE = Source.GONE
OOM_FIX = (
    "the node ran out of host memory: lower num_envs (or what each rank keeps in memory), run fewer ranks "
    "per node, or ask the scheduler for more memory (SLURM --mem); `dmesg | grep -i oom` names the victim"
)
SIGKILL_FIX = (
    "something outside the launch sent it: a scheduler's limit (time, memory), an administrator, or `kill -9`; "
    "check the scheduler's log for the job"
)

_CURRENT = re.compile(r"(?:Current thread 0x[0-9a-f]+|Stack) \(most recent call first\):\n((?:[ \t]+File .*\n?)+)")
_FRAME = re.compile(r"File \"([^\"]+)\", line (\d+) in (\S+)")
# a frame of Python's own library (ctypes, mmap's callers, runpy): the user's frame below it says more
_STDLIB = re.compile(r"^<frozen |/lib/python3\.\d+/(?!(?:site|dist)-packages/)")
_FATAL = re.compile(r"Fatal Python error: ([^\n]+)")


@dataclass(frozen=True)
class Context:
    """What the supervisor knows beyond the failure. ``statuses``: (global rank, local rank, status)
    of each JAX rank that had exited when the failure was seen; ``oom_before``: the counters at start."""

    log_dir: Path
    torchrun: bool
    statuses: tuple[tuple[int, int, int], ...] = ()
    oom_before: oom.Counters | None = None
    # torchrun: the global ranks of this node still running when the failure was seen (None: unknown),
    # and the workers per node (local rank = rank % nproc, as torchrun assigns them)
    live_at_failure: frozenset[int] | None = None
    nproc: int = 1
    # the launch has GPUs (plan.device == "cuda"): without, GPU-only classes and hints are never given
    gpu: bool = True


@dataclass(frozen=True)
class Diagnosis:
    failure: Failure  # the cause (the detected failure, unless that one only lost a peer)
    cls: str
    hint: str
    detail: str = ""  # one line: the evidence
    followers: tuple[tuple[int, str], ...] = ()  # (rank, what it reported)
    dumps: str = ""  # the NCCL flight recorder's directory, when it holds dumps

    def record(self) -> dict:
        """What status.json's ``failure`` gains."""
        return {
            "class": self.cls,
            "hint": self.hint,
            "detail": self.detail,
            "followers": [{"rank": rank, "error": text} for rank, text in self.followers],
        }

    def lines(self) -> list[str]:
        """The summary's lines about the cause (after its first line)."""
        out = [f"  cause: {self.cls}" + (f": {self.detail}" if self.detail else ""), f"  fix: {self.hint}"]
        if self.followers:
            ranks = ", ".join(f"rank {rank} ({text})" for rank, text in self.followers)
            out.append(f"  followers (failed because of it, not causes): {ranks}")
        if self.dumps:
            out.append(
                f"  NCCL flight recorder dumps: {self.dumps} (read with: {flight_recorder.READ_WITH} {self.dumps})"
            )
        return out


@dataclass
class _Case:
    failure: Failure
    text: str = ""
    exception_text: str = ""
    cls: str = ""
    hint: str = ""
    detail: str = ""
    notes: list[str] = field(default_factory=list)


def _record_text(log_dir: Path, rank: int | None) -> str:
    """The exception a rank died of, as its exit record has it: the exception, then the exception
    lines of its traceback (chained ones too), never the source lines the traceback quotes; '' when
    the rank recorded no exception (an exit code, a signal, no record).

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> stack = 'Traceback (most recent call last):\\n  File "t.py", line 3\\n    print("CUDA out of memory")'
    >>> stack += '\\nKeyError: 1'
    >>> _ = (d / "rank0.exit.json").write_text(json.dumps({"exception": "KeyError: 1", "traceback": stack}))
    >>> _record_text(d, 0)
    'KeyError: 1\\nKeyError: 1'
    """
    if rank is None:
        return ""
    try:
        data = json.loads((log_dir / exit_record_name(rank)).read_text())
    except (OSError, ValueError):
        return ""
    exception = str(data.get("exception", "") or "")
    if not exception:
        return ""
    return "\n".join([exception, *_EXCEPTION_LINE.findall(str(data.get("traceback", "") or ""))])


def _log_text(failure: Failure, log_dir: Path) -> str:
    path = Path(failure.log) if failure.log else None
    if failure.rank is not None and (path is None or not path.exists()):
        path = logs.rank_log(log_dir, failure.rank)
    return "\n".join(logs.last_lines(path, TEXT_LINES)) if path is not None else ""


_SOURCE_PATH = re.compile(r"\[(?:[^\]\s]*/)([^/\]\s]+:\d+)\]")  # [/__w/pytorch/.../pair.cc:553] -> [.../pair.cc:553]


def _first_line(pattern: re.Pattern[str], text: str, limit: int = 160) -> str:
    """The line of ``text`` where ``pattern`` matched, shortened.

    >>> _first_line(FOLLOWER, "x\\nRuntimeError: [/__w/pytorch/third_party/gloo/pair.cc:553] Connection closed by peer")
    'RuntimeError: [.../pair.cc:553] Connection closed by peer'
    """
    match = pattern.search(text)
    if not match:
        return ""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = _SOURCE_PATH.sub(r"[.../\1]", text[start : end if end != -1 else len(text)].strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _faulthandler_frame(text: str) -> str:
    """``file:line in function`` of the innermost Python frame faulthandler printed outside Python's
    own library (with the innermost one when that is Python's), or ''.

    >>> _faulthandler_frame('Current thread 0x1 (most recent call first):\\n'
    ...     '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\\n'
    ...     '  File "/w/sim.py", line 35 in step\\n')
    'sim.py:35 in step (innermost: ctypes/__init__.py:519 in string_at)'
    """
    match = _CURRENT.search(text)
    if not match:
        return ""
    frames = _FRAME.findall(match.group(1))
    if not frames:
        return ""

    def shown(frame: tuple[str, str, str]) -> str:
        path, line, function = frame
        name = Path(path).name
        if _STDLIB.search(path) and name == "__init__.py":
            name = f"{Path(path).parent.name}/{name}"
        return f"{name}:{line} in {function}"

    own = next((frame for frame in frames if not _STDLIB.search(frame[0])), frames[0])
    return shown(own) + (f" (innermost: {shown(frames[0])})" if own is not frames[0] else "")


def _match_class(text: str, gpu: bool) -> tuple[str, str, str] | None:
    """(class, fix, the matching line) of the first of :data:`CLASSES` in ``text``."""
    for cls, pattern, hint in CLASSES:
        if cls in GPU_CLASSES and not gpu:
            continue
        line = _first_line(pattern, text)
        if line:
            return cls, hint, line
    return None


def _follower(case: _Case, text: str) -> bool:
    line = _first_line(FOLLOWER, text)
    if line:
        case.cls, case.hint, case.detail = FOLLOWER_CLASS, FOLLOWER_FIX, line[:100] + ("..." if len(line) > 100 else "")
    return bool(line)


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|error)\b.*$", re.M)


def _last_exception_line(text: str) -> str:
    """The last exception line of a traceback (torchrun's own: its log also holds warnings), shortened.

    >>> _last_exception_line("  File 'x'\\nsocket.gaierror: [Errno -3] No\\n[W socket.cpp:207] warning")
    'socket.gaierror: [Errno -3] No'
    """
    lines = _RAISED.findall(text) or _EXCEPTION_LINE.findall(text)
    line = lines[-1].strip() if lines else ""
    return line if len(line) <= 160 else line[:157] + "..."


def _classify(case: _Case, evidence: oom.Evidence, gpu: bool = True) -> None:
    failure = case.failure
    if failure.signal == "SIGKILL":
        if evidence.verdict == "none_counted":
            case.cls, case.hint = "SIGKILL", SIGKILL_FIX
            case.detail = f"killed by a SIGKILL the launcher did not send; {evidence.detail}"
        else:
            case.cls, case.hint = "oom-killed", OOM_FIX
            word = "confirmed" if evidence.verdict == "confirmed" else "likely"
            case.detail = f"{word}: the kernel's OOM killer sent the SIGKILL ({evidence.detail})"
            if failure.source == GONE:
                case.detail += "; it had ended, without an exit record, when the failure was seen"
        return
    if case.exception_text:  # the exception the rank died of outranks any text its log printed before
        found = _match_class(case.exception_text, gpu)
        if found:
            case.cls, case.hint, case.detail = found
        elif not _follower(case, case.exception_text):
            _exception(case, failure.exception or case.exception_text.splitlines()[0])
        return
    found = _match_class(case.text, gpu)
    if found:
        case.cls, case.hint, case.detail = found
        return
    if failure.rank is None and RENDEZVOUS.search(case.text):  # torchrun's own, before any worker ran
        own = OWN_NAME.search(case.text)
        case.cls = "rendezvous"
        case.hint = OWN_NAME_FIX if own else RENDEZVOUS_FIX
        case.detail = own.group(1).strip() if own else _last_exception_line(case.text)
        return
    if _follower(case, case.text):
        return
    if failure.signal is not None:
        case.cls = failure.signal
        case.hint = SIGNAL_FIX.get(failure.signal, f"killed by {failure.signal}: read the log's last lines")
        fatal = _FATAL.search(case.text)
        frame = _faulthandler_frame(case.text)
        parts = [f"Fatal Python error: {fatal.group(1).strip()}" if fatal else f"killed by {failure.signal}"]
        if frame:
            parts.append(f"last Python frame {frame}")
        case.detail = "; ".join(parts)
        return
    if failure.exception:
        _exception(case, failure.exception)
        return
    if failure.rank is None:  # torchrun's exit status, no worker failed: never "the script exited by itself"
        case.cls, case.hint = "torchrun", TORCHRUN_FIX
        case.detail = _last_exception_line(case.text) or f"torchrun exited with {failure.exit_code}"
        return
    if failure.exit_code == USAGE_EXIT:  # one name with the restart class (launcher/restarts.py)
        case.cls = "usage"
        case.detail = f"the script refused its arguments (rank exit {USAGE_EXIT})"
        case.hint = (
            "its last log lines (argparse's usage line) say which argument; the launch had started: "
            "train_multigpu's own refusals, exit 2 too, are one 'error:' line before anything starts"
        )
        return
    case.cls = "exit-code"
    case.hint = f"the script exited with {failure.exit_code} by itself: its last log lines say why"


def _exception(case: _Case, exception: str) -> None:
    case.cls = "exception"
    case.hint = "an uncaught exception in the training script: its traceback shows where"
    case.detail = exception if len(exception) <= 160 else exception[:157] + "..."


def _torchrun_failures(log_dir: Path, node: int) -> list[Failure]:
    """Every failed worker in torchrun's report (its ``Failures:`` and ``Root Cause`` entries)."""
    text = "\n".join(logs.last_lines(log_dir / logs.TORCHRUN_LOG, 400))
    return parse_torchrun_entries(text, node, log_dir)


def _gone(failure: Failure, ctx: Context, recorded: set[int | None]) -> list[Failure]:
    """torchrun's ranks of this node (those with a log) that had ended without an exit record when the
    failure was seen: killed by a signal (torchrun's report, when it got to write one, says which)."""
    if ctx.live_at_failure is None:
        return []
    found = []
    try:
        names = sorted(entry.name for entry in ctx.log_dir.iterdir())
    except OSError:
        return []
    for name in names:
        match = logs.RANK_LOG.match(name)
        if not match:
            continue
        rank = int(match.group(1))
        if rank in ctx.live_at_failure or rank in recorded:
            continue
        found.append(
            Failure(
                node=failure.node,
                rank=rank,
                local_rank=rank % max(1, ctx.nproc),
                exit_code=exit_code_of(-9),
                signal="SIGKILL",
                source=GONE,
                log=str(logs.rank_log(ctx.log_dir, rank)),
            )
        )
    return found


def _candidates(failure: Failure, ctx: Context, evidence: oom.Evidence) -> list[Failure]:
    found = [failure]
    records = read_exit_records(ctx.log_dir)
    found += records
    if ctx.torchrun:
        found += _torchrun_failures(ctx.log_dir, failure.node)
        if evidence.verdict in ("confirmed", "likely"):  # a rank gone without a word, and an OOM kill counted
            found += _gone(failure, ctx, {record.rank for record in records} | {failure.rank})
    for rank, local, status in ctx.statuses:
        if status:
            found.append(
                Failure(
                    node=failure.node,
                    rank=rank,
                    local_rank=local,
                    exit_code=exit_code_of(status),
                    signal=signal_name(status),
                    source=Source.EXIT_STATUS,
                    log=str(logs.rank_log(ctx.log_dir, rank)),
                )
            )
    seen: dict[int | None, Failure] = {}
    for candidate in found:
        known = seen.get(candidate.rank)
        if known is None:
            seen[candidate.rank] = candidate
        elif candidate.signal and not known.signal and known.source != Source.EXIT_RECORD:
            seen[candidate.rank] = replace(known, signal=candidate.signal, exit_code=candidate.exit_code)
    return list(seen.values())


def _dumps(log_dir: Path) -> str:
    """The NCCL flight recorder's directory when it holds dumps (run/postmortem/flight_recorder.py), else ''."""
    return str(flight_recorder.dump_dir(log_dir.parent)) if flight_recorder.dump_files(log_dir.parent) else ""


def diagnose(failure: Failure, ctx: Context, oom_after: oom.Counters | None = None) -> Diagnosis:
    """The cause of a failed launch, its class and fix, and the followers."""
    after = oom_after if oom_after is not None else oom.read()
    evidence = oom.judge(ctx.oom_before, after)
    cases = []
    for candidate in _candidates(failure, ctx, evidence):
        case = _Case(
            candidate,
            text=_log_text(candidate, ctx.log_dir) if candidate.rank is not None or ctx.torchrun else "",
            exception_text=_record_text(ctx.log_dir, candidate.rank),
        )
        if candidate.rank is None:
            case.text = "\n".join(logs.last_lines(ctx.log_dir / logs.TORCHRUN_LOG, TEXT_LINES))
        _classify(case, evidence, ctx.gpu)
        cases.append(case)
    causes = [case for case in cases if case.cls != FOLLOWER_CLASS and case.failure.signal not in STOP_SIGNALS]
    cause = causes[0] if causes else cases[0]
    if cause.cls == FOLLOWER_CLASS:
        cause.hint = FOLLOWER_ALONE_FIX
        known = {case.failure.rank for case in cases}
        gone = [str(f.rank) for f in _gone(failure, ctx, known | {r.rank for r in read_exit_records(ctx.log_dir)})]
        if gone:
            cause.detail += f"; rank(s) {', '.join(gone)} of this node had ended before, without an exit record"
    followers = tuple(
        (case.failure.rank, case.detail)
        for case in cases
        if case is not cause and case.cls == FOLLOWER_CLASS and case.failure.rank is not None
    )
    return Diagnosis(cause.failure, cause.cls, cause.hint, cause.detail, followers, _dumps(ctx.log_dir))
