"""What ``wrp profile`` measured: :class:`ProfileResult`, its JSON form and its summaries.

:func:`summarize` fills the per-kernel and per-top-level rows from the per-op
times; :func:`call_site_rows` the per-line rows of a capture that carries call
sites.  The timing itself is :mod:`wrpkit.debug.profile`'s; the Chrome trace
export :mod:`wrpkit.debug.profile_export`'s; reading a profile file back
:mod:`wrpkit.debug.profile_format`'s.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional

from ..records import field, record
from .. import model as m
from ..checks.effects import launch_label
from ..errors import WrpError
from ..atomic_writes import atomic_write
from .profile_export import chrome_trace
from .profile_format import PROFILE_FORMAT

#: Below this share of a whole replay, the sum of the ops is a poor account of where the time goes:
#: the result says so (:attr:`ProfileResult.coverage_warning`) and which clock to try.
MIN_COVERAGE = 0.75


@record
class ProfileResult:
    """Per-op and per-kernel times of one capture.

    Attributes:
        ops: One dict per op run in one step, in order (numbered as
            ``wrp trace`` numbers them): ``seq``, ``index``, ``path``,
            ``iteration`` (None outside WHILE bodies), ``iterations``, ``op``
            (kind), ``kernel`` (key, or None), ``ms`` (median over the rounds,
            the floor subtracted, never below 0; for an op of a group, its
            share of the group's time, see ``grouped_ops``) and ``raw_ms``
            (median as timed alone).
        kernels: Per kernel (or op kind, for ops that launch no kernel), most
            time first: ``name``, ``op``, ``calls`` (per step), ``total_ms``,
            ``median_ms`` (per call), ``share`` (of ``total_ms``, 0..1).
        top_level: Per top-level op, in program order: ``index``, ``op``,
            ``name`` (kernel key or op kind), ``calls``, ``total_ms``, ``share``.
        call_sites: Per line of the program that issued ops (captures made
            with ``wrpkit.capture``), most time first, each with ``callers``: the
            same time split by the line that called the function holding it
            (a helper called from several places): ``call_site``
            (``"sim.py:42"``), ``file``, ``line``, ``function``, ``names``
            (kernel keys or op kinds issued there), ``calls``, ``total_ms``,
            ``median_ms``, ``share``; ops the capture does not place are left
            out.  Empty for a stock capture.
        total_ms: Sum of the per-op medians (``ms``).
        replay_ms: Median time of a plain replay of the whole graph, from the same state.
        floor_ms: Median time of an empty step (subtracted from every op
            that launches no kernel).
        launch_floor_ms: Subtracted from every kernel launch instead: on a
            CPU device, what stepping a launch costs beyond the launch itself
            (a zero-size launch of the first kernel stepped alone, less the
            same launch inside a graph of many; never below ``floor_ms``);
            elsewhere ``floor_ms``.
        timer: ``"host"`` (the wall clock around each launch), ``"host-cpu"``
            (the thread's CPU time, ``clock="cpu"``) or ``"cuda-events"``.
        repeat, warmup: Rounds timed / run untimed first.
        step_ms: Per timed round, the wall time of stepping it (profiling
            included): each op alone, and the group walk.
        replay_rounds_ms: Per timed round, the whole replay's time.
        typing: With ``kernels=``: how each recorded kernel matched the
            user's files (``SourceTyping.to_json()``); None without.
        grouped_ops: Op runs whose ``ms`` comes from a group: runs of up to
            :data:`~wrpkit.debug.profile_groups.GROUP_OPS` consecutive leaf ops of one body are also
            stepped together, in rounds of their own, and each op gets the
            group's median (less the launch floor) split in proportion to its
            own ``raw_ms`` above the empty step.  Why: an op stepped alone
            pays Warp's per-stream costs every time, which a whole replay
            pays once per stream; for sub-microsecond launches that dwarfs
            the op (see :func:`~wrpkit.debug.profile_groups.op_groups`).
        group_floor_ms: Subtracted from a group's time: on a CPU device, a
            group of :data:`~wrpkit.debug.profile_groups.GROUP_OPS` zero-size launches stepped, less as
            many inside a graph (never below ``floor_ms``); elsewhere
            ``launch_floor_ms``.
    """

    file: str
    engine: str
    device: str
    ops: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    top_level: list = field(default_factory=list)
    call_sites: list = field(default_factory=list)
    total_ms: float = 0.0
    replay_ms: float = 0.0
    floor_ms: float = 0.0
    launch_floor_ms: float = 0.0
    timer: str = "host"
    repeat: int = 1
    warmup: int = 0
    step_ms: list = field(default_factory=list)
    replay_rounds_ms: list = field(default_factory=list)
    load_seconds: float = 0.0
    typing: Optional[dict] = None
    grouped_ops: int = 0
    group_floor_ms: float = 0.0
    #: With ``clock="auto"`` on a CPU device: ``{"clock", "wall_ms", "cpu_ms", "why"}`` of the choice.
    clock_choice: Optional[dict] = None
    #: The profiled program (not serialized): the Chrome trace's IF/WHILE events come from it.
    program: Optional[m.Program] = field(default=None, repr=False, compare=False)

    @property
    def coverage(self) -> Optional[float]:
        """``total_ms / replay_ms`` (None when the replay took no measurable time)."""
        return self.total_ms / self.replay_ms if self.replay_ms > 0 else None

    @property
    def coverage_warning(self) -> Optional[str]:
        """A sentence when the ops' sum covers less than :data:`MIN_COVERAGE` of a whole replay, naming
        the clock to try; None otherwise."""
        cov = self.coverage
        if cov is None or cov >= MIN_COVERAGE:
            return None
        other = {"host": "--clock cpu (the thread's CPU time, which leaves out waits for a core)",
                 "host-cpu": "--clock wall"}.get(self.timer)
        return (f"the ops' sum covers {100 * cov:.0f}% of a whole replay (timer {self.timer}), under the "
                f"{100 * MIN_COVERAGE:.0f}% that makes per-op shares trustworthy: the machine is busy, or the "
                "ops are too short to time alone" + (f"; try {other}" if other else "") + ", or more --repeat")

    def top(self, n: int = 10, by: str = "kernel") -> list:
        """The ``n`` entries with the most time: ``by`` ``"kernel"``, ``"top_level"``, ``"call_site"`` or
        ``"op"`` (one per run).

        Raises:
            WrpError: ``by`` is none of those.
        """
        rows = {"kernel": self.kernels, "top_level": self.top_level, "op": self.ops,
                "call_site": self.call_sites}.get(by)
        if rows is None:
            raise WrpError(f"cannot rank by {by!r}", hint="Use 'kernel', 'top_level', 'call_site' or 'op'.")
        key = "ms" if by == "op" else "total_ms"
        return sorted(rows, key=lambda r: -r[key])[:max(0, int(n))]

    def to_json(self) -> dict:
        """``{"kernels", "ops", "top_level", "total_ms", "replay_ms", "floor_ms", "coverage", ...}``."""
        return {"format": PROFILE_FORMAT, "file": self.file, "engine": self.engine, "device": self.device,
                "timer": self.timer, "repeat": self.repeat, "warmup": self.warmup,
                "total_ms": self.total_ms, "replay_ms": self.replay_ms, "floor_ms": self.floor_ms,
                "launch_floor_ms": self.launch_floor_ms, "coverage": self.coverage, "kernels": self.kernels,
                "top_level": self.top_level, "call_sites": self.call_sites, "ops": self.ops,
                "step_ms": self.step_ms, "replay_rounds_ms": self.replay_rounds_ms, "typing": self.typing,
                "grouped_ops": self.grouped_ops, "group_floor_ms": self.group_floor_ms,
                "clock_choice": self.clock_choice, "coverage_warning": self.coverage_warning}

    def chrome_trace(self, program: Optional[m.Program] = None) -> dict:
        """The profile in Chrome's trace-event format (see :func:`~wrpkit.debug.profile_export.chrome_trace`)."""
        return chrome_trace(self, program)

    def save_chrome_trace(self, path, program: Optional[m.Program] = None) -> Path:
        """Write :meth:`chrome_trace` as JSON, atomically; Chromium DevTools' Performance panel and Perfetto UI open it."""
        path = Path(path)
        atomic_write(path, [json.dumps(self.chrome_trace(program), separators=(",", ":")).encode()])
        return path


def round_ns(ms: float) -> float:
    """Milliseconds rounded to whole nanoseconds (what the clocks resolve; keeps the JSON readable)."""
    return round(ms, 6)


def summarize(result: ProfileResult, program: Optional[m.Program] = None) -> None:
    """Fill ``kernels``, ``top_level`` and ``total_ms`` of ``result`` from its ``ops``."""
    total = round_ns(sum(o["ms"] for o in result.ops))
    result.total_ms = total
    per_kernel: dict = {}
    for o in result.ops:
        name = o["kernel"] or o["op"]
        per_kernel.setdefault((name, o["op"]), []).append(o["ms"])
    share = (lambda v: v / total) if total > 0 else (lambda v: 0.0)  # noqa: E731
    result.kernels = sorted(({"name": name, "op": op, "calls": len(v), "total_ms": round_ns(sum(v)),
                              "median_ms": round_ns(statistics.median(v)), "share": round(share(sum(v)), 6)}
                             for (name, op), v in per_kernel.items()), key=lambda r: (-r["total_ms"], r["name"]))
    per_top: dict = {}
    for o in result.ops:
        t = per_top.setdefault(o["index"], [0, 0.0, o])
        t[0] += 1
        t[1] += o["ms"]
    rows = []
    for index in sorted(per_top):
        calls, ms, first = per_top[index]
        op = program.ops[index] if program is not None and 0 <= index < len(program.ops) else None
        kind = op.op_type.name if op is not None else (first["op"] if first["path"] == str(index) else "?")
        name = launch_label(op, program) if isinstance(op, m.KernelLaunch) else kind
        rows.append({"index": index, "op": kind, "name": name, "calls": calls, "total_ms": round_ns(ms),
                     "share": round(share(ms), 6)})
    result.top_level = rows


def call_site_rows(ops: list, program: m.Program) -> list:
    """Op times summed per line of the program that issued the ops (see :attr:`ProfileResult.call_sites`).

    Args:
        ops: :attr:`ProfileResult.ops`.
        program: The profiled program; its annotations say where each op was issued
            (:class:`wrpkit.checks.sources.Sources`).
    """
    from ..checks.sources import Sources, call_site_key  # noqa: PLC0415

    sources = Sources.of(program)
    if not sources.has_call_sites:
        return []
    per: dict = {}
    for o in ops:
        src = sources.op(o["path"])
        key = call_site_key(src)
        if key is None:
            continue
        row = per.setdefault(key, [src, [], [], {}])
        row[1].append(o["ms"])
        name = o["kernel"] or o["op"]
        if name not in row[2]:
            row[2].append(name)
        # The line that called the function holding the call (a helper called from several places).
        caller = src["stack"][1] if len(src.get("stack") or ()) > 1 else None
        if caller is not None:
            row[3].setdefault((call_site_key(caller), caller.get("function", "")), []).append(o["ms"])
    total = sum(o["ms"] for o in ops)

    def share(v):
        return round(sum(v) / total, 6) if total > 0 else 0.0

    return sorted(({"call_site": key, "file": src["file"], "line": src["line"], "function": src["function"],
                    "names": names, "calls": len(v), "total_ms": round_ns(sum(v)),
                    "median_ms": round_ns(statistics.median(v)), "share": share(v),
                    "callers": sorted(({"call_site": ck, "function": fn, "calls": len(cv),
                                        "total_ms": round_ns(sum(cv)), "share": share(cv)}
                                       for (ck, fn), cv in callers.items()),
                                      key=lambda r: (-r["total_ms"], r["call_site"]))}
                   for key, (src, v, names, callers) in per.items()), key=lambda r: (-r["total_ms"], r["call_site"]))


__all__ = ["MIN_COVERAGE", "ProfileResult", "round_ns", "summarize", "call_site_rows"]
