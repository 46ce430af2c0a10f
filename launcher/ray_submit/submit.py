"""``submit=ray``, the submitter's side: the job (spec.py) through Ray's Job Submission API.

The pieces :class:`launcher.ray_submit.backend.RayBackend` uses: the address and its client (every
request with a deadline), the secrets' upload, the submission, the announcement, following one job
(its output streamed) or many (one line as each ends), stopping, the sweep table. One Ray job per
launch -- a sweep's point too, so each has its own state, logs, resources and ``ray job stop``, and
Ray's scheduler runs the points as the cluster's resources allow. Ctrl+C stops the job(s) and waits
until Ray says they stopped.

Ray is imported here, when ``submit=ray`` is used, never by the rest of the launcher.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import record
from ..backends import summary as sweep_summary
from ..backends.base import SUBMIT_RECORD
from ..config.schema import TrainConfig
from ..errors import UserError
from ..names import PROG
from ..run.process.signals import TermAsInterrupt
from . import spec as spec_mod
from .spec import CREDENTIALS, shown_address

RECORD = SUBMIT_RECORD  # the handle (backends.base.Handle); before format 2 it was ray_job.json
ADDRESS_VAR = "RAY_ADDRESS"  # Ray's own convention (its CLI reads it too)
EXTRA_HINT = "pip install 'train_multigpu[ray]' (the Job Submission API needs ray[default])"
ADDRESS_FORM = (
    "the Ray dashboard's HTTP address, http://HOST:PORT or https://HOST:PORT (not a GCS address HOST:PORT, nor ray://)"
)
DOWN_HINT = "the dashboard's address, e.g. http://HEAD:8265; is the cluster up (`ray status`)?"
ADDRESS_HINT = "e.g. ray.address=http://HEAD:8265 (`ray start --head` prints it)"
# every request to the cluster has a deadline (Ray's client sets none: a listener that accepts and never
# answers hung it forever): to connect, and for each answer; a submission uploads (working_dir, the
# secrets) and waits for Ray to accept the job, so it may take longer
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 5.0
SUBMIT_TIMEOUT_S = 120.0
# following: how long the cluster may stay silent before the job's state is given up as unknown
FOLLOW_PATIENCE_S = 60.0
TAIL_HEARTBEAT_S = 60.0  # the log stream pings the dashboard this often; no pong within half of it ends it


@dataclass
class RayJob:
    """One submitted (or refused) job, for the follow loop and the summary table."""

    overrides: tuple[str, ...]
    run_dir: str
    job_id: str | None = None
    error: str | None = None
    state: str = ""  # the last state seen (SUCCEEDED, FAILED, STOPPED, ...)
    exit_code: int | None = None
    address: str = ""


def address(cfg: TrainConfig, env) -> tuple[str, str]:
    """(key, address): ``ray.address``, else ``$RAY_ADDRESS``; the dashboard's HTTP address, checked."""
    if cfg.ray.address:
        key, where = "ray.address", str(cfg.ray.address)
    elif env.get(ADDRESS_VAR):
        key, where = ADDRESS_VAR, env[ADDRESS_VAR]
    else:
        raise UserError("ray.address", None, f"needs the Ray dashboard's address (or {ADDRESS_VAR})", ADDRESS_HINT)
    check_address(key, where)
    return key, where


def given_address(cfg: TrainConfig, env) -> None:
    """A dry run connects to nothing and needs no address; one that is given is checked as a real
    submission checks it (``ray.address``, else ``$RAY_ADDRESS``)."""
    if cfg.ray.address is not None:
        check_address("ray.address", str(cfg.ray.address))
    elif env.get(ADDRESS_VAR):
        check_address(ADDRESS_VAR, env[ADDRESS_VAR])


