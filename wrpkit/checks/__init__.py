"""What a capture is and whether it is safe: validation, preflight and lints, summaries.

``validate`` applies every rule of ``schema/VALIDATION-RULES.md`` to the typed
model; ``check`` asks whether a file will load and replay on this machine;
``elf`` reads kernel objects; ``summary`` describes a capture for ``wrp
inspect``.  Imports :mod:`wrpkit.formats` and the root, never Warp at import.
"""
