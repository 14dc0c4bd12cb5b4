"""``wrp trace``: replay a capture op by op; digests, NaN/Inf counts and min/max of what each op writes."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from .options import (Seconds, UserPath, gather_inputs, input_options, kernel_match_lines, kernels_option,
                      trust_options)
from .output import console, dump_json, escape, stderr_console, table


def wrapped(text: str, indent: str = "    ", label: str = "", style: str = "") -> str:
    """``text`` broken into lines of at most 80 columns; ``label`` (its first words) printed in ``style``."""
    import textwrap  # noqa: PLC0415

    lead = len(text) - len(text.lstrip(" "))
    out = textwrap.fill(text, width=80, initial_indent="", subsequent_indent=" " * lead + indent,
                        break_long_words=False, break_on_hyphens=False)
    out = out.replace("[", "\\[")  # literal brackets, not rich markup
    if label and style and out.startswith(label):
        out = f"[{style}]{label}[/]{out[len(label):]}"
    return out


def nonfinite_headline(nf: dict) -> str:
    """One line naming the first op that wrote a NaN or Inf: step, op, path, iteration, kernel, region."""
    it = f" iteration {nf['iteration']}" if nf["iteration"] is not None else ""
    what = nf["kernel"] or nf["op"]
    arg = f" argument {nf['argument']}" if nf.get("argument") else ""
    name = f"binding {nf['binding']}" if nf["binding"] else "unbound"
    return wrapped(f"first non-finite: step {nf['seq']}: op {nf['index']} (path {nf['path']}{it}) {what} "
                   f"wrote {nf['nan']} NaN / {nf['inf']} Inf into region {nf['region']}{arg} ({name}), "
                   f"first at element {nf['element']}", label="first non-finite:", style="bold red") + _at(nf)


def _at(rec: dict) -> str:
    """A line ``    at sim.py:42 in step()`` where the trace names the op's source (the call in the
    program that issued it), else ""."""
    from ..checks.sources import where_text  # noqa: PLC0415

    where = where_text(rec.get("source"))
    return "\n" + wrapped(f"    at {where}") if where else ""


def divergence_line(dv: dict) -> str:
    """The first divergence from --against: step, op, path, iteration, and exactly what differs."""
    it = f" iteration {dv['iteration']}" if dv.get("iteration") is not None else ""
    head = (f"first divergence: step {dv['seq']} op {dv['index']} (path {dv['path']}{it}) "
            f"{dv.get('kernel') or dv.get('op') or ''}: {dv['reason']}")
    if "region" in dv:
        head += f", region {dv['region']} ({dv.get('binding') or 'unbound'})"
    other = dv.get("other")
    if other:
        oit = f" iteration {other['iteration']}" if other.get("iteration") is not None else ""
        head += (f"; the other trace has op {other.get('index')} (path {other.get('path')}{oit}) "
                 f"{other.get('kernel') or other.get('op') or ''} there")
    return wrapped(head, label="first divergence:", style="bold red") + _at(dv)


def unchecked_lines(unchecked: list) -> list:
    """Lines naming each written region of unknown dtype, its writers, and how to type it."""
    if not unchecked:
        return []
    out = [f"[yellow]not checked for NaN/Inf[/] (dtype unknown): {len(unchecked)} written region(s)"]
    for u in unchecked[:20]:
        who = ", ".join(f"{w['name']} (path {w['path']})" for w in u["writers"][:3])
        more = f" and {len(u['writers']) - 3} more" if len(u["writers"]) > 3 else ""
        name = (f" ({u['binding']})" if u.get("binding")
                else f" (unbound, argument {u['argument']})" if u.get("argument") else " (unbound)")
        same = f"; left unchanged {u['unchanged']}x" if u.get("unchanged") else ""
        out.append(wrapped(f"  region {u['region']}{name}: written {u['writes']}x by {who}{more}{same}"))
    if len(unchecked) > 20:
        out.append(f"  ... and {len(unchecked) - 20} more (--json lists them all)")
    out.append(wrapped("  type them: --kernels FILE.py (the script that defines the kernels), or "
                       "`wrp annotate FILE --kernels FILE.py -o OUT`"))
    return out


def _fmt(v) -> str:
    if v is None:
        return "?"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


@click.command("trace")
@click.argument("file", type=UserPath(dir_okay=True, path_type=Path))
@click.option("--device", default=None, help="cpu or cuda:N (default: the capture's own device family).")
@click.option("--engine", type=click.Choice(["python", "native"]), default="python", show_default=True,
              help="Step through Warp's Python API or the C++ replayer's C API (both in a child process).")
@input_options
@click.option("--stop-at-nonfinite", is_flag=True, help="Stop at the first op that leaves a NaN or Inf in a "
              "region it writes, and show its inputs.")
@click.option("--dump", type=UserPath(file_okay=False, path_type=Path), metavar="DIR",
              help="Write each op's written regions as .npy (typed where the dtype is known).")
@click.option("--save", "save_path", type=UserPath(dir_okay=False, path_type=Path), metavar="TRACE",
              help="Write the trace (JSON) for a later --against.")
@click.option("--against", type=UserPath(dir_okay=False, path_type=Path), metavar="TRACE",
              help="Compare with a saved trace; report the first op whose digests differ (exit 1).")
@click.option("--timeout", type=Seconds(), default=None, metavar="SECONDS",
              help="Give up when the trace takes longer than SECONDS of wall time (fractional allowed): "
                   "exit 124, nothing written. Bounds WHILE loops that do not end.")
@kernels_option
@click.option("--strict", is_flag=True,
              help="Exit 1 when any written region could not be checked for NaN/Inf (its dtype unknown: type a "
                   "stock capture with --kernels), naming them: an incomplete answer fails a CI gate.")
@click.option("--json", "as_json", is_flag=True, help='Print {"ops": [...], "first_nonfinite": ..., '
              '"first_divergence": ..., "unchecked": [...]}.')
@trust_options
def trace(file, device, engine, inputs_npz, input_items, stop_at_nonfinite, dump, save_path, against, timeout,
          kernels, strict, as_json, trust):
    """Replay FILE op by op and record what every op writes.

    \b
    The summary names the first op that wrote a NaN or Inf (with or without
    --stop-at-nonfinite; "step" is the # column), its input regions as they
    were before it ran, and every written region whose dtype is unknown (not
    checked) with the ops that wrote it. A stock capture records no types:
    --kernels FILE.py types every array its kernels are passed.

    \b
    After each op (nested IF/WHILE bodies per iteration), for each region the
    op writes: a content digest, NaN and Inf counts, and min/max where the
    dtype is known (from the typed signature or kernel-argument annotations;
    "?" where unknown). Ops are numbered as `wrp inspect --ops` numbers them:
    INDEX is the top-level op, PATH the position in nested bodies, IT the
    WHILE iteration. A kernel writes the array arguments the file records
    as written, and every array argument where the file does not say; the
    summary counts such an argument as written only by the ops that changed
    its bytes.
    The file is validated here, then loaded and stepped in a child process:
    a fatal signal there (kernel code, Warp's runtime) ends with exit 4 and
    names the op that was running. Nothing (--save, --dump) is written
    unless the trace finishes.
    Exit codes: 0 ok; 1 a NaN/Inf found with --stop-at-nonfinite, a
    divergence with --against, or with --strict a written region left
    unchecked; 2 bad input (a --kernels file that fails to
    import, or none of whose kernels matches); 3 invalid file; 4 the trace
    crashed (contained); 124 --timeout ran out; 130 Ctrl-C.

    \b
    Examples:
      wrp trace sim.wrp --inputs in.npz --stop-at-nonfinite
      wrp trace sim.wrp --save python.trace
      wrp trace sim.wrp --engine native --against python.trace
      wrp trace stock.wrp --stop-at-nonfinite --strict   # a CI gate
      wrp trace sim.wrp --dump steps/ --json | jq '.ops[3].writes'
      wrp trace untrusted.wrp --timeout 10 --save t.trace
      wrp trace stock.wrp --kernels sim.py
    """
    from ..formats.signature import verify_path  # noqa: PLC0415

    verify_path(trust, file)
    from ..debug.trace import trace as run_trace  # noqa: PLC0415
    from ..output_paths import check_output_dir, check_output_path  # noqa: PLC0415

    # Every output place is checked before the trace runs (it may take minutes).
    if dump is not None:
        check_output_dir(dump)
    if save_path is not None:
        check_output_path(save_path, [file])
    # The job runs in a child, which starts Warp quietly itself: this process never imports Warp.
    inputs = gather_inputs(inputs_npz, input_items)
    # What the kernels print (wp.printf) passes through as it is: on stdout, or on stderr with --json.
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        result = run_trace(file, device=device, engine=engine, inputs=inputs, stop_at_nonfinite=stop_at_nonfinite,
                           dump=dump, against=against, isolate=True, timeout=timeout, kernels=kernels,
                           kernel_output=sys.stderr if as_json else sys.stdout)
    if save_path is not None:
        result.save(save_path)
    code = result.exit_code(stop_at_nonfinite, strict)
    if as_json:
        d = result.to_json()
        dump_json({"ops": d["ops"], "first_nonfinite": d["first_nonfinite"],
                   "first_divergence": d["first_divergence"], "file": d["file"], "engine": d["engine"],
                   "device": d["device"], "unknown_dtypes": d["unknown_dtypes"], "unchecked": d["unchecked"],
                   "kernels": d["kernels"], "program": d["program"], "against_warning": d["against_warning"],
                   "strict_failed": bool(strict and result.unchecked)})
        if strict and result.unchecked:
            stderr_console().print(f"error: --strict: {len(result.unchecked)} written region(s) were not checked "
                                   "for NaN/Inf (their dtype is unknown; --json lists them)", markup=False)
        sys.exit(code)
    con = console()
    t = table(f"{file} ({result.engine} engine, {result.device}): {len(result.ops)} ops",
              ["#", "op", "it", "name", "writes", "digest", "nan/inf", "min..max"])
    shown = result.ops if len(result.ops) <= 200 else result.ops[:100] + result.ops[-100:]
    for rec in shown:
        name = rec["kernel"] or rec["op"]
        for k, w in enumerate(rec["writes"] or [None]):
            it = "" if rec["iteration"] is None else str(rec["iteration"])
            head = [str(rec["seq"]), rec["path"], it, name] if k == 0 else [""] * 4
            if w is None:
                t.add_row(*head, "", "", "", "")
                continue
            where = f"r{w['region']}" + (f" {w['binding']}" if w["binding"] else "")
            t.add_row(*head, where, w["digest"][:8], f"{_fmt(w['nan'])}/{_fmt(w['inf'])}",
                      f"{_fmt(w['min'])}..{_fmt(w['max'])}")
    con.print(t)
    if len(shown) < len(result.ops):
        con.print(f"({len(result.ops) - len(shown)} ops in the middle not shown; --json or --save has them all)")
    for line in kernel_match_lines(result.kernels):
        con.print(line, highlight=False)
    nf = result.first_nonfinite
    if nf is not None:
        con.print(nonfinite_headline(nf), highlight=False)
        for w in nf["inputs"]:
            con.print(wrapped(f"  input r{w['region']} {w.get('argument') or ''} ({w['binding'] or 'unbound'}) "
                              f"before the op: nan={_fmt(w['nan'])} inf={_fmt(w['inf'])} min={_fmt(w['min'])} "
                              f"max={_fmt(w['max'])} digest={w['digest'][:12]}"), highlight=False)
    for line in unchecked_lines(result.unchecked):
        con.print(line, highlight=False)
    if nf is None:
        if result.unchecked:
            con.print(wrapped(f"no NaN or Inf written in the regions of known dtype; {len(result.unchecked)} "
                              "written region(s) were not checked (above)", label="no NaN or Inf written",
                              style="yellow"), highlight=False)
        else:
            con.print("[green]no NaN or Inf written[/] (every written region was checked)", highlight=False)
    if result.against_warning:
        con.print(f"[bold yellow]warning:[/] {escape(result.against_warning)}", highlight=False)
    dv = result.first_divergence
    if dv is not None:
        con.print(divergence_line(dv), highlight=False)
    elif against is not None:
        con.print(f"[green]same digests as {escape(str(against))}[/] at every op", highlight=False)
    if save_path is not None:
        con.print(f"trace saved to {save_path}", markup=False)
    if strict and result.unchecked:
        stderr_console().print(f"error: --strict: {len(result.unchecked)} written region(s) were not checked for "
                               "NaN/Inf (listed above)", markup=False)
        stderr_console().print("hint: Type a stock capture's arrays with --kernels FILE.py (the script that defines "
                               "its kernels), or capture it with wrpkit.capture.", markup=False)
    sys.exit(code)