def check_address(key: str, where: str) -> None:
    """Only the dashboard's ``http(s)://HOST[:PORT]``: anything else Ray's client takes for a GCS or Ray
    Client address, which it resolves itself -- slowly, with warnings of its own, and it may replace a
    loopback address with this machine's network address.

    >>> check_address("ray.address", "ray://head:10001")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ray.address=ray://head:10001: the Ray dashboard's HTTP address, http://HOST:PORT or https://HOST:PORT (not a GCS address HOST:PORT, nor ray://) (e.g. ray.address=http://HEAD:8265 (`ray start --head` prints it))
    """  # noqa: E501
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(where.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)  # a path: behind a proxy
        port = parts.port  # raises on a port that is not a number
        ok = ok and (port is None or 1 <= port <= 65535)  # like every endpoint's port (launcher/addresses.py)
        ok = ok and not re.search(r"[\s\x00-\x1f\x7f]", where.strip())  # no blanks or control characters
    except ValueError:
        ok = False
    if not ok:
        raise UserError(key, shown_address(where), ADDRESS_FORM, ADDRESS_HINT)


def _why(err: BaseException, where: str) -> str:
    """One line saying why a request failed, the address's password masked."""
    if type(err).__name__ in ("ReadTimeout", "Timeout"):
        return f"no answer within {READ_TIMEOUT_S:g} s"
    if type(err).__name__ == "ConnectTimeout":
        return f"no connection within {CONNECT_TIMEOUT_S:g} s"
    lines = [line for line in str(err).strip().splitlines() if line.strip()] or [type(err).__name__]
    return _scrub(lines[0], where)


def _scrub(text: str, where: str) -> str:
    """``text`` (Ray's or requests' words) without the address's password."""
    match = CREDENTIALS.match(where)
    if not match or not match.group(2):
        return text
    return text.replace(where, shown_address(where)).replace(match.group(2), "***")


def _ray_client_class():
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        raise UserError("submit", "ray", f"Ray's Job Submission API is not installed ({err.msg})", EXTRA_HINT) from None

    class Client(JobSubmissionClient):
        """Ray's client with a deadline on every request (its own sets none)."""

        origin = ("ray.address", "")  # (key, address) it was made for: for messages

        def _do_request(self, method, endpoint, **kwargs):
            slow = endpoint.startswith("/api/packages/") or (method == "POST" and endpoint.rstrip("/") == "/api/jobs")
            kwargs.setdefault("timeout", (CONNECT_TIMEOUT_S, SUBMIT_TIMEOUT_S if slow else READ_TIMEOUT_S))
            return super()._do_request(method, endpoint, **kwargs)

    return Client


def store_secrets(client, values) -> str:
    """Put the job's secret values into Ray's internal KV (the GCS's memory) through the dashboard's
    package upload, XOR-ed with a one-time pad; the reference the entrypoint needs: "<key> <pad, hex>".

    The entry is no package: no runtime_env names it, so no node downloads or unpacks it; the job's
    entrypoint reads it and deletes it (job.take_secrets). Neither the pad (in the runtime_env, which Ray
    logs) nor the entry alone says anything about the values."""
    data = json.dumps(dict(values)).encode()
    pad = os.urandom(len(data))
    name = f"train_multigpu_secrets_{os.urandom(16).hex()}.bin"
    response = client._do_request("PUT", f"/api/packages/gcs/{name}", data=bytes(a ^ b for a, b in zip(data, pad)))
    if response.status_code != 200:  # never its text: Ray's error shows the data's first bytes
        raise RuntimeError(f"storing the job's secret values in the cluster answered HTTP {response.status_code}")
    return f"gcs://{name} {pad.hex()}"


def _ray_installed() -> bool:
    """Whether Ray can be imported, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["ray"] is None
        return False


def _silent(where: str) -> str | None:
    """Why nothing answers HTTP at the dashboard's address (None: something did, even an error status or
    a certificate Ray's client may still accept), asked with the standard library and a deadline."""
    import ssl
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(where.strip())
    host = parts.netloc.rpartition("@")[2]  # no credentials: any HTTP answer will do
    url = parts._replace(netloc=host, path=parts.path.rstrip("/") + "/api/version", query="", fragment="").geturl()
    try:
        urllib.request.urlopen(url, timeout=READ_TIMEOUT_S).close()  # noqa: S310 (http(s) checked)
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as err:
        if isinstance(err.reason, ssl.SSLError):
            return None
        if isinstance(err.reason, TimeoutError):
            return f"no answer within {READ_TIMEOUT_S:g} s"
        return _scrub(str(getattr(err.reason, "strerror", None) or err.reason), where)
    except TimeoutError:
        return f"no answer within {READ_TIMEOUT_S:g} s"
    except (OSError, ValueError) as err:  # a reset, a malformed answer
        return _scrub(str(err) or type(err).__name__, where)
    return None


