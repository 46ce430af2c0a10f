"""A word when a run changes state: one POST to a webhook per event (``notify.url``, ``notify.events``;
docs/notify.md). Standard library only (urllib).

The body is Slack- and Discord-compatible JSON: ``text`` (Slack's incoming webhooks) and ``content``
(Discord's) hold the same line, ``run: failed (exit-code) after 2 attempts; goodput 41%: ...``; the
fields a receiver of one's own reads are beside them (``event``, ``run``, ``cause``, ``attempts``,
``goodput``). The URL is a secret (a Slack webhook URL grants posting: launcher/secrets.py's
SECRET_KEYS): it is never printed, and a failure's text is redacted before it is.

Bounded: one worker thread per launcher posts what :meth:`Notifier.send` queued, in order (a restart
never waits for it); the queue holds :data:`QUEUE_MAX` posts at most (a post beyond is dropped, said
in one line). Each try gets :data:`TIMEOUT_S` in all, connecting and answering (a receiver that
trickles its answer is cut off: its socket is shut at the deadline), and is retried once after
:data:`RETRY_AFTER_S`; whatever the outcome, one line says it. At the launcher's exit the posts
still queued or under way get at most :data:`BOUND_S` between them (atexit), then the process exits:
a webhook that never answers delays the exit by that bound at most and never changes the exit code.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import queue
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from . import secrets
from .names import PROG
from .rundir import Reason

FAILED, RESTARTED, SUCCEEDED, STOPPED = "failed", "restarted", "succeeded", "stopped"
EVENTS = (FAILED, RESTARTED, SUCCEEDED, STOPPED)
TIMEOUT_S = 2.0  # one try: connect + answer
RETRY_AFTER_S = 0.5
BOUND_S = 2 * TIMEOUT_S + RETRY_AFTER_S + 0.5  # the most the launcher's exit waits for the posts
QUEUE_MAX = 64  # posts waiting for the worker (a sweep posts once per job)
SCHEMES = ("http://", "https://")


def event_of(ended: Reason) -> str:
    """The event a launch's end is.

    >>> event_of(Reason.SUCCEEDED), event_of(Reason.HANG), event_of(Reason.INTERRUPTED)
    ('succeeded', 'failed', 'stopped')
    """
    if ended is Reason.SUCCEEDED:
        return SUCCEEDED
    if ended in (Reason.INTERRUPTED, Reason.FAIL_FAST_STOP):
        return STOPPED
    return FAILED


def message(event: str, run: str, cause: str | None, attempts: int, ledger: Mapping) -> dict:
    """The POST's body.

    >>> m = message("failed", "r1", "exit-code", 2, {"line": "goodput 50%: 1 restart cost 3.0 s"})
    >>> m["text"] == m["content"], m["text"]
    (True, 'train_multigpu: r1 failed (exit-code) after 2 attempts; goodput 50%: 1 restart cost 3.0 s')
    """
    what = f"{event}" + (f" ({cause})" if cause else "")
    if event == RESTARTED:
        what = f"restarted after {cause or 'a failure'}, attempt {attempts + 1} starting"
    plural = "s" if attempts != 1 else ""
    text = f"{PROG}: {run} {what}" + (f" after {attempts} attempt{plural}" if event != RESTARTED else "")
    line = ledger.get("line") if isinstance(ledger, Mapping) else None
    if line:
        text += f"; {line}"
    return {
        "text": text,
        "content": text[:2000],  # Discord's limit
        "event": event,
        "run": run,
        "cause": cause,
        "attempts": attempts,
        "goodput": line,
    }


class Notifier:
    """One launcher's webhook: ``send`` queues a post for the one worker; the exit waits, bounded."""

    def __init__(self, url: str, events: Sequence[str]) -> None:
        # here, not at the top (http.client, email and ssl: no dry run needs them), and not first on a
        # post's thread, which may run while the interpreter exits
        import urllib.error  # noqa: F401
        import urllib.request  # noqa: F401

        self._url = url
        self.events = frozenset(events)
        self._queue: queue.Queue[tuple[str, bytes]] = queue.Queue(QUEUE_MAX)
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        atexit.register(self.drain)

    def __repr__(self) -> str:  # never the URL
        return f"Notifier(url={secrets.MASK!r}, events={sorted(self.events)!r})"

    def send(self, event: str, run: str, cause: str | None, attempts: int, ledger: Mapping) -> None:
        if event not in self.events:
            return
        body = json.dumps(message(event, run, cause, attempts, ledger)).encode()
        try:
            self._queue.put_nowait((event, body))
        except queue.Full:
            _say(f"notify: {event} not posted: {QUEUE_MAX} posts are waiting already", err=True)
            return
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, daemon=True, name="notify")
                self._worker.start()

    def _work(self) -> None:
        while True:
            event, body = self._queue.get()
            try:
                self._post(event, body)
            finally:
                self._queue.task_done()

    def _post(self, event: str, body: bytes) -> None:
        import urllib.error  # loaded by __init__: a lookup here
        import urllib.request

        problem = ""
        for attempt in range(2):
            if attempt:
                time.sleep(RETRY_AFTER_S)
            try:
                status = _post_once(self._url, body, TIMEOUT_S)
                _say(f"notify: {event} posted (HTTP {status})")
                return
            except urllib.error.HTTPError as err:
                problem = f"HTTP {err.code} {err.reason}"
            except Exception as err:  # noqa: BLE001 - any failure is said and the launch goes on
                problem = str(getattr(err, "reason", None) or err) or type(err).__name__
        problem = secrets.redact(problem, [self._url])
        _say(f"notify: {event} not posted: {problem} (tried twice, {TIMEOUT_S:g} s each)", err=True)

    def drain(self) -> None:
        """Wait for the posts queued or under way, :data:`BOUND_S` at most in all (atexit)."""
        deadline = time.monotonic() + BOUND_S
        done = self._queue.all_tasks_done
        with done:
            while self._queue.unfinished_tasks and time.monotonic() < deadline:
                done.wait(max(0.0, deadline - time.monotonic()))
            late = self._queue.unfinished_tasks
        if late:
            _say(f"notify: {late} post(s) not answered within {BOUND_S:g} s; not waiting longer", err=True)


