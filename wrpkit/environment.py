"""What this environment can run, known without Warp: device names, the installed
Warp version (read from its package metadata), how Warp's replay and library
load report failures, and whether memory can be reserved.

Never imports Warp: what the installed Warp itself reports about the host (CPU
object tags, CUDA archs) is asked in :mod:`wrpkit.run.warp_bridge.start`, and ``wrp
check`` hands it to :func:`wrpkit.checks.check.preflight`.

Shared by ``wrp check`` (which must not import Warp just to read a version)
and the runtime (which loads captures into Warp).
"""

from __future__ import annotations

import os
import re
from typing import Optional

from .errors import WrpDeviceError, WrpRuntimeError


def parse_device(device) -> tuple:
    """Split a device name into its family and ordinal.

    ``"cpu"`` -> ``("cpu", None)``; ``"cuda"`` / ``"cuda:1"`` -> ``("cuda", 0 / 1)``;
    a ``wp.Device`` maps the same way; None means the CPU.

    Raises:
        WrpDeviceError: Anything else.
    """
    if device is None:
        return "cpu", None
    if not isinstance(device, str):
        if getattr(device, "is_cpu", False):
            return "cpu", None
        return "cuda", getattr(device, "ordinal", 0)
    d = device.strip().lower()
    if d == "cpu":
        return "cpu", None
    mt = re.fullmatch(r"cuda(?::(\d+))?", d)
    if mt:
        return "cuda", int(mt.group(1) or 0)
    raise WrpDeviceError(f"unknown device {device!r}", hint="Use 'cpu', 'cuda' or 'cuda:N'.")


def _dist_info_version(package_dir: str) -> Optional[str]:
    """``Version:`` of the one ``warp_lang-*.dist-info`` beside ``package_dir``; None if not exactly one."""
    import glob  # noqa: PLC0415
    import os  # noqa: PLC0415

    hits = glob.glob(os.path.join(glob.escape(os.path.dirname(package_dir)), "warp_lang-*.dist-info"))
    if len(hits) != 1:
        return None
    try:
        with open(os.path.join(hits[0], "METADATA"), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # end of the headers
                if line.startswith("Version:"):
                    return line[len("Version:"):].strip() or None
    except OSError:
        pass
    return None


def installed_warp_version() -> Optional[str]:
    """The installed warp-lang version, read without importing Warp; None if it is absent.

    Reads the ``METADATA`` of the ``warp_lang-*.dist-info`` beside the
    ``warp`` package that ``import warp`` would load (a few file reads);
    ``importlib.metadata``, which costs about 0.1 s of imports, is the
    fallback for other layouts.
    """
    import importlib.util  # noqa: PLC0415

    try:
        spec = importlib.util.find_spec("warp")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or ()) if spec is not None else ():
        found = _dist_info_version(location)
        if found:
            return found
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("warp-lang")
    except PackageNotFoundError:
        return None


def stderr_tail(limit: int = 4096) -> str:
    """The end of what this process wrote on stderr when fd 2 is a file (a replay child's memory file)."""
    import stat as st  # noqa: PLC0415

    try:
        info = os.fstat(2)
        if not st.S_ISREG(info.st_mode):
            return ""
        return os.pread(2, limit, max(0, info.st_size - limit)).decode("utf-8", "replace")
    except OSError:
        return ""


#: Warp's guard against runaway WHILE loops on the CPU (warp/native/apic.cpp,
#: ``guard_limit``): one WHILE that runs this many iterations ends the replay
#: with an error.  Nested loops multiply it.
WARP_WHILE_GUARD = 1 << 24

#: How Warp's CPU replay reports a failure on stderr (apic.cpp); its Python
#: exception carries ``wp_get_error_string()``, which these leave empty.
_APIC_ERROR_LINE = "Warp APIC error:"


def hit_while_guard(text: str) -> bool:
    """Whether Warp's message (or its stderr) says a WHILE loop hit :data:`WARP_WHILE_GUARD`."""
    return "APIC_OP_WHILE exceeded guard limit" in text


def warp_reason(said: str, match) -> str:
    """The last line of ``said`` (a process's stderr) for which ``match(line)`` is true, stripped; ``""`` if none."""
    return next((ln.strip() for ln in reversed(said.splitlines()) if match(ln)), "")


