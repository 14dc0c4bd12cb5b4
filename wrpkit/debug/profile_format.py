"""Reading a profile file back (``wrp graph --profile``): a ``wrp profile -o`` trace-event file or its
``--json``, as per-path times, and the check that it times the capture it is drawn over."""

from __future__ import annotations

import json

from .. import model as m
from ..checks.effects import launch_label
from ..errors import WrpBindingError, WrpFormatError
from ..file_reads import read_user_text
#: The ``format`` of a profile's JSON (``--json``, and the trace file's ``otherData.wrpkit``).
PROFILE_FORMAT = "wrpkit-profile/1"


def load_profile(path) -> dict:
    """Per-path times of a profile file: a ``wrp profile -o`` trace-event file, or its ``--json``.

    Returns:
        ``{"paths": {path: {"ms": total over its runs, "calls": runs, "kernel": key or None, "op": kind}},
        "total_ms", "replay_ms", "engine", "device", "timer", "repeat", "file"}``.

    Raises:
        WrpFormatError: The file is neither.
    """
    hint = "Pass a file written by `wrp profile FILE -o OUT.json` (or its --json output)."
    try:
        data = json.loads(read_user_text(path, "profile"))  # missing: exit 2; unreadable: exit 1
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WrpFormatError(f"cannot read profile {path}: {e}", hint=hint) from None
    ops = None
    meta: dict = {}
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        other = data.get("otherData")
        meta = other.get("wrpkit") if isinstance(other, dict) and isinstance(other.get("wrpkit"), dict) else {}
        ops = []
        for ev in data["traceEvents"]:
            if not isinstance(ev, dict) or ev.get("ph") != "X":
                continue
            args = ev.get("args")
            if isinstance(args, dict) and "seq" in args and "path" in args:
                ms = args.get("ms")
                if not isinstance(ms, (int, float)):
                    ms = ev.get("dur", 0) / 1e3 if isinstance(ev.get("dur"), (int, float)) else None
                ops.append({"path": args.get("path"), "kernel": args.get("kernel"), "op": args.get("op"), "ms": ms})
    elif isinstance(data, dict) and data.get("format") == PROFILE_FORMAT and isinstance(data.get("ops"), list):
        meta, ops = data, data["ops"]
    if ops is None or meta.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
        raise WrpFormatError(f"{path} is not a wrp profile", hint=hint)
    paths: dict = {}
    for o in ops:
        ms = o.get("ms") if isinstance(o, dict) else None
        if not isinstance(o.get("path") if isinstance(o, dict) else None, str) or not isinstance(ms, (int, float)) \
                or isinstance(ms, bool) or not 0 <= ms < float("inf"):
            raise WrpFormatError(f"{path}: an op record has no path or no finite, non-negative time", hint=hint)
        p = paths.setdefault(o["path"], {"ms": 0.0, "calls": 0, "kernel": o.get("kernel"), "op": o.get("op")})
        p["ms"] += float(o["ms"])
        p["calls"] += 1
    def number(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf") \
            else None

    def text(v):
        return str(v)[:200] if v is not None else None

    total = number(meta.get("total_ms"))
    return {"paths": paths, "total_ms": total if total is not None else sum(p["ms"] for p in paths.values()),
            "replay_ms": number(meta.get("replay_ms")), "engine": text(meta.get("engine")),
            "device": text(meta.get("device")), "timer": text(meta.get("timer")),
            "repeat": text(meta.get("repeat")), "file": text(meta.get("file"))}


def check_profile_matches(profile: dict, program: m.Program) -> None:
    """Refuse a profile whose op paths or kernels are not those of ``program``.

    Raises:
        WrpBindingError: A path the program lacks, or another op kind or kernel there.
    """
    from ..run.contain.crash import op_at_path  # noqa: PLC0415

    for path, p in profile["paths"].items():
        op = op_at_path(program.ops, path)
        kernel = launch_label(op, program) if isinstance(op, m.KernelLaunch) else None
        if op is None or (p.get("op") and p["op"] != op.op_type.name) or (p.get("kernel") and p["kernel"] != kernel):
            what = "no op" if op is None else f"{op.op_type.name} {kernel or ''}".strip()
            raise WrpBindingError(f"the profile is not of this capture: it times "
                                  f"{p.get('kernel') or p.get('op') or 'an op'} at op {path}, where this capture has "
                                  f"{what}",
                                  hint="Profile this file (`wrp profile FILE -o OUT.json`) and pass that OUT.json.")


__all__ = ["PROFILE_FORMAT", "load_profile", "check_profile_matches"]
