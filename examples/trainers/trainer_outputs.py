"""Run directory, atomic checkpoints, TensorBoard scalars, learning-curve plot, resolved config.

Everything here is written by global rank 0 only.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

CHECKPOINT_DIR = "checkpoints"
_CKPT_RE = re.compile(r"^iter_(\d{6,})\.ckpt$")
KEEP_CHECKPOINTS = 3
RUN_INFO = "run_info.json"


def _elastic_run_id() -> str:
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return "" if run_id in ("", "none") else run_id


def resolve_run_dir(task: str, run_name: str | None, *, resume: bool, restarted: bool) -> Path:
    """TRAIN_MULTIGPU_RUN_DIR, else runs/<task>/<run_name or timestamp> under the cwd.

    Without a run name a fresh run gets a timestamp.  ``--resume`` then means the most recent run of
    the task, and a torch-elastic restart means the run that recorded the same TORCHELASTIC_RUN_ID.
    """
    explicit = os.environ.get("TRAIN_MULTIGPU_RUN_DIR", "")
    if explicit:
        return Path(explicit).resolve()
    base = Path.cwd() / "runs" / task
    if run_name:
        return base / run_name
    if restarted and _elastic_run_id():
        for info in sorted(base.glob(f"*/{RUN_INFO}"), key=os.path.getmtime, reverse=True):
            try:
                if json.loads(info.read_text()).get("torchelastic_run_id") == _elastic_run_id():
                    return info.parent
            except (OSError, ValueError):
                continue
    if resume:
        runs = sorted((p for p in base.glob("*") if p.is_dir() and latest_checkpoint(p)), key=os.path.getmtime)
        if runs:
            return runs[-1]
    return base / datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def write_run_info(run_dir: Path, resolved: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = dict(resolved, torchelastic_run_id=_elastic_run_id())
    atomic_write(run_dir / RUN_INFO, json.dumps(resolved, indent=2, sort_keys=True, default=str).encode())
    try:
        import yaml

        atomic_write(
            run_dir / "trainer_config.yaml",
            yaml.safe_dump(json.loads(json.dumps(resolved, default=str)), sort_keys=False).encode(),
        )
    except ImportError:  # PyYAML comes with Hydra; the JSON copy is enough without it
        pass


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def checkpoint_path(run_dir: Path, iteration: int) -> Path:
    return run_dir / CHECKPOINT_DIR / f"iter_{iteration:06d}.ckpt"


def checkpoints(run_dir: Path) -> list[Path]:
    """The run's ``checkpoints/iter_NNNNNN.ckpt``, newest first: regular files only (not a link, a
    FIFO, a device or a directory under that name: reading one could block or never end)."""
    try:
        entries = list(os.scandir(run_dir / CHECKPOINT_DIR))
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _CKPT_RE.match(entry.name)
        with contextlib.suppress(OSError):
            if match and entry.is_file(follow_symlinks=False):
                found.append((int(match.group(1)), Path(entry.path)))
    return [path for _, path in sorted(found, reverse=True)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[0] if found else None


def read_checkpoint(path: Path) -> bytes:
    """A checkpoint's bytes, read only from a regular file (O_NOFOLLOW, non-blocking open): a FIFO,
    a device or a link swapped in since the lookup raises OSError instead of blocking or never ending."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path}: not a regular file")
        return f.read()


def usable_checkpoint(run_dir: Path, say) -> tuple[Path, bytes] | None:
    """The newest checkpoint that holds something, with its bytes: an empty or unreadable one (a
    disk that filled up while it was written, a file truncated by hand) is named through ``say``
    and the one before it is tried. None: none usable."""
    for path in checkpoints(run_dir):
        try:
            data = read_checkpoint(path)
        except OSError as err:
            say(f"train.py: checkpoint {path} cannot be read ({err}); trying the one before it")
            continue
        if not data:
            say(f"train.py: checkpoint {path} is empty (0 bytes); trying the one before it")
            continue
        return path, data
    return None


def save_checkpoint(run_dir: Path, iteration: int, data: bytes) -> Path:
    path = checkpoint_path(run_dir, iteration)
    atomic_write(path, data)
    for stale in checkpoints(run_dir)[KEEP_CHECKPOINTS:]:
        with contextlib.suppress(OSError):
            stale.unlink()
    return path


