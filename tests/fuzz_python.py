"""Coverage-guided fuzz targets for wrpkit's Python decoders (atheris / libFuzzer).

Usage: python tests/fuzz_python.py TARGET [libFuzzer args...] [CORPUS_DIR...]
TARGET is one of: wrp1, wrpk, wrpk-manifest, json, signature.

Each target feeds the bytes to a decoder.  The only acceptable failure is a
:class:`wrpkit.errors.WrpError` (a clean refusal); any other exception, a
crash or a hang is a finding.  When the WRP1 decoder accepts an input, the
model must also validate without raising and re-encode to the same bytes, and
the shared decode (``share_ops=True``) must accept or refuse every input exactly
as the plain one does.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports(include=["wrpkit"]):
    from wrpkit.formats import jsonform
    from wrpkit.formats.wrpk import reader
    from wrpkit.errors import WrpError
    from wrpkit.checks.validate import validate_program
    from wrpkit.formats.wrp1 import decode_wrp1, encode_wrp1
    from wrpkit.formats.signature import parse_bundle, parse_statement


def fuzz_wrp1(data: bytes) -> None:
    try:
        prog = decode_wrp1(data)
    except WrpError as e:
        # The shared decode (wrp convert's) must refuse the same input with the same message.
        try:
            decode_wrp1(data, share_ops=True)
        except WrpError as e2:
            if str(e2) != str(e):
                raise AssertionError(f"shared decode refused differently: {e2} / {e}") from None
            return
        raise AssertionError(f"shared decode accepted what the plain decode refused: {e}") from None
    validate_program(prog)
    if encode_wrp1(prog) != data:
        raise AssertionError("accepted input does not re-encode to the same bytes")
    shared = decode_wrp1(data, share_ops=True)
    if shared != prog or encode_wrp1(shared) != data:
        raise AssertionError("shared decode differs from the plain decode")


def fuzz_wrpk(data: bytes) -> None:
    try:
        prog = reader.decode_wrpk(data)
    except WrpError:
        return
    validate_program(prog)


def fuzz_wrpk_manifest(data: bytes) -> None:
    """Like ``wrpk``, but re-stamps the manifest SHA-256 so that mutations reach the FlatBuffers reader."""
    if len(data) >= 128:
        moff, msize = struct.unpack_from("<QQ", data, 16)
        if moff + msize <= len(data):
            data = data[:48] + hashlib.sha256(data[moff:moff + msize]).digest() + data[80:]
    fuzz_wrpk(data)


def fuzz_json(data: bytes) -> None:
    try:
        prog, _ = jsonform.loads(data)
    except WrpError:
        return
    validate_program(prog)


def fuzz_signature(data: bytes) -> None:
    """A signature bundle, and the same bytes as the statement inside one (schema/SIGNATURE-RULES.md)."""
    for parse in (parse_bundle, parse_statement):
        try:
            parse(data, "fuzz.sig")
        except WrpError as e:
            if not e.message.startswith("signature malformed: fuzz.sig: "):
                raise AssertionError(f"refused with another verdict: {e.message}") from None


TARGETS = {"wrp1": fuzz_wrp1, "wrpk": fuzz_wrpk, "wrpk-manifest": fuzz_wrpk_manifest, "json": fuzz_json,
           "signature": fuzz_signature}


def main() -> None:
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
