"""The front door: :func:`load` a capture as a :class:`~wrpkit.run.load.program.Program`, whose graph
lives in this process or, with ``isolate=True``, in a child process.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from ..load.prepare import prepare
from ..load.program import load_isolated, load_prepared


def load(path_or_bytes, device="cpu", modules: Optional[Mapping] = None, *, isolate: bool = False,
         allow_raw_pointers: bool = False, modules_dir=None, max_memory=None, trusted_keys=None,
         signature=None):
    """Load a ``.wrp`` or ``.wrpk`` (path or bytes) as a runnable :class:`~wrpkit.run.load.program.Program`.

    Checks, in order: the container decodes and validates with wrpkit's codec;
    the module files are present, non-empty and match their recorded
    digests; the device family matches; the Warp version matches.  Then Warp
    loads it.

    Args:
        path_or_bytes: A path, or the bytes of a ``.wrp`` / ``.wrpk``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``wp.Device``.
        modules: ``{filename: bytes}`` of module files (needed for the bytes
            of a ``.wrp`` that launches kernels; replaces ``<stem>_modules/``
            for a path).
        isolate: Return a Program that validates here and replays in a
            child process (``Program.isolated``) that its first run starts and
            loads: a crash in kernel code or in Warp's runtime raises
            :class:`~wrpkit.errors.WrpCrashError` (a ``WrpRuntimeError``)
            instead of ending the caller.  The first run costs a process
            start and a load; later runs a request and the bindings' bytes.
        allow_raw_pointers: Accept kernel arguments holding live process
            pointers (refused by default: see :func:`~wrpkit.run.load.prepare.prepare`).
        modules_dir: For a ``.wrp`` path: the folder of its module files
            (default: ``<stem>_modules/`` beside the path, or beside a
            symbolic link's target).
        max_memory: Bytes (or a size such as ``"64G"``) the load may
            allocate, replacing the check against the device's free memory
            (host: available memory; CUDA: free device memory) that runs
            before anything is allocated.
        trusted_keys: Paths of PEM public keys or CA certificates (or folders of ``*.pem``): the
            capture must be signed by one of them (``wrp sign``, or ``model_signing sign``), its
            file and module files unchanged since, checked before anything is decoded or loaded.
            None: what the environment variable ``WRPKIT_TRUSTED_KEYS`` requires (nothing when
            it is unset).
        signature: The signature file, when it is not ``STEM.sig`` beside the capture.

    A path may be a symbolic link, or a stem to which ``.wrp`` is added (as
    ``wp.capture_load`` does).

    Raises:
        WrpFormatError, WrpValidationError: The file is invalid, or holds raw
            process pointers.
        WrpModuleError: A module file is missing, empty or altered.
        WrpDeviceError: Wrong device family, or the device is unavailable.
        WrpVersionError: Recorded with another Warp version (recapture needed).
        WrpRuntimeError: Warp failed to load it.
        WrpOutOfMemoryError: Its memory does not fit the device (or ``max_memory``), or an allocation failed.
        WrpSignatureError: Unsigned, signed by no trusted key, or changed after signing (exit 3).
    """
    from ...checks.memory import parse_size  # noqa: PLC0415
    from ...formats.signature import ENVIRONMENT, Trust  # noqa: PLC0415

    max_memory = parse_size(max_memory) if max_memory is not None else None
    paths = [trusted_keys] if isinstance(trusted_keys, (str, os.PathLike)) else list(trusted_keys or [])
    trust = (Trust.from_paths([p for p in paths if not os.path.isdir(p)], [p for p in paths if os.path.isdir(p)],
                              signature) if paths else Trust.resolve(signature=signature) if signature else ENVIRONMENT)
    prep = prepare(path_or_bytes, modules, allow_raw_pointers=allow_raw_pointers, modules_dir=modules_dir,
                   trust=trust)
    if isolate:
        return load_isolated(prep, str(device), max_memory)
    prog = load_prepared(prep, device, max_memory)
    if prep.kind == "wrpk":
        prep.wrp_bytes = None  # Warp copied what it needs; the rebuilt image is no longer used
    return prog


__all__ = ["load"]
