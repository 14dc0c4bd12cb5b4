"""Ctrl-C during a replay in this process: stop within a fraction of a second.

Warp replays a graph in native code (one ctypes call for a whole CPU graph,
a WHILE loop included).  Python runs its SIGINT handler only between
bytecodes of the main thread, so a ``KeyboardInterrupt`` would arrive only
when that call returns, which for a long WHILE loop is never soon.  But
Python's C-level handler, in whichever thread the signal lands (Warp starts
threads of its own), writes the signal's number to the *wakeup fd*.
:func:`stop_on_interrupt` points the wakeup fd at a pipe that a helper
thread watches; on Ctrl-C the helper prints ``interrupted`` and ends the
process with exit status 130, as the native ``wrp-replay`` is ended by the
signal.  Nothing is written during a replay (outputs are written atomically
after it), so nothing is left half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from ..errors import EXIT_INTERRUPTED
from .output import error_object

#: How long the end of the block waits for the helper thread (x10, seconds).
_POLL_S = 0.1


_DONE = b"\0"  # written by the replaying thread when the block ends (no signal has number 0)


@contextlib.contextmanager
def stop_on_interrupt(as_json: bool = False):
    """While the block runs, Ctrl-C (SIGINT) ends the process at once with exit status 130.

    Args:
        as_json: Also print ``{"error": "interrupted", "exit_code": 130}`` on
            stdout, as every ``--json`` failure does.

    Outside the main thread, or where SIGINT does not raise
    ``KeyboardInterrupt`` (ignored, or handled by someone else), the block
    runs unchanged.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        yield
        return

    def watch():
        while True:
            try:
                data = os.read(r, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data or _DONE in data and bytes([signal.SIGINT]) not in data:
                return
            if bytes([signal.SIGINT]) in data:
                with contextlib.suppress(OSError):
                    if as_json:
                        os.write(1, (json.dumps(error_object("interrupted", EXIT_INTERRUPTED)) + "\n").encode())
                    os.write(2, b"interrupted\n")
                os._exit(EXIT_INTERRUPTED)

    helper = threading.Thread(target=watch, name="wrp-sigint", daemon=True)
    helper.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        with contextlib.suppress(OSError):
            os.set_blocking(w, True)
            os.write(w, _DONE)
        helper.join(_POLL_S * 10)
        os.close(w)
        os.close(r)
