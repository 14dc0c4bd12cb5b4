"""The ``wrp`` command line: thin click commands over the wrpkit library.

The library never prints; this module formats its results with rich, or as
JSON with ``--json``.  Every :class:`~wrpkit.errors.WrpError` becomes one
``error:`` line (plus a ``hint:`` line) on stderr and the error's exit code;
nothing a user feeds in produces a Python traceback.  Set ``WRP_DEBUG=1`` to
see tracebacks of internal errors.

Exit codes: 0 success; 1 a check or replay failed (e.g. ``--check``
mismatch, runtime error); 2 usage error (bad option, unknown binding,
wrong input size); 3 the file is invalid, corrupted, unsafe or incomplete;
70 internal error; 124 ``wrp replay --timeout`` ran out.
"""

from __future__ import annotations

import os

import click

from .. import __version__
from ..errors import WrpError
from .output import report_error, stderr_console

EXIT_INTERNAL = 70


class WrpGroup(click.Group):
    """A click group that turns wrpkit errors into clean messages and exit codes.

    Every command lives in a module of its own (``wrpkit/cli/<name>.py``),
    registered by name in ``lazy`` and imported only when used, so that a
    command pays only for the imports it needs.
    """

    lazy = {name: f"wrpkit.cli.{name}:{name}"
            for name in ("inspect", "validate", "check", "convert", "replay", "graph", "upgrade", "trace", "slice",
                         "diff")}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self.lazy:
            import importlib  # noqa: PLC0415

            mod, attr = self.lazy[name].split(":")
            cmd = getattr(importlib.import_module(mod), attr)
        return cmd

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except WrpError as e:
            report_error(e)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            stderr_console().print("interrupted")
            ctx.exit(130)
        except Exception as e:  # noqa: BLE001  (last line of defence: no tracebacks for users)
            if os.environ.get("WRP_DEBUG"):
                raise
            stderr_console().print(f"error: internal error: {type(e).__name__}: {e}", markup=False)
            stderr_console().print("hint: rerun with WRP_DEBUG=1 for a traceback and report it", markup=False)
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=WrpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wrp")
def main():
    """Inspect, validate, convert and replay NVIDIA Warp captured graphs (.wrp, .wrpk).

    \b
    Examples:
      wrp inspect graph.wrp             summary tables
      wrp inspect graph.wrp --ops       every op, nested bodies indented
      wrp validate graph.wrp            exit 0 when valid, else list problems
      wrp convert graph.wrp graph.wrpk  one self-contained, checksummed file
      wrp replay graph.wrp --inputs in.npz --output out.npz
    """
