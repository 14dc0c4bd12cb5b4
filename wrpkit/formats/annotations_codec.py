"""Encoding wrpkit's annotations as an ``Annotations`` FlatBuffer without the
FlatBuffers runtime (the ``.wrpk`` struct-based builder); the verifier the
C++ reader mirrors is :func:`wrpkit.formats.wrpk.reader.verify_annotations`.
:mod:`wrpkit.formats.annotations` builds on this to encode its records.
"""

from __future__ import annotations

import struct

from ..errors import WrpFormatError
from .wrpk.builder import _ENC, _Encoder

def encode_annotations_buffer(annotations) -> bytes:
    """Encode wrpkit's annotations as an ``Annotations`` FlatBuffer (identifier ``"WRPK"``).

    The same struct-based builder as the manifest, so that no FlatBuffers
    runtime (nor the numpy it imports, about 0.2 to 1 s) is needed to write
    annotations.  Empty strings and vectors are left out, as absent fields
    read as empty.

    Args:
        annotations: A :class:`wrpkit.formats.annotations.Annotations` (any
            object with the schema's field names as attributes, nested alike).

    Returns:
        The buffer's bytes.

    Raises:
        WrpFormatError: A value does not fit its field.
    """
    enc = _Encoder()
    b = enc.b

    def node(name: str, obj) -> int:
        spec = _ENC[name]
        vals = list(spec.getter(obj))
        for i, kind in spec.children:
            v = vals[i]
            if kind.startswith("t:"):
                vals[i] = enc.offsets_vector([node(kind[2:], x) for x in v]) if v else None
            elif kind.startswith("table:"):
                vals[i] = node(kind[6:], v) if v is not None else None
            elif kind == "i64v":
                vals[i] = b.vector(("q", tuple(v)), len(v), struct.pack(f"<{len(v)}q", *v), align8=True) if v else None
            else:
                vals[i] = enc.child(kind, v)
        return b.table(spec, vals)

    try:
        return b.finish(node("Annotations", annotations))
    except struct.error as e:
        raise WrpFormatError(f"cannot encode the annotations: {e}", field="annotations") from None


__all__ = ["encode_annotations_buffer"]