class _OnlyThisAddress:
    """While Ray's client is made: without $RAY_ADDRESS / $RAY_API_SERVER_ADDRESS, which it would take
    instead of the address it is given."""

    NAMES = (ADDRESS_VAR, "RAY_API_SERVER_ADDRESS")

    def __enter__(self):
        self.saved = {name: os.environ.pop(name) for name in self.NAMES if name in os.environ}

    def __exit__(self, *exc):
        os.environ.update(self.saved)


class Clients:
    """One Ray client per address (made on first use: a silent address fails fast, before Ray's import)."""

    def __init__(self) -> None:
        self.clients: dict[str, object] = {}

    def __getitem__(self, where: str):
        return self.clients[where]

    def client(self, key: str, where: str):
        if where not in self.clients:
            if not _ray_installed():
                _ray_client_class()  # its one line: not installed
            silent = _silent(where)  # before Ray's import (seconds): a dead address fails fast
            if silent:
                raise UserError(
                    key, shown_address(where), f"no Ray Job Submission API answers there ({silent})", DOWN_HINT
                )
            client_class = _ray_client_class()
            try:
                with _OnlyThisAddress():
                    self.clients[where] = client_class(where)
                self.clients[where].origin = (key, where)
            except Exception as err:  # ConnectionError, a timeout, ValueError (a malformed address), ...
                why = _why(err, where)
                raise UserError(
                    key, shown_address(where), f"no Ray Job Submission API answers there ({why})", DOWN_HINT
                ) from None
        return self.clients[where]


def submit_job(client, job: spec_mod.JobSpec, where: str) -> str:
    """Submit ``job`` (its secrets first, apart: spec.py); Ray's refusal as one line."""
    try:
        if job.secrets:  # never in the runtime_env: Ray logs it (spec.py)
            job = job.with_secrets_at(store_secrets(client, job.secrets))
        return client.submit_job(**job.submit_kwargs())
    except Exception as err:
        why = _scrub((str(err).strip().splitlines() or [type(err).__name__])[-1], where)
        if type(err).__name__ in ("ReadTimeout", "ConnectTimeout", "Timeout"):
            why = f"no answer within {SUBMIT_TIMEOUT_S:g} s"
        raise UserError("submit", "ray", f"Ray refused the job: {why}", f"address {shown_address(where)}") from None


def announce(job: RayJob) -> str:
    shown = shown_address(job.address)
    at = f" --address {shown}"
    lines = [
        f"[{PROG}] submitted Ray job {job.job_id} to {shown}",
        f"[{PROG}]   run directory: {job.run_dir} (on the cluster; per-rank logs under logs/)",
        f"[{PROG}]   follow: ray job logs -f {job.job_id}{at}   status: ray job status {job.job_id}{at}",
        f"[{PROG}]   stop:   ray job stop {job.job_id}{at}",
    ]
    if _has_runs_command():
        lines.append(f"[{PROG}]   record: {PROG} runs (the run directory above)")
    return "\n".join(lines)


def _has_runs_command() -> bool:
    import importlib.util

    return importlib.util.find_spec("launcher.runs") is not None


# -- following ------------------------------------------------------------------------------------

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
LAST_CHARS = 4096  # of a job's log kept while following: its launcher's last line is in them


# the launcher's own last line in a job's log (launcher/backends/local.py)
_LAUNCH_END = re.compile(rf"^\[{re.escape(PROG)}\] exit code (\d+) \(", re.MULTILINE)


