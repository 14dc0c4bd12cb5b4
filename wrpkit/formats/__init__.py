"""Codecs: bytes in, the typed model (:mod:`wrpkit.model`) out, and back.

``wrp1`` (Warp's ``.wrp``, with every format's differences in ``wrp1_layout``),
``wrpk`` (the ``.wrpk`` bundle), ``jsonform`` (the editable ``.json``),
``annotations`` (wrpkit's extra section), the generated FlatBuffers code in
``fbs/``, ``container`` (open a capture of any kind) and ``convert`` (between
the three).  Nothing here imports Warp; this layer imports only the package
root (model, errors, file access) and itself.
"""
