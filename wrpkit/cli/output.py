"""Shared output helpers of the ``wrp`` commands: consoles, error lines, JSON, sizes, tables.

The library never prints; these are the only places the command line writes
from, so every command formats errors, JSON and sizes the same way.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys

from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PIPE, WrpError, caused_by_interrupt
from ..limits import is_resource_error, resource_error


@functools.lru_cache(maxsize=None)
def _console_class():
    from rich.console import Console  # noqa: PLC0415

    class WrpConsole(Console):
        """A rich console that leaves a closed pipe to :func:`reported_errors` (exit 141, quietly).

        Rich's own answer is ``SystemExit(1)``, which would read as "a check failed".
        """

        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    return WrpConsole


def import_rich() -> None:
    """Import what the tables print with now (a command that will wait on a child process anyway).

    ``wrp replay`` calls it while its prestarted child is still importing Warp, so that the
    report is printed at once when the replay ends instead of importing rich then.
    """
    _console_class()
    import rich.table  # noqa: F401, PLC0415
    import rich.text  # noqa: F401, PLC0415


def stderr_console():
    return _console_class()(stderr=True, highlight=False, soft_wrap=True)


def console(soft_wrap: bool = True):
    """The stdout console: text lines are never broken inside (soft wrap), tables fit the width.

    ``soft_wrap=False`` keeps every line within the width instead (a report whose titles must fit).
    """
    return _console_class()(highlight=False, soft_wrap=soft_wrap)


def escape(value) -> str:
    """``value`` as text inside rich markup: paths and names from a file ("pos[0]") print as they are."""
    from rich.markup import escape as markup_escape  # noqa: PLC0415

    return markup_escape(str(value))


def styled(*parts):
    """rich ``Text`` from plain strings and ``(text, style)`` pairs; no markup is parsed in them."""
    from rich.text import Text  # noqa: PLC0415

    return Text.assemble(*parts)


def report_error(err: WrpError, as_json: bool = False) -> None:
    """Print a WrpError as ``error:`` and ``hint:`` lines on stderr; with ``as_json`` also its JSON on stdout.

    The JSON is :func:`error_object`: ``{"error", "exit_code", "hint"}`` (plus
    ``"problems"`` for a validation error, and ``"requested_bytes"``,
    ``"device"``, ``"available_bytes"`` where known for out of memory), the
    shape ``wrp-replay --json`` prints for its failures too.
    """
    problems = [str(p) for p in getattr(err, "problems", [])]
    if as_json:
        print_json_error(err.message, err.exit_code, err.hint, problems or None, _error_fields(err))
    try:
        from rich.text import Text  # noqa: PLC0415

        con = stderr_console()
    except (OSError, ImportError, MemoryError):  # no file (ulimit -n) or memory left to import rich: plain lines
        sys.stderr.write(f"error: {err.message}\n" + "".join(f"       {p}\n" for p in problems[1:21])
                         + (f"hint: {err.hint}\n" if err.hint else ""))
        sys.stderr.flush()
        return
    # Text, not markup: a message quotes file contents and names ("[defaults]") rich would eat.
    con.print(Text.assemble(("error:", "bold red"), " ", err.message), highlight=False)
    for p in problems[1:21]:
        con.print(f"       {p}", markup=False)
    if err.hint:
        con.print(Text.assemble(("hint:", "yellow"), " ", err.hint), highlight=False)


def _error_fields(err: WrpError) -> dict:
    """What an error says beyond its message, for scripts: an out-of-memory error's size and device."""
    from ..errors import WrpOutOfMemoryError  # noqa: PLC0415

    if not isinstance(err, WrpOutOfMemoryError):
        return {}
    fields = (("requested_bytes", err.requested), ("device", err.device), ("available_bytes", err.available))
    return {key: value for key, value in fields if value is not None}


def error_object(message: str, exit_code: int, hint=None, problems=None, fields=None) -> dict:
    """The JSON object of a failure: ``{"error": message, "exit_code": code, "hint": hint or null}``, plus
    ``"problems"`` and any ``fields``."""
    obj = {"error": message, "exit_code": exit_code, "hint": hint}
    if problems:
        obj["problems"] = list(problems)
    obj.update(fields or {})
    return obj


def print_json_error(message: str, exit_code: int, hint=None, problems=None, fields=None) -> None:
    """Print :func:`error_object` on stdout, one line."""
    import json  # noqa: PLC0415  (only a command with --json pays for it)

    _echo(json.dumps(error_object(message, exit_code, hint, problems, fields)))


