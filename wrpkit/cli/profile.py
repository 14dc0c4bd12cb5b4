"""``wrp profile``: where a capture's time goes, per op run, per kernel and per top-level op."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from .options import (Seconds, UserPath, gather_inputs, input_options, kernel_match_lines, kernels_option,
                      trust_options)
from .output import console, dump_json, stderr_console, table

#: Top-level ops shown in the table (the --json and -o outputs have them all).
TOP_ROWS = 15


def fmt_ms(v: float) -> str:
    """Milliseconds with about four significant digits."""
    if v >= 100:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.3f}"
    return f"{v:.4f}"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


@click.command("profile")
@click.argument("file", type=UserPath(dir_okay=True, path_type=Path))
@click.option("--device", default=None, help="cpu or cuda:N (default: the capture's own device family).")
@click.option("--engine", type=click.Choice(["python", "native"]), default="python", show_default=True,
              help="Step through Warp's Python API or the C++ replayer's C API (both in a child process).")
@input_options
@click.option("--repeat", type=click.IntRange(min=1), default=5, show_default=True, metavar="N",
              help="Timed rounds of the whole step; every figure is a median over them.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True, metavar="N",
              help="Untimed rounds first.")
@click.option("-o", "--output", "out", type=UserPath(dir_okay=False, path_type=Path), metavar="OUT.json",
              help="Write Chrome trace-event JSON (Chromium DevTools' Performance panel, Perfetto UI; "
                   "wrp graph --profile).")
@click.option("--nvtx", is_flag=True, help="Push one NVTX range per op, named 'SEQ KERNEL' (for nsys / Nsight "
              "Compute; needs libnvToolsExt).")
@click.option("--clock", type=click.Choice(["auto", "wall", "cpu"]), default="auto", show_default=True,
              help="CPU devices: auto picks the thread's CPU time when a whole replay's wall time is well above its "
                   "CPU time (a busy machine), else the wall clock, and says which; wall or cpu forces one.")
@click.option("--timeout", type=Seconds(), default=None, metavar="SECONDS",
              help="Give up when the profile takes longer than SECONDS of wall time: exit 124, nothing written.")
@kernels_option
@click.option("--json", "as_json", is_flag=True, help='Print {"kernels", "top_level", "ops", "total_ms", '
              '"replay_ms", ...}.')
@trust_options
def profile(file, device, engine, inputs_npz, input_items, repeat, warmup, out, nvtx, clock, timeout, kernels,
            as_json, trust):
    """Time every op of FILE: per op run, per kernel and per top-level op.

    \b
    Every leaf op (inside IF and WHILE bodies too, at each iteration) runs
    alone through the stepper `wrp trace` uses, and is numbered as trace
    numbers it. The whole step is run --warmup times untimed, then --repeat
    times timed, each round from the same memory (the state after the
    inputs are set); figures are medians over the rounds. The cost of an
    empty step, timed in the same run, is subtracted from every op (the
    "floor"); on the CPU, kernel launches less what stepping a launch
    costs beyond the launch (a launch of no thread, stepped and in a
    graph). Runs of consecutive ops are also stepped together, in rounds
    of their own: each op gets its run's time (less the same cost for a
    run of launches of no thread) split by its time stepped alone, since
    an op stepped alone pays per-stream costs a whole replay pays once.
    A plain replay of the whole graph is timed between rounds:
    "coverage" is the sum of the per-op medians against it. On CUDA with
    the python engine, ops are timed with CUDA events.
    A stock capture (saved by wp.capture_save) carries no types:
    --kernels FILE.py types the arrays its kernels are passed, so that
    --inputs are checked against those types.
    The file is validated here, then profiled in a child process: a crash
    there ends with exit 4 and names the op; nothing is written.
    Exit codes: 0 ok; 1 an output cannot be written; 2 bad input (a
    --kernels file that fails to import, or none of whose kernels
    matches); 3 invalid file; 4 the profile crashed (contained); 124
    --timeout ran out; 130 Ctrl-C.

    \b
    Examples:
      wrp profile sim.wrp --inputs in.npz
      wrp profile sim.wrp --repeat 20 --warmup 3 -o sim.trace.json
      wrp graph sim.wrp --profile sim.trace.json      heat colours by share
      wrp profile sim.wrp --json | jq '.kernels[0]'
      wrp profile stock.wrp --kernels sim.py --inputs in.npz
      wrp profile sim.wrp --device cuda:0 --nvtx      (under nsys profile)
    """
    from ..formats.signature import verify_path  # noqa: PLC0415

    verify_path(trust, file)
    from ..debug.profile import profile as run_profile  # noqa: PLC0415

    if out is not None:
        from ..output_paths import check_output_path  # noqa: PLC0415

        # Before the long work: a folder that cannot be made or written to fails now (exit 1).
        check_output_path(out, [file])
    # The job runs in a child, which starts Warp quietly itself: this process never imports Warp.
    inputs = gather_inputs(inputs_npz, input_items)
    # What the kernels print (wp.printf) passes through as it is: on stdout, or on stderr with --json.
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        result = run_profile(file, device=device, engine=engine, inputs=inputs, repeat=repeat, warmup=warmup,
                             nvtx=nvtx, clock=clock, isolate=True, timeout=timeout, kernels=kernels,
                             kernel_output=sys.stderr if as_json else sys.stdout)
    if out is not None:
        result.save_chrome_trace(out)
    if as_json:
        dump_json(result.to_json())
        return
    con = console()
    for line in kernel_match_lines(result.typing):
        con.print(line, highlight=False)
    runs = len(result.ops)
    con.print(f"{file} ({result.engine} engine, {result.device})", highlight=False, markup=False)
    con.print(f"{runs} op run{'s' if runs != 1 else ''} per step; medians of {result.repeat} "
              f"round{'s' if result.repeat != 1 else ''} after {result.warmup} warmup", highlight=False, markup=False)
    t = table("by kernel (ms)", ["kernel", "calls", "total", "per call", "share"],
              numeric=("calls", "total", "per call", "share"))
    for k in result.kernels:
        t.add_row(k["name"], str(k["calls"]), fmt_ms(k["total_ms"]), fmt_ms(k["median_ms"]), _pct(k["share"]))
    con.print(t)
    if result.call_sites:
        sites = result.call_sites[:TOP_ROWS]
        more = "" if len(result.call_sites) <= TOP_ROWS else f", the {TOP_ROWS} costliest of {len(result.call_sites)}"
        t = table(f"by call site (ms){more}", ["call site", "issues", "calls", "total", "per call", "share"],
                  numeric=("calls", "total", "per call", "share"))
        for r in sites:
            names = ", ".join(r["names"][:3]) + (", ..." if len(r["names"]) > 3 else "")
            t.add_row(f"{r['call_site']} {r['function']}()", names, str(r["calls"]), fmt_ms(r["total_ms"]),
                      fmt_ms(r["median_ms"]), _pct(r["share"]))
            callers = r.get("callers") or []
            if len(callers) > 1:  # a helper called from several lines: which call costs what
                for c in callers[:3]:
                    t.add_row(f"  via {c['call_site']} {c['function']}()", "", str(c["calls"]),
                              fmt_ms(c["total_ms"]), "", _pct(c["share"]))
        con.print(t)
    tops = sorted(result.top_level, key=lambda r: -r["total_ms"])
    shown = tops[:TOP_ROWS]
    t = table(f"by top-level op (ms){'' if len(tops) <= TOP_ROWS else f', the {TOP_ROWS} costliest of {len(tops)}'}",
              ["#", "op", "op runs", "total", "share"], numeric=("#", "op runs", "total", "share"))
    for r in shown:  # "op runs": the leaf ops it ran in a step (an IF's or WHILE's, all iterations)
        name = r["op"] if r["op"] in ("IF", "WHILE") else r["name"]
        t.add_row(str(r["index"]), name, str(r["calls"]), fmt_ms(r["total_ms"]), _pct(r["share"]))
    con.print(t)
    con.print("")
    cov = result.coverage
    con.print(f"sum of ops {fmt_ms(result.total_ms)} ms; whole replay {fmt_ms(result.replay_ms)} ms"
              + (f" (coverage {100 * cov:.0f}%)" if cov is not None else ""), highlight=False, markup=False)
    if result.clock_choice is not None:
        con.print(f"clock: {result.clock_choice['clock']} (auto: {result.clock_choice['why']})", highlight=False,
                  markup=False)
    if result.coverage_warning:
        stderr_console().print(f"warning: {result.coverage_warning}", highlight=False, markup=False)
    # Both floors always: they are equal when a stepped launch costs no more than an empty step.
    con.print(f"subtracted: {fmt_ms(result.launch_floor_ms)} ms per launch, "
              f"{fmt_ms(result.floor_ms)} ms per other op ({result.timer} timer)", highlight=False, markup=False)
    if result.grouped_ops:
        from ..debug.profile_groups import GROUP_OPS  # noqa: PLC0415

        con.print(f"grouped: {result.grouped_ops} of {runs} op runs; a run of up to {GROUP_OPS} consecutive ops "
                  f"stepped\nat once, less {fmt_ms(result.group_floor_ms)} ms, split by each op's time stepped alone",
                  highlight=False, markup=False)
    if out is not None:
        con.print(f"trace events written to {out} (Chromium DevTools, Perfetto UI, wrp graph --profile)",
                  highlight=False, markup=False)
