"""The ``wrp`` click group (:data:`main`), imported on first use of ``wrpkit.cli.main``.

See :mod:`wrpkit.cli` for what the command line promises.
"""

from __future__ import annotations

import click

from .. import __version__
from ..errors import EXIT_CODES
from .output import reported_errors, usage_error, wants_json

_JSON = "wrp.json"  # ctx.meta key: the command line asked for --json


class WrpGroup(click.Group):
    """A click group that turns wrpkit errors into clean messages and exit codes.

    Every command lives in a module of its own (``wrpkit/cli/<name>.py``),
    registered by name in ``lazy`` and imported only when used, so that a
    command pays only for the imports it needs.
    """

    lazy = {name: f"wrpkit.cli.{name}:{name}"
            for name in ("inspect", "validate", "check", "convert", "replay", "graph", "upgrade", "trace", "slice",
                         "diff", "regress", "annotate", "profile", "sign", "memcheck")}
    lazy["export-runtime"] = "wrpkit.cli.export_runtime:export_runtime"

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self.lazy:
            import importlib  # noqa: PLC0415

            mod, attr = self.lazy[name].split(":")
            cmd = getattr(importlib.import_module(mod), attr)
        return cmd

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's ``main``, except that Ctrl-C anywhere click itself catches it (while it parses, or
        while a usage error is shown) is "interrupted", exit 130, as in every command, not
        click's "Aborted!" and exit 1."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        import sys  # noqa: PLC0415

        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:  # click's word for a KeyboardInterrupt it caught
            from ..errors import EXIT_INTERRUPTED  # noqa: PLC0415
            from .output import print_json_error, stderr_console, wants_json  # noqa: PLC0415

            if wants_json(sys.argv[1:] if args is None else args):
                print_json_error("interrupted", EXIT_INTERRUPTED)
            stderr_console().print("interrupted")
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        # A command returns None; an Exit (every error report ends in one) returns its code.
        sys.exit(rv if isinstance(rv, int) else 0)

    def make_context(self, info_name, args, parent=None, **extra):
        as_json = wants_json(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as e:  # a usage error of the group itself (unknown command)
            usage_error(e, as_json)
        ctx.meta[_JSON] = as_json
        return ctx

    def invoke(self, ctx):
        from ..run.load.file_guard import install  # noqa: PLC0415

        install()  # a file truncated while a command reads it: one line naming it and exit 3, never SIGBUS
        with reported_errors(ctx, ctx.meta.get(_JSON, False)):
            return super().invoke(ctx)


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

    \b
    Exit codes (the same in every command and in wrp-replay):
    """


def exit_code_lines(indent: str = "  ") -> str:
    """The exit-code table as help text lines (from :data:`wrpkit.errors.EXIT_CODES`)."""
    return "".join(f"{indent}{code:<4} {meaning}\n" for code, meaning in EXIT_CODES.items())


def _with_exit_codes(text: str) -> str:
    import inspect  # noqa: PLC0415  (click imports it anyway)

    return inspect.cleandoc(text) + "\n" + exit_code_lines()


main.help = _with_exit_codes(main.help)
