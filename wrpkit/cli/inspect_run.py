"""``wrp inspect``'s body, and its own start that needs no click (:func:`fast`).

``wrp inspect FILE [--json] [--ops] [--verify]``, the common command lines, are run from
``wrpkit/__main__.py`` through :func:`fast` without importing click or the ``wrp`` group (about a
fifth of the command's start-up, issue 42); any other command line (``--help``, ``--kernels``, a
path that does not exist, a typo) returns None there and goes to click, which calls :func:`run`
(``wrpkit/cli/inspect.py``).  Both report errors through
:func:`~wrpkit.cli.output.reported_errors`, so they print the same.  Either way the tables are written
without rich where rich would print them plainly (:func:`_plain_text`): the same bytes, about half of
the command's time spared.
"""

from __future__ import annotations

import os
from typing import Optional

from ..checks.summary import shape_text
from .output import console, dump_json, plural, reported_errors, size, styled, table

#: The flags :func:`fast` takes (each a flag of ``wrp inspect``), and their argument of :func:`run`.
_FLAGS = {"--ops": "with_ops", "--json": "as_json", "--verify": "verify", "--no-verify": "no_verify"}


class _Exits:
    """The ``ctx`` :func:`~wrpkit.cli.output.reported_errors` ends a command through, outside click."""

    @staticmethod
    def exit(code: int = 0):
        raise SystemExit(code)


def fast(args: list) -> Optional[int]:
    """Run ``wrp inspect`` with ``args`` (what follows ``inspect``) without click; None: leave it to click.

    Only a command line of one existing path and the flags ``--json``, ``--ops``, ``--verify`` and
    ``--no-verify`` is run here: click would parse it to the same call of :func:`run`.  Anything
    else (help, ``--kernels``, ``--``, a second argument, a path ``os.stat`` refuses, click's shell
    completion) returns None before anything is printed, and click parses and words it as before.
    """
    if "_WRP_COMPLETE" in os.environ:  # click's shell completion of `wrp`
        return None
    options = dict.fromkeys(_FLAGS.values(), False)
    files = []
    for a in args:
        if a in _FLAGS:
            options[_FLAGS[a]] = True
        elif a.startswith("-") or files:
            return None
        else:
            files.append(a)
    if not files:
        return None
    try:
        os.stat(files[0])  # click's Path(exists=True); UserPath words what it refuses
    except (OSError, ValueError):
        return None
    from ..run.load.file_guard import install  # noqa: PLC0415

    install()  # as the wrp group does: a file truncated while it is read is one line and exit 3
    with reported_errors(_Exits, options["as_json"]):
        run(files[0], **options)
    return 0


def run(file, with_ops: bool = False, as_json: bool = False, verify: bool = False, no_verify: bool = False,
        kernels=()) -> None:
    """The body of ``wrp inspect`` (its options as arguments): print the tables, the ops, or the JSON."""
    from ..formats.container import open_capture  # noqa: PLC0415
    from ..checks.effects import kernel_signatures  # noqa: PLC0415
    from ..checks.summary import binding_signature_rows, iter_op_lines, region_names, summarize  # noqa: PLC0415

    from ..checks.sources import Sources  # noqa: PLC0415

    # Without --ops (or --kernels) no op is shown alone: a .wrp's byte-identical records (a step loop's) decode once
    # into one shared object (3x faster on 10,000 launches; the counts and the tables are the same).
    with open_capture(file, verify_checksums=verify and not no_verify, thorough=True,
                      share_ops=not (with_ops or kernels)) as cap:
        typing = None
        sources = Sources.of(cap.program)
        if kernels:  # imports the user's kernels, and so Warp: only when asked
            from ..run.capture.source_types import type_program  # noqa: PLC0415

            typed = type_program(cap.program, kernels)
            typing = typed.to_json()
            if getattr(typed, "annotations", None) is not None:  # the kernels' definition lines
                sources = Sources(typed.annotations, cap.program.ops)
        info = summarize(cap, with_ops=with_ops and as_json, signature=binding_signature_rows(cap.program),
                         sources=sources)
        info["signed"] = _signed(file)
        if as_json:
            if typing is not None:
                info["kernels_typed"] = typing
            dump_json(info)
            return
        _print_summary(info)
        if typing:  # --kernels' lines (kernel_match_lines: none without it)
            from .options import kernel_match_lines  # noqa: PLC0415  (imports click)

            for line in kernel_match_lines(typing):
                console().print(line, highlight=False)
        if with_ops:
            _print_ops(iter_op_lines(cap.program.ops, signatures=kernel_signatures(cap.program),
                                     names=region_names(cap.program), program=cap.program, sources=sources))


