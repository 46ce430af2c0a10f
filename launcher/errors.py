"""The one error type a user can cause. The CLI prints it in one line and exits with code 2."""

from __future__ import annotations

from typing import Any, Optional

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake in the command line or config: names the key, the bad value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str, hint: Optional[str] = None) -> None:
        self.key, self.value, self.allowed, self.hint = key, value, allowed, hint
        message = f"{key}={value!s}: {allowed}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)
