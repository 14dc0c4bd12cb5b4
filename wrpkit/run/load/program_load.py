"""Load a prepared capture into Warp: the device, a memory check before anything is allocated, the
hidden binding names that let :meth:`~wrpkit.run.load.program.Program.reset` reach every region, and
Warp's load itself (:func:`load_graph`), of which :func:`wrpkit.run.load.program.load_prepared` makes a
:class:`~wrpkit.run.load.program.Program`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ...environment import can_reserve, stderr_tail, warp_reason
from ...errors import WrpDeviceError, WrpError, WrpRuntimeError
from ...module_dirs import modules_dir_for
from .prepare import Prepared, check_runnable, device_family
from ..warp_bridge.start import init_warp


#: The name a region no binding names gets in the image Warp loads (:func:`load_graph`), so that
#: :meth:`~wrpkit.run.load.program.Program.reset` can reach its memory (Warp hands out pointers by binding name only).
HIDDEN_BINDING = "wrpkit.unbound.region{}"


def hidden_bindings(model) -> dict:
    """``{name: region_id}`` for every region no binding names, under names no binding has.

    A mesh's regions are left out: Warp built the mesh's BVH from them at load, and writing
    its points back would not rebuild it (such a graph is loaded afresh on unpickling).
    """
    named = model.binding_map()
    bound = set(named.values())
    bound |= {rid for me in model.meshes
              for rid in (me.points_region_id, me.indices_region_id, me.velocities_region_id)}
    out = {}
    for r in model.regions:
        if r.region_id in bound:
            continue
        name, k = HIDDEN_BINDING.format(r.region_id), 0
        while name in named or name in out:
            k += 1
            name = HIDDEN_BINDING.format(r.region_id) + f".{k}"
        out[name] = r.region_id
    return out


def _image_with_bindings(model, hidden: dict):
    """The WRP1 image of ``model`` with ``hidden`` appended to its bindings.

    Only the records change size, so every region's data keeps its place relative to the
    others and :func:`~wrpkit.run.load.mapped_image.build_mapped_image` maps all of it from the
    source's pages at one shift (a ``.wrp``, a bundle or a memory file): no copy of the data.
    """
    from ... import records  # noqa: PLC0415

    from ...model import Binding  # noqa: PLC0415
    from .mapped_image import build_mapped_image  # noqa: PLC0415

    extended = records.replace(model, bindings=list(model.bindings) + [Binding(n, r) for n, r in hidden.items()])
    return build_mapped_image(extended)[0]



def resolve_device(device):
    """The ``wp.Device`` for a device string (or a ``wp.Device``).

    Raises:
        WrpDeviceError: Unknown device, or CUDA requested without a CUDA device.
        WrpOutOfMemoryError: Warp's library does not fit this process's address space.
        WrpRuntimeError: Warp's library cannot be loaded.
    """
    fam = device_family(device)
    if not isinstance(device, str) and device is not None:
        return device
    wp = init_warp(cpu_only=fam == "cpu")  # Warp's runtime starts here: a library that cannot load is a WrpError
    if fam == "cuda" and wp.get_cuda_device_count() == 0:
        raise WrpDeviceError(f"device {device} was requested but no CUDA device is available",
                             hint="Run on a machine with an NVIDIA GPU and driver, or use a CPU capture.")
    try:
        return wp.get_device(device)
    except (RuntimeError, ValueError, KeyError, IndexError) as e:
        raise WrpDeviceError(f"cannot use device {device!r}: {e}",
                             hint=f"Available devices: {', '.join(str(d) for d in wp.get_devices())}.") from None


def device_free_memory(dev) -> Optional[int]:
    """Bytes a new allocation on ``dev`` (a ``wp.Device``) can take: CUDA's free memory, or the host's
    available memory (:func:`wrpkit.checks.memory.host_available`); None when unknown."""
    from ...checks.memory import host_available  # noqa: PLC0415

    if dev.is_cuda:
        try:
            return int(dev.free_memory)
        except Exception:  # noqa: BLE001  (an old Warp, or no driver answer: unknown)
            return None
    return host_available()


def check_memory(model, dev, max_memory: Optional[int] = None) -> None:
    """Refuse a capture whose regions would not fit the device's free memory (or ``max_memory``).

    Raises:
        WrpOutOfMemoryError: It does not fit; nothing was allocated.
    """
    from ...checks.memory import check_budget  # noqa: PLC0415

    check_budget(model, str(dev), device_free_memory(dev) if max_memory is None else None, max_memory)


def _warp_load_error(e, what: str, dev, model) -> WrpError:
    """The error for Warp's failure to load: out of memory (one status, with the size) when Warp says so."""
    text = str(e)
    said = stderr_tail()  # Warp prints its reason on stderr; a replay child's stderr is a memory file
    oom = re.compile(r"out of memory|failed to allocate|cannot allocate|std::bad_alloc|ENOMEM", re.IGNORECASE)
    reason = warp_reason(said, oom.search)
    if reason and not oom.search(text):
        text = f"{text.rstrip(': ')}: {reason}"
    if not oom.search(text) and not _can_reserve(model):
        text = f"{text.rstrip(': ')}: the memory its regions declare cannot even be reserved"
    if oom.search(text) or "cannot even be reserved" in text:
        from ...checks.memory import declared_memory  # noqa: PLC0415
        from ...errors import WrpOutOfMemoryError  # noqa: PLC0415

        need = declared_memory(model)
        return WrpOutOfMemoryError(f"Warp ran out of memory loading {what} on {dev} (the capture declares "
                                   f"{need.describe()}): {text}", requested=need.total, device=str(dev),
                                   hint="Free memory or replay on a larger device.")
    return WrpRuntimeError(f"Warp could not load {what}: {text}",
                           hint="Warp's own diagnostic, if any, is printed on stderr above.")


