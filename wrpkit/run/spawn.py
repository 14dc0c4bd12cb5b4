"""Starting wrpkit's child processes.

Every child (a replay's :mod:`wrpkit.run.child`, ``wrp trace``'s and ``wrp profile``'s
:mod:`wrpkit.debug.child`) is ``python -m MODULE --serve FD``: it talks over one end
of a Unix socket pair and prints into a memory file (:func:`spawn_served`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import WrpRuntimeError

def child_env() -> dict:
    """The environment of a child: wrpkit importable, and no faulthandler dump (the parent reports)."""
    env = dict(os.environ)
    env.pop("PYTHONFAULTHANDLER", None)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])]
                                         + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def spawn_served(module: str, extra: tuple = ()) -> tuple:
    """Start ``python -m module --serve FD [extra]``, FD being one end of a new Unix socket pair.

    The child has wrpkit importable (:func:`child_env`), no stdin, and its
    stdout and stderr in a memory file (read with :func:`output_tail`), so
    Warp's output never reaches the terminal and nothing is written to disk.

    Returns:
        ``(process, our end of the socket, the output's fd)``.

    Raises:
        WrpRuntimeError: The process could not be started.
    """
    import socket  # noqa: PLC0415

    from .shared import memory_file  # noqa: PLC0415

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out_fd = memory_file("wrpkit-child-output")
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, "--serve", str(theirs.fileno()), *extra],
                                stdin=subprocess.DEVNULL, stdout=out_fd, stderr=out_fd, env=child_env(),
                                pass_fds=(theirs.fileno(),))
    except OSError as e:
        ours.close()
        os.close(out_fd)
        raise WrpRuntimeError(f"cannot start the replay process: {e}") from None
    finally:
        theirs.close()
    return proc, ours, out_fd


def output_tail(out_fd: int, size: int = 4000) -> str:
    """The last ``size`` bytes a child printed into its output memory file (:func:`spawn_served`)."""
    if out_fd < 0:
        return ""
    try:
        end = os.fstat(out_fd).st_size
        return os.pread(out_fd, size, max(0, end - size)).decode("utf-8", "replace")
    except OSError:
        return ""