def exit_code(info, log=None) -> int:
    """The launch's exit code from Ray's job info: SUCCEEDED 0, FAILED the entrypoint's code.

    Ray's job manager can record a FAILED job with no code: its monitor, finding the job's supervisor
    already gone, writes FAILED again without the code the supervisor had written. The launcher's own
    last line in the job's log (``log()``, its text) then says the code."""
    state = str(getattr(info.status, "value", info.status))
    if state == "SUCCEEDED":
        return 0
    if state == "STOPPED":
        return 128 + signal.SIGTERM
    code = getattr(info, "driver_exit_code", None)
    if isinstance(code, int) and code > 0:
        return code
    try:
        ends = _LAUNCH_END.findall(log() if log else "")
    except Exception:  # the log is unreadable: Ray's word only
        ends = []
    return int(ends[-1]) if ends and int(ends[-1]) > 0 else 1


def _state(client, job_id: str, patience: float = FOLLOW_PATIENCE_S):
    """(state, info) of the job; the cluster may fail to answer for ``patience`` seconds (a dashboard
    restarting), then the job's state is unknown: one line, exit 2."""
    deadline = time.monotonic() + patience
    while True:
        try:
            info = client.get_job_info(job_id)
            return str(getattr(info.status, "value", info.status)), info
        except Exception as err:
            if time.monotonic() >= deadline:
                key, where = getattr(client, "origin", ("ray.address", ""))
                raise UserError(
                    key,
                    shown_address(where),
                    f"stopped answering about job {job_id} for {patience:g} s ({_why(err, where)})",
                    f"the job may still run: ray job status {job_id}",
                ) from None
            time.sleep(1.0)


def record_end(job: RayJob) -> None:
    """Write the job's final state into its submit.json (``runs`` reads it: a job stopped before its
    launcher started has no other record)."""
    path = Path(job.run_dir) / RECORD if job.run_dir else None
    if path is None or not job.state:
        return
    try:
        data = json.loads(path.read_text())
        data.update(state=job.state, exit_code=job.exit_code)
        record.write_json(path, data)
    except (OSError, ValueError):  # the record is gone or not ours: nothing to add to
        pass


def _stop(client, jobs: Sequence[RayJob], timeout: float = 120.0) -> None:
    """Stop the jobs and wait until Ray reports each terminal (the launcher's grace period included)."""
    for job in jobs:
        try:
            client.stop_job(job.job_id)
        except Exception:  # already ended
            pass
    deadline = time.monotonic() + timeout
    pending = list(jobs)
    while pending and time.monotonic() < deadline:
        time.sleep(0.5)
        for job in list(pending):
            try:
                job.state, info = _state(client, job.job_id, patience=max(0.0, deadline - time.monotonic()))
            except UserError:  # the cluster does not answer: the job's state stays unknown
                return
            if job.state in TERMINAL:
                job.exit_code = exit_code(info, _log_end(client, job.job_id))
                record_end(job)
                pending.remove(job)


def _log_end(client, job_id: str):
    """The last characters of the job's log, read when asked (exit_code)."""
    return lambda: client.get_job_logs(job_id)[-LAST_CHARS:]


async def _tail(client, job_id: str):
    """The job's output as the dashboard streams it (its websocket, as Ray's ``tail_job_logs``), with
    deadlines Ray's lacks: to connect, and a heartbeat (a dashboard that stops answering ends the stream
    within ``TAIL_HEARTBEAT_S``; a job may rightly print nothing for hours)."""
    import asyncio

    import aiohttp

    url = f"{client._address}/api/jobs/{job_id}/logs/tail"
    async with aiohttp.ClientSession(cookies=client._cookies, headers=client._headers) as session:
        connect = session.ws_connect(url, ssl=client._ssl_context, heartbeat=TAIL_HEARTBEAT_S)
        ws = await asyncio.wait_for(connect, CONNECT_TIMEOUT_S + READ_TIMEOUT_S)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                yield message.data
            elif message.type == aiohttp.WSMsgType.ERROR:
                raise RuntimeError(f"{ws.exception() or 'the stream broke'}")
        if ws.close_code not in (None, aiohttp.WSCloseCode.OK):
            raise RuntimeError(f"the stream closed with code {ws.close_code}")


