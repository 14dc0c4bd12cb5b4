"""``wrp diff``: compare two captures structurally; exit 0 identical, 1 different, 2 or more could not compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .output import console, dump_json


def _short(v) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _field_lines(fields: dict, indent: str) -> list:
    out = []
    for k, v in fields.items():
        if k == "args":
            for a in v:
                out.append(f"{indent}arg {a['name'] or a['param']}: {_short(a['a'])} -> {_short(a['b'])}")
        elif isinstance(v, list):  # a nested body
            out.append(f"{indent}{k}:")
            out += _op_lines(v, indent + "  ")
        else:
            out.append(f"{indent}{k}: {_short(v['a'])} -> {_short(v['b'])}")
    return out


def _op_lines(rows: list, indent: str = "  ") -> list:
    out = []
    sign = {"added": "+", "removed": "-", "changed": "~"}
    for r in rows:
        where = f"a[{r['a']}]" if r["a"] is not None else ""
        where += (" " if where and r["b"] is not None else "") + (f"b[{r['b']}]" if r["b"] is not None else "")
        out.append(f"{indent}{sign[r['change']]} {where} {r['kind']} {r['kernel'] or ''}".rstrip())
        out += _field_lines(r["fields"], indent + "    ")
    return out


@click.command("diff")
@click.argument("a", type=click.Path(dir_okay=True, path_type=Path))
@click.argument("b", type=click.Path(dir_okay=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help='Print {"identical": ..., "ops": [...], ...}.')
def diff(a, b, as_json):
    """Compare captures A and B structurally.

    \b
    Compares versions and device, regions (sizes, initial-data digests),
    bindings, kernels and modules, and the op streams aligned like a text
    diff, with per-field changes: launch dims, scalar arguments (decoded
    through the kernel-argument annotations where present), relocations,
    IF/WHILE bodies. Pointer values patched at load are not differences:
    one program captured twice diffs as identical.
    Exit codes: 0 identical; 1 different; 2 or more: could not compare,
    with the code of the reason (2 a path missing or unreadable, or a bad
    option; 3 an input invalid or of another Warp version), never 1.

    \b
    Examples:
      wrp diff v1.wrp v2.wrp
      wrp diff a.wrp b.wrpk --json | jq '.ops[] | select(.change=="changed")'
    """
    from ..debug.diff import diff as run_diff  # noqa: PLC0415
    from ..errors import EXIT_FAILED, EXIT_USAGE, WrpError  # noqa: PLC0415

    try:
        res = run_diff(a, b)
    except WrpError as e:
        # 1 means "different" here, so a failure that is 1 elsewhere (a file that cannot be
        # read) is 2, "could not compare", as diff(1) answers trouble.
        if e.exit_code == EXIT_FAILED:
            e.exit_code = EXIT_USAGE
        raise
    if as_json:
        dump_json(res.to_json())
        sys.exit(0 if res.identical else 1)
    con = console()
    if res.identical:
        con.print(f"[green]identical:[/] {a} and {b}", highlight=False)
        sys.exit(0)
    lines = [f"--- {a}", f"+++ {b}"]
    for k, v in res.header.items():
        lines.append(f"{k}: {_short(v['a'])} -> {_short(v['b'])}")
    for section, key in (("regions", "region"), ("bindings", "binding"), ("kernels", "kernel"),
                         ("modules", "module")):
        rows = getattr(res, section)
        if rows:
            lines.append(f"{section}:")
            for r in rows:
                lines.append(f"  {r['change']} {key} {r[key]}")
                lines += _field_lines(r["fields"], "      ")
    if res.ops:
        lines.append(f"ops ({len(res.ops)} difference(s)):")
        lines += _op_lines(res.ops)
    for line in lines:
        con.print(line, markup=False, highlight=False)
    sys.exit(1)