def _signed(file):
    """:func:`wrpkit.formats.signature.describe` of ``file``; that module (and OpenSSL's hashlib) is
    imported only where a signature file may be there.

    describe says None exactly when opening ``STEM.sig`` (``default_signature_path``) finds no file,
    which ``os.stat`` tells as well; any other answer, or a path it cannot form, is describe's to word.
    """
    from pathlib import Path  # noqa: PLC0415

    try:
        p = Path(file)
        os.stat(p.with_name(p.stem + ".sig"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        pass
    from ..formats.signature import describe  # noqa: PLC0415

    return describe(file)


def _arch(info: dict) -> str:
    if info["device"] == "cpu" or not info["target_arch"]:
        return f"{info['target_arch']} (CPU)" if info["device"] == "cpu" else str(info["target_arch"])
    return f"sm_{info['target_arch']}"


def _roles(b: dict) -> str:
    roles = [r for r in ("input", "output") if b.get(r)]
    if roles:
        return ", ".join(roles)
    return "-" if b.get("input") is False and b.get("output") is False else "?"


def _summary_items(info: dict) -> list:
    """What the tables print, in order: ``("styled", parts)`` (:func:`~wrpkit.cli.output.styled`),
    ``("text", line)`` (printed without markup), ``("markup", line)``, ``("table", title, columns, rows)``
    (a cell is text or a ``(text, style)`` pair)."""
    items = [("styled", ((info["file"], "bold"), f"  ({info['container']}, {size(info['file_size'])})")),
             ("text", f"  format {info['format_version']}   Warp {info['producer']}   device {info['device']}"
                      f"   target arch: {_arch(info)}"),
             ("text", f"  {plural(info['op_total'], 'op')} ({info['top_level_ops']} top level, nesting depth "
                      f"{info['max_depth']}), {plural(len(info['kernels']), 'kernel')}, "
                      f"{plural(len(info['bindings']), 'binding')}, {plural(len(info['regions']), 'region')}, "
                      f"{plural(len(info['modules']), 'module')}")]
    signed = info.get("signed")
    if signed is None:
        items.append(("text", "  unsigned (no STEM.sig beside it)"))
    elif "error" in signed:
        items.append(("text", f"  signature {signed['path']}: unreadable ({signed['error']})"))
    else:
        who = signed["key"][:23] + "…" if signed["key"] else "a key with no hint"
        items.append(("text", f"  signed: {signed['path']}, {signed['kind']} {who} (unverified: wrp validate "
                              "--trusted-key checks it)"))
    items.append(("table", "Sections", ["name", "offset", "size"],
                  [[s["name"], str(s["offset"]), size(s["size"])] for s in info["sections"]]))
    items.append(("table", "Ops", ["op", "count"], [[k, str(v)] for k, v in info["op_counts"].items()]))
    with_source = any(k.get("source") for k in info["kernels"])
    rows = []
    for k in info["kernels"]:
        src = k.get("source")
        rows.append([k["name"], f"{k['module_name']} {k['module_hash'][:8]}", str(k["launches"]),
                     "has adjoint" if k["backward_name"] else "-",
                     *([f"{src['file']}:{src['line']}" if src else "-"] if with_source else [])])
    items.append(("table", "Kernels", ["kernel", "module", "launches", "backward"]
                  + (["defined at"] if with_source else []), rows))
    items.append(("table", "Bindings", ["name", "role", "region", "size", "dtype", "shape"], [
        [b["name"], _roles(b), str(b["region_id"]), size(b["size"]), b.get("dtype") or "-",
         shape_text(b["shape"]) if b.get("shape") is not None else "-"] for b in info["bindings"]]))
    rows = []
    for r in info["regions"]:
        dtype = r.get("dtype") or ("conflict" if r.get("conflicts") and not r.get("dtype") else "-")
        rows.append([str(r["region_id"]), r.get("name") or "-", size(r["size"]), dtype,
                     shape_text(r["shape"]) if r.get("shape") is not None else "-",
                     "yes" if r["has_initial_data"] else "no"])
    items.append(("table", "Regions", ["region", "name", "size", "dtype", "shape", "initial data"], rows))
    for r in info["regions"]:
        for c in r.get("conflicts") or ():
            items.append(("styled", ((f"region {r['region_id']} ({r.get('name')}): sources disagree on its type: "
                                      f"{c}", "yellow"),)))
    items.append(("table", "Modules", ["module", "file", "size", "status"], [
        [f"{mod['module_name']} {mod['module_hash'][:8]}", mod["binary_filename"], size(mod["size"]),
         ("present", "green") if mod["present"] else (mod["state"], "red")] for mod in info["modules"]]))
    if info["meshes"]:
        items.append(("table", "Meshes", ["points", "tris", "points region", "indices region"], [
            [str(me["num_points"]), str(me["num_tris"]), str(me["points_region_id"]), str(me["indices_region_id"])]
            for me in info["meshes"]]))
    if any(b.get("input") is None for b in info["bindings"]):
        items.append(("markup", _ROLE_NOTE))
    return items


#: The note under the tables when a binding's role is not recorded (rich markup; its text is _ROLE_NOTE_TEXT).
_ROLE_NOTE = ("[dim]role ?: the file does not record whether the binding is an input or an output "
              "(save with wrpkit to add a signature)[/]")
_ROLE_NOTE_TEXT = _ROLE_NOTE[5:-3]


def _print_summary(info: dict) -> None:
    items = _summary_items(info)
    text = _plain_text(items)
    if text is not None:
        import sys  # noqa: PLC0415

        sys.stdout.write(text)
        return
    con = console()
    for item in items:
        kind = item[0]
        if kind == "styled":
            con.print(styled(*item[1]))
        elif kind == "text":
            con.print(item[1], markup=False)
        elif kind == "markup":
            con.print(item[1])
        else:
            t = table(item[1], item[2])
            for row in item[3]:
                t.add_row(*(c if isinstance(c, str) else styled(c) for c in row))
            con.print(t)


def _plain_text(items: list) -> Optional[str]:
    """The bytes rich prints for ``items`` where rich would print them plainly; else None (rich prints them).

    Rich costs the tables about half of ``wrp inspect``'s time (importing it, laying out), and where
    stdout is no terminal (a pipe, a file: what scripts and benchmarks read) it prints no styles:
    these are the same characters, laid out as :func:`~wrpkit.cli.output.table` lays out a table
    that fits the console's width (box HEAVY_HEAD without edges, one space of padding between
    columns, number columns right-aligned).  Anything else is left to rich: a terminal (or
    FORCE_COLOR, TTY_COMPATIBLE=1), an encoding other than UTF-8, a table wider than the console
    (rich folds it), text other than printable ASCII (wide characters, control codes), cells with
    spaces at their ends, and a line in which rich would look for an emoji code (``:name:``).
    """
    import builtins  # noqa: PLC0415
    import re  # noqa: PLC0415
    import sys  # noqa: PLC0415

    out = sys.stdout
    env = os.environ
    try:
        if (out is None or out.isatty() or "FORCE_COLOR" in env or env.get("TTY_COMPATIBLE") == "1"
                or not (getattr(out, "encoding", None) or "utf-8").lower().startswith("utf")
                or sys.platform == "win32" or hasattr(builtins, "get_ipython")):  # rich's Jupyter test
            return None
    except (ValueError, OSError):  # a closed stream: rich words it
        return None
    width = _console_width(env)
    emoji = re.compile(r":\S*:")
    lines = []
    for item in items:
        kind = item[0]
        if kind == "styled":
            line = "".join(p if isinstance(p, str) else p[0] for p in item[1])
        elif kind == "text":
            line = item[1]
            if emoji.search(line):
                return None
        elif kind == "markup":
            if item[1] != _ROLE_NOTE:
                return None
            line = _ROLE_NOTE_TEXT
        else:
            table_lines = _plain_table(item[1], item[2], item[3], width)
            if table_lines is None:
                return None
            lines.extend(table_lines)
            continue
        if not _printable(line) or line != line.rstrip():  # rich may drop spaces at a line's end
            return None
        lines.append(line)
    return "\n".join(lines) + "\n"


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _console_width(env) -> int:
    """The width rich's console takes (``rich.console.Console.size``) where stdout is no terminal."""
    columns = env.get("COLUMNS")
    if columns is not None and columns.isdigit():
        return int(columns)
    width = None
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd)[0]
        except (AttributeError, ValueError, OSError):
            continue
        break
    return width or 80


def _plain_table(title: str, columns: list, rows: list, width: int) -> Optional[list]:
    """The lines of :func:`~wrpkit.cli.output.table` ``title``, ``columns`` with ``rows``, when it fits ``width``."""
    from .output import NUMERIC_COLUMNS  # noqa: PLC0415

    if not rows:
        return ["", title, "none"]
    cells = [list(columns)] + [[c if isinstance(c, str) else c[0] for c in row] for row in rows]
    n = len(columns)
    for row in cells:
        if len(row) != n:
            return None
        for c in row:
            if not _printable(c) or c != c.strip():
                return None
    pads = [(0 if j == 0 else 1, 0 if j == n - 1 else 1) for j in range(n)]
    widths = [max(len(row[j]) for row in cells) + pads[j][0] + pads[j][1] for j in range(n)]
    if sum(widths) + n - 1 > width:
        return None
    right = [c in NUMERIC_COLUMNS for c in columns]

    def line(row, sep):
        return sep.join(" " * pads[j][0] + (row[j].rjust if right[j] else row[j].ljust)(widths[j] - sum(pads[j]))
                        + " " * pads[j][1] for j in range(n))

    return ["", title, line(cells[0], "┃"), "╇".join("━" * w for w in widths)] + [line(r, "│") for r in cells[1:]]


def _print_ops(lines) -> None:
    con = console()
    con.print("[bold]Ops[/]")
    for depth, index, name, line in lines:
        pad = "  " * depth
        if not line:
            con.print(styled(f"  {pad}", (name, "dim")))
        else:
            con.print(styled(f"  {pad}", (f"{index:>5}", "cyan"), " ", (name, "bold"), f" {line}"),
                      highlight=False)