def _echo(text: str) -> None:
    """``click.echo(text)`` for a JSON line (ASCII: nothing for click to strip or re-encode), without
    importing click: ``wrp inspect`` runs without it (:mod:`wrpkit.cli.inspect_run`)."""
    out = sys.stdout
    if out is None:  # as click.echo: nothing to write to
        return
    out.write(text + "\n")
    out.flush()


def _click_usage_errors() -> tuple:
    """click's usage errors; none where click was never imported (then none can have been raised)."""
    click = sys.modules.get("click")
    return (click.ClickException,) if click is not None else ()


def _click_exits() -> tuple:
    """click's ``Exit`` and ``Abort``; none where click was never imported."""
    click = sys.modules.get("click")
    return (click.exceptions.Exit, click.exceptions.Abort) if click is not None else ()


def usage_error(e: click.ClickException, as_json: bool):
    """Show a click usage error as click does (stderr), plus its JSON on stdout with --json; then exit."""
    import click  # noqa: PLC0415  (a click usage error: click is imported already)

    if as_json:
        print_json_error(e.format_message(), e.exit_code)
    e.show()
    raise click.exceptions.Exit(e.exit_code)


@contextlib.contextmanager
def reported_errors(ctx: click.Context, as_json: bool):
    """Turn what a command raises into its report and exit code: never a traceback for users.

    A :class:`~wrpkit.errors.WrpError` prints its ``error:``/``hint:`` lines
    (and its JSON with ``as_json``) and exits with its code; a click usage
    error is shown as click shows it; Ctrl-C exits 130; an ``OSError`` that
    no layer below worded (a file system that failed under it) is an I/O
    error (exit 1) naming its path and reason; anything else is an
    internal error (exit 70; ``WRP_DEBUG=1`` re-raises it for a traceback).
    A command that fails leaves no folder it made for its outputs behind.
    The ``wrp`` group wraps every command in it, and a command that is also
    used on its own (``replay``) wraps its body too.
    """
    if sys.stdout is None:  # started with stdout closed (`>&-`): what it prints stops, as at a closed pipe
        sys.stdout = _ClosedStdout()
    try:
        try:
            yield
        finally:
            # Output still buffered is written here, inside these handlers: a closed
            # pipe (`| head`) then surfaces as BrokenPipeError below, not at exit.
            sys.stdout.flush()
    except BrokenPipeError:
        _leave_nothing_behind()
        stop_on_closed_pipe(ctx)
    except WrpError as e:
        _leave_nothing_behind()
        report_error(e, as_json)
        ctx.exit(e.exit_code)
    except _click_usage_errors() as e:  # the command's usage errors (bad option, missing path)
        _leave_nothing_behind()
        usage_error(e, as_json)
    except _click_exits():
        raise
    except KeyboardInterrupt:
        _leave_nothing_behind()
        _report_interrupted(ctx, as_json)
    except Exception as e:  # noqa: BLE001  (last line of defence)
        _leave_nothing_behind()
        if caused_by_interrupt(e):  # a Ctrl-C that came wrapped in another error: still "interrupted"
            _report_interrupted(ctx, as_json)
        if os.environ.get("WRP_DEBUG"):
            raise
        if is_resource_error(e):  # a limit (open files, processes, threads, memory) that no layer below worded
            err = resource_error(e)
            report_error(err, as_json)
            ctx.exit(err.exit_code)
        if isinstance(e, OSError) and e.errno in _IO_ERRNOS:
            from ..io_errors import io_error  # noqa: PLC0415

            err = io_error(e)
            report_error(err, as_json)
            ctx.exit(err.exit_code)
        msg = f"internal error: {type(e).__name__}: {e}"
        hint = "rerun with WRP_DEBUG=1 for a traceback and report it"
        if as_json:
            print_json_error(msg, EXIT_INTERNAL, hint)
        stderr_console().print(f"error: {msg}", markup=False)
        stderr_console().print(f"hint: {hint}", markup=False)
        ctx.exit(EXIT_INTERNAL)


def _report_interrupted(ctx: click.Context, as_json: bool) -> None:
    """Print "interrupted" (and its JSON with ``as_json``) and exit 130."""
    if as_json:
        print_json_error("interrupted", EXIT_INTERRUPTED)
    stderr_console().print("interrupted")
    ctx.exit(EXIT_INTERRUPTED)