def follow(client, job: RayJob) -> int:
    """Stream the job's output until it ends; its launch's exit code. Ctrl+C stops it (130)."""
    import asyncio

    shown = [0]  # characters of the job's log printed so far
    last = [""]  # its last lines (the launcher's own last line among them)

    async def tail() -> None:
        async for lines in _tail(client, job.job_id):
            sys.stdout.write(lines)
            sys.stdout.flush()
            shown[0] += len(lines)
            last[0] = (last[0] + lines)[-LAST_CHARS:]

    with TermAsInterrupt() as handler:
        try:
            try:
                asyncio.run(tail())
            except Exception as err:  # the stream broke (the dashboard restarted, a proxy): the state still tells
                why = (str(err).strip().splitlines() or [type(err).__name__])[0]
                print(f"[{PROG}] the job's log stream ended ({why}); waiting for its state", flush=True)
                broke = True
            else:
                broke = False
            while True:  # the log stream ends with the job; its state follows soon after
                job.state, info = _state(client, job.job_id)
                if job.state in TERMINAL:
                    break
                time.sleep(0.5)
            if broke:  # the rest of the output, from the job's log (the stream sent it from its start)
                try:
                    rest = client.get_job_logs(job.job_id)[shown[0] :]
                    sys.stdout.write(rest)
                    last[0] = (last[0] + rest)[-LAST_CHARS:]
                except Exception:  # the output stays in `ray job logs`
                    pass
        except KeyboardInterrupt:
            signum = handler.received
            print(f"\n[{PROG}] stopping Ray job {job.job_id} ...", flush=True)
            _stop(client, [job])
            print(f"[{PROG}] Ray job {job.job_id}: {job.state or 'not stopped yet'}", flush=True)
            job.exit_code = 128 + signum
            return job.exit_code
    job.exit_code = exit_code(info, lambda: last[0])
    record_end(job)
    print(f"[{PROG}] Ray job {job.job_id} {job.state} (exit code {job.exit_code}); run directory: {job.run_dir}")
    return job.exit_code


def follow_many(jobs: Sequence[RayJob], clients: Clients, interrupts=None, fail_fast: bool = False) -> list[int]:
    """A sweep's jobs: one line as each ends; Ctrl+C (the sweep's Interrupts) or fail_fast stops the rest.
    The exit codes, one per job: its launch's, 128+signal for a job stopped by Ctrl+C."""
    running = [job for job in jobs if job.job_id]
    interrupted: list[RayJob] = []
    with TermAsInterrupt() as handler:
        try:
            while running:
                if interrupts is not None and interrupts.received is not None:
                    raise KeyboardInterrupt
                for job in list(running):
                    client = clients[job.address]
                    job.state, info = _state(client, job.job_id)
                    if job.state in TERMINAL:
                        running.remove(job)
                        job.exit_code = exit_code(info, _log_end(client, job.job_id))
                        record_end(job)
                        print(f"[{PROG}] Ray job {job.job_id} {job.state} (exit code {job.exit_code})", flush=True)
                        if job.exit_code != 0 and fail_fast and running:
                            print(f"[{PROG}] sweep.fail_fast: stopping the other jobs", flush=True)
                            for other in running:
                                _stop(clients[other.address], [other])
                            running = []
                time.sleep(0.5)
        except KeyboardInterrupt:
            print(f"\n[{PROG}] stopping {len(running)} Ray job(s) ...", flush=True)
            for job in running:
                _stop(clients[job.address], [job])
            interrupted = running
    signum = handler.received
    return [128 + signum if job in interrupted else job.exit_code or 0 for job in jobs]


def summary(jobs: Sequence[RayJob]) -> str:
    """The table: one row per job, its state and exit code once followed (launcher/backends/summary.py)."""
    return sweep_summary.table(jobs, title="Ray", none="NOT SUBMITTED", followed=True)


def as_json(job: RayJob) -> str:
    return json.dumps(job.__dict__)
