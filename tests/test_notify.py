"""A word when a run ends (issue 27; launcher/notify.py, docs/notify.md): a webhook receiver on
loopback (http.server, in this process) gets exactly the configured events; one that never answers
does not delay the launch's exit by more than the bound; the URL is in no file and no console line.
Real launches of small scripts of one's own (no training: the claims are the launcher's)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import clean_env
from inproc import environment, run_main
from launcher import notify, secrets

pytestmark = pytest.mark.timeout(180)

SECRET = "s3cr3t-T0KEN-9f2c"  # the part of the URL that grants posting
FAILS_FIRST = """import os, sys
sys.exit(3 if os.environ["TRAIN_MULTIGPU_ATTEMPT"] == "0" else 0)
"""
ALWAYS_FAILS = "import sys\nsys.exit(3)\n"
RESTARTED = ("restart.max=1", "restart.classes=[default,exit-code]", "restart.max_without_progress=5")


class Receiver:
    """A webhook on loopback that keeps every POST's path and JSON body."""

    def __init__(self) -> None:
        posts = self.posts = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                posts.append((self.path, self.headers["Content-Type"], json.loads(body)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/{SECRET}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Trickler:
    """A webhook on loopback that stalls: it takes the request, then answers a byte every 0.5 s
    forever (each read gets a byte well within a socket timeout: only a deadline ends the try)."""

    def __init__(self) -> None:
        import socketserver

        stop = self.stop = threading.Event()

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.recv(65536)
                for byte in iter(lambda: b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000, None):
                    for one in byte:
                        if stop.wait(0.5):
                            return
                        try:
                            self.request.sendall(bytes([one]))
                        except OSError:
                            return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True  # a handler still trickling never holds the test's end

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/{SECRET}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def trickler():
    made = Trickler()
    yield made
    made.close()


@pytest.fixture
def receiver():
    made = Receiver()
    yield made
    made.close()


def launch(tmp: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp / "own.py"
    script.write_text(body)
    argv = [sys.executable, "-m", "launcher", f"run_root={tmp / 'runs'}", f"script={script}"]
    argv += ["launcher=skrl_jax", "launcher.nproc_per_node=1", *args]  # no torchrun: the claims are the launcher's
    return subprocess.run(argv, cwd=tmp, env=clean_env(), capture_output=True, text=True, timeout=150)


def nowhere_holds(secret: str, folder: Path, *outputs: str) -> None:
    """No file under ``folder`` and no console line holds ``secret``."""
    for text in outputs:
        assert secret not in text
    for path in folder.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"{path} holds the webhook URL"


def test_the_receiver_gets_exactly_the_configured_events_and_the_url_is_nowhere(tmp_path, receiver):
    # a launch restarted once that then succeeds, told of restarts and failures only
    events = "notify.events=[restarted,failed]"
    first = launch(tmp_path, FAILS_FIRST, *RESTARTED, f"notify.url={receiver.url}", events)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    got = [(body["event"], body["attempts"], body["cause"]) for _, _, body in receiver.posts]
    assert got == [("restarted", 1, "exit-code")]  # its success was not asked for
    (run,) = (tmp_path / "runs").iterdir()
    for path, kind, body in receiver.posts:
        assert (path, kind) == (f"/hook/{SECRET}", "application/json")
        assert body["run"] == run.name and body["text"] == body["content"]
        assert body["text"].startswith(f"train_multigpu: {run.name} restarted after exit-code, attempt 2 starting; ")
        assert body["goodput"].startswith("goodput ") and body["goodput"] in body["text"]
    assert "[train_multigpu] notify: restarted posted (HTTP 200)" in first.stdout
    assert "notify.url=***" in (run / "composition.json").read_text()
    assert "url: '***'" in (run / "config.yaml").read_text()
    nowhere_holds(SECRET, tmp_path, first.stdout, first.stderr)


def test_a_sweep_tells_each_job_and_hydra_never_sees_the_url(tmp_path, receiver):
    """One word per job, each naming its job; typed on the command line for a sweep, the URL is in no
    job's record (config.yaml, composition.json) and no console line."""
    sweep = launch(tmp_path, "print('done')\n", "-m", "seed=1,2", f"notify.url={receiver.url}")
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    assert sorted((body["event"], body["run"]) for _, _, body in receiver.posts) == [
        ("succeeded", f"multirun/{stamp.name}/{job}")
        for stamp in (tmp_path / "runs" / "multirun").iterdir()
        for job in "01"
    ]
    nowhere_holds(SECRET, tmp_path, sweep.stdout, sweep.stderr)


def _failing_launch_posting_to(tmp_path, url: str) -> tuple[int, float, str]:
    """A launch whose script exits 3, posting to ``url``: its exit code, how long its exit waited after
    the launcher said the code (the webhook's bound), its stderr."""
    script = tmp_path / "own.py"
    script.write_text(ALWAYS_FAILS)
    argv = [sys.executable, "-m", "launcher", f"run_root={tmp_path / 'runs'}", f"script={script}"]
    argv += ["launcher=skrl_jax", "launcher.nproc_per_node=1", f"notify.url={url}"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    said_at = None
    for raw in proc.stdout:
        if raw.startswith(b"[train_multigpu] exit code 3"):
            said_at = time.monotonic()
    proc.wait(timeout=60)
    assert said_at is not None, proc.stderr.read().decode()[-2000:]
    return proc.returncode, time.monotonic() - said_at, proc.stderr.read().decode()


def test_a_webhook_that_never_answers_delays_the_exit_by_the_bound_at_most(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are taken by the kernel, nothing ever answers them
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook/{SECRET}"
    code, waited, stderr = _failing_launch_posting_to(tmp_path, url)
    silent.close()
    assert code == 3, stderr[-2000:]  # the launch's own code, whatever the webhook did
    assert notify.BOUND_S - 1.5 < waited < notify.BOUND_S + 2.0, f"the exit waited {waited:.1f} s"
    assert "[train_multigpu] notify: failed not posted: timed out" in stderr
    nowhere_holds(SECRET, tmp_path, stderr)


@pytest.mark.parametrize(
    "value, message",
    [
        ("notify.url=ftp://127.0.0.1/s3cr3t-T0KEN-9f2c", "notify.url=***: an http:// or https:// URL"),
        ("notify.events=[failed,crashed]", "notify.events=crashed: one of failed, restarted, succeeded, stopped"),
    ],
)
def test_a_bad_notify_key_is_one_line(tmp_path, value, message):
    result = run_main([value, "dry_run=true"], cwd=str(tmp_path), env=environment(str(tmp_path)))
    assert result.returncode == 2
    assert result.stderr.strip() == f"train_multigpu: error: {message} (" + result.stderr.split(" (", 1)[1].strip()
    assert SECRET not in result.stdout + result.stderr


def test_the_dry_run_and_cfg_show_the_url_masked(tmp_path):
    url = f"notify.url=https://hooks.example/services/{SECRET}"
    dry = run_main([url, "dry_run=true"], cwd=str(tmp_path), env=environment(str(tmp_path)))
    assert dry.returncode == 0 and SECRET not in dry.stdout + dry.stderr
    shown = run_main(["--cfg", "job", url], cwd=str(tmp_path), env=environment(str(tmp_path)))
    assert "url: '***'" in shown.stdout and SECRET not in shown.stdout + shown.stderr


def test_the_body_is_slack_and_discord_json():
    body = notify.message("failed", "2026-12-01_10-00-00", "hang", 3, {"line": "goodput 40%: 2 restarts cost 9 s"})
    assert set(body) >= {"text", "content"} and body["text"] == body["content"]
    assert body["text"] == (
        "train_multigpu: 2026-12-01_10-00-00 failed (hang) after 3 attempts; goodput 40%: 2 restarts cost 9 s"
    )


def test_save_profile_keeps_a_typed_url_as_a_reference_that_composes_back(tmp_path, receiver):
    """A typed URL reached Hydra as ``***``: the profile names the variable a submitted job reads it
    from instead (``${oc.env:TRAIN_MULTIGPU_NOTIFY_URL}``), never the value nor the mask; a launch
    with the profile posts to the variable's URL."""
    saved = run_main(
        ["save_profile=hooked", f"notify.url={receiver.url}"], cwd=str(tmp_path), env=environment(str(tmp_path))
    )
    assert saved.returncode == 0, saved.stderr
    text = (tmp_path / ".train_multigpu" / "profile" / "hooked.yaml").read_text()
    assert "url: ${oc.env:TRAIN_MULTIGPU_NOTIFY_URL}" in text and "***" not in text.split("defaults:")[1]
    assert SECRET not in text + saved.stdout + saved.stderr
    script = tmp_path / "own.py"
    script.write_text("print('done')\n")
    argv = [sys.executable, "-m", "launcher", "profile=hooked", f"run_root={tmp_path / 'runs'}", f"script={script}"]
    argv += ["launcher=skrl_jax", "launcher.nproc_per_node=1", "notify.events=[succeeded]"]
    env = clean_env(**{secrets.SECRET_KEYS["notify.url"]: receiver.url})
    used = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert used.returncode == 0, used.stderr[-2000:]
    assert [(path, body["event"]) for path, _, body in receiver.posts] == [(f"/hook/{SECRET}", "succeeded")]


def test_rerun_takes_a_typed_url_from_the_environment_or_names_it(tmp_path, receiver):
    """composition.json keeps ``notify.url=***``; ``runs rerun`` posts to the URL of
    TRAIN_MULTIGPU_NOTIFY_URL (the variable docs/notify.md names), or stops with one line naming
    it, nothing started."""
    first = launch(tmp_path, "print('done')\n", f"notify.url={receiver.url}", "notify.events=[succeeded]")
    assert first.returncode == 0, first.stderr[-2000:]
    runs = [sys.executable, "-m", "launcher", "runs", "--root", str(tmp_path / "runs"), "rerun", "last"]
    missing = subprocess.run(runs, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=150)
    assert missing.returncode == 2
    assert missing.stderr == (
        "train_multigpu: error: notify.url=***: the record keeps no secret values: set them in the environment "
        "before the rerun (export TRAIN_MULTIGPU_NOTIFY_URL=..., or give +KEY=VALUE on the rerun's line)\n"
    )
    assert len(list((tmp_path / "runs").iterdir())) == 1  # nothing started
    again = receiver.url + "/again"
    env = clean_env(TRAIN_MULTIGPU_NOTIFY_URL=again)
    rerun = subprocess.run(runs, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert [(path, body["event"]) for path, _, body in receiver.posts] == [
        (f"/hook/{SECRET}", "succeeded"),
        (f"/hook/{SECRET}/again", "succeeded"),
    ]
    nowhere_holds(SECRET, tmp_path, first.stdout, first.stderr, missing.stdout, rerun.stdout, rerun.stderr)


def test_one_worker_posts_in_turn_and_a_trickling_webhook_is_cut_off_at_the_deadline(trickler, capsys):
    """One worker thread whatever the number of posts (a thread each before), and a try that gets
    TIMEOUT_S in all: a receiver answering a byte at a time (no read ever waits past the socket's
    timeout) held a post, and its thread, forever."""
    before = {t.ident for t in threading.enumerate()}
    sender = notify.Notifier(trickler.url, ["failed"])
    started = time.monotonic()
    for n in range(5):
        sender.send("failed", f"r{n}", "exit-code", 1, {})
    ours = [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("notify")]
    assert len(ours) == 1, ours
    deadline = started + 2 * notify.TIMEOUT_S + notify.RETRY_AFTER_S + 3.0
    while "not posted" not in (err := capsys.readouterr().err) and time.monotonic() < deadline:
        time.sleep(0.1)
    took = time.monotonic() - started
    assert "[train_multigpu] notify: failed not posted: timed out (tried twice, 2 s each)" in err, (err, took)
    assert took < 2 * notify.TIMEOUT_S + notify.RETRY_AFTER_S + 2.0, took
    sender.drain()  # the 4 posts left: at most BOUND_S, then said
    assert "post(s) not answered within" in capsys.readouterr().err
    assert time.monotonic() - started < 2 * notify.BOUND_S + 2.0


def test_a_trickling_webhook_delays_a_launchs_exit_by_the_bound_at_most(tmp_path, trickler):
    code, waited, stderr = _failing_launch_posting_to(tmp_path, trickler.url)
    assert code == 3, stderr[-2000:]
    assert waited < notify.BOUND_S + 2.0, f"the exit waited {waited:.1f} s"
    assert "[train_multigpu] notify: failed not posted: timed out" in stderr, stderr[-2000:]
    nowhere_holds(SECRET, tmp_path, stderr)
