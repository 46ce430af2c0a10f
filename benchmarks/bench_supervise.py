"""Supervision benchmarks: train_multigpu against bare torchrun (and skrl's JAX launcher), same run.

    python benchmarks/bench_supervise.py [--repeat 3] [--nproc 2] [--limit 40] [--hang_timeout 10]

1. SIGINT to the last process gone (ranks and the helpers each rank leaves behind); both sides
   are watched for the same --limit seconds (the launcher's grace period is 30 s).
2. A rank's failure to the launcher's exit: torchrun and JAX ranks. skrl's own JAX launcher
   (python -m skrl.utils.distributed.jax) never exits then; it is bounded by --hang_timeout.
   Every measure, baselines included, runs --repeat times.
3. Start-up: the launch command to the first worker line on the console, and the dry run's time
   (config, no process) as a share of the launcher's start-up.

Prints medians and ratios (launcher / bare). Processes a bare launcher leaves behind are counted,
then killed by pid. Figures mean little on a loaded machine: the first line printed is the load.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPAWNER = REPO / "tests" / "workers" / "spawner.py"
FIRST_LINE = REPO / "benchmarks" / "first_line.py"
PY = sys.executable


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    out.setdefault("OMP_NUM_THREADS", "1")  # same for both sides, and no torchrun banner
    return out


def launcher(tmp: Path, script: Path, *overrides: str, args: tuple = ()) -> list[str]:
    return [PY, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", f"script={script}", *overrides, "--", *args]


def torchrun(nproc: int, script: Path, args: tuple = ()) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), str(script), *args]


def skrl_jax(nproc: int, script: Path, args: tuple = ()) -> list[str]:
    return [PY, "-m", "skrl.utils.distributed.jax", "--nproc_per_node", str(nproc), str(script), *args]


def _pids(pid_dir: Path) -> dict[int, bytes]:
    found = {}
    for path in pid_dir.glob("*.pid"):
        token = b"tmg-test-helper" if path.name.startswith("helper-") else b"spawner.py"
        found[int(path.read_text())] = token
    return found


def _alive(pid: int, token: bytes) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X") and token in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _wait_files(directory: Path, count: int, pattern: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(pattern))) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{pattern} x{count} not in {directory}")
        time.sleep(0.01)


def _cleanup(pid_dir: Path) -> int:
    """Kill what a launch left behind (by recorded pid, checked against its command line)."""
    left = [pid for pid, token in _pids(pid_dir).items() if _alive(pid, token)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return len(left)


def sigint_to_gone(argv: list[str], pid_dir: Path, nproc: int, limit: float) -> tuple[float, float, int]:
    """(s to the ranks gone, s to every recorded process gone, processes left after ``limit``)."""
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_files(pid_dir, 3 * nproc, "*.pid")
    time.sleep(0.2)
    pids = _pids(pid_dir)
    ranks = {pid: t for pid, t in pids.items() if t == b"spawner.py"}
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    ranks_took = all_took = float("nan")
    while time.monotonic() - sent < limit:
        now = time.monotonic() - sent
        if ranks_took != ranks_took and not any(_alive(pid, t) for pid, t in ranks.items()):
            ranks_took = now
        if not any(_alive(pid, t) for pid, t in pids.items()):
            all_took = now
            break
        time.sleep(0.005)
    left = _cleanup(pid_dir)
    proc.wait()
    return ranks_took, all_took, left


def failure_to_exit(argv: list[str], pid_dir: Path, limit: float) -> tuple[float, int, int]:
    proc = subprocess.Popen(
        argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    _wait_files(pid_dir, 1, "failed.time")
    try:
        proc.wait(timeout=limit)
        took = time.time() - float((pid_dir / "failed.time").read_text())
        code = proc.returncode
    except subprocess.TimeoutExpired:
        took, code = float("inf"), None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return took, code, _cleanup(pid_dir)


def first_line(argv: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for line in proc.stdout:
        if b"first line from rank" in line:
            took = time.monotonic() - start
            break
    else:
        took = float("nan")
    proc.stdout.close()
    proc.wait()
    return took


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--hang_timeout", type=float, default=10.0)
    parser.add_argument("--limit", type=float, default=40.0, help="seconds each side is watched after SIGINT")
    args = parser.parse_args()
    n, rows = args.nproc, []
    print(f"load average: {os.getloadavg()}  cores: {len(os.sched_getaffinity(0))}  repeat: {args.repeat}", flush=True)

    def fresh() -> tuple[Path, Path]:
        tmp = Path(tempfile.mkdtemp(prefix="tmg-bench-"))
        (tmp / "pids").mkdir()
        return tmp, tmp / "pids"

    # 1. SIGINT -> last process gone
    ours, bare, ours_all, bare_all, ours_left, bare_left = [], [], [], [], [], []
    for _ in range(args.repeat):
        tmp, pids = fresh()
        ranks, every, left = sigint_to_gone(
            launcher(tmp, SPAWNER, f"launcher.nproc_per_node={n}", args=("--pid_dir", str(pids))), pids, n, args.limit
        )
        ours.append(ranks), ours_all.append(every), ours_left.append(left)
        tmp, pids = fresh()
        ranks, every, left = sigint_to_gone(torchrun(n, SPAWNER, ("--pid_dir", str(pids))), pids, n, args.limit)
        bare.append(ranks), bare_all.append(every), bare_left.append(left)
    rows.append(("SIGINT -> ranks gone (s)", _median(ours), _median(bare), ""))
    rows.append(
        (
            "SIGINT -> every descendant gone (s)",
            _median(ours_all),
            _median(bare_all),
            f"left behind after {args.limit:g} s, all repeats: launcher {sum(ours_left)}, "
            f"torchrun {sum(bare_left)} (- = not within {args.limit:g} s)",
        )
    )

    # 2. failure -> exit, torchrun
    ours, bare, codes = [], [], []
    for _ in range(args.repeat):
        tmp, pids = fresh()
        took, code, _ = failure_to_exit(
            launcher(tmp, SPAWNER, f"launcher.nproc_per_node={n}", args=("--pid_dir", str(pids), "--fail", "1:7")),
            pids,
            40,
        )
        ours.append(took), codes.append(code)
        tmp, pids = fresh()
        took, code, _ = failure_to_exit(torchrun(n, SPAWNER, ("--pid_dir", str(pids), "--fail", "1:7")), pids, 40)
        bare.append(took), codes.append(code)
    rows.append(
        ("rank failure -> exit, torchrun (s)", _median(ours), _median(bare), f"exit codes launcher/torchrun: {codes}")
    )

    # 2b. failure -> exit, JAX
    ours, bare, codes = [], [], []
    for _ in range(args.repeat):
        tmp, pids = fresh()
        took, code, _ = failure_to_exit(
            launcher(
                tmp,
                SPAWNER,
                "launcher=skrl_jax",
                f"launcher.nproc_per_node={n}",
                args=("--pid_dir", str(pids), "--fail", "1:7"),
            ),
            pids,
            40,
        )
        ours.append(took), codes.append(code)
        tmp, pids = fresh()
        took, code, _ = failure_to_exit(
            skrl_jax(n, SPAWNER, ("--pid_dir", str(pids), "--fail", "1:7")), pids, args.hang_timeout
        )
        bare.append(took), codes.append(code)
    rows.append(
        (
            "rank failure -> exit, JAX (s)",
            _median(ours),
            _median(bare),
            f"exit codes launcher.../skrl: {codes} (skrl inf/None = still running after {args.hang_timeout:g} s, killed)",  # noqa: E501
        )
    )

    # 3. start-up -> first worker line
    ours, bare = [], []
    for _ in range(args.repeat):
        tmp, _ = fresh()
        ours.append(first_line(launcher(tmp, FIRST_LINE, f"launcher.nproc_per_node={n}")))
        bare.append(first_line(torchrun(n, FIRST_LINE)))
    rows.append(("start-up -> first worker line (s)", _median(ours), _median(bare), "target ratio <= 1.15"))
    dry = []
    for _ in range(args.repeat):
        tmp, _ = fresh()
        start = time.monotonic()
        subprocess.run(
            launcher(tmp, FIRST_LINE, f"launcher.nproc_per_node={n}", "dry_run=true"), env=env(), capture_output=True
        )
        dry.append(time.monotonic() - start)
    startup = rows[-1][1]
    # a share of the launcher's own start-up, not a ratio to bare torchrun (which has no config step)
    rows.append(
        (
            "  of which config (dry run, no process) (s)",
            _median(dry),
            float("nan"),
            f"{100 * _median(dry) / startup:.0f}% of the launcher's start-up: Hydra compose + checks",
        )
    )

    print(f"\n{'measure':38} {'launcher':>9} {'bare':>9} {'ratio':>7}")
    for name, a, b, note in rows:
        ratio = a / b if b and b == b and b != float("inf") else float("nan")
        bare_text = f"{b:9.3f}" if b == b else f"{'-':>9}"
        ratio_text = f"{ratio:7.2f}" if ratio == ratio else f"{'-':>7}"
        print(f"{name:38} {a:9.3f} {bare_text} {ratio_text}   {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
