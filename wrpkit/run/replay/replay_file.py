"""Replay a captured graph file, time it, summarise and check its outputs: ``wrp replay`` without printing.

Everything that can be checked is checked before anything runs or is
written: the file decodes and validates, its module files are present,
non-empty and unaltered, the device family and the Warp version match, every
input names a binding and fits it (size, and dtype when the file carries a
signature), the memory fits, and the golden file and output path are usable.
The replay runs in a child process with either engine
(:mod:`wrpkit.run.replay.engines`); :func:`replay_file` returns a
:class:`ReplayReport` and never prints.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Mapping, Optional

from ...records import field, record
from ...errors import EXIT_FAILED, WrpError


@record
class ReplayReport:
    """What a replay found: everything ``wrp replay`` prints, as data.

    Attributes:
        file: The capture replayed.
        device: The device string.
        engine: ``python`` or ``native``: the engine that replayed.
        warp_version: The Warp version the file was captured with.
        repeat: Timed replays.
        warmup: Untimed replays first.
        timings: ``{"host_ms", "device_ms"}``, each a
            :func:`~wrpkit.checks.binding_stats.timing_summary` or None.
        outputs: ``{binding: stats}`` of every output binding after the last replay.
        unset_inputs: ``{binding: what it holds}`` of each input binding no input was given for.
        warnings: Warnings found before the replay (regions nothing reaches).
        check: The comparison with the golden file, or None without one.
        output: The ``.npz`` written, or None.
        npy_outputs: ``{binding: path}`` of the ``.npy`` files written (``--output NAME=Y.npy``), or None.
        kernels: What ``--kernels`` typed (``SourceTyping.to_json()``), or None.
        notices: The lines that say so of ``unset_inputs`` (:func:`unset_input_notices`; not in the JSON,
            which has ``unset_inputs``).
        engine_reason: Why that engine replayed (``--engine auto``'s choice, or the engine named).
    """

    file: str
    device: str
    engine: str
    warp_version: str
    repeat: int
    warmup: int
    timings: dict
    outputs: dict
    unset_inputs: dict
    warnings: list
    check: Optional[dict] = None
    output: Optional[str] = None
    npy_outputs: Optional[dict] = None
    kernels: Optional[dict] = None
    notices: list = field(default_factory=list)
    engine_reason: str = ""

    @property
    def ok(self) -> bool:
        """Whether the check passed (True without one)."""
        return self.check is None or bool(self.check["ok"])

    @property
    def exit_code(self) -> int:
        """0, or :data:`~wrpkit.errors.EXIT_FAILED` when a binding differs from the golden."""
        return 0 if self.ok else EXIT_FAILED

    def mismatched(self) -> list:
        """The bindings that differ from the golden file."""
        return [n for n, r in (self.check or {}).get("bindings", {}).items() if not r["ok"]]

    def to_json(self) -> dict:
        """The report as ``wrp replay --json`` prints it (non-finite floats as null; ``kernels`` only
        with ``--kernels``)."""
        from ...checks.json_values import json_safe  # noqa: PLC0415

        out = {"file": self.file, "device": self.device, "engine": self.engine, "engine_reason": self.engine_reason,
               "warp_version": self.warp_version,
               "repeat": self.repeat, "warmup": self.warmup, "timings": self.timings, "outputs": self.outputs,
               "unset_inputs": self.unset_inputs, "warnings": self.warnings, "check": self.check,
               "output": self.output, "npy_outputs": self.npy_outputs, "ok": self.ok}
        if self.kernels is not None:
            out["kernels"] = self.kernels
        return json_safe(out)


def unset_inputs(prep, inputs) -> dict:
    """``{binding name: what it holds}`` for each input binding no input was given for.

    A binding left unset keeps the value captured with the graph (the
    region's initial bytes recorded in the file, or zeros when none were).

    Args:
        prep: The :class:`~wrpkit.run.load.prepare.Prepared` capture.
        inputs: The binding names given.

    Returns:
        ``{name: text}``.
    """
    out = {}
    for name, (size, recorded, role_known) in _unset(prep, inputs).items():
        out[name] = (f"the captured value ({size} bytes recorded in the file)" if recorded else
                     f"zeros ({size} bytes; the file records no initial value)")
        if not role_known:
            out[name] += "; the file does not record whether it is an input"
    return out


def _unset(prep, inputs) -> dict:
    """``{name: (bytes, initial value recorded, role known)}`` of each input binding not given."""
    from ...binding_roles import binding_roles  # noqa: PLC0415

    regions = prep.model.region_map()
    region_of = prep.model.binding_map()
    # Roles as capture_save's inputs-then-outputs order tells them (a signature, where
    # present, says it outright): an output-only binding gets no input notice.
    roles = binding_roles([b.name for b in prep.model.bindings])
    out = {}
    for name, size in prep.sizes.items():
        sig = prep.signature.get(name)
        is_input = sig.is_input if sig is not None else roles.get(name, (None, None))[0]
        if name in inputs or is_input is False:
            continue
        region = regions.get(region_of.get(name))
        out[name] = (size, region is not None and region.has_initial_data, is_input is not None)
    return out


def unset_input_notices(prep, inputs) -> list:
    """The notices ``wrp replay`` prints for the input bindings not given: one per binding, or, for more
    than two that hold the same kind of value, one for all of them (a stock capture names every array
    it was given as a binding and records none as an input)."""
    groups: dict = {}
    for name, (size, recorded, role_known) in _unset(prep, inputs).items():
        groups.setdefault((recorded, role_known), []).append((name, size))
    lines = []
    for (recorded, role_known), members in groups.items():
        if len(members) <= 2:
            for name, size in members:
                what = (f"the captured value ({size} bytes recorded in the file)" if recorded else
                        f"zeros ({size} bytes; the file records no initial value)")
                lines.append(f"binding {name!r} was not given as an input: it holds {what}"
                             + ("" if role_known else "; the file does not record whether it is an input"))
            continue
        names = ", ".join(repr(n) for n, _ in members[:-1]) + f" and {members[-1][0]!r}"
        what = ("its captured value (recorded in the file)" if recorded else
                "zeros (the file records no initial value)")
        lines.append(f"{len(members)} bindings were not given as inputs: {names}; each holds {what}"
                     + ("" if role_known else "; the file does not record which are inputs"))
    return lines


def check_memory(prep, device: str, max_memory, allow_unreached: bool) -> list:
    """Refuse, before anything is allocated, what cannot fit; return the warnings (unreached regions).

    The host's free memory is checked here (a CUDA device's by the replay's process, which asks Warp).

    Raises:
        WrpOutOfMemoryError: The declared memory exceeds the host's available memory or ``max_memory``.
        WrpValidationError: Regions nothing reaches hold more than the refusal threshold.
    """
    from ...checks.memory import (UNREACHED_FIX, UNREACHED_REFUSE_BYTES, check_budget, format_size,  # noqa: PLC0415
                                  host_available, unreached_regions)
    from ...errors import WrpValidationError  # noqa: PLC0415

    unreached = unreached_regions(prep.model)
    wasted = sum(u.unreached for u in unreached)
    if unreached and wasted > UNREACHED_REFUSE_BYTES and not allow_unreached:
        raise WrpValidationError(
            [u.message() for u in unreached],
            hint=f"Together {format_size(wasted)} that no op reaches (over the {format_size(UNREACHED_REFUSE_BYTES)} "
                 f"a replay allocates without asking). {UNREACHED_FIX}")
    if device.strip().lower().startswith("cpu"):
        check_budget(prep.model, "cpu", host_available() if max_memory is None else None, max_memory)
    return [u.message() for u in unreached]


def _type_bindings(prep, dtypes: Mapping, kernels) -> tuple:
    """Type the bindings ``--dtype`` and ``--kernels`` name; ``(names typed here, SourceTyping or None)``."""
    from ..load import prepare as preparation  # noqa: PLC0415

    typed_here = set()  # the replay (child, or wrp-replay) returns their bytes
    if dtypes:
        from ...checks.region_types import user_dtype_signatures  # noqa: PLC0415

        for name in dtypes:
            if name not in prep.sizes:
                raise preparation.unknown_binding(name, prep.sizes)
        # --dtype is region typing's strongest source: the one typing function decides (and refuses a
        # binding the file types already, or one its type does not divide).
        given = {n: (t, preparation.warp_data_type(n, t)) for n, t in dtypes.items()}
        for name, sig in user_dtype_signatures(prep.model, given, annotations=prep.annotations).items():
            prep.signature[name] = sig
            typed_here.add(name)
    kernel_typing = None
    if kernels:
        from ..capture.source_types import type_from_source  # noqa: PLC0415

        kernel_typing = type_from_source(prep.model, prep.annotations, list(kernels))
        for sig in kernel_typing.annotations.signature:
            if prep.signature.get(sig.name) is None and sig.name not in typed_here:
                prep.signature[sig.name] = sig
                typed_here.add(sig.name)
    return typed_here, kernel_typing


def _write_npz(output, results: dict) -> None:
    """``numpy.savez`` of ``results`` straight into the atomic write's file.

    numpy streams each array into its zip member in 16 MiB pieces, so no copy
    of the archive is held in memory (a 1 GiB output through an in-memory
    archive cost 1 GiB more); the results themselves are views where they can
    be (the native engine's memory files, mapped).
    """
    import numpy as np  # noqa: PLC0415

    from ...atomic_writes import atomic_write  # noqa: PLC0415

    def write(fd: int) -> None:
        with os.fdopen(os.dup(fd), "wb") as f:  # the dup shares fd's offset; closing it leaves fd open
            np.savez(f, **results)

    atomic_write(output, [], finish=write)


def _write_npy(path, array) -> None:
    """``numpy.save`` of one binding straight into the atomic write's file (as :func:`_write_npz`)."""
    import numpy as np  # noqa: PLC0415

    from ...atomic_writes import atomic_write  # noqa: PLC0415

    def write(fd: int) -> None:
        with os.fdopen(os.dup(fd), "wb") as f:
            np.save(f, array)

    atomic_write(path, [], finish=write)


@record
class _Given:
    """The user's arrays: inputs (raw and coerced to their bindings) and the golden values."""

    raw: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    golden: Optional[dict] = None
    sources: list = field(default_factory=list)

    def hint(self, name: str):
        """The array given for ``name`` (an input, else a golden value), or None."""
        h = self.raw.get(name)
        return h if h is not None or self.golden is None else self.golden.get(name)


def _read_given(prep, file: Path, inputs_npz, inputs: Mapping, golden) -> _Given:
    from ...numpy_files import load_npy, load_npz  # noqa: PLC0415
    from ..load import prepare as preparation  # noqa: PLC0415

    g = _Given(sources=[file])
    if inputs_npz is not None:
        g.sources.append(Path(inputs_npz))
        g.raw.update(load_npz(Path(inputs_npz)))
    for name, p in inputs.items():
        g.sources.append(Path(p))
        g.raw[name] = load_npy(Path(p))
    for name, value in g.raw.items():
        if name not in prep.sizes:
            raise preparation.unknown_binding(name, prep.sizes)
        g.inputs[name] = preparation.coerce_input(name, value, prep.sizes[name], prep.signature.get(name))
    if golden is not None:
        g.sources.append(Path(golden))
        g.golden = load_npz(Path(golden), "golden file")
        for name in g.golden:
            if name not in prep.sizes:
                raise preparation.unknown_binding(name, prep.sizes)
    return g


def _replay_with(chosen, choice, prep, request) -> tuple:
    """``(EngineRun, EngineChoice)``: replay with ``chosen``; where ``--engine auto`` picked the native engine
    and it cannot run at all (:func:`~wrpkit.run.replay.engines.engine_unavailable`), with the python engine instead."""
    from ..contain.spawn import discard_prestarted  # noqa: PLC0415
    from .engines import REPLAYER_KEY, EngineChoice, PythonEngine, engine_unavailable  # noqa: PLC0415

    try:
        return chosen.replay(prep, request), choice
    except WrpError as e:
        if not (choice.auto and choice.name == "native" and engine_unavailable(e)):
            raise
        discard_prestarted(REPLAYER_KEY)
        said = str(e).splitlines()[0] if str(e) else type(e).__name__
        reason = f"--engine auto: the native engine could not run ({said}), so the python engine replayed instead"
        return PythonEngine().replay(prep, request), EngineChoice("python", reason, auto=True)


def replay_file(file, *, device: str = "cpu", inputs_npz=None, inputs: Optional[Mapping] = None, output=None,
                repeat: int = 1, warmup: int = 0, golden=None, rtol: float = 1e-5, atol: float = 1e-6,
                equal_nan: bool = False, engine: str = "python", verify_checksums: bool = True, watchdog=None,
                allow_raw_pointers: bool = False, modules_dir=None, dtypes: Optional[Mapping] = None, kernels=(),
                max_memory: Optional[int] = None, allow_unreached: bool = False,
                while_replaying: Optional[Callable[[], None]] = None, trust=None,
                npy_outputs: Optional[Mapping] = None, kernel_output=None) -> ReplayReport:
    """Replay a ``.wrp`` or ``.wrpk`` and report timings and outputs; compare with a golden file, write every
    binding to an ``.npz``.

    The replay runs in a child process (either engine): a fatal signal there
    raises :class:`~wrpkit.errors.WrpCrashError` (exit 4) naming the op that
    crashed, and nothing is written.

    Args:
        file: The capture.
        device: ``cpu``, ``cuda`` or ``cuda:N`` (the capture's device family).
        inputs_npz: An ``.npz`` of inputs keyed by binding name.
        inputs: ``{binding: path of an .npy}`` (after ``inputs_npz``; they win).
        output: An ``.npz`` to write every binding to after the last replay.
        repeat: Timed replays.
        warmup: Untimed replays first.
        golden: An ``.npz`` to compare bindings with.
        rtol: Relative tolerance of the comparison.
        atol: Absolute tolerance of the comparison.
        equal_nan: NaN in the output equals NaN in the golden at the same element.
        engine: ``python``, ``native`` (:mod:`wrpkit.run.replay.engines`) or ``auto``: the native engine wherever
            the options allow it (:func:`~wrpkit.run.replay.engines.choose_engine`), and the python engine where
            it cannot run at all (wrp-replay not installed, or without Warp's runtime); the report's
            ``engine`` and ``engine_reason`` say which replayed and why.
        verify_checksums: Verify a ``.wrpk``'s blob checksums (False: trusted files only).
        watchdog: An armed deadline (``disarm()``, ``remaining()``, ``seconds``,
            ``replays``; ``wrp replay --timeout``'s :class:`wrpkit.cli.options.Watchdog`)
            covering preparation; it is disarmed before the replay's child starts,
            which keeps the rest of the time itself, and before anything is written.
        allow_raw_pointers: Replay kernel arguments that hold live process pointers.
        modules_dir: Folder of a ``.wrp``'s module files (default ``<stem>_modules/`` beside it).
        dtypes: ``{binding: Warp type name}`` for bindings the file records no
            signature for (typed by :func:`wrpkit.checks.region_types.user_dtype_signatures`).
        kernels: ``.py`` files defining the capture's kernels, which type the bindings they are passed.
        max_memory: Bytes the replay may allocate instead of the device's free memory.
        allow_unreached: Replay a file whose regions are far larger than any op reaches.
        while_replaying: Called in this process while the replay's process runs (the
            native engine; the command line imports its table printer then), or None.
        trust: A :class:`~wrpkit.formats.signature.Trust` the capture must be signed by (checked
            before anything is decoded, here and again by wrp-replay), or None.
        npy_outputs: ``{binding: path}``: write each of those bindings alone as a ``.npy`` after
            the last replay (as ``--input NAME=X.npy`` reads one).
        kernel_output: Where the kernels' own output (``wp.printf``) of every replay goes, all of it
            before this returns: a stream, a :class:`~wrpkit.run.contain.spawn.KernelOutput`, ``"stdout"``,
            or None (the default: not shown; this function prints nothing).  ``wrp replay`` passes
            its stdout, or its stderr with ``--json``.

    Returns:
        The :class:`ReplayReport`; its ``exit_code`` is 1 when a binding differs from the golden.

    Raises:
        WrpError: Any problem found before or while replaying; nothing is written in that case.
    """
    from ...checks.binding_stats import stats_spec, timing_summary, with_warp_shape  # noqa: PLC0415
    from ...output_paths import check_output_path  # noqa: PLC0415
    from ..load import prepare as preparation  # noqa: PLC0415
    from .engines import ReplayRequest, choose_engine, engine as engine_named, typed_like  # noqa: PLC0415
    from ..contain.spawn import kernel_output_of  # noqa: PLC0415

    choice = choose_engine(engine, device=device)
    chosen = engine_named(choice.name)
    file = Path(file)
    shown, owned = kernel_output_of(kernel_output)
    try:
        file = preparation.resolve_capture_path(file)
        # Both engines replay in a child that maps the file itself: this process reads its records
        # (and a .wrpk's module blobs) only, except that for the python engine it hashes a .wrpk's
        # region data while the child loads it, and so maps every page up front; wrp-replay
        # verifies a bundle's region data itself.
        hashes_here = choice.name == "python" and verify_checksums and file.suffix.lower() != ".wrp"
        prep = preparation.prepare(file, verify_checksums=verify_checksums, allow_raw_pointers=allow_raw_pointers,
                                   modules_dir=modules_dir, prefetch=hashes_here, trust=trust)
    except BaseException:
        if watchdog is not None:
            watchdog.disarm()
        raise
    try:
        # Warp is imported only where the replay runs (the child; wrp-replay loads its own), which
        # checks the device too: this process starts fast and holds no Warp runtime.
        preparation.check_runnable(prep.model, device, what=str(file))
        warnings = check_memory(prep, device, max_memory, allow_unreached)
        if not prep.sizes:
            # A stock capture saved without inputs=/outputs= (the usual case): say why nothing is shown.
            warnings.append(f"{file.name} names no bindings (wp.capture_save was given no inputs= or outputs=), "
                            "so there are no outputs to summarise" + (", and the output file holds no arrays"
                                                                     if output is not None else "")
                            + "; name them with wp.capture_save(graph, path, inputs={...}, outputs={...}) or "
                            "save with wrpkit.capture")
        typed_here, kernel_typing = _type_bindings(prep, dict(dtypes or {}), kernels)
        given = _read_given(prep, file, inputs_npz, dict(inputs or {}), golden)
        if output is not None:
            output = check_output_path(output, given.sources)
            if output.exists() and output.is_dir():
                raise WrpError(f"output {output} is a directory")
        npy_outputs = dict(npy_outputs or {})
        for name in npy_outputs:
            if name not in prep.sizes:
                raise preparation.unknown_binding(name, prep.sizes)
            npy_outputs[name] = check_output_path(npy_outputs[name], given.sources)

        outputs = [n for n in prep.sizes if prep.signature.get(n) is None or prep.signature[n].is_output]
        # Only what is asked for comes back: every binding for --output, the golden's for --check;
        # the outputs table is computed where the data is (the replay's process).
        request = ReplayRequest(
            device=device, inputs=given.inputs, repeat=repeat, warmup=warmup, verify_checksums=verify_checksums,
            allow_raw_pointers=allow_raw_pointers, max_memory=max_memory, while_replaying=while_replaying,
            trust=trust, kernel_output=shown, read_back=list(prep.sizes) if output is not None
            else list(dict.fromkeys([*(given.golden or ()), *npy_outputs])),
            stats={n: stats_spec(prep.signature.get(n), prep.sizes[n], given.hint(n)) for n in outputs})
        if watchdog is not None:
            # From here on the child keeps the time (it is killed, or wrp-replay stops itself): this
            # process must not be ended while its child runs.
            watchdog.disarm()
            request.deadline = watchdog.deadline
        run, choice = _replay_with(chosen, choice, prep, request)
    finally:
        if owned:
            shown.close()
        if watchdog is not None:
            watchdog.disarm()  # replayed (or failed) in time: what follows is never cut short
        for k in prep._keep:
            with contextlib.suppress(Exception):
                k.close()

    # Bindings without a signature come back as raw bytes; type them like the
    # input or golden array given for them when the sizes agree.
    results = run.results
    if results:
        import numpy as np  # noqa: PLC0415

        from ...checks.compare import typed_as  # noqa: PLC0415
    for name, arr in list(results.items()):
        if prep.signature.get(name) is None:
            results[name] = typed_as(arr, given.hint(name))
        elif name in typed_here and arr.dtype == np.uint8 and arr.nbytes == prep.sizes[name]:
            results[name] = typed_like(arr, prep.sizes[name], prep.signature[name])  # typed by --dtype

    report = ReplayReport(
        file=str(file), device=device, engine=choice.name, engine_reason=choice.reason,
        warp_version=prep.model.warp_version, repeat=repeat,
        warmup=warmup, timings={"host_ms": timing_summary(run.host_ms), "device_ms": timing_summary(run.device_ms)},
        outputs={n: with_warp_shape(run.stats[n], prep.signature.get(n)) for n in outputs},
        unset_inputs=unset_inputs(prep, given.inputs), notices=unset_input_notices(prep, given.inputs),
        warnings=warnings,
        kernels=kernel_typing.to_json() if kernel_typing is not None else None)
    if given.golden is not None:
        from ...checks.compare import compare_binding  # noqa: PLC0415

        per = {n: compare_binding(results[n], w, rtol, atol, equal_nan) for n, w in given.golden.items()}
        total = warmup + repeat
        report.check = {"golden": str(golden), "rtol": rtol, "atol": atol, "equal_nan": equal_nan,
                        "ok": all(r["ok"] for r in per.values()), "bindings": per,
                        "not_compared": [n for n in outputs if n not in given.golden],
                        "compared": f"values after the last of {total} replay{'s' if total != 1 else ''} "
                                    f"({warmup} warmup + {repeat} timed; inputs set once before the first, "
                                    "each replay starting from the state the previous one left)"}
    if output is not None:
        _write_npz(output, results)
        report.output = str(output)
    for name, path in npy_outputs.items():
        _write_npy(path, results[name])
    report.npy_outputs = {n: str(p) for n, p in npy_outputs.items()} or None
    return report


__all__ = ["replay_file", "ReplayReport", "unset_inputs", "unset_input_notices", "check_memory"]
