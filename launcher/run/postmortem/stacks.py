"""Every rank's Python stack, taken with py-spy, saved in the run directory and summed up.

``py-spy dump --json --pid P`` attaches to a live process for a moment (ptrace: root, the same user
with ``kernel.yama.ptrace_scope`` 0, or CAP_SYS_PTRACE), reads its threads' Python frames and lets
it go on. The ranks are dumped at once (one py-spy each), so their stacks are of the same moment.

A capture is a directory ``<run_dir>/stacks/<YYYY-mm-dd_HH-MM-SS>[_hang]/`` holding ``rank<R>.txt``
per rank and ``summary.txt``; it is written as ``<name>.tmp`` and renamed once complete, so a
reader (``runs stacks``) sees it whole or not at all.

The summary gives, per rank, the innermost frame of the user's code (not the standard library, not
an installed package, not the rank wrapper) and the call it waits in: the innermost library
function below that frame when there is one (``all_reduce``), else the call written on the user's
line (``time.sleep``, a function implemented in C shows no Python frame of its own).
"""

from __future__ import annotations

import ast
import json
import linecache
import os
import shutil
import subprocess
import sysconfig
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ...paths import WORKER_WRAPPER
from ...rundir import STACKS, STACKS_SUMMARY, stack_name
from ..process import procs

PY_SPY = "py-spy"
DUMP_TIMEOUT_S = 10.0
STACKS_DIR = STACKS
SUMMARY = STACKS_SUMMARY
HANG_SUFFIX = "_hang"
INSTALL_HINT = "pip install py-spy (a dependency of train_multigpu: reinstall it)"
PTRACE_HINT = (
    "run as root, give py-spy CAP_SYS_PTRACE (in a container: --cap-add SYS_PTRACE), or allow ptrace "
    "between processes of one user: sysctl kernel.yama.ptrace_scope=0"
)
# paths that are not the user's code (besides the standard library found below)
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/")
_WRAPPER = WORKER_WRAPPER  # launcher/run/worker.py: its frames are not the rank's
# generic wrapper functions a library frame may be called: not what a rank waits in
_GENERIC = {"wrapper", "inner", "_fn", "__call__", "wrapped", "decorated", "reraise_with_filtered_traceback"}


def find_py_spy() -> str | None:
    """The py-spy installed beside this interpreter (the package's dependency), else one on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / PY_SPY
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(PY_SPY)


@dataclass(frozen=True)
class Frame:
    function: str
    path: str
    line: int

    def short(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}"


@dataclass
class RankStack:
    rank: int
    pid: int
    threads: list[dict] = field(default_factory=list)  # py-spy's JSON, one entry per thread
    error: str = ""  # why there is no stack

    def main_frames(self) -> list[Frame]:
        """The frames of the rank's main thread, innermost first."""
        if not self.threads:
            return []
        main = next((t for t in self.threads if t.get("os_thread_id") == self.pid), None)
        main = main or next((t for t in self.threads if t.get("thread_name") == "MainThread"), self.threads[0])
        return [Frame(f.get("name", "?"), f.get("filename", "?"), int(f.get("line", 0))) for f in main["frames"]]


def is_user_code(path: str, stdlib: tuple[str, ...] = ()) -> bool:
    """Not the standard library, an installed package, a frozen module or the rank wrapper.

    >>> is_user_code("/home/u/IsaacLab/scripts/train.py"), is_user_code("/v/lib/python3.11/site-packages/torch/x.py")
    (True, False)
    >>> is_user_code("<frozen runpy>"), is_user_code("/usr/lib/python3.11/threading.py", ("/usr/lib/python3.11/",))
    (False, False)
    >>> is_user_code(WORKER_WRAPPER)  # the rank wrapper (launcher/run/worker.py), wherever the package is
    False
    """
    if path.startswith("<") or path == _WRAPPER or any(part in path for part in _LIBRARY_PARTS):
        return False
    return not any(path.startswith(prefix) for prefix in stdlib)


def _stdlib_prefixes() -> tuple[str, ...]:
    paths = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    return tuple(p.rstrip("/") + "/" for p in paths if p)


def calls_on_line(text: str) -> list[str]:
    """The calls written on a line of source, innermost (evaluated first) first.

    >>> calls_on_line("        time.sleep(1000)"), calls_on_line("x = dist.all_reduce(torch.ones(1), op=op)")
    (['time.sleep'], ['torch.ones', 'dist.all_reduce'])
    >>> calls_on_line("print(np.asarray(f(y)))"), calls_on_line("x = 1"), calls_on_line("if (")
    (['f', 'np.asarray', 'print'], [], [])
    """
    try:
        tree = ast.parse(text.strip())
    except SyntaxError:
        return []
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, depth: int) -> None:
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is not None:
                found.append((-depth, len(found), name))
            depth += 1
        for child in ast.iter_child_nodes(node):
            visit(child, depth)

    visit(tree, 0)
    return [name for _, _, name in sorted(found)]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return None


