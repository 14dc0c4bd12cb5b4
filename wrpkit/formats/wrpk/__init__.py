"""The ``.wrpk`` bundle: one checksummed, mmap-able file per capture.

A ``.wrpk`` holds a whole captured program, module binaries included, as a
FlatBuffer manifest (root ``Program`` of ``schema/wrp.fbs``, identifier
``"WRPK"``) followed by a 64-byte-aligned blob area with every region's
initial data and every module file.  ``schema/WRPK-FORMAT.md`` describes the
layout::

    0     header (128 bytes): magic, version, flags, manifest and blob area
          offsets and sizes, SHA-256 of the manifest, reserved zeros
    128   manifest: the FlatBuffer, then zero padding to a multiple of 64
    ...   blob area: blobs at 64-byte-aligned offsets, zero padding between;
          the file ends with the last blob

The FlatBuffer is written and read directly with ``struct`` (no FlatBuffers
runtime needed), so a 10,000-launch program encodes and decodes in about
0.1 s each.  The modules, each one job:

- :mod:`.tables`: the schema's tables (generated into :mod:`.schema_tables`
  by ``tools/gen_wrpk_tables.py``) and the header's constants;
- :mod:`.builder`: writing (:func:`~.builder.encode_wrpk`,
  :func:`~.builder.write_wrpk`, :func:`~.builder.iter_wrpk_chunks`);
- :mod:`.reader`: the verifying reader (:func:`~.reader.decode_wrpk`), which
  checks every offset, length and alignment before it reads;
- :mod:`.blobs`: the header and the blob area's checks, and checksums
  deferred to the caller.

Import from the module that does the job; this package exports nothing.
``tests/formats/test_wrpk.py`` checks both directions against the ``flatc``-generated
Python code and the output against the C++ ``flatbuffers::Verifier``.
"""
