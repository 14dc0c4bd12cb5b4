"""``wrp replay``: replay a captured graph, time it, summarize and check its outputs.

The command parses its options, calls :func:`wrpkit.run.replay.replay_file.replay_file`
(which checks everything before anything runs or is written, and replays with
either engine in a child process) and prints the :class:`ReplayReport` as
tables or one JSON object.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from .options import Seconds, UserPath, Watchdog, kernel_match_lines, name_items, trust_options
from .replay_start import REPLAY_DEFAULTS


def output_places(items) -> tuple:
    """``(OUT.npz or None, {binding: Y.npy})`` of the ``--output`` values.

    Raises:
        WrpUsageError: A value that is neither ``NAME=PATH`` nor a path ending in ``.npz``, or two ``.npz``.
    """
    from ..errors import WrpUsageError  # noqa: PLC0415

    npz, npy = None, {}
    for item in items:
        name, sep, path = str(item).partition("=")
        if sep and name and path:
            npy[name] = Path(path)
        elif not sep and str(item).lower().endswith(".npz"):
            if npz is not None:
                raise WrpUsageError(f"--output {item}: a second .npz ({npz} is the first)",
                                    hint="Give one OUT.npz (it holds every binding), or NAME=Y.npy for one binding.")
            npz = Path(item)
        else:
            raise WrpUsageError(f"--output {item!r} is neither OUT.npz (every binding) nor NAME=Y.npy (one binding)",
                                hint="For example --output out.npz, or --output y=y.npy.")
    return npz, npy


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) and abs(v) < 10**10:
        return str(v)
    return f"{v:.6g}"  # an int64's 19 digits as well: the table is a summary, --json has the exact values


def _print_report(report) -> None:
    from ..checks.summary import shape_text  # noqa: PLC0415
    from .output import console, plural, stderr_console, styled, table  # noqa: PLC0415

    # Notices (stderr) are never broken mid-phrase, on a terminal or not; the report (stdout) keeps
    # every line within the width, its titles included.
    con = console(soft_wrap=False)
    err = stderr_console()
    for line in report.notices:
        err.print(f"notice: {line}", markup=False)
    for line in kernel_match_lines(report.kernels):
        err.print(line)
    for text in report.warnings:
        err.print(f"warning: {text}", markup=False)
    tt = table(f"{report.file} on {report.device} ({report.engine} engine, "
               f"{plural(report.repeat, 'replay')}, {report.warmup} warmup)",
               ["time per replay", "min", "median", "mean", "max"])
    for key, label in (("host_ms", "host wall (ms)"), ("device_ms", "device (ms)")):
        s = report.timings.get(key)
        if s:
            tt.add_row(label, _fmt(s["min"]), _fmt(s["median"]), _fmt(s["mean"]), _fmt(s["max"]))
    con.print(tt)
    con.print(f"engine: {report.engine} ({report.engine_reason})", markup=False)
    ot = table("outputs", ["binding", "shape", "dtype", "min", "max", "mean", "NaN", "Inf"])
    for name, s in report.outputs.items():
        ot.add_row(name, shape_text(s["shape"]), s["dtype"], _fmt(s["min"]), _fmt(s["max"]), _fmt(s["mean"]),
                   _fmt(s["nan"]), _fmt(s["inf"]))
    con.print(ot)
    if any(s.get("raw") for s in report.outputs.values()):
        con.print("[dim]raw bytes: the file records no dtype for these bindings (type them from the script "
                  "that defines the kernels with --kernels FILE.py, pass an input or --check array, or save "
                  "with wrpkit to add a signature)[/]")
    chk = report.check
    if chk:
        nan_rule = ", NaN == NaN" if chk.get("equal_nan") else ""
        ct = table(f"check against {chk['golden']} (rtol={chk['rtol']:g}, atol={chk['atol']:g}{nan_rule})",
                   ["binding", "result", "max abs err", "max rel err", "note"])
        for name, r in chk["bindings"].items():
            ct.add_row(name, styled(("ok", "green")) if r["ok"] else styled(("MISMATCH", "bold red")),
                       _fmt(r["max_abs"]),
                       _fmt(r["max_rel"]), r.get("reason") or "")
        con.print(ct)
        con.print(f"compared: {chk['compared']}", markup=False)
        if chk.get("not_compared"):
            con.print(f"not compared (absent from {chk['golden']}): {', '.join(chk['not_compared'])}", markup=False)
        con.print("[green]check passed[/]" if chk["ok"] else "[bold red]check failed[/]")
    if report.output:
        con.print(f"wrote {report.output}", markup=False)
    for name, path in (report.npy_outputs or {}).items():
        con.print(f"wrote {path} ({name})", markup=False)


@click.command("replay")
@click.argument("file", type=UserPath(exists=True, dir_okay=True, path_type=Path))
@click.option("--device", default=REPLAY_DEFAULTS["device"], show_default=True,
              help="cpu, cuda or cuda:N (the capture's device family).")
@click.option("--inputs", "inputs_npz", type=UserPath(path_type=Path), metavar="IN.npz",
              help="Inputs keyed by binding name.")
@click.option("--input", "input_items", multiple=True, metavar="NAME=X.npy", help="One input (repeatable).")
@click.option("--output", "output_items", multiple=True, metavar="OUT.npz|NAME=Y.npy",
              help="OUT.npz: every binding after the last replay. NAME=Y.npy: binding NAME alone, as .npy "
                   "(repeatable, like --input).")
@click.option("--repeat", type=click.IntRange(min=1), default=REPLAY_DEFAULTS["repeat"], show_default=True,
              help="Timed replays.")
@click.option("--warmup", type=click.IntRange(min=0), default=REPLAY_DEFAULTS["warmup"], show_default=True,
              help="Untimed replays first.")
@click.option("--check", "golden", type=UserPath(path_type=Path), metavar="GOLDEN.npz",
              help="Compare bindings with a golden .npz; exit 1 on mismatch.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-5, show_default=True)
@click.option("--atol", type=click.FloatRange(min=0), default=1e-6, show_default=True)
@click.option("--equal-nan", is_flag=True, help="With --check: NaN in the output equals NaN in the golden at the "
              "same element (by default it is a mismatch).")
@click.option("--engine", type=click.Choice(["auto", "python", "native"]), default=REPLAY_DEFAULTS["engine"],
              show_default=True,
              help="auto: the native engine (wrp-replay, the faster) unless an option needs the python one "
                   "(--device cuda: device timings) or wrp-replay cannot run; the output says which and why.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--no-verify", is_flag=True, help="For a .wrpk: skip blob checksums (trusted files only).")
@click.option("--timeout", type=Seconds(), default=None, metavar="SECONDS",
              help="Give up when loading and replaying take longer than SECONDS of wall time (fractional "
                   "allowed): exit 124, nothing written. Bounds WHILE loops that do not end.")
@click.option("--allow-raw-pointers", is_flag=True,
              help="Replay a file whose kernel arguments hold live process pointers (HashGrid, Bvh or Volume "
                   "ids), refused by default: they dangle in a new process.")
@click.option("--modules-dir", type=UserPath(file_okay=False, path_type=Path), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@click.option("--max-memory", "max_memory", metavar="SIZE", default=None,
              help="Memory the replay may allocate (e.g. 64G), instead of the device's free memory, which the "
                   "capture's declared memory is checked against before anything is allocated (exit 3).")
@click.option("--allow-unreached", is_flag=True,
              help="Replay a file whose regions are far larger than any op reaches (refused above 1 GiB in all).")
@click.option("--dtype", "dtype_items", multiple=True, metavar="NAME=TYPE",
              help="Type a binding the file records no signature for, as a 1-D array of a Warp type "
                   "(float32, vec3f, mat33f, ...). Repeatable.")
@click.option("--kernels", "kernels", multiple=True, metavar="FILE.py",
              type=UserPath(dir_okay=False, path_type=Path),
              help="The .py file that defines the capture's kernels (repeatable): types every binding a "
                   "matching kernel is passed (imported as a script, without its __main__ block).")
@trust_options
@click.pass_context
def replay(ctx, file, device, inputs_npz, input_items, output_items, repeat, warmup, golden, rtol, atol, equal_nan, engine,
           as_json, no_verify, timeout, allow_raw_pointers, modules_dir, max_memory, allow_unreached, dtype_items,
           kernels, trust):
    """Replay a captured graph FILE (.wrp or .wrpk) and report timings and outputs.

    \b
    Inputs are keyed by binding name.  Where the file records a binding's
    dtype and shape, an input must have exactly that dtype and shape (a view
    binding takes the view's shape); otherwise exactly the binding's bytes
    (--dtype NAME=TYPE types such a binding).  A binding left unset keeps its
    captured value, and a notice says so.
    Exit codes (wrp --help has the table): 0 ok; 1 check mismatch, replay
    failure or I/O error; 2 usage error, bad input, wrong device; 3 invalid,
    incomplete, incompatible or unsafe file (e.g. stale process pointers), or
    one needing more memory than the device has free (--max-memory);
    4 the replay crashed (a fatal signal in kernel code or Warp's runtime,
    contained in a child process: the message names the op); 124 --timeout
    ran out; 130 Ctrl-C.  Nothing is written on any error.

    \b
    Examples:
      wrp replay sim.wrp --inputs in.npz --output out.npz
      wrp replay sim.wrp --input x=x.npy --output y=y.npy
      wrp replay sim.wrp --repeat 1000 --warmup 10 --json
      wrp replay sim.wrp --inputs in.npz --check expected.npz --rtol 1e-6
      wrp replay sim.wrp --check expected.npz --equal-nan
      wrp replay sim.wrp --engine python      # force an engine (default auto)
      wrp replay untrusted.wrp --timeout 10 --output out.npz
      wrp replay renamed.wrp --modules-dir old_name_modules
      wrp replay stock.wrp --dtype x=vec3f --input x=x.npy
      wrp replay stock.wrp --kernels sim.py --output out.npz
      wrp replay h200.wrp --device cuda:0 --max-memory 120G
      wrp replay shipped.wrp --trusted-key pub.pem   # refused (exit 3) unless signed
    """
    from ..run.contain.spawn import kernel_output_for  # noqa: PLC0415

    # What the kernels print (wp.printf) passes through to the user as it is, as Warp's own replay
    # prints it: on stdout, or on stderr with --json, so that stdout stays one JSON object.  (The one
    # made for a wrp-replay started before the command line was parsed, wrpkit/cli/replay_start.py.)
    kernel_output = kernel_output_for(sys.stderr if as_json else sys.stdout)
    from ..run.replay.engines import choose_engine  # noqa: PLC0415  (imports nothing heavy; looks for wrp-replay)

    requested, engine = engine, choose_engine(engine, device=device).name  # replay_file decides the same
    if engine == "python":
        # The replay's child starts now, before anything else is imported: its Python start, `import warp`
        # and Warp's initialisation run on the other core while this process reads and validates the file.
        from ..run.contain.spawn import prestart_child  # noqa: PLC0415

        prestart_child({"op": "preload", "device": device})
        if not as_json:
            from .output import import_rich  # noqa: PLC0415

            import_rich()  # while the child imports Warp, not after the replay
    try:
        from ..checks.memory import parse_size  # noqa: PLC0415
        from ..run.replay.replay_file import replay_file  # noqa: PLC0415
        from .output import import_rich, reported_errors  # noqa: PLC0415

        # The same error handling as the `wrp` group's, so that the command also reports cleanly on its own.
        with reported_errors(ctx, as_json):
            # With --json, stdout carries exactly one JSON object: anything printed
            # on the way (Warp's messages) goes to stderr.
            with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
                dtypes = {n: t.strip()
                          for n, t in name_items(dtype_items, "--dtype", "TYPE", "--dtype x=vec3f").items()}
                inputs = name_items(input_items, "--input", "FILE.npy", "--input x=x.npy")
                output, npy_outputs = output_places(output_items)
                budget = parse_size(max_memory) if max_memory is not None else None
                if engine == "native" and not (inputs_npz or inputs or output or npy_outputs or golden or dtypes or kernels
                                               or timeout is not None):
                    # wrp-replay starts now and maps and validates the file while this process does the same;
                    # a file big enough to be refused for regions no op reaches waits for that check.
                    from ..checks.memory import UNREACHED_REFUSE_BYTES  # noqa: PLC0415
                    from ..run.replay.engines import ReplayRequest, prestart_replayer  # noqa: PLC0415

                    prestart_replayer(file, ReplayRequest(device=device, repeat=repeat, warmup=warmup,
                                                          verify_checksums=not no_verify,
                                                          allow_raw_pointers=allow_raw_pointers, max_memory=budget,
                                                          trust=trust, kernel_output=kernel_output),
                                      modules_dir, approve_above=None if allow_unreached else UNREACHED_REFUSE_BYTES)
                # --timeout: ends this process at once (exit 124) while the file is prepared; the replay's
                # child keeps the rest of the time itself.
                watchdog = Watchdog(timeout, repeat + warmup) if timeout is not None else None
                report = replay_file(file, device=device, inputs_npz=inputs_npz, inputs=inputs, output=output,
                                     npy_outputs=npy_outputs,
                                     repeat=repeat, warmup=warmup, golden=golden, rtol=rtol, atol=atol,
                                     equal_nan=equal_nan, engine=requested, verify_checksums=not no_verify,
                                     watchdog=watchdog, allow_raw_pointers=allow_raw_pointers,
                                     modules_dir=modules_dir, dtypes=dtypes, kernels=kernels, max_memory=budget,
                                     allow_unreached=allow_unreached, trust=trust, kernel_output=kernel_output,
                                     while_replaying=None if as_json or engine == "python" else import_rich)
    finally:
        # A child started ahead that the replay did not take (the command failed before it: a usage
        # error, a refused file) ends with the command, in this process too (a caller of main()).
        from ..run.contain.spawn import discard_prestarted  # noqa: PLC0415

        discard_prestarted()
        kernel_output.close()
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, allow_nan=False))
    else:
        _print_report(report)
    if not report.ok:
        if not as_json:
            bad = report.mismatched()
            noun = "binding differs" if len(bad) == 1 else "bindings differ"
            click.echo(f"error: {len(bad)} {noun} from {golden}: {', '.join(bad)}", err=True)
        ctx.exit(report.exit_code)


__all__ = ["replay"]
