"""The ``wrp`` command line: thin click commands over the wrpkit library.

The library never prints; this module formats its results with rich, or as
JSON with ``--json``.  Every :class:`~wrpkit.errors.WrpError` becomes one
``error:`` line (plus a ``hint:`` line) on stderr and the error's exit code;
nothing a user feeds in produces a Python traceback.  Set ``WRP_DEBUG=1`` to
see tracebacks of internal errors.

With ``--json``, every failure (usage errors included) also prints one
JSON object on stdout, ``{"error": ..., "exit_code": ..., "hint": ...}``;
the group does this for every command, so a new command gets it for free.

Exit codes: one table for ``wrp`` and ``wrp-replay``, in
:data:`wrpkit.errors.EXIT_CODES` (and native/cli/cli_error.h).
"""

# The click group lives in .group and is imported on first use of these names, so that a command
# with a path of its own (``wrp inspect``: wrpkit.cli.inspect_run) starts without click.
_GROUP_NAMES = ("main", "WrpGroup", "exit_code_lines")


def __getattr__(name):
    if name in _GROUP_NAMES:
        from . import group  # noqa: PLC0415

        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_GROUP_NAMES))