def while_guard_error(loop: str, warp_said: str = "") -> WrpRuntimeError:
    """The error of a WHILE that ran :data:`WARP_WHILE_GUARD` iterations, in a replay or stepped.

    Args:
        loop: What ran, e.g. ``"the WHILE at op 1"``.
        warp_said: Warp's own message, where Warp stopped it.
    """
    said = f" ({warp_said})" if warp_said else ""
    return WrpRuntimeError(
        f"{loop} ran {WARP_WHILE_GUARD:,} iterations (2^24), the most Warp's CPU replay allows one loop, "
        f"and was stopped there{said}",
        hint="Its condition never became 0 with these inputs: `wrp inspect FILE --ops` shows the loop and its "
             "condition region, and `wrp trace FILE --timeout 10` steps it, iteration by iteration.")


def warp_replay_error(text: str, said: Optional[str] = None) -> WrpRuntimeError:
    """The error for Warp's failure to replay a graph, with Warp's reason.

    Warp's CPU replay prints why it stopped on stderr and raises an exception
    with an empty reason ("CPU graph replay failed: "), so the reason is taken
    from ``said`` (what the process wrote on stderr) where ``text`` lacks one.
    The python engine and ``wrp-replay`` (whose message relays Warp's line) get
    the same explanation of a WHILE that hit Warp's guard.

    Args:
        text: Warp's message (the exception's, or the line ``wrp-replay`` relayed).
        said: The end of the replaying process's stderr; by default this process's own, where fd 2
            is a file (:func:`stderr_tail`), and ``""`` for a parent relaying a child's message.

    Returns:
        A :class:`~wrpkit.errors.WrpRuntimeError` (exit 1) whose hint says what to do next.
    """
    text = text.strip()
    if _APIC_ERROR_LINE not in text:
        reason = warp_reason(stderr_tail() if said is None else said, lambda ln: _APIC_ERROR_LINE in ln)
        if reason:
            text = f"{text.rstrip(': ')}: {reason}"
    if hit_while_guard(text):
        return while_guard_error("Warp failed to replay the graph: a WHILE loop", warp_said=text)
    if not text.endswith(":"):
        return WrpRuntimeError(f"Warp failed to replay the graph: {text}",
                               hint="Warp's own diagnostic, if any, is on stderr above.")
    return WrpRuntimeError(f"Warp failed to replay the graph: {text} (Warp gave no reason)",
                           hint="Warp's own diagnostic, if any, is on stderr above; `wrp trace FILE` names the op "
                                "that fails.")


def can_reserve(nbytes: int) -> bool:
    """Whether this process could reserve ``nbytes`` of address space now.

    The reservation is never touched and is released at once, so it costs no
    memory; it fails where the address space is the limit (``ulimit -v``, a
    full 32-bit space, overcommit refused).
    """
    import mmap  # noqa: PLC0415

    if nbytes <= 0:
        return True
    try:
        mmap.mmap(-1, int(nbytes), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0),
                  prot=mmap.PROT_READ).close()
        return True
    except (OSError, ValueError, OverflowError, MemoryError):
        return False


def warp_library_error(e: BaseException):
    """The error for Warp's native library failing to load (``wp.init``), or None if ``e`` is another failure.

    ``dlopen`` reports an address space too small for the library only as
    "failed to map segment from shared object" (no errno), which a ``noexec``
    mount gives too; so a reservation of the library's size decides: if that
    fails as well, it is out of memory (exit 3, the size), else Warp's library
    is unusable here (exit 1).  ``wrp-replay`` decides the same way
    (native/src/warp_runtime.cpp).

    Returns:
        A :class:`~wrpkit.errors.WrpOutOfMemoryError` or :class:`~wrpkit.errors.WrpRuntimeError`, or None.
    """
    from .errors import WrpOutOfMemoryError  # noqa: PLC0415

    text = str(e)
    named = re.match(r"Failed to load the shared library '([^']+)'", text)
    if not named:
        return None
    lib = named.group(1)
    why = str(e.__cause__ or "").strip() or "no reason given"
    try:
        size = os.path.getsize(lib)
    except OSError:
        size = 0
    if "failed to map segment" in why and size and not can_reserve(size):
        import resource  # noqa: PLC0415

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        hint = (f"This process's address space is limited to {limit >> 20} MiB (ulimit -v); raise the limit."
                if limit != resource.RLIM_INFINITY else "Free memory on the host and try again.")
        return WrpOutOfMemoryError(f"out of memory on the host: cannot load Warp's library {lib} "
                                   f"({size >> 20} MiB, {size} bytes): {why}", hint=hint, requested=size,
                                   device="cpu")
    return WrpRuntimeError(f"Warp's native library could not be loaded: {lib}: {why}",
                           hint="Reinstall Warp (pip install --force-reinstall warp-lang==1.19.0); "
                                "`wrp check FILE` says what this host's Warp can run.")
