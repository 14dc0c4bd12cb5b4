"""``wrp replay``'s native replayer, started before the command line is parsed (issue 42 item 7).

The default engine of ``wrp replay`` is ``wrp-replay`` (:mod:`wrpkit.run.replay.engines`), which
the command starts ahead (:func:`~wrpkit.run.replay.engines.prestart_replayer`) so that its start,
Warp's libraries and the mapping of the file overlap this process's own checks.  Started from the
command's body, it came about 75 ms into ``wrp`` (click and the command group imported first), a
fifth of a 256 MiB replay.  :func:`prestart` starts it from ``wrpkit/__main__.py`` instead, before
click is imported, for the common command lines ``wrp replay FILE`` with ``--json``, ``--repeat``,
``--warmup``, ``--device``, ``--engine auto|native`` and ``--no-verify``.

It is a guess, never an answer: click still parses the command line, and the command forms
wrp-replay's arguments itself (:func:`~wrpkit.run.replay.engines.replayer_args`, the one place); the
replayer started here is used only when they are the same, else it is stopped and another started.
Anything this parser does not know (another option, ``--help``, a second argument, a missing file,
trusted keys in the environment) starts nothing.  Nothing here prints.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

#: ``wrp replay``'s defaults, the one place: its click options take them from here, and :func:`parse`
#: fills in what a command line leaves out.
REPLAY_DEFAULTS = {"repeat": 1, "warmup": 0, "device": "cpu", "engine": "auto"}

#: The options taken here with a value, and the flags.
_VALUED = ("--repeat", "--warmup", "--device", "--engine")
_FLAGS = ("--json", "--no-verify")


def parse(args: list) -> Optional[dict]:
    """``{file, repeat, warmup, device, engine, as_json, no_verify}`` for a command line this start
    takes (what follows ``replay``), else None."""
    got = {**{k: str(v) for k, v in REPLAY_DEFAULTS.items()}, "--json": False, "--no-verify": False}
    files = []
    k = 0
    while k < len(args):
        a = args[k]
        name, eq, value = a.partition("=")
        if a in _FLAGS:
            got[a] = True
        elif name in _VALUED:
            if not eq:
                k += 1
                if k >= len(args):
                    return None
                value = args[k]
            got[name[2:]] = value
        elif a.startswith("-") or files:
            return None  # another option, "--", "-", or a second argument: click's to word
        else:
            files.append(a)
        k += 1
    if not files:
        return None
    try:
        repeat, warmup = int(got["repeat"]), int(got["warmup"])
    except ValueError:
        return None
    if repeat < 1 or warmup < 0 or got["engine"] not in ("auto", "native"):
        return None
    return {"file": files[0], "repeat": repeat, "warmup": warmup, "device": got["device"], "engine": got["engine"],
            "as_json": got["--json"], "no_verify": got["--no-verify"]}


def prestart(args: list) -> None:
    """Start wrp-replay for ``wrp replay`` + ``args`` if the command line is one this parser takes and
    the native engine would replay it; else do nothing."""
    got = parse(args)
    if got is None or os.environ.get("WRPKIT_TRUSTED_KEYS"):
        return  # trusted keys: the command resolves them (and refuses bad ones) first
    try:
        if not os.path.isfile(got["file"]):
            return
    except (OSError, ValueError):
        return
    from ..checks.memory import UNREACHED_REFUSE_BYTES  # noqa: PLC0415
    from ..run.contain.spawn import early_kernel_output  # noqa: PLC0415
    from ..run.replay.engines import ReplayRequest, choose_engine, prestart_replayer  # noqa: PLC0415

    if choose_engine(got["engine"], device=got["device"]).name != "native":
        return
    # What the command's own start gives wrp-replay (cli/replay.py): the kernels' output on stdout,
    # on stderr with --json; the same descriptor, which the command takes over.
    kernel_output = early_kernel_output(sys.stderr if got["as_json"] else sys.stdout)
    prestart_replayer(got["file"], ReplayRequest(device=got["device"], repeat=got["repeat"], warmup=got["warmup"],
                                                 verify_checksums=not got["no_verify"], kernel_output=kernel_output),
                      None, approve_above=UNREACHED_REFUSE_BYTES)
