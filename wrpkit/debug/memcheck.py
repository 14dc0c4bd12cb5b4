"""``wrp memcheck``: replay a capture so that an access outside any array's memory stops it, and name it.

Warp without debug mode writes past an array's end silently, and a saved
capture carries compiled kernels, not their source, so the check has to work
on the machine code as captured.  The mechanism (``docs/memcheck.md`` says why
it was chosen): the capture is stepped one op at a time
(:mod:`wrpkit.debug.stepper`) in a child process into which
``libwrp_memguard`` (``native/memguard/memguard.cpp``) is preloaded.  While the
child loads the capture, that allocator gives every region Warp allocates its
own pages, with an inaccessible zone right after its last byte (the overrun
pass) or right before its first (the underrun pass).  The first read or write
outside a region faults at once; the allocator reports the region, the byte
offset and whether it was a read or a write, and the child's op slot
(:mod:`wrpkit.debug.isolation`) says which op ran.  Here the offset becomes the
argument (0-based as ``wrp inspect --ops`` numbers them, with its name), the
element index, the array's shape, and where known the kernel's source lines
that access that argument.

Copies and fills are bounds-checked without running them: validation refuses
any whose byte range leaves its regions (``schema/VALIDATION-RULES.md``).

Nothing here prints.
"""

from __future__ import annotations

import os
import re
import time
from typing import Mapping, Optional

from ..records import field, record
from .. import model as m
from ..errors import WrpError, WrpRuntimeError, WrpUsageError

#: The passes, in order: where each region's inaccessible zone is.
PASSES = ("overrun", "underrun")
#: Bytes of inaccessible memory on each side of a region.
GUARD_BYTES = 4 << 20
#: The line the allocator writes when a guard zone is touched (memguard.cpp ``on_segv``).
_FAULT = re.compile(rb"WRPKIT-MEMGUARD fault region=(-?\d+) offset=(-?\d+) size=(\d+) access=(\w+) pc=(0x[0-9a-f]+)")

#: What a pass cannot see, said with every answer.
LIMITS = (
    "an index past one dimension that stays in the array (a[i, n] of an (m, n) array, i < m-1, is row i+1)",
    f"an access more than {GUARD_BYTES >> 20} MiB outside its region, which may land in other memory",
    "memory Warp builds at load for meshes, hash grids and BVHs (not regions of the capture)",
)


@record
class MemcheckResult:
    """What ``wrp memcheck`` found.

    Attributes:
        file: The capture checked.
        device: Where it ran.
        engine: Which engine loaded it in the child.
        violation: The first out-of-bounds access (None when clean): ``pass``,
            ``access`` (``"read"``/``"write"``), ``step`` (ops run before it, as
            ``wrp trace`` numbers its steps), ``op`` (top-level index),
            ``path``, ``iteration`` (innermost WHILE iteration or None), ``kind``,
            ``kernel``, ``module``, ``region``, ``binding``, ``region_size``,
            ``byte_offset`` (from the region's start; negative before it),
            ``side`` (``"after the end"``/``"before the start"``) and
            ``arguments`` (each launch argument whose array lies in that region:
            ``index`` 0-based, ``name``, ``part``, ``dtype``, ``shape``,
            ``element`` (flat, row-major; negative before the start),
            ``element_index`` (that element per dimension, row-major: the address
            ``a[3, 8]`` of a 4x8 array reaches is reported as ``[4, 0]``), ``lines``:
            the kernel's source lines that access it, where ``--kernels`` gave
            its source), ``kernel_source`` (file and line of its definition,
            where known), ``call_site`` (where the op was launched, where
            recorded) and ``cause`` (``wrp check``'s lint-overloads finding when the
            kernel is a generic one whose overloads share one record, else None).
        passes: The passes that ran, in order.
        ops: Ops run in the last pass.
        regions: Regions guarded.
        unguarded: Regions Warp did not allocate through the guarded allocator (not checked).
        limits: What no pass can see (:data:`LIMITS`).
        kernels: How ``--kernels`` matched, when given.
        seconds: Wall time of the whole check.
    """

    file: str
    device: str
    engine: str
    violation: Optional[dict] = None
    passes: list = field(default_factory=list)
    ops: int = 0
    regions: int = 0
    unguarded: list = field(default_factory=list)
    limits: list = field(default_factory=lambda: list(LIMITS))
    kernels: Optional[dict] = None
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.violation is None

    def to_json(self) -> dict:
        return {"file": self.file, "device": self.device, "engine": self.engine, "clean": self.clean,
                "violation": self.violation, "passes": list(self.passes), "ops": self.ops, "regions": self.regions,
                "unguarded": list(self.unguarded), "limits": list(self.limits), "kernels": self.kernels,
                "copies_and_fills": "bounds-checked by validation before anything ran",
                "seconds": round(self.seconds, 6)}


