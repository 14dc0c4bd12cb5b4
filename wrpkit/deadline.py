"""The one timeout mechanism: a :class:`Deadline`, made once from the seconds a user gave
(``--timeout``, ``timeout=``) and handed down to whatever waits.

Every wait in wrpkit that a timeout bounds reads the same object: a child's answer
(:meth:`wrpkit.run.contain.served.ServedChild.ask`), ``wrp-replay``'s own timer (given
:meth:`Deadline.left` as its ``--timeout``), the second run that names a crashing op, and a
command line's watchdog (:class:`wrpkit.cli.options.Watchdog`, which ends the process where
native code cannot be interrupted).  Each says the same words when it runs out (:meth:`error`:
the seconds the user gave, not the seconds left where it ran out).
"""

from __future__ import annotations

import math
import time
from typing import Optional

from .errors import WrpTimeoutError, timeout_hint, timeout_message


class Deadline:
    """A point in :func:`time.monotonic` time, and the timeout it came from.

    Args:
        seconds: The timeout the user gave (named when it runs out).
        replays: Replays asked for (``--repeat`` plus ``--warmup``), named as a cause when more than one.
        started: False: the clock has not started (:meth:`left` is None) until :meth:`restarted`
            (``wrp regress`` starts a case's clock once its files are validated).
        spent: Seconds of it already gone (work before the deadline was made counts).

    Attributes:
        seconds: As given.
        replays: As given.
        at: When it runs out (``time.monotonic()``); infinite before it started.
    """

    __slots__ = ("seconds", "replays", "at")

    def __init__(self, seconds: float, replays: int = 1, *, started: bool = True, spent: float = 0.0):
        self.seconds = float(seconds)
        self.replays = int(replays)
        self.at = time.monotonic() + self.seconds - spent if started else math.inf

    @classmethod
    def after(cls, seconds: Optional[float], replays: int = 1, *, spent: float = 0.0) -> Optional["Deadline"]:
        """A deadline ``seconds`` (less ``spent``) from now, or None when there is no timeout."""
        return None if seconds is None else cls(seconds, replays, spent=spent)

    def __repr__(self) -> str:
        left = self.left()
        return f"<Deadline {self.seconds:g} s, {'not started' if left is None else f'{left:.3f} s left'}>"

    def left(self) -> Optional[float]:
        """Seconds left, at least 1 ms (a wait given 0 would not wait at all); None before it started."""
        if self.at == math.inf:
            return None
        return max(1e-3, self.at - time.monotonic())

    def passed(self) -> bool:
        """Whether it has run out."""
        return time.monotonic() >= self.at

    def restarted(self) -> "Deadline":
        """The same timeout, from now."""
        return Deadline(self.seconds, self.replays)

    def error(self) -> WrpTimeoutError:
        """The error of a wait it bounded that ran out (the same words as wrp-replay's)."""
        return WrpTimeoutError(timeout_message(self.seconds, self.replays), hint=timeout_hint(self.replays))


def left(deadline: Optional[Deadline]) -> Optional[float]:
    """:meth:`Deadline.left` of ``deadline``, or None without one."""
    return None if deadline is None else deadline.left()


__all__ = ["Deadline", "left"]
