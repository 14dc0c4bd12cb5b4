"""Warp started quietly, and the few Warp calls ``debug/`` and ``cli/`` make through ``run/``.

``run/`` is the one package that imports Warp: :func:`init_warp` starts it (no
banner; on the CPU no "no CUDA driver" warning), :func:`host_cpu_tags` and
:func:`cuda_device_arch` are what this host's Warp says for ``wrp check``
(which hands them to :func:`wrpkit.checks.check.preflight`), and the rest are
the launches, waits and timers of ``debug/``'s in-process engines.  Every
function imports Warp on call, never at import.
"""

from __future__ import annotations

from typing import Optional

from ...environment import warp_library_error

#: Lines Warp's native ``wp_init`` prints on stderr on a machine without a
#: CUDA driver (warp/native/cuda_util.cpp), which say nothing to CPU-only work.
_CUDA_PROBE_LINES = ("Warp CUDA warning: Could not find or load the NVIDIA CUDA driver",
                     "Warp CUDA warning: Unable to determine CUDA driver version")


def _start_runtime(wp) -> None:
    """``wp.init()``, with a failure to load Warp's native library as a :class:`~wrpkit.errors.WrpError`."""
    try:
        wp.init()
    except RuntimeError as e:
        err = warp_library_error(e)
        if err is None:
            raise
        raise err from e


def quiet_banner() -> None:
    """Turn Warp's start-up banner off, without starting Warp (the library starts it later, on the capture's device)."""
    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True


def init_warp(cpu_only: bool = False):
    """Import and initialize Warp quietly; return the ``warp`` module.

    Warp's start-up banner is turned off (``wp.config.quiet``, ``log_level``).  With
    ``cpu_only``, the warning Warp's native code prints when it finds no CUDA
    driver is dropped too: it is written by C code straight to file
    descriptor 2, so stderr is redirected into a temporary file while Warp
    initializes, and every other line is written back.

    Args:
        cpu_only: The caller will only use the CPU device.

    Raises:
        WrpOutOfMemoryError: Warp's library does not fit the process's address space.
        WrpRuntimeError: Warp's library cannot be loaded for another reason.
    """
    import warp as wp  # noqa: PLC0415

    from .internals import runtime_started  # noqa: PLC0415

    wp.config.quiet = True
    if hasattr(wp, "LOG_WARNING") and hasattr(wp.config, "log_level"):
        wp.config.log_level = max(getattr(wp.config, "log_level", 0) or 0, wp.LOG_WARNING)  # no banner
    if not cpu_only or runtime_started():
        _start_runtime(wp)
        return wp
    import os  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        _start_runtime(wp)
        return wp
    # A memory file where the system has one: nothing is written to disk.
    memfd = getattr(os, "memfd_create", None)
    with (os.fdopen(memfd("wrpkit-warp-init", os.MFD_CLOEXEC), "w+b") if memfd else tempfile.TemporaryFile()) as tmp:
        try:
            os.dup2(tmp.fileno(), 2)
            _start_runtime(wp)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("utf-8", "replace")
    kept = [ln for ln in text.splitlines(keepends=True) if not ln.startswith(_CUDA_PROBE_LINES)]
    if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()
    return wp


def _quiet_warp(cpu_only: bool = False):
    """:func:`init_warp`, with Warp's log level kept at warnings afterwards, so that
    nothing but warnings reaches stdout (``wrp check --json`` must print JSON only)."""
    wp = init_warp(cpu_only)
    wp.config.log_level = getattr(wp, "LOG_WARNING", 30)
    return wp


def host_cpu_tags() -> Optional[set]:
    """The ``.cpu<hash>`` tags this host's Warp would give CPU objects.

    Returns:
        The set of tags, or None when Warp is absent or its private API for
        them has changed (:func:`wrpkit.run.warp_bridge.internals.cpu_target_hash`): unknown.
    """
    try:
        from .internals import cpu_target_hash  # noqa: PLC0415

        _quiet_warp(cpu_only=True)
        tags = {cpu_target_hash(""), cpu_target_hash("-march=native")}
        return {t for t in tags if t}
    except Exception:  # noqa: BLE001  (private API; absence just means "unknown")
        return None


def cuda_device_arch(ordinal: int) -> Optional[int]:
    """The compute capability (e.g. 90) of CUDA device ``ordinal`` as Warp sees it.

    Returns:
        The arch, or None when Warp is absent, finds no such device or fails
        to initialize CUDA.
    """
    try:
        wp = _quiet_warp()
        if ordinal >= wp.get_cuda_device_count():
            return None
        return wp.get_device(f"cuda:{ordinal}").arch
    except Exception:  # noqa: BLE001
        return None


def get_device(device):
    """Warp's device object for ``device`` (a name or a ``wp.Device``): ``wp.get_device``."""
    import warp as wp  # noqa: PLC0415

    return wp.get_device(device)


def synchronize(device) -> None:
    """Wait for everything queued on ``device``: ``wp.synchronize_device``."""
    import warp as wp  # noqa: PLC0415

    wp.synchronize_device(device)


def capture_launch(graph) -> None:
    """Replay a loaded graph once: ``wp.capture_launch`` (asynchronous on CUDA; a failure is Warp's RuntimeError)."""
    import warp as wp  # noqa: PLC0415

    wp.capture_launch(graph)


def launcher():
    """``wp.capture_launch`` itself, for a timed loop that should not pay a call more per launch."""
    import warp as wp  # noqa: PLC0415

    return wp.capture_launch


def timing_events(device) -> tuple:
    """``(start, end)``: two CUDA events on ``device`` that record their time (``wp.Event(enable_timing=True)``)."""
    import warp as wp  # noqa: PLC0415

    return wp.Event(device, enable_timing=True), wp.Event(device, enable_timing=True)


def elapsed_ms(start, end) -> float:
    """Milliseconds between two recorded timing events: ``wp.get_event_elapsed_time``."""
    import warp as wp  # noqa: PLC0415

    return float(wp.get_event_elapsed_time(start, end))


__all__ = ["capture_launch", "cuda_device_arch", "elapsed_ms", "get_device", "host_cpu_tags", "init_warp", "launcher",
           "quiet_banner", "synchronize", "timing_events"]
