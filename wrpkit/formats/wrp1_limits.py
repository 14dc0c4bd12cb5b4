"""Caps the WRP1 decoder applies, and the string rules every container's strings meet.

:class:`Limits` bounds every count and size :func:`wrpkit.formats.wrp1.decode_wrp1`
reads before it allocates or loops; :func:`check_strings` holds a program
decoded from a ``.wrpk`` or ``.json`` to the string rules a ``.wrp``'s strings
meet as they are decoded (:class:`wrpkit.formats.wrp1_decode.Cursor`).
"""

from __future__ import annotations

from ..records import record

from .. import model as m
from ..errors import WrpFormatError
from .wrp1_layout import LAYOUTS


@record(frozen=True)
class Limits:
    """Caps the decoder applies before it allocates or loops.

    The defaults are far above anything a real capture needs and far below
    what would exhaust memory or time.  Raise them explicitly for unusual
    files.
    """

    # Files, regions and their total are bounded by 64-bit arithmetic, a
    # region with data by the file's own size, and the memory a load would
    # allocate by the device's free memory (wrpkit.checks.memory.check_budget),
    # not by a fixed cap: an H200 capture holds over 100 GiB.
    max_file_size: int = (1 << 63) - 1
    max_string: int = 4096
    max_modules: int = 1 << 16
    max_kernels: int = 1 << 20
    max_bindings: int = 1 << 16
    max_meshes: int = 1 << 16
    max_pointer_locations: int = 1 << 20
    max_regions: int = 1 << 20
    max_region_size: int = (1 << 63) - 1
    max_memory: int = (1 << 63) - 1
    max_ops: int = 1 << 26
    max_depth: int = 64
    max_annotations: int = 64 << 20


#: Tighter caps of single strings (the C++ validator's, wrp1_validator.cpp read_metadata).
MAX_HASH = 256
MAX_FILENAME = 255
MAX_DIGEST = 64
MAX_VERSION = 64


DEFAULT_LIMITS = Limits()


def check_strings(prog: m.Program, limits: Limits = DEFAULT_LIMITS) -> None:
    """Apply the WRP1 string rules to a program decoded from any form (``.wrpk``, ``.json``).

    A ``.wrp``'s strings are checked as they are decoded (``wrp1_decode.Cursor.string``
    and the producer version rule below); a bundle or JSON file carries the
    same strings in another container, and wrp-replay checks them on the
    WRP1 image it builds, so they are held to the same rules here: no NUL
    byte, the length caps, and a producer version of printable ASCII.
    Without this a bundle could pass ``wrp validate`` and then be refused by
    wrp-replay, or convert to a ``.wrp`` that ``wrp validate`` refuses.

    Raises:
        WrpFormatError: The first string that breaks a rule, named by its field.
    """
    layout = LAYOUTS.get(prog.format_version)

    def one(value, what: str, cap=None) -> None:
        if value is None:
            return
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        limit = limits.max_string if cap is None else min(cap, limits.max_string)
        if len(raw) > limit:
            raise WrpFormatError(f"string length {len(raw)} exceeds the limit of {limit}", field=what)
        if b"\0" in raw:
            raise WrpFormatError("string contains a NUL byte", field=what)

    if layout is None or layout.producer_version:
        one(prog.warp_version, "metadata.warp_version", MAX_VERSION)
        if not prog.warp_version or not all(0x20 < ord(ch) < 0x7F for ch in prog.warp_version):
            raise WrpFormatError("producer Warp version must be non-empty printable ASCII",
                                 field="metadata.warp_version")
    for i, mod in enumerate(prog.modules):
        w = f"metadata.modules[{i}]"
        one(mod.module_hash, w + ".module_hash", MAX_HASH)
        one(mod.module_name, w + ".module_name")
        one(mod.binary_filename, w + ".binary_filename", MAX_FILENAME)
        one(mod.binary_digest, w + ".binary_digest", MAX_DIGEST)
        one(mod.source_filename, w + ".source_filename", MAX_FILENAME)
        one(mod.source_digest, w + ".source_digest", MAX_DIGEST)
    for i, k in enumerate(prog.kernels):
        w = f"metadata.kernels[{i}]"
        one(k.kernel_key, w + ".kernel_key")
        one(k.module_hash, w + ".module_hash", MAX_HASH)
        one(k.forward_name, w + ".forward_name")
        one(k.backward_name, w + ".backward_name")
    for i, b in enumerate(prog.bindings):
        one(b.name, f"metadata.bindings[{i}].name")