class _Kept:
    """An urllib handler that keeps each connection it opens (``conns``): the deadline shuts its socket."""

    conns: list

    def do_open(self, http_class, req, **kwargs):
        def make(*args, **kw):
            conn = http_class(*args, **kw)
            self.conns.append(conn)
            return conn

        return super().do_open(make, req, **kwargs)


@functools.cache
def _handler_classes() -> tuple[type, type]:
    """urllib's HTTP and HTTPS handlers that keep their connections (urllib is imported where a post
    happens: the dry run needs none of http.client, email and ssl)."""
    import urllib.request

    return (
        type("_Http", (_Kept, urllib.request.HTTPHandler), {}),
        type("_Https", (_Kept, urllib.request.HTTPSHandler), {}),
    )


def _post_once(url: str, body: bytes, timeout_s: float) -> int:
    """One POST (urllib: the environment's proxies apply), ``timeout_s`` in all: at the deadline the
    connection's socket is shut, so a receiver that answers a byte at a time cannot hold it longer.
    The answer's HTTP status; an error raises (``timed out`` at the deadline)."""
    import urllib.error
    import urllib.request

    conns: list = []
    handlers = [cls() for cls in _handler_classes()]
    for handler in handlers:
        handler.conns = conns
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        for conn in list(conns):
            with contextlib.suppress(OSError, AttributeError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout_s) as answer:
            return answer.status
    except urllib.error.HTTPError:
        raise
    except Exception:
        if expired.is_set():
            raise TimeoutError("timed out") from None
        raise
    finally:
        timer.cancel()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()


def _say(line: str, err: bool = False) -> None:
    try:
        print(f"[{PROG}] {line}", file=sys.stderr if err else sys.stdout, flush=True)
    except (OSError, ValueError):  # the terminal is gone
        pass


def check(url: str | None, events: Sequence[str]):
    """The ``notify`` keys' one error (a :class:`~launcher.errors.UserError`), or None.

    >>> str(check("hooks.example/x", []))
    'notify.url=***: an http:// or https:// URL (the webhook; docs/notify.md)'
    >>> str(check(None, ["failed", "crashed"]))
    'notify.events=crashed: one of failed, restarted, succeeded, stopped (docs/notify.md)'
    >>> check("https://hooks.example/x", ["failed"]) is None
    True
    """
    from .errors import UserError

    if url is not None and (not isinstance(url, str) or not url.startswith(SCHEMES) or len(url) <= 8):
        return UserError("notify.url", url, "an http:// or https:// URL", "the webhook; docs/notify.md")
    for event in events:
        if event not in EVENTS:
            return UserError("notify.events", event, f"one of {', '.join(EVENTS)}", "docs/notify.md")
    return None
