"""What this environment can run: device names and the installed Warp version.

Shared by ``wrp check`` (which must not import Warp just to read a version)
and the runtime (which loads captures into Warp).
"""

from __future__ import annotations

import re
from typing import Optional

from .errors import WrpDeviceError


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


def installed_warp_version() -> Optional[str]:
    """The installed warp-lang version, read without importing Warp; None if it is absent."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("warp-lang")
    except PackageNotFoundError:
        return None
