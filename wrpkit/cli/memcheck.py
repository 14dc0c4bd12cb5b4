"""``wrp memcheck``: replay a capture with every region between inaccessible pages; name the first access outside one."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from .options import (Seconds, UserPath, gather_inputs, input_options, kernel_match_lines, kernels_option,
                      trust_options)
from .output import console, dump_json, escape, stderr_console


def violation_lines(v: dict) -> list:
    """The first out-of-bounds access in words: what, where in the step, which argument and element."""
    if v.get("pass") == "compute-sanitizer":  # a CUDA capture: NVIDIA's checker names kernel, thread, block
        return [f"[bold red]out-of-bounds {v['access']}[/] ({v['memory']} memory, {v['size']} bytes): kernel "
                f"{escape(repr(v['kernel']))}, thread ({', '.join(map(str, v['thread']))}) in block "
                f"({', '.join(map(str, v['block']))}): {escape(v['side'])}",
                "  (compute-sanitizer's report; `wrp trace` names the op that launched it)"]
    where = f"op {v['op']}" if v["op"] is not None else "while Warp loaded the capture"
    if v["path"] is not None and (v["path"] != str(v["op"]) or v["iteration"] is not None):
        where += f" (path {v['path']}" + (f", WHILE iteration {v['iteration']}" if v["iteration"] is not None
                                          else "") + ")"
    what = f"kernel {v['kernel']!r}" if v["kernel"] else (v["kind"] or "an op")
    region = (f"region {v['region']}" + (f" ({v['binding']})" if v["binding"] else "")
              if v["region"] is not None else "memory Warp allocated for the replay")
    side = "past its end" if v["side"] == "after the end" else "before its start"
    out = [f"[bold red]out-of-bounds {v['access']}[/]: {escape(where)} {escape(what)} "
           f"{v['access'] if v['access'] in ('read', 'write') else 'access'}s {region} at byte {v['byte_offset']} "
           f"of its {v['region_size']}, {side}"]
    for a in v["arguments"]:
        shape = "x".join(str(s) for s in a["shape"]) if a.get("shape") else None
        count = 1
        for n in a.get("shape") or []:
            count *= n
        el = ""
        if a.get("element") is not None:
            el = f" at element {a['element']}" + (f" of its {count}" if shape else "")
            if a.get("element_index") is not None and len(a["element_index"]) > 1:
                idx = ", ".join(str(i) for i in a["element_index"])
                el += f" (shape {shape}; [{idx}] in row-major order)"
        part = "" if a["part"] == "data" else f" ({a['part']} array)"
        dtype = f" {a['dtype']}" if a.get("dtype") else ""
        out.append(f"  argument {a['index']} ({escape(a['name'])}{dtype}){part}{el}")
        if a.get("lines"):
            out.append(f"    the kernel {v['access']}s it at line(s) " + ", ".join(str(n) for n in a["lines"]))
    from ..checks.sources import where_text  # noqa: PLC0415

    if where_text(v.get("kernel_source")):
        out.append(f"  kernel defined at {escape(where_text(v['kernel_source']))}")
    if where_text(v.get("call_site")):
        out.append(f"  launched at {escape(where_text(v['call_site']))}")
    if v.get("cause"):
        out.append(f"  [yellow]likely cause[/]: {escape(v['cause'])}")
    if not v["arguments"] and v["kernel"]:
        out.append("  (no array argument of this launch lies in that region)")
    return out


@click.command("memcheck")
@click.argument("file", type=UserPath(dir_okay=True, path_type=Path))
@click.option("--device", default=None, help="cpu (the default; the guard pages are host memory).")
@click.option("--engine", type=click.Choice(["python", "native"]), default="python", show_default=True,
              help="Load through Warp's Python API or the C++ replayer's C API (in the child process).")
@input_options
@click.option("--timeout", type=Seconds(), default=None, metavar="SECONDS",
              help="Give up when the check takes longer than SECONDS of wall time (both passes): exit 124.")
@kernels_option
@click.option("--strict", is_flag=True,
              help="Exit 1 when any region could not be guarded (listed as unguarded), naming them: an incomplete "
                   "answer fails a CI gate.")
@click.option("--json", "as_json", is_flag=True, help='Print {"clean": ..., "violation": {...} | null, '
              '"passes": [...], "unguarded": [...], "limits": [...]}.')
@trust_options
def memcheck(file, device, engine, inputs_npz, input_items, timeout, kernels, strict, as_json, trust):
    """Replay FILE so that any read or write outside an array's memory is caught, and name the first.

    \b
    Each region Warp allocates gets pages of its own with an inaccessible
    zone right after its last byte (the overrun pass), then, in a second
    replay, right before its first (the underrun pass). The first access
    into a zone stops the replay: memcheck names the op (index, path, WHILE
    iteration), the kernel, the argument (0-based, as `wrp inspect --ops`
    numbers them, with its name), the element index and the array's shape,
    whether it was a read or a write, and with --kernels the lines of the
    kernel that access that argument. Works on stock captures and on
    wrpkit captures, on CPU. Copies and fills are bounds-checked by
    validation before anything runs. What no pass can see (an index past
    one dimension that stays inside the array) is said with every answer.
    Nothing is written.
    Exit codes: 0 no out-of-bounds access; 1 one found, or with --strict a
    region left unguarded; 2 bad input or a CUDA device; 3 invalid file; 4
    the replay crashed for another reason; 124 --timeout ran out; 130 Ctrl-C.

    \b
    Examples:
      wrp memcheck sim.wrp
      wrp memcheck stock.wrp --kernels sim.py --inputs in.npz
      wrp memcheck sim.wrp --json | jq .violation
      wrp memcheck sim.wrp --strict          # a CI gate: unguarded regions fail it
    """
    from ..debug.memcheck import memcheck as run_memcheck  # noqa: PLC0415
    from ..formats.signature import verify_path  # noqa: PLC0415

    verify_path(trust, file)
    # The job runs in a child, which starts Warp quietly itself: this process never imports Warp.
    inputs = gather_inputs(inputs_npz, input_items)
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        result = run_memcheck(file, device=device, engine=engine, inputs=inputs, timeout=timeout, kernels=kernels,
                              kernel_output=sys.stderr if as_json else sys.stdout)
    strict_failed = bool(strict and result.clean and result.unguarded)
    code = 0 if result.clean and not strict_failed else 1
    if as_json:
        dump_json({**result.to_json(), "strict_failed": strict_failed})
        if strict_failed:
            stderr_console().print(f"error: --strict: {len(result.unguarded)} region(s) could not be guarded "
                                   "(--json lists them as unguarded)", markup=False)
        sys.exit(code)
    con = console()
    for line in kernel_match_lines(result.kernels):
        con.print(line, highlight=False)
    if result.violation is not None:
        for line in violation_lines(result.violation):
            con.print(line, highlight=False)
    else:
        con.print(f"[green]no out-of-bounds access[/] in {result.ops} ops ({' and '.join(result.passes)} passes, "
                  f"{result.regions} regions guarded, {result.engine} engine)", highlight=False)
        if result.unguarded:
            con.print(f"[yellow]not checked[/]: region(s) {', '.join(str(r) for r in result.unguarded)} "
                      "(not allocated through the guarded allocator)", highlight=False)
    con.print("not seen by memcheck:", highlight=False, markup=False)
    for limit in result.limits:
        con.print(f"  - {limit}", highlight=False, markup=False)
    if strict_failed:
        stderr_console().print(f"error: --strict: region(s) {', '.join(str(r) for r in result.unguarded)} could not "
                               "be guarded, so accesses outside them were not checked", markup=False)
    sys.exit(code)