def memcheck(source, *, device=None, engine: str = "python", inputs: Optional[Mapping] = None,
             modules: Optional[Mapping] = None, timeout: Optional[float] = None, kernels=(),
             kernel_output=None) -> MemcheckResult:
    """Replay a capture with every region between inaccessible pages; name the first access outside one.

    Args:
        source: A ``.wrp`` or ``.wrpk`` path (or its bytes, with ``modules``).
        device: ``"cpu"`` (the default, and the only device this check runs on).
        engine: ``"python"`` or ``"native"``: which engine loads the capture in the child.
        inputs: ``{binding name: array}`` set before the first op.
        modules: ``{filename: bytes}`` of module files (for bytes input).
        timeout: Seconds of wall time for the whole check (both passes).
        kernels: ``.py`` files defining the capture's kernels: types a stock
            capture's arrays (element indices instead of bytes) and gives the
            source lines of the kernel that access the argument.
        kernel_output: Where the kernels' own output (``wp.printf``) of the first pass goes (a
            stream, :func:`wrpkit.debug.isolation.run_in_child`); None: not shown.

    Returns:
        A :class:`MemcheckResult`; ``violation`` is None when no pass found one.

    Raises:
        WrpFormatError, WrpValidationError, WrpModuleError: Invalid capture.
        WrpBindingError: Bad inputs.
        WrpUsageError: A CUDA device (the guard pages are host memory).
        WrpRuntimeError: The guard allocator is not built, or could not guard anything.
        WrpCrashError: The replay crashed for another reason than a guarded access.
        WrpTimeoutError: ``timeout`` ran out.
        WrpKernelsError: (``kernels``) A file fails to import, or no kernel matches.
    """
    from ..run.replay.native_lib import find_memguard  # noqa: PLC0415
    from ..run.load.prepare import check_runnable  # noqa: PLC0415
    from ..run.capture.source_types import type_capture  # noqa: PLC0415
    from ..run.contain.worker import verify_deferred  # noqa: PLC0415
    from .common import open_program  # noqa: PLC0415
    from .isolation import run_in_child  # noqa: PLC0415

    t0 = time.perf_counter()
    opened = open_program(source, modules)
    typing = type_capture(opened, list(kernels or ()))
    is_cuda_file = opened.model.device_type != m.DeviceType.CPU
    device = ("cuda:0" if is_cuda_file else "cpu") if device is None else str(device)
    if device.strip().lower() != "cpu" or is_cuda_file:
        return _memcheck_cuda(opened, device, inputs, timeout, t0, typing)
    if engine not in ("python", "native"):
        raise WrpError(f"unknown engine {engine!r}", hint="Use 'python' or 'native'.")
    guard = find_memguard()
    if guard is None:
        raise WrpRuntimeError("wrp memcheck needs libwrp_memguard, which this install does not have",
                              hint="Reinstall wrpkit from source (`pip install .`), which builds it beside "
                                   "libwrp_replay.")
    if engine == "python":
        check_runnable(opened.model, device)
    verify_deferred(opened)
    result = MemcheckResult(str(opened.path) if opened.path is not None else "<bytes>", device, engine)
    if typing is not None:
        result.kernels = typing.to_json()
    preload = " ".join(p for p in (str(guard), os.environ.get("LD_PRELOAD", "")) if p)
    for mode, name in enumerate(PASSES):
        result.passes.append(name)
        fault: dict = {}

        def crashed(crash, slot, fault=fault):
            hit = list(_FAULT.finditer(crash.stderr.encode("utf-8", "replace")))
            if not hit:
                return None  # not a guarded access: a crash, reported as one
            fault.update(_fault_fields(hit[-1]), slot=slot, stage=crash.stage)
            return {"fault": True}

        job = {"device": device, "engine": engine, "mode": mode, "guard_bytes": GUARD_BYTES}
        data = run_in_child(opened, "memcheck", job, inputs, timeout=timeout, started=t0,
                            env={"LD_PRELOAD": preload}, crashed=crashed,
                            kernel_output=kernel_output if mode == 0 else None)  # one replay's worth, as trace
        if fault:
            result.violation = describe_violation(opened, fault, name, typing)
            result.ops = max(0, fault["slot"][0] + 1)
            break
        result.ops, result.regions, result.unguarded = data["ops"], data["regions"], data["unguarded"]
    result.seconds = time.perf_counter() - t0
    return result


