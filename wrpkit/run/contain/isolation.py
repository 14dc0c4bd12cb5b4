"""Contained replays: one request in a fresh child, or one more request to a kept worker.

A crash of the child becomes a :class:`~wrpkit.errors.WrpCrashError` that names
the op (:mod:`wrpkit.run.contain.crash`); nothing is written.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ...deadline import Deadline
from .crash import located_crash
from .spawn import kernel_output_of
from .served import ChildCrashed
from .worker import ChildRun, ReplayWorker, whole_region




def replay_in_child(prep, device, inputs: Optional[Mapping] = None, repeat: int = 1, warmup: int = 0, *,
                    verify_checksums: bool = True, deadline: Optional[Deadline] = None, read_back=True,
                    identify: bool = True, raw: bool = False, stats: Optional[Mapping] = None,
                    max_memory: Optional[int] = None, kernel_output=None) -> ChildRun:
    """Load and replay a prepared capture in a child process (one request, then it ends).

    Args:
        prep: A :class:`wrpkit.run.load.prepare.Prepared` (validated; the child
            maps its source file itself, see :class:`~wrpkit.run.contain.worker.ChildSource`).
        device: The device string.
        inputs: ``{binding: np.ndarray}``, already checked against the bindings.
        repeat: Timed replays.
        warmup: Untimed replays first.
        verify_checksums: Whether a ``.wrpk`` input's blob checksums were verified (said on a crash).
        deadline: When to give up (None: no limit).
        read_back: True: every binding; False: none; or the names to return.
        identify: On a crash, search for the op that crashed (more children).
        raw: Inputs are whole bindings as ``uint8`` bytes, and so are the results.
        stats: ``{binding: spec}`` to summarise in the child (``ChildRun.stats``).
        max_memory: Bytes the child's load may allocate (None: the device's free memory).
        kernel_output: Where the replays' kernel output (``wp.printf``) goes: a stream, a
            :class:`~wrpkit.run.contain.spawn.KernelOutput`, ``"stdout"``, or None (not shown;
            :func:`~wrpkit.run.contain.spawn.kernel_output_of`).  The search for a crashing op shows none.

    Returns:
        A :class:`ChildRun`; its results are views of shared memory, typed per
        the signature unless ``raw``.

    Raises:
        WrpCrashError: The replay died of a fatal signal; the message names
            the op when it could be identified.
        WrpTimeoutError: ``deadline`` passed (the child was killed).
        WrpError: Whatever the child raised (the same class and message).
    """
    from ...formats import annotations as ann  # noqa: PLC0415

    whole = {n: (np.asarray(a) if raw else whole_region(prep, n, a)) for n, a in dict(inputs or {}).items()}
    names = list(prep.sizes) if read_back is True else [] if read_back is False else list(read_back)
    worker = ReplayWorker(prep, device, max_memory=max_memory)
    shown, owned = kernel_output_of(kernel_output)
    try:
        try:
            run = worker.run(whole, repeat, warmup, deadline, read_back=names, stats=stats, kernel_output=shown)
        except ChildCrashed as crash:
            raise located_crash(prep, crash, device, whole, repeat + warmup, deadline, identify,
                                 verify_checksums, worker.source) from None
    finally:
        worker.close()
        if owned:
            shown.close()
    if not raw:
        for n, arr in list(run.results.items()):
            sig = prep.signature.get(n)
            if sig is not None:
                run.results[n] = ann.view_region(arr, sig)
    return run



def replay_in_worker(worker: ReplayWorker, inputs: Mapping, repeat: int, *, verify_checksums: bool = True,
                     deadline: Optional[Deadline] = None, full_state: Optional[Mapping] = None,
                     read_back=None, reset: bool = False, kernel_output=None) -> ChildRun:
    """Replay in ``worker``; on a crash, find the op (children from ``full_state``) and raise it.

    Args:
        worker: The program's :class:`~wrpkit.run.contain.worker.ReplayWorker`.
        inputs: Whole bindings (``uint8``) to set before the replay.
        repeat: Replays.
        verify_checksums: Whether a ``.wrpk`` input's blob checksums were verified (said on a crash).
        deadline: When to give up (None: no limit).
        full_state: Every binding the program holds (what a new child needs to replay the same run).
        read_back: Names of the bindings to return (None: every binding).
        reset: The child restores all of its graph's memory to the captured bytes first.
        kernel_output: Where the replays' kernel output goes (as :func:`replay_in_child`).

    Raises:
        WrpCrashError, WrpTimeoutError, WrpError: As :func:`replay_in_child`.
    """
    shown, owned = kernel_output_of(kernel_output)
    try:
        return worker.run(inputs, repeat, 0, deadline, read_back=read_back, reset=reset, kernel_output=shown)
    except ChildCrashed as crash:
        raise located_crash(worker.prep, crash, worker.device, dict(full_state or inputs), repeat, deadline,
                             True, verify_checksums, worker.source) from None
    finally:
        if owned:
            shown.close()
