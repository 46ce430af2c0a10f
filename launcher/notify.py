"""A word when a run changes state: one POST to a webhook per event (``notify.url``, ``notify.events``;
docs/notify.md). Standard library only (urllib).

The body is Slack- and Discord-compatible JSON: ``text`` (Slack's incoming webhooks) and ``content``
(Discord's) hold the same line, ``run: failed (exit-code) after 2 attempts; goodput 41%: ...``; the
fields a receiver of one's own reads are beside them (``event``, ``run``, ``cause``, ``attempts``,
``goodput``). The URL is a secret (a Slack webhook URL grants posting: launcher/secrets.py's
SECRET_KEYS): it is never printed, and a failure's text is redacted before it is.

Bounded: each POST runs on a thread of its own (a restart never waits for it); a try that gets no
answer within :data:`TIMEOUT_S` is retried once after :data:`RETRY_AFTER_S`; whatever the outcome,
one line says it. At the launcher's exit the posts still under way get at most :data:`BOUND_S`
between them (atexit), then the process exits: a webhook that never answers delays the exit by that
bound at most and never changes the exit code.
"""

from __future__ import annotations

import atexit
import json
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
    """One launcher's webhook: ``send`` posts on a thread; the exit waits for the posts, bounded."""

    def __init__(self, url: str, events: Sequence[str]) -> None:
        # here, not at the top (http.client, email and ssl: no dry run needs them), and not first on a
        # post's thread, which may run while the interpreter exits
        import urllib.error  # noqa: F401
        import urllib.request  # noqa: F401

        self._url = url
        self.events = frozenset(events)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        atexit.register(self.drain)

    def __repr__(self) -> str:  # never the URL
        return f"Notifier(url={secrets.MASK!r}, events={sorted(self.events)!r})"

    def send(self, event: str, run: str, cause: str | None, attempts: int, ledger: Mapping) -> None:
        if event not in self.events:
            return
        body = json.dumps(message(event, run, cause, attempts, ledger)).encode()
        thread = threading.Thread(target=self._post, args=(event, body), daemon=True, name=f"notify-{event}")
        with self._lock:  # the posts answered are forgotten (a long sweep posts once per job)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _post(self, event: str, body: bytes) -> None:
        import urllib.error  # loaded by __init__: a lookup here
        import urllib.request

        problem = ""
        for attempt in range(2):
            if attempt:
                time.sleep(RETRY_AFTER_S)
            try:
                request = urllib.request.Request(
                    self._url, data=body, method="POST", headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                    _say(f"notify: {event} posted (HTTP {answer.status})")
                    return
            except urllib.error.HTTPError as err:
                problem = f"HTTP {err.code} {err.reason}"
            except Exception as err:  # noqa: BLE001 - any failure is said and the launch goes on
                problem = str(getattr(err, "reason", None) or err) or type(err).__name__
        problem = secrets.redact(problem, [self._url])
        _say(f"notify: {event} not posted: {problem} (tried twice, {TIMEOUT_S:g} s each)", err=True)

    def drain(self) -> None:
        """Wait for the posts under way, :data:`BOUND_S` at most in all (atexit)."""
        deadline = time.monotonic() + BOUND_S
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        late = [t for t in threads if t.is_alive()]
        if late:
            _say(f"notify: {len(late)} post(s) not answered within {BOUND_S:g} s; not waiting longer", err=True)


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