def _can_reserve(model) -> bool:
    """Whether address space for every region could be reserved now (a failed Warp load with no reason:
    was it memory?)."""
    from ...checks.memory import declared_memory  # noqa: PLC0415

    return can_reserve(declared_memory(model).total)


def load_graph(prep: Prepared, device="cpu", max_memory: Optional[int] = None) -> tuple:
    """Load a :class:`Prepared` capture into Warp (see :func:`wrpkit.run.replay.runtime.load`).

    Returns:
        ``(graph, wp.Device, {hidden binding name: region_id})``: what
        :class:`~wrpkit.run.load.program.Program` is made of (:func:`wrpkit.run.load.program.load_prepared`).
    """
    import warp as wp  # noqa: PLC0415

    what = str(prep.path) if prep.path is not None else "the capture"
    check_runnable(prep.model, device, what=what)
    dev = resolve_device(device)
    check_memory(prep.model, dev, max_memory)  # before anything is allocated
    # prepare() picked exactly the files Warp needs (and .cu sources when present).
    binaries = prep.modules
    # Region data holds no code and has passed validation, so its checksums
    # are verified while Warp copies it (hashlib and Warp's loader both
    # release the GIL); the graph is returned only if they match.  Module
    # blobs were verified before this point.
    verification = None
    hidden = {}  # a CUDA .wrp loaded by capture_load (its source fallback) gets no hidden names
    if prep.deferred:
        from ...formats.wrpk.blobs import BackgroundVerification  # noqa: PLC0415

        verification = BackgroundVerification(prep.deferred)
    try:
        if dev.is_cuda and prep.kind == "wrp" and prep.path is not None and not prep.modules_given \
                and prep.modules_dir == modules_dir_for(prep.path) and not os.path.islink(prep.path):
            # capture_load can also compile the packaged source fallback.
            graph = wp.capture_load(os.fspath(prep.path), device=dev)
        elif hasattr(wp, "capture_load_from_bytes"):
            hidden = hidden_bindings(prep.model)
            built = prep.wrp_bytes is None or bool(hidden)
            image = _image_with_bindings(prep.model, hidden) if hidden else prep.image()
            if built and prep.path is not None:
                # The image now holds the region data; let the mapped bundle's
                # pages go so the file is not resident twice while Warp copies it.
                for k in prep._keep:
                    mapped = getattr(k, "mapped", None)
                    if mapped is not None:
                        mapped.drop_pages()
            graph = wp.capture_load_from_bytes(image, modules=binaries, device=dev)
            del image  # Warp copied what it needs
        else:  # pragma: no cover  (older Warp)
            graph = _load_via_dir(prep, binaries, dev)
    except MemoryError:
        from ...checks.memory import declared_memory  # noqa: PLC0415
        from ...errors import WrpOutOfMemoryError  # noqa: PLC0415

        need = declared_memory(prep.model)
        raise WrpOutOfMemoryError(f"out of memory while loading {what} on {dev} (the capture declares "
                                  f"{need.describe()})", requested=need.total, device=str(dev),
                                  hint="Free memory or replay on a larger device.") from None
    except (RuntimeError, TypeError, ValueError) as e:
        raise _warp_load_error(e, what, dev, prep.model) from None
    finally:
        if verification is not None:
            try:
                verification.wait()
            except WrpError:
                graph = None  # never hand out a graph whose data failed its checksum
                raise
            prep.deferred = []  # verified
    return graph, dev, hidden


def _load_via_dir(prep: Prepared, binaries: dict, dev):  # pragma: no cover
    import tempfile  # noqa: PLC0415

    import warp as wp  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="wrpkit-load-") as d:
        p = Path(d) / "capture.wrp"
        p.write_bytes(bytes(prep.image()))
        (Path(d) / "capture_modules").mkdir()
        for name, data in binaries.items():
            (Path(d) / "capture_modules" / name).write_bytes(bytes(data))
        return wp.capture_load(os.fspath(p), device=dev)
