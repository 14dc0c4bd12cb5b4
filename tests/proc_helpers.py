"""The processes a test started, read from /proc (other sessions on the machine may run their own)."""

from __future__ import annotations

from pathlib import Path


def processes(match) -> list:
    """``(pid, parent pid, argv, /proc entry)`` of every live process whose ``argv`` (a list of bytes)
    ``match(argv)`` accepts."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if match(argv):
            found.append((int(p.name), ppid, argv, p))
    return found