#: The first error block of NVIDIA's compute-sanitizer (memcheck tool): kind, size, kernel symbol,
#: thread, block and the address line (see its manual, "memcheck_demo Output").
_SANITIZER_ERROR = re.compile(r"=+ Invalid __(?P<space>\w+)__ (?P<access>read|write) of size (?P<size>\d+) bytes?\s*\n"
                              r"=+\s+at (?P<symbol>[^\s(+]+)[^\n]*\n"
                              r"=+\s+by thread \((?P<thread>[\d,]+)\) in block \((?P<block>[\d,]+)\)\s*\n"
                              r"=+\s+(?P<address>Address [^\n]*)")


def sanitizer_violation(text: str, program: m.Program) -> Optional[dict]:
    """The first out-of-bounds access compute-sanitizer reported, in the capture's terms (its kernel
    key from the symbol), or None when its output holds none."""
    hit = _SANITIZER_ERROR.search(text)
    if hit is None:
        return None
    symbol = hit["symbol"]
    kernel = next((("" if symbol == k.forward_name else "backward ", k.kernel_key) for k in program.kernels
                   if symbol in (k.forward_name, k.backward_name)), None)
    return {"pass": "compute-sanitizer", "access": hit["access"], "step": None, "op": None, "path": None,
            "iteration": None, "kind": "KERNEL_LAUNCH",
            "kernel": (kernel[1] + (" (backward)" if kernel[0] else "")) if kernel else symbol,
            "module": None, "region": None, "binding": None, "region_size": None, "byte_offset": None,
            "side": hit["address"], "arguments": [], "kernel_source": None, "call_site": None, "cause": None,
            "thread": [int(v) for v in hit["thread"].split(",")], "block": [int(v) for v in hit["block"].split(",")],
            "memory": hit["space"], "size": int(hit["size"]), "report": hit.group(0)}