@dataclass(frozen=True)
class Where:
    """Where a rank is: its innermost user frame and the call it waits in."""

    call: str | None
    frame: Frame | None

    def text(self) -> str:
        if self.frame is None:
            return f"in {self.call}" if self.call else "in no frame of the user's code"
        return f"in {self.call or self.frame.function} ({self.frame.short()})"


def _plain(function: str) -> str:
    """A library function's name as a user knows it: no ``<locals>``, no generic wrapper at the end.

    >>> _plain("pmap.<locals>.wrapped"), _plain("all_reduce"), _plain("_exception_logger.<locals>.wrapper")
    ('pmap', 'all_reduce', '_exception_logger')
    >>> _plain("<module>"), _plain("wrapper")
    ('', '')
    """
    parts = [part for part in function.split(".") if part != "<locals>"]
    while parts and (parts[-1] in _GENERIC or parts[-1].startswith("<")):
        parts.pop()
    return ".".join(parts)


def where(frames: list[Frame], stdlib: tuple[str, ...] | None = None) -> Where:
    """The innermost frame of the user's code and the call it waits in (frames innermost first)."""
    stdlib = _stdlib_prefixes() if stdlib is None else stdlib
    for index, frame in enumerate(frames):
        if not is_user_code(frame.path, stdlib):
            continue
        below = [name for name in (_plain(f.function) for f in frames[:index]) if name]
        written = calls_on_line(linecache.getline(frame.path, frame.line))
        if below:
            # the call on the user's line that is among the library frames below, else the innermost of those
            called = [name for name in written if name.rsplit(".", 1)[-1] in below]
            call = called[0] if called else below[0]
        else:
            call = written[0] if written else None  # a function in C: no frame of its own
        return Where(call, frame)
    innermost = frames[0].function if frames else None
    return Where(innermost, None)