#: ``OSError`` numbers that say the file system or a file failed, not wrpkit: an I/O error (exit 1)
#: wherever one surfaces unworded.  Others (a bad descriptor, a bad argument) stay internal errors (70).
_IO_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EIO", "EACCES", "EPERM", "EROFS", "ENOENT", "ENOTDIR", "EISDIR", "ELOOP", "ENAMETOOLONG",
    "EFBIG", "EMFILE", "ENFILE", "ENXIO", "ENODEV", "ETXTBSY", "EPIPE", "ESTALE", "EXDEV", "ENOTEMPTY", "EEXIST")
    if hasattr(errno, name))


class _ClosedStdout:
    """``sys.stdout`` of a command started with its stdout closed (Python leaves None there): the first
    write meets a closed pipe, so the command stops as :func:`stop_on_closed_pipe` says (141), never
    with an internal error, and never ends 0 having printed nothing."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text):
        if text:
            raise BrokenPipeError(errno.EPIPE, "stdout is closed")
        return 0

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        raise OSError(errno.EBADF, "stdout is closed")


def _leave_nothing_behind() -> None:
    """Remove the folders this command made for outputs that it never wrote (still empty)."""
    try:
        from ..output_paths import remove_created_folders  # noqa: PLC0415

        remove_created_folders()
    except Exception:  # noqa: BLE001  (never hide the error being reported)
        pass


def stop_on_closed_pipe(ctx: click.Context):
    """Stop quietly because stdout was closed (``wrp ... | head``): no message, exit 141.

    stdout is pointed at /dev/null first, so that nothing Python flushes at
    exit fails again (which would print "Exception ignored ... BrokenPipeError").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    ctx.exit(EXIT_PIPE)


def wants_json(args) -> bool:
    """Whether a command line asks for ``--json`` (before any ``--``)."""
    for a in args or ():
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def dump_json(obj) -> None:
    import json  # noqa: PLC0415  (only a command with --json pays for it)

    _echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def size(n) -> str:
    """A byte count as people read it: ``512 B``, ``1.5 KiB``, ``256.0 MiB``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


#: Columns that hold numbers: right-aligned and never wrapped or cut (text columns wrap instead).
NUMERIC_COLUMNS = frozenset({"size", "offset", "count", "launches", "region", "points", "tris", "min", "max",
                             "mean", "median", "p5", "p95", "NaN", "Inf", "max abs err", "max rel err"})
#: Text columns of short tokens ("float32", "(4096, 4096)"): never broken inside a token.
TOKEN_COLUMNS = frozenset({"shape", "dtype"})


def table(title, columns, numeric=()):
    """A rich table whose title is a line of its own above it.

    Rich wraps a table's own title to the table's width, so a narrow table
    would break its title over lines however wide the terminal is; this
    title takes the whole console width.  Number columns (``NUMERIC_COLUMNS``
    or ``numeric``) are never wrapped or cut: at 80 columns the text columns
    fold instead.
    """
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    class _Titled(Table):
        def add_row(self, *cells, **kwargs):
            # Cells are text, never markup: they hold names from inside the file ("pos[0]", "[red]").
            super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)

        def __rich_console__(self, console, options):
            yield Text("")
            yield Text(title, style="bold")
            if not self.row_count:  # headers over nothing read as a glitch
                yield Text("none", style="dim")
                return
            if self.box is not _NARROW_BOX and self.__rich_measure__(console, options).maximum > options.max_width:
                # Too wide for the console (80 columns, a long shape): drop the column rules and
                # one space of padding, a character less per column each, before any cell has to fold.
                self.box, self.padding = _NARROW_BOX, (0, 1, 0, 0)
                if self.__rich_measure__(console, options).maximum > options.max_width:
                    for col in self.columns:  # still too wide: shapes and dtypes fold too, rather than be cut
                        col.no_wrap = col.no_wrap and col.header not in TOKEN_COLUMNS
            yield from super().__rich_console__(console, options)

    from rich import box  # noqa: PLC0415

    _NARROW_BOX = box.SIMPLE_HEAD
    t = _Titled(show_edge=False, pad_edge=False)
    for c in columns:
        if c in NUMERIC_COLUMNS or c in numeric:
            t.add_column(c, justify="right", no_wrap=True)
        elif c in TOKEN_COLUMNS:
            t.add_column(c, justify="left", overflow="fold", no_wrap=True)
        else:
            t.add_column(c, justify="left", overflow="fold")
    return t


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 op``, ``2 ops``, ``0 ops``; ``many`` for irregular plurals."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