def _memcheck_cuda(opened, device: str, inputs, timeout, t0: float, typing) -> MemcheckResult:
    """A CUDA capture: ``wrp-replay`` under NVIDIA's compute-sanitizer (memcheck tool), where it is installed.

    Guard pages are host memory; on a GPU the checker that sees every access is NVIDIA's own.  It
    names the kernel, thread and block, not the op: a capture launching one kernel several times
    needs the op found with ``wrp trace`` (a CPU recapture gets the whole answer here).
    """
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    from ..deadline import Deadline, left  # noqa: PLC0415
    from ..run.replay.engines import native_paths  # noqa: PLC0415

    if opened.model.device_type == m.DeviceType.CPU:
        raise WrpUsageError(f"this capture was recorded for the CPU; {device} was asked for",
                            hint="Leave --device out: wrp memcheck checks a CPU capture on the CPU.")
    if inputs:
        raise WrpUsageError("wrp memcheck of a CUDA capture replays it with its captured data; --inputs are not "
                            "passed to compute-sanitizer", hint="Leave --inputs out, or check a CPU capture.")
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    sanitizer = shutil.which("compute-sanitizer") or shutil.which("compute-sanitizer", path=os.path.join(home, "bin"))
    if sanitizer is None or opened.path is None:
        raise WrpUsageError(
            f"wrp memcheck checks a CUDA capture with NVIDIA's compute-sanitizer, which is not installed here"
            if sanitizer is None else "wrp memcheck of a CUDA capture needs its file on disk",
            hint="Install the CUDA toolkit's compute-sanitizer (or put it on PATH / set CUDA_HOME), or recapture "
                 "the step with device=\"cpu\" and check that: guard pages name the op, argument and element.")
    replayer = native_paths().require_replayer()
    cmd = [sanitizer, "--tool", "memcheck", "--print-limit", "1", "--error-exitcode", "86",
           str(replayer), str(opened.path), "--device", device]
    deadline = Deadline.after(timeout, spent=time.perf_counter() - t0)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=left(deadline))
    except subprocess.TimeoutExpired:
        raise deadline.error() from None
    text = done.stdout + done.stderr
    result = MemcheckResult(str(opened.path), device, "compute-sanitizer")
    result.passes = ["compute-sanitizer"]
    result.limits = ["compute-sanitizer names the kernel, thread and block, not the op (wrp trace finds it)"]
    if typing is not None:
        result.kernels = typing.to_json()
    result.violation = sanitizer_violation(text, opened.model)
    if result.violation is None and done.returncode not in (0, 86):
        raise WrpRuntimeError(f"compute-sanitizer ended with exit code {done.returncode}: "
                              f"{text.strip().splitlines()[-1] if text.strip() else 'no output'}",
                              hint="Run the command yourself: " + " ".join(map(str, cmd)))
    result.seconds = time.perf_counter() - t0
    return result


def _fault_fields(match) -> dict:
    region, offset, size, access, pc = match.groups()
    return {"region": int(region), "offset": int(offset), "size": int(size), "access": access.decode("ascii"),
            "pc": pc.decode("ascii")}


def run_memcheck(opened, *, device: str, engine: str, mode: int, guard_bytes: int, inputs: Optional[Mapping],
                 before=None, stage=None) -> dict:
    """The child's part: arm the preloaded allocator, load, name the regions, step every op.

    A guarded access never returns here: the allocator reports it and the
    process dies of the fault, which the parent reads (:func:`memcheck`).

    Returns:
        ``{"ops": ops run, "regions": regions guarded, "unguarded": [region ids not guarded]}``.

    Raises:
        WrpRuntimeError: The allocator is not preloaded, or guarded nothing.
    """
    import ctypes  # noqa: PLC0415

    from ..run.replay.native_lib import find_memguard  # noqa: PLC0415
    from . import stepper as st  # noqa: PLC0415
    from .trace import apply_inputs, open_machine  # noqa: PLC0415

    if stage is not None:
        stage("loading")
    lib = ctypes.CDLL(str(find_memguard()))
    lib.wrp_memguard_arm.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
    lib.wrp_memguard_label.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
    if lib.wrp_memguard_arm(int(mode), int(guard_bytes)) != 0:
        raise WrpRuntimeError("wrp memcheck could not find Warp's library (warp.so) in its child process",
                              hint="Check that `python -c \"import warp; warp.init()\"` works.")
    try:
        machine = open_machine(opened, engine, device)
    finally:
        lib.wrp_memguard_disarm()
    try:
        apply_inputs(machine, opened, inputs)
        guarded, unguarded = 0, []
        for r in opened.model.regions:
            view = machine.engine.view(f"{st.REGION_BINDING}{r.region_id}")
            if view is not None and lib.wrp_memguard_label(ctypes.c_void_p(view.ctypes.data), r.region_id) == 0:
                guarded += 1
            else:
                unguarded.append(r.region_id)
        if opened.model.regions and not guarded:
            raise WrpRuntimeError("wrp memcheck could not guard any region: its allocator was not preloaded into "
                                  "the replay process",
                                  hint="LD_PRELOAD is ignored for set-user-ID programs and where the dynamic "
                                       "loader is told to; run wrp memcheck as a plain user process.")
        count = [0]

        def visit(op, index, path, iterations):
            count[0] += 1
            return False

        if stage is not None:
            stage("replaying")
        st.walk_program(opened.model.ops, machine, visit, before=before)
        return {"ops": count[0], "regions": guarded, "unguarded": unguarded}
    finally:
        machine.close()