def dump(pids: dict[int, int], binary: str | None) -> dict[int, RankStack]:
    """Every rank's stack at once (``pids``: rank -> pid)."""
    stacks = {rank: RankStack(rank, pid) for rank, pid in pids.items()}
    if binary is None:
        for stack in stacks.values():
            stack.error = f"py-spy not found: {INSTALL_HINT}"
        return stacks
    running: dict[int, subprocess.Popen] = {}
    for rank, pid in pids.items():
        try:
            running[rank] = subprocess.Popen(
                [binary, "dump", "--json", "--pid", str(pid)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as err:
            stacks[rank].error = f"cannot run {binary}: {err.strerror or err} ({INSTALL_HINT})"
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    for rank, proc in running.items():
        stack = stacks[rank]
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            stack.error = f"py-spy did not answer within {DUMP_TIMEOUT_S:.0f} s"
            continue
        if proc.returncode == 0:
            try:
                stack.threads = json.loads(out)
            except ValueError:
                stack.error = "py-spy printed no stack"
            continue
        stack.error = explain(err.decode(errors="replace"), stack.pid)
    return stacks


def explain(stderr: str, pid: int) -> str:
    """py-spy's failure, said with what to do.

    >>> explain("Error: Permission denied (os error 13)", 7)  # doctest: +ELLIPSIS
    'py-spy cannot attach to pid 7: permission denied (ptrace); run as root, give py-spy CAP_SYS_PTRACE ...'
    """
    lowered = stderr.lower()
    if not procs.alive(pid):
        return f"pid {pid} exited before its stack was taken"
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return f"py-spy cannot attach to pid {pid}: permission denied (ptrace); {PTRACE_HINT}"
    said = f"py-spy failed on pid {pid}: {error_line(stderr)}"
    if procs.stopped(pid):
        said += f" (pid {pid} is stopped: SIGSTOP or a debugger; kill -CONT {pid} resumes it)"
    return said


def error_line(stderr: str) -> str:
    """py-spy's error and its causes on one line, without the Rust backtrace that follows them.

    >>> error_line("Error: Failed to get stack traces\\n\\nCaused by:\\n    0: Failed to suspend process\\n"
    ...            "    1: unexpected waitpid result\\n\\nStack backtrace:\\n   0: anyhow\\n   9: main\\n")
    'Failed to get stack traces: Failed to suspend process: unexpected waitpid result'
    >>> error_line("Error: No python processes found in process 7"), error_line("a panic\\nat the end"), error_line("")
    ('No python processes found in process 7', 'at the end', 'no message')
    """
    lines = [line.strip() for line in stderr.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("Error:")), None)
    if start is None:  # not anyhow's report: its last line
        said = [line for line in lines if line]
        return said[-1] if said else "no message"
    parts = [lines[start].removeprefix("Error:").strip()]
    in_causes = False
    for line in lines[start + 1 :]:
        if line.startswith("Stack backtrace:"):
            break
        if line == "Caused by:":
            in_causes = True
        elif in_causes and line:
            number, _, text = line.partition(": ")
            parts.append(text if number.isdigit() else line)
    return ": ".join(part for part in parts if part)


def render(stack: RankStack, node: int) -> str:
    """One rank's file: a header, then every thread's frames (innermost first), as py-spy prints them."""
    lines = [f"rank {stack.rank}, pid {stack.pid}, node {node}, taken {datetime.now().isoformat(timespec='seconds')}"]
    if stack.error:
        return "\n".join([*lines, f"no stack: {stack.error}"]) + "\n"
    for thread in stack.threads:
        state = "active" if thread.get("active") else "idle"
        lines.append(f'\nThread {thread.get("os_thread_id")} ({state}): "{thread.get("thread_name") or ""}"')
        for f in thread.get("frames", []):
            lines.append(f"    {f.get('name')} ({f.get('filename')}:{f.get('line')})")
    return "\n".join(lines) + "\n"


def one_line(stacks: dict[int, RankStack]) -> str:
    """``rank 0 waits in all_reduce (train.py:120); rank 1 in time.sleep (train.py:14)``. Ranks without a
    stack for the same reason are said once: ``ranks 0, 1 no stack (py-spy not found: ...)``.

    >>> one_line({0: RankStack(0, 10, error="py-spy cannot attach to pid 10: denied"),
    ...           1: RankStack(1, 11, error="py-spy cannot attach to pid 11: denied"), 2: RankStack(2, 12, error="x")})
    'ranks 0, 1 no stack (py-spy cannot attach to pids 10, 11: denied); rank 2 no stack (x)'
    """
    alike: dict[str, list[RankStack]] = {}
    for rank in sorted(stacks):
        if stacks[rank].error:
            alike.setdefault(_reason(stacks[rank]), []).append(stacks[rank])
    parts = []
    for index, rank in enumerate(sorted(stacks)):
        stack = stacks[rank]
        if not stack.error:
            parts.append(f"rank {rank} {'waits ' if index == 0 else ''}{where(stack.main_frames()).text()}")
            continue
        group = alike.pop(_reason(stack), [])
        if len(group) == 1:
            parts.append(f"rank {rank} no stack ({stack.error})")
        elif group:
            ranks = ", ".join(str(each.rank) for each in group)
            pids = ", ".join(str(each.pid) for each in group)
            parts.append(f"ranks {ranks} no stack ({_reason(stack).replace('pid <P>', f'pids {pids}')})")
    return "; ".join(parts)


def _reason(stack: RankStack) -> str:
    """Its error with its pid left out (the same reason for several ranks)."""
    return stack.error.replace(f"pid {stack.pid}", "pid <P>")


def new_dir(run_dir: Path, hang: bool) -> Path:
    """A fresh ``stacks/<stamp>[_hang]`` name (not created; written as ``.tmp`` first)."""
    root = run_dir / STACKS_DIR
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + (HANG_SUFFIX if hang else "")
    for attempt in range(1000):
        name = stamp if attempt == 0 else f"{stamp}-{attempt}"
        if not (root / name).exists() and not (root / f"{name}.tmp").exists():
            return root / name
    raise RuntimeError(f"no free name under {root}")


def save(target: Path, stacks: dict[int, RankStack], node: int, summary: str) -> Path:
    """Write the rank files and summary.txt into ``<target>.tmp``, then rename it to ``target``."""
    tmp = target.with_name(target.name + ".tmp")
    tmp.mkdir(parents=True)
    for rank, stack in sorted(stacks.items()):
        (tmp / stack_name(rank)).write_text(render(stack, node))
    (tmp / SUMMARY).write_text(summary.rstrip("\n") + "\n")
    tmp.rename(target)
    return target


def capture(
    run_dir: Path, pids: dict[int, int], node: int, hang: bool, headline: str, before: tuple[str, ...] = ()
) -> tuple[Path | None, str]:
    """Dump every rank, save the capture; returns its directory and its summary text (``headline``,
    the lines ``before``, where each rank waits, the directory). A capture that cannot be saved (the
    run directory is the ranks' to write into: ``stacks`` may be a file) returns None and a summary
    whose last line says why: the stacks were taken, a hang still has its summary."""
    target = new_dir(run_dir, hang)
    stacks = dump(pids, find_py_spy())
    lines = [headline, *before]
    if not pids:
        lines.append("no rank process is running on this node")
    else:
        lines.append(one_line(stacks))
    for rank in sorted(stacks):
        stack = stacks[rank]
        if stack.error:
            continue
        frames = stack.main_frames()
        found = where(frames)
        inner = frames[0] if frames else None
        detail = f"  rank {rank} (pid {stack.pid}): {found.text()}"
        if found.frame is not None:
            detail += f" in {found.frame.function} of {found.frame.path}"
        if inner is not None and inner != found.frame:
            detail += f"; innermost frame {inner.function} ({inner.path}:{inner.line})"
        lines.append(detail)
    lines.append(f"stacks: {target}/rank<R>.txt (one file per rank of node {node})")
    summary = "\n".join(lines)
    try:
        save(target, stacks, node, summary)
    except OSError as err:
        lines[-1] = f"stacks not saved: {target}/: {err.strerror or err}"
        return None, "\n".join(lines)
    return target, summary