class Scalars:
    """TensorBoard event file (tensorboard's writer, as skrl uses); tolerates tensorboard missing."""

    def __init__(self, run_dir: Path) -> None:
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            self._writer = None
            return
        self._Event, self._Summary = Event, Summary
        self._writer = EventFileWriter(str(run_dir / "tensorboard"), max_queue_size=100, flush_secs=30)

    def add(self, step: int, values: dict[str, float]) -> None:
        if self._writer is None:
            return
        import time

        summary = self._Summary(value=[self._Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
        self._writer.add_event(self._Event(summary=summary, step=int(step), wall_time=time.time()))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def plot_learning_curve(run_dir: Path, history: list[tuple[int, float]], task: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = run_dir / "learning_curve.png"
    points = [(s, r) for s, r in history if r == r]  # drop iterations without a finished episode (NaN)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    if points:
        ax.plot([s for s, _ in points], [r for _, r in points], marker=".", linewidth=1)
    ax.set_xlabel("environment steps (all workers)")
    ax.set_ylabel("mean episode return")
    ax.set_title(f"{task}: PPO training")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    tmp = run_dir / ".learning_curve.tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def trim_metrics(run_dir: Path, iteration: int) -> None:
    """metrics.csv without the rows past ``iteration`` (a resume from that checkpoint does them again)."""
    path = run_dir / "metrics.csv"
    try:
        lines = path.read_text().splitlines(keepends=True)
    except OSError:
        return
    kept = lines[:1] + [
        line for line in lines[1:] if line.split(",", 1)[0].isdigit() and int(line.split(",", 1)[0]) <= iteration
    ]
    if len(kept) < len(lines):
        tmp = path.with_name(".metrics.tmp.csv")
        tmp.write_text("".join(kept))
        os.replace(tmp, path)


def append_metrics(
    run_dir: Path,
    iteration: int,
    env_steps: int,
    steps_per_s: float,
    mean_return: float,
    seconds: float,
    update_seconds: float,
    rollout_seconds: float,
    sync_seconds: float,
    checkpoint_seconds: float,
) -> None:
    """One CSV row per iteration (metrics.csv), for scripts that compare runs.

    iteration_s ~ rollout_s (env steps and actions) + update_s (PPO update, gradient all-reduces)
    + sync_s (the per-iteration all-gather) + checkpoint_s (rank 0's atomic checkpoint write, fsync).
    """
    path = run_dir / "metrics.csv"
    new = not path.exists()
    with open(path, "a") as f:
        if new:
            f.write(
                "iteration,env_steps,env_steps_per_s,mean_return,iteration_s,update_s,rollout_s,sync_s,checkpoint_s\n"
            )
        f.write(
            f"{iteration},{env_steps},{steps_per_s:.1f},{mean_return:.3f},{seconds:.4f},{update_seconds:.4f},"
            f"{rollout_seconds:.4f},{sync_seconds:.4f},{checkpoint_seconds:.4f}\n"
        )


class Eta:
    """The time the remaining iterations take, once this process's iteration rate is known.

    The first ``warmup`` iterations of a process (from the start or a resume) are not timed: they
    hold JAX's compilation (seconds, against tenths of a second for a compiled iteration), and
    counting them gave ``eta=38m53s`` for a job that ended 70 s later.  The rate is known once
    ``timed`` iterations after them have run; before that there is no estimate (``None``), except
    after the last iteration, when nothing remains (0).

    >>> eta = Eta(total=10, start_iteration=0)
    >>> [eta.update(i, now) for i, now in [(1, 30.0), (2, 31.0), (3, 32.0), (4, 33.5)]]
    [None, None, 7.0, 7.0]
    >>> Eta(total=3, start_iteration=2).update(3, 50.0)  # a resume that runs only the last iteration
    0.0
    """

    def __init__(self, total: int, start_iteration: int, warmup: int = 1, timed: int = 2) -> None:
        self.total, self.warm = total, start_iteration + warmup  # the clock starts when iteration `warm` ends
        self.timed = timed
        self.t0: float | None = None

    def update(self, iteration: int, now: float) -> float | None:
        """Seconds left after ``iteration`` ended at ``now`` (``time.perf_counter()``), or None."""
        if iteration >= self.total:
            return 0.0
        if iteration == self.warm:
            self.t0 = now
        done = iteration - self.warm
        if self.t0 is None or done < self.timed:
            return None
        return (now - self.t0) / done * (self.total - iteration)


def progress_line(
    iteration: int, total: int, steps_per_s: float, mean_return: float, env_steps: int, eta_s: float | None
) -> str:
    """The per-iteration line (rank 0); ``eta=?`` while the rate is not known (:class:`Eta`).

    >>> progress_line(3, 150, 5099.4, 27.73, 1536, 75.2)
    '[iter    3/150] env_steps/s=    5099 mean_return=   27.7 env_steps=1536 eta=1m15s'
    >>> progress_line(1, 150, 35.5, 20.55, 1024, None)
    '[iter    1/150] env_steps/s=      36 mean_return=   20.6 env_steps=1024 eta=?'
    """
    ret = f"{mean_return:7.1f}" if mean_return == mean_return else "    n/a"
    if eta_s is None:
        eta = "?"
    else:
        eta = f"{int(eta_s) // 60}m{int(eta_s) % 60:02d}s" if eta_s >= 60 else f"{eta_s:.0f}s"
    rate = f"env_steps/s={steps_per_s:8.0f}"
    return f"[iter {iteration:4d}/{total}] {rate} mean_return={ret} env_steps={env_steps} eta={eta}"


class Progress:
    """Shows the per-iteration line: on a terminal one live line rewritten in place (``\\r``), else
    (a log file, a pipe: what the launcher's rank logs are) every line. Under the launcher the console
    collapses the lines instead (launcher/run/logs.py), so the rank log keeps every iteration."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdout
        try:
            self.live = self.stream.isatty()
        except (AttributeError, ValueError):
            self.live = False
        self.pending = False

    def show(self, line: str) -> None:
        if self.live:
            self.stream.write("\r" + line + "\x1b[K")
            self.pending = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end(self) -> None:
        """Finish the live line (what is printed next starts on a line of its own)."""
        if self.pending:
            self.stream.write("\n")
            self.stream.flush()
            self.pending = False