def describe_violation(opened, fault: dict, pass_name: str, typing=None) -> dict:
    """The fault the allocator reported, in the capture's terms: op, kernel, argument, element, source."""
    from ..checks.effects import kernel_signatures, launch_label  # noqa: PLC0415
    from ..checks.sources import Sources  # noqa: PLC0415
    from ..run.contain.crash import op_at_path  # noqa: PLC0415

    prog = opened.model
    sources = Sources.of(prog)  # where each op was issued and each kernel defined: the one lookup
    seq, index, iteration, path = fault["slot"]  # a wrpkit.op_slots.SlotRecord
    ran = fault.get("stage") == "replaying" and seq >= 0
    op = op_at_path(prog.ops, path) if ran else None
    rid, offset, size = fault["region"], fault["offset"], fault["size"]
    bindings = [b.name for b in prog.bindings if b.region_id == rid] if rid >= 0 else []
    out = {"pass": pass_name, "access": fault["access"], "step": seq if ran else None,
           "op": index if ran else None, "path": path if ran else None,
           "iteration": iteration if ran else None,
           "kind": op.op_type.name if op is not None else None, "kernel": None, "module": None,
           "region": rid if rid >= 0 else None, "binding": bindings[0] if bindings else None, "region_size": size,
           "byte_offset": offset, "side": "after the end" if offset >= size else "before the start",
           "arguments": [], "kernel_source": None, "call_site": None, "cause": None}
    if isinstance(op, m.KernelLaunch):
        modules = {mod.module_hash: mod.binary_filename for mod in prog.modules}
        out["kernel"], out["module"] = launch_label(op, prog), modules.get(op.module_hash)
        sig = kernel_signatures(prog).get((op.module_hash, op.kernel_key))
        lines = _kernel_lines(typing, op)
        out["arguments"] = [dict(a, lines=lines.get(a["name"], {}).get(fault["access"] if fault["access"] in
                                                                        ("read", "write") else "write", []))
                            for a in arrays_in_region(op, sig, rid, offset)]
        out["kernel_source"] = sources.kernel(op.module_hash, op.kernel_key)
        out["cause"] = _overload_cause(opened, op)
    out["call_site"] = sources.op(path) if ran else None
    return out


def _overload_cause(opened, op: m.KernelLaunch) -> Optional[str]:
    """``wrp check``'s lint-overloads finding for the launch's kernel, when it has one: a generic
    kernel whose overloads share one record replays one overload's code for every launch, which
    reads and writes another dtype's extent (Warp's ``_array_cast_kernel`` in its fem examples)."""
    from ..checks.check import overload_findings  # noqa: PLC0415
    from ..checks.elf import read_object  # noqa: PLC0415

    mod = next((x for x in opened.model.modules if x.module_hash == op.module_hash), None)
    data = opened.modules.get(mod.binary_filename) if mod is not None else None
    if data is None:
        return None
    try:
        findings = overload_findings(opened.model, mod, read_object(data, mod.binary_filename))
    except Exception:  # noqa: BLE001 -- a CUDA image or an odd object: no cause to add
        return None
    hit = next((f for f in findings if f"kernel {op.kernel_key!r} " in f.message), None)
    return f"{hit.message} (wrp check: lint-overloads). {hit.fix}" if hit is not None else None


