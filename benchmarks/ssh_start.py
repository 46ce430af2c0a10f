"""``submit=ssh`` start-up: the time from the command to every rank started, two hosts, against
starting the two nodes by hand (one launcher per host, both typed at the same instant: the best a
person at two terminals can do, and no SSH in the way).

    python benchmarks/ssh_start.py [--repeat 3] [--nproc 1]

Two "hosts" are network namespaces, each with a real sshd (tests/sshd.py; needs root, iproute2,
openssh-server). Both sides run the same launch: JAX-topology ranks running the test spawner (no JAX
imported, so the ranks start in a blink and the figure is the launchers'), each rank writing its pid
file as its first act; the clock stops when every rank's file exists. ``submit=ssh`` adds the
preflight (every host asked, in parallel: reachable, the same version, the script there) and one
ssh connection per host. Prints the medians and the ratio (ssh / by hand). Figures mean little on a
loaded machine: the first line printed is the load.

Where the difference goes, measured in the same run: ``this machine's launcher`` is the same
``submit=ssh`` command with ``dry_run=true`` (Python, Hydra's composition, every node's command),
``ssh login`` one ``ssh host true`` (a connection, a login, a remote shell). The command line names
the hosts, so the ssh clients start before the composition (launcher/ssh/early.py) and every host's
launcher imports meanwhile: a launch over ssh is about a start by hand plus one ssh login plus the
time to the clients' start (Python and the command line read, about 0.1 s) -- the composition here
runs beside them, on the same two cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
SPAWNER = REPO / "tests" / "workers" / "spawner.py"
PY = sys.executable
PORT = 29400


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    out.setdefault("OMP_NUM_THREADS", "1")
    return out


def common(tmp: Path, nproc: int, pid_dir: Path) -> list[str]:
    return [
        "device=cpu",
        f"run_root={tmp / 'runs'}",
        "launcher=skrl_jax",
        f"launcher.nproc_per_node={nproc}",
        f"script={SPAWNER}",
        "launcher.grace_period=3",
    ], ["--", "--pid_dir", str(pid_dir), "--mode", "sleep"]


def until_ranks(pid_dir: Path, count: int, started: float, procs: list[subprocess.Popen], limit: float = 120) -> float:
    while len(list(pid_dir.glob("rank*.pid"))) < count:
        if time.monotonic() - started > limit or any(p.poll() is not None for p in procs):
            out = b"".join(p.stdout.read() if p.poll() is not None and p.stdout else b"" for p in procs)
            raise SystemExit(f"the ranks did not all start: {out.decode(errors='replace')[-2000:]}")
        time.sleep(0.005)
    return time.monotonic() - started


def stop(procs: list[subprocess.Popen]) -> None:
    import signal

    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def over_ssh(lab, tmp: Path, nproc: int) -> float:
    pid_dir = tmp / "pids"
    pid_dir.mkdir()
    options = ",".join(f"'{o}'" for o in lab.options)
    head, tail = common(tmp, nproc, pid_dir)
    hosts = [f"ssh.hosts=[{','.join(lab.addresses)}]", f"ssh.identity={lab.identity}", f"ssh.options=[{options}]"]
    argv = [PY, "-m", "launcher", "submit=ssh", *hosts, *head, *tail]
    started = time.monotonic()
    proc = lab.hosts[0].run(argv, env=env(), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    took = until_ranks(pid_dir, 2 * nproc, started, [proc])
    stop([proc])
    return took


def launcher_here(lab, tmp: Path, nproc: int) -> float:
    """This machine's own part: the submit=ssh command's dry run (composes, builds every node's command)."""
    options = ",".join(f"'{o}'" for o in lab.options)
    head, tail = common(tmp, nproc, tmp / "pids")
    hosts = [f"ssh.hosts=[{','.join(lab.addresses)}]", f"ssh.identity={lab.identity}", f"ssh.options=[{options}]"]
    argv = [PY, "-m", "launcher", "submit=ssh", *hosts, *head, "dry_run=true", *tail]
    started = time.monotonic()
    proc = lab.hosts[0].run(argv, env=env(), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"the dry run failed: {out.decode(errors='replace')[-2000:]}")
    return time.monotonic() - started


def ssh_login(lab, tmp: Path, nproc: int) -> float:
    """One ssh connection, login and remote shell: ``ssh host true``."""
    started = time.monotonic()
    proc = lab.hosts[0].run(lab.ssh_argv(1, "true"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"ssh failed: {out.decode(errors='replace')}")
    return time.monotonic() - started


def by_hand(lab, tmp: Path, nproc: int) -> float:
    pid_dir = tmp / "pids"
    pid_dir.mkdir()
    head, tail = common(tmp, nproc, pid_dir)
    procs = []
    started = time.monotonic()
    for host in lab.hosts:
        argv = [PY, "-m", "launcher", *head, "launcher.nnodes=2", f"launcher.node_rank={host.index}"]
        argv += [f"launcher.coordinator_address={lab.addresses[0]}:{PORT}", *tail]
        procs.append(host.run(argv, env=env(), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    took = until_ranks(pid_dir, 2 * nproc, started, procs)
    stop(procs)
    return took


def main() -> int:
    from sshd import SshHosts

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=1)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    figures: dict[str, list[float]] = {"ssh": [], "hand": [], "here": [], "login": []}
    measures = (("hand", by_hand), ("ssh", over_ssh), ("here", launcher_here), ("login", ssh_login))
    work = Path(tempfile.mkdtemp(prefix="tmg-ssh-start-"))
    try:
        with SshHosts(2, work / "ssh", hostnames=True) as lab:
            for i in range(args.repeat):
                for name, measure in measures:
                    tmp = work / f"{name}{i}"
                    tmp.mkdir()
                    figures[name].append(measure(lab, tmp, args.nproc))
                    print(f"  {name} run {i}: {figures[name][-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ssh, hand = statistics.median(figures["ssh"]), statistics.median(figures["hand"])
    here, login = statistics.median(figures["here"]), statistics.median(figures["login"])
    ratios = sorted(s / h for s, h in zip(figures["ssh"], figures["hand"]))
    print(f"command to every rank started, 2 hosts x {args.nproc} rank(s), median of {args.repeat}:")
    print(f"  submit=ssh (one ssh and one launcher per host): {ssh:.2f} s")
    print(f"  by hand (both nodes started at once):           {hand:.2f} s")
    print(f"  one ssh login {login:.2f} s; this machine's launcher (its dry run, beside the logins) {here:.2f} s")
    print(f"  ratio ssh / by hand: {ssh / hand:.2f} (each repeat's: {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