def _kernel_lines(typing, op) -> dict:
    """``{argument name: {"read": [lines], "write": [lines]}}`` of the user's kernel (``--kernels``), or {}:
    Warp's own kernel object, as ``--kernels`` matched it, is asked (:func:`wrpkit.run.capture.access.argument_lines`)."""
    if typing is None:
        return {}
    match = next((k for k in typing.matches if k.kernel_key == op.kernel_key and k.module_hash == op.module_hash
                  and k.kernel is not None), None)
    if match is None:
        return {}
    from ..run.capture.access import argument_lines  # noqa: PLC0415

    return argument_lines(match.kernel)  # never raises (a kernel it cannot analyse gives empty lists)


def arrays_in_region(op: m.KernelLaunch, sig, region_id: int, offset: int) -> list:
    """Each array a launch passes that lies in ``region_id``, with the element ``offset`` falls on.

    Args:
        op: The launch.
        sig: Its kernel's signature (names, dtypes), or None.
        region_id: The region the access fell outside of.
        offset: The byte offset of the access from the region's start.

    Returns:
        ``[{"index": 0-based argument, "name", "part", "dtype", "shape", "element", "element_index"}, ...]``.
    """
    from ..checks.effects import argument_name, launch_argument  # noqa: PLC0415
    from ..formats.launch_arrays import DescriptorLayoutError, argument_arrays, descriptor_view  # noqa: PLC0415

    args = sig.arguments if sig is not None else ()
    blob = op.value_data
    out = []
    for p, rels in op.param_relocations():
        if not rels or p.value_offset < 0 or p.value_offset + p.value_size > len(blob):
            continue
        a = launch_argument(args, p)
        name = argument_name(args, p.param_index)
        try:
            descriptors = list(argument_arrays(p, rels))
        except DescriptorLayoutError:
            continue
        for d in descriptors:
            ndim, shape, strides = descriptor_view(blob, p.value_offset + d.offset)
            parts = [("data", d.relocations[0]), ("grad", d.relocations[1])]
            parts += [("index", r) for r in d.relocations[2:6]]
            for part, r in parts:
                if r.kind != m.RelocKind.DATA_PTR or r.region_id != region_id:
                    continue
                entry = {"index": p.param_index - 1, "name": name, "part": part, "dtype": None,
                         "shape": list(shape[:ndim]) if part != "index" else None, "element": None,
                         "element_index": None}
                if a is not None and a.dtype is not None and part != "index":
                    entry["dtype"] = str(a.dtype)
                if part == "index":
                    entry["element"] = (offset - r.region_offset) // 4
                elif 1 <= ndim <= 4:
                    entry.update(_element(offset - r.region_offset, shape[:ndim], strides[:ndim]))
                out.append(entry)
    return out


def _element(pos: int, shape, strides) -> dict:
    """The element a byte position (from the array's first byte) falls on, flat and per dimension."""
    ndim = len(shape)
    itemsize = strides[-1] if strides and strides[-1] > 0 else 0
    contiguous = itemsize > 0 and all(strides[k] == strides[k + 1] * shape[k + 1] for k in range(ndim - 1))
    if not contiguous:
        return {"element": None, "element_index": None}
    flat = pos // itemsize
    idx = []
    rest = flat
    for k in range(ndim - 1, 0, -1):
        rest, r = divmod(rest, shape[k]) if shape[k] > 0 else (rest, 0)
        idx.append(r)
    idx.append(rest)
    return {"element": flat, "element_index": idx[::-1]}
