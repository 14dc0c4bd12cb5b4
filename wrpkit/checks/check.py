"""``wrp check``: will this capture load and replay here, and if not, why?

:func:`preflight` runs every check that can be made before Warp touches the
file and returns a list of :class:`Finding`; each failed finding says how to
fix it.  It covers the format and Warp version against the installed Warp,
the device family, the CUDA arch against the device, the CPU objects' target
against this host, module presence and hashes, the kernel symbols each module
must define, wrpkit's structural validation, and lints for captures that
save but cannot replay elsewhere.
"""

from __future__ import annotations

import hashlib
import platform
import re
from typing import Optional

from ..records import record
from .. import model as m
from ..errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_USAGE, WrpError
from ..formats.container import PRESENT, Capture
from .elf import check_kernel_symbols, read_object
from ..environment import installed_warp_version, parse_device
from ..formats.wrp1_layout import CURRENT_FORMAT, LAYOUTS, describe_format
from ..formats.launch_arrays import ARRAY_BYTES, INDEXED_ARRAY_BYTES, INDICES_OFFSET
from .module_files import kernel_symbols
from .validate import validate_program

OK, FAIL, WARN = "ok", "fail", "warn"


@record(frozen=True)
class Finding:
    """One preflight result.

    Attributes:
        check: Short name of the check (``warp-version``, ``device``, ...).
        status: ``"ok"``, ``"fail"`` (the file will not load or replay here)
            or ``"warn"`` (it may, but something is suspicious).
        message: What was found.
        fix: What to do about a failure or warning, or ``""``.
        exit_code: For a failure whose exit status is not its check's usual
            one (see :func:`exit_code`), that status; else ``None``.
    """

    check: str
    status: str
    message: str
    fix: str = ""
    exit_code: Optional[int] = None


#: What to change when a kernel argument holds a live process pointer: the one hint that
#: ``wrp check``, every loading route (``wrpkit.run.load.prepare.refuse_raw_pointers``) and
#: ``wrpkit.capture``'s save give (``wrp-replay`` says the same in native/src/program.cpp).
RAW_POINTER_HINT = ("A wp.Mesh id: declare that kernel argument `wp.handle` instead of `wp.uint64` and recapture "
                    "(Warp rebuilds meshes at load). A HashGrid, Bvh or Volume cannot be saved by Warp 1.19: replay "
                    "the graph in the process that captured it, or pass --allow-raw-pointers / "
                    "allow_raw_pointers=True to run it anyway (contained: a crash ends with exit code 4).")


def _annotation_digests(prog: m.Program) -> dict:
    """``{binary_filename: ModuleDigest}`` recorded by wrpkit, or {} (bad annotations are validate's job)."""
    if not prog.annotations:
        return {}
    from ..formats.annotations import read_annotations  # noqa: PLC0415
    from ..errors import WrpError  # noqa: PLC0415

    try:
        ann = read_annotations(prog)
    except WrpError:
        return {}
    return ann.digest_map() if ann is not None else {}


def _descriptor_bytes(rels) -> set:
    """Offsets (8-byte steps) inside array descriptors and relocated slots of one argument.

    An ``array_t`` is recognised by relocated slots at +0 (data) and +8
    (grad) and spans ``ARRAY_BYTES`` (56); an ``indexedarray_t`` adds four
    index-pointer slots from ``INDICES_OFFSET`` (+56) and its own shape,
    ``INDEXED_ARRAY_BYTES`` (104) in all (wrp1_layout.py declares both).  Their
    shape and stride words are not pointers.
    """
    slots = {r.value_byte_offset for r in rels}
    covered = set(slots)
    for o in slots:
        if o + 8 in slots:
            span = INDEXED_ARRAY_BYTES if o + INDICES_OFFSET in slots else ARRAY_BYTES
            covered.update(range(o, o + span, 8))
    return covered


def unrecorded_call_message(call: str, where: str) -> tuple:
    """``(message, fix)`` for a structure call a CPU capture ran without recording (``Mesh.refit()``):
    the words ``wrpkit.capture``'s warning and ``wrp check``'s finding share."""
    at = f" at {where}" if where else ""
    return (f"{call}{at} ran during this CPU capture, but Warp does not record it: a replay runs without it, "
            "so what its kernels read from that structure differs from the live step",
            "Call it outside the captured step (before each wp.capture_launch), or keep the structure fixed "
            "during the step; a replay in another process sees the structure as it was built at load")


def unrecorded_call_findings(prog: m.Program) -> list:
    """``lint-unrecorded`` warnings: each structure call the capture's annotations say ran unrecorded
    (``wrpkit.capture`` logs them), or, for a CPU capture without annotations that uses meshes, that
    such a call would not be recorded either."""
    from ..errors import WrpError  # noqa: PLC0415
    from ..formats.annotations import read_annotations  # noqa: PLC0415
    from .sources import Sources, where_text  # noqa: PLC0415

    try:
        ann = read_annotations(prog)
    except WrpError:
        ann = None
    out = []
    for u in Sources(ann).unrecorded:
        text, fix = unrecorded_call_message(u["call"], where_text(u) if u.get("file") else "")
        out.append(Finding("lint-unrecorded", WARN, text, fix))
    if ann is None and prog.device_type == m.DeviceType.CPU and prog.meshes:
        out.append(Finding("lint-unrecorded", WARN,
                           f"this CPU capture uses {len(prog.meshes)} wp.Mesh: a Mesh.refit() or Mesh.points "
                           "assignment inside the captured step is not recorded by Warp, and a stock capture cannot "
                           "say whether one ran",
                           "Capture with wrpkit.capture, which names each such call, or keep the meshes fixed "
                           "during the step."))
    return out


def lint_program(prog: m.Program) -> list:
    """Findings for captures that save but cannot replay correctly elsewhere.

    See :func:`lint_launches`; this lints every kernel launch of ``prog``,
    nested bodies included.
    """
    from .effects import kernel_signatures  # noqa: PLC0415

    return lint_launches((op for _, op in m.walk_ops(prog.ops) if isinstance(op, m.KernelLaunch)),
                         kernel_signatures(prog))


# Where a live process pointer lies.  The heap of a PIE interpreter (most
# builds, pyenv's) is near 2^46 and its mmap areas just below 2^47: 8-aligned
# values in [2^44, 2^47) are pointers wherever they sit, since pairs of small
# int32 values stay below 2^44 and floats of normal magnitude pack above 2^47.
# A non-PIE interpreter (Debian's /usr/bin/python3) grows its brk heap up from
# a few MiB, so a HashGrid made there has an id below 2^32, among the bit
# patterns of floats padded with zeros.  Such a value is taken for a pointer
# only when it fills a whole 8-byte scalar argument (a uint64 id), is
# 16-aligned, as glibc's malloc returns, and is not round: sizes and strides
# such as 2^24 or 3 * 2^24 are a small odd number (below 256) times a power of
# two, which a heap address almost never is.  (Not "a multiple of 4096": the
# brk heap starts on a random page, but where an object lies within its page
# is the same in every run of the same program, so a grid allocated on a page
# boundary was missed every time.)  The C++ twin is in native/src/wrp1_ops.cpp.
HIGH_POINTERS = (1 << 44, 1 << 47)
LOW_POINTERS = (1 << 24, 1 << 44)
ROUND_ODD_PART = 256  # m * 2^k with an odd m below this is a round number, not an address


def _looks_like_a_process_pointer(v: int, whole_u64_argument: bool) -> bool:
    """True for a value that is most likely an address in a 64-bit Linux process."""
    if v % 8 == 0 and HIGH_POINTERS[0] <= v < HIGH_POINTERS[1]:
        return True
    return (whole_u64_argument and v % 16 == 0 and LOW_POINTERS[0] <= v < LOW_POINTERS[1]
            and v >> ((v & -v).bit_length() - 1) >= ROUND_ODD_PART)


def lint_launches(launches, signatures=None) -> list:
    """Lint findings for kernel launches (:class:`wrpkit.model.KernelLaunch`).

    Arguments are named as ``wrp inspect --ops`` names them: the 0-based index, and the name
    where ``signatures`` (``{(module_hash, kernel_key): KernelSignature}``) gives one.

    * A 64-bit kernel argument (or struct field) that holds a live
      process pointer without a relocation: HashGrid, Bvh or Volume ids
      passed as ``uint64``.  Stock Warp saves them; the replay in a new
      process dereferences a stale pointer.
    * Overloads of one generic kernel launched in one graph: Warp records one
      kernel per (module, key), so replay runs the first overload's code for
      all of them.
    """
    out = []
    layouts: dict = {}
    flagged = set()
    for op in launches:
        key = (op.module_hash, op.kernel_key)
        layout = tuple((p.value_size, p.value_align) for p in op.params)
        layouts.setdefault(key, set()).add(layout)
        sig = (signatures or {}).get(key)
        args = sig.arguments if sig is not None else ()
        for j, (p, rels) in enumerate(op.param_relocations()):
            covered = _descriptor_bytes(rels)
            blob = bytes(op.value_data[p.value_offset:p.value_offset + p.value_size])
            for off in range(0, len(blob) - 7, 8):
                if off in covered:
                    continue
                v = int.from_bytes(blob[off:off + 8], "little")
                whole = p.value_size == 8 and off == 0
                if _looks_like_a_process_pointer(v, whole) and (key, j, off) not in flagged:
                    flagged.add((key, j, off))
                    out.append(Finding(
                        "lint-pointer", FAIL,
                        f"kernel {op.kernel_key!r} {_argument_words(args, p.param_index)} holds {v:#x} at byte {off} "
                        "with no relocation: "
                        "it looks like a live process pointer (a HashGrid, Bvh or Volume id passed as uint64?)",
                        RAW_POINTER_HINT))
    for (mh, kk), seen in layouts.items():
        if len(seen) > 1:
            out.append(Finding(
                "lint-overloads", WARN,
                f"kernel {kk!r} is launched with {len(seen)} different argument layouts: overloads of one generic "
                "kernel share one kernel record, so the replay runs one overload's code for all of them",
                "Give each overload its own kernel key (wp.kernel(fn, key=...)) or its own module before capturing."))
    return out


def _argument_words(args, param_index: int) -> str:
    """``argument 1`` (0-based, as ``wrp inspect --ops`` numbers it), with ``(name)`` where it is known."""
    from .effects import argument_name  # noqa: PLC0415

    i = param_index - 1
    name = argument_name(args, param_index)
    return f"argument {i}" + (f" ({name})" if name != f"arg{i}" else "")


#: The exit code of each check's failure, the same as the failure's code in
#: ``wrp replay`` and ``wrp-replay`` (see :data:`wrpkit.errors.EXIT_CODES`).
#: Checks not named here exit with EXIT_FAILED.
_CHECK_EXIT_CODES = {
    "device": EXIT_USAGE,
    "warp-version": EXIT_INVALID, "structure": EXIT_INVALID, "modules": EXIT_INVALID,
    "cpu-object": EXIT_INVALID, "cpu-target": EXIT_INVALID, "kernel-symbols": EXIT_INVALID,
    "cuda-arch": EXIT_INVALID, "lint-pointer": EXIT_INVALID,
}
# The order in which replay meets these failures: the file's own problems
# (it is decoded and validated first), then the device, then Warp's version.
_CHECK_ORDER = ("structure", "modules", "cpu-object", "kernel-symbols", "lint-pointer", "device", "warp-version")


def exit_code(findings: list) -> int:
    """The exit status of ``wrp check`` for ``findings``: 0 when loadable, else the code of the failure replay would hit.

    Args:
        findings: What :func:`preflight` returned.

    Returns:
        ``EXIT_OK``, or the code of the first failure in replay's order
        (``EXIT_INVALID`` for the file's own problems and a Warp version
        mismatch, ``EXIT_USAGE`` for the wrong device, ``EXIT_FAILED`` for an
        older format that ``wrp upgrade`` converts, and else).
    """
    failed = [f for f in findings if f.status == FAIL]
    if not failed:
        return EXIT_OK
    order = {c: i for i, c in enumerate(_CHECK_ORDER)}
    first = min(failed, key=lambda f: order.get(f.check, len(_CHECK_ORDER)))
    return first.exit_code if first.exit_code is not None else _CHECK_EXIT_CODES.get(first.check, EXIT_FAILED)


def raw_pointer_findings(prog: m.Program) -> list:
    """The ``lint-pointer`` findings of ``prog``: kernel arguments holding live process pointers.

    A replay refuses such a file unless told to allow raw pointers
    (:func:`wrpkit.run.load.prepare.prepare`); ``wrp check`` fails on it.
    """
    return [f for f in lint_program(prog) if f.check == "lint-pointer"]


def extent_findings(prog: m.Program) -> list:
    """``lint-extent`` warnings: launches whose threads exceed every array argument (see :mod:`wrpkit.formats.launch_arrays`)."""
    from ..formats.launch_arrays import exceeded_launches, exceeded_message  # noqa: PLC0415

    return [Finding("lint-extent", WARN, f"{w}: {exceeded_message(op, largest)}",
                    "If the kernel does not guard its indices, launch at most as many threads as the arrays "
                    "hold (recapture, or undo the edit to the launch).")
            for w, op, largest in exceeded_launches(prog.ops)]


def preflight(cap: Capture, device: str = "cpu", *, cpu_tags=None, cuda_arch=None) -> list:
    """Check whether a capture will load and replay on ``device`` in this environment.

    What the installed Warp itself says about the host is asked by the caller
    (``checks/`` never imports Warp; ``wrp check`` passes
    :func:`wrpkit.run.warp_bridge.start.host_cpu_tags` and ``cuda_device_arch``), and only when needed.

    Args:
        cap: An opened capture.
        device: ``"cpu"`` or ``"cuda:N"``.
        cpu_tags: Called with no argument for the ``.cpu<hash>`` tags this host's Warp gives CPU
            objects (None: unknown).  Without it the CPU-target check is skipped.
        cuda_arch: Called with a CUDA ordinal for that device's compute capability (None: no such
            device).  Without it the CUDA-arch check is reported as not made (a warning).

    Returns:
        A list of :class:`Finding`; the file is loadable when none has status ``fail``.

    Raises:
        WrpDeviceError: ``device`` is not ``cpu`` or ``cuda:N``.
    """
    prog = cap.program
    kind, ordinal = parse_device(device)
    out = []

    installed = installed_warp_version()
    if prog.format_version < CURRENT_FORMAT:
        layout = LAYOUTS[prog.format_version]
        out.append(Finding(
            "warp-version", FAIL,
            f"written by an older Warp: {describe_format(prog.format_version)}, loaded by Warp {layout.loaded_by} "
            f"only; the installed Warp ({installed or 'not installed'}) loads only format {CURRENT_FORMAT} from "
            "its own version",
            "Convert it with `wrp upgrade "
            + (f"{cap.path} NEW.wrp --kernels KERNELS.py` (format 3 kernels are rebuilt from their Python source)."
               if layout.legacy_args else f"{cap.path} NEW.wrp`, which keeps its kernel objects."),
            # Not loadable as it is, but one command away from it: check answers 1, as
            # for any other failure a command fixes.  A format-18 file of another Warp
            # version cannot be upgraded (it needs a recapture) and exits 3 everywhere.
            exit_code=EXIT_FAILED))
    elif installed is None:
        out.append(Finding("warp-version", FAIL, "warp-lang is not installed",
                           f"pip install warp-lang=={prog.warp_version}"))
    elif installed != prog.warp_version:
        out.append(Finding("warp-version", FAIL,
                           f"captured with Warp {prog.warp_version}, installed Warp is {installed}; Warp only loads "
                           "captures from its own version",
                           f"Recapture the graph with Warp {installed}, or install warp-lang=={prog.warp_version}."))
    else:
        out.append(Finding("warp-version", OK, f"format {prog.format_version}, Warp {installed}"))

    if prog.device != kind:
        out.append(Finding("device", FAIL, f"captured for {prog.device.upper()}, asked to run on {device}",
                           f"Run it with --device {'cpu' if prog.device == 'cpu' else 'cuda:0'}, or recapture "
                           f"on {device}."))
    else:
        out.append(Finding("device", OK, f"{prog.device.upper()} capture, {device} requested"))

    if kind == "cuda" and prog.device == "cuda":
        out.extend(_cuda_arch_findings(prog, ordinal, cuda_arch))

    out.extend(_module_findings(cap, kind, cpu_tags))

    problems = [p for p in validate_program(prog) if p.severity == "error"]
    if problems:
        for p in problems[:20]:
            out.append(Finding("structure", FAIL, str(p), "The file is malformed or was altered; recapture it."))
    else:
        out.append(Finding("structure", OK, "every reference and byte range checks out"))
    out.extend(lint_program(prog))
    out.extend(unrecorded_call_findings(prog))
    out.extend(extent_findings(prog))
    out.extend(memory_findings(prog, kind))
    return out


def memory_findings(prog: m.Program, kind: str) -> list:
    """``memory`` findings: the declared memory against the host's available memory (CPU captures;
    a CUDA device's free memory is checked when the replay loads), and ``lint-memory`` warnings for
    regions far larger than any op reaches."""
    from .memory import (UNREACHED_FIX, UNREACHED_REFUSE_BYTES, check_budget, declared_memory,  # noqa: PLC0415
                         format_size, host_available, unreached_regions)

    out = []
    need = declared_memory(prog)
    if kind == "cpu":
        try:
            check_budget(prog, "cpu", host_available())
            out.append(Finding("memory", OK, f"declares {need.describe()}, which fits the host's available memory"))
        except WrpError as e:
            out.append(Finding("memory", FAIL, e.message, e.hint))
    for u in unreached_regions(prog):
        out.append(Finding("lint-memory", WARN, u.message(),
                           f"wrp replay refuses a file with over {format_size(UNREACHED_REFUSE_BYTES)} unreached. "
                           + UNREACHED_FIX))
    return out


def _cuda_arch_findings(prog: m.Program, ordinal: int, cuda_arch=None) -> list:
    if cuda_arch is None:
        return [Finding("cuda-arch", WARN, f"the CUDA arch of cuda:{ordinal} was not checked (no Warp was asked)",
                        "Run `wrp check FILE --device cuda:N`, which asks the installed Warp.")]
    arch = cuda_arch(ordinal)
    if arch is None:
        return [Finding("cuda-arch", FAIL, f"no CUDA device cuda:{ordinal} is available here",
                        "Run on a machine with a CUDA GPU, or recapture on CPU.")]
    out = []
    for mod in prog.modules:
        name = mod.binary_filename
        if name.endswith(".cubin"):
            specific = ".sm%da." % mod.target_arch in name or ".sm%df." % mod.target_arch in name
            ok = arch == mod.target_arch if specific else (arch // 10 == mod.target_arch // 10
                                                            and arch >= mod.target_arch)
            how = "CUBIN"
        else:
            ok = arch >= mod.target_arch
            how = "PTX (JIT-compiled by the driver)"
        if ok:
            out.append(Finding("cuda-arch", OK, f"{name}: {how} for sm_{mod.target_arch} runs on sm_{arch}"))
        elif mod.source_filename and mod.fallback_reason == m.CudaFallbackReason.AVAILABLE:
            out.append(Finding("cuda-arch", WARN, f"{name}: {how} for sm_{mod.target_arch} cannot run on sm_{arch}; "
                                                  "Warp will recompile the packaged source", ""))
        else:
            out.append(Finding("cuda-arch", FAIL, f"{name}: {how} for sm_{mod.target_arch} cannot run on sm_{arch}",
                               f"Recapture on an sm_{arch} device, or save with source_fallback=True."))
    return out


def _module_findings(cap: Capture, kind: str, cpu_tags=None) -> list:
    prog = cap.program
    out = []
    digests = _annotation_digests(prog)
    host_tags = cpu_tags() if cpu_tags is not None and prog.device == "cpu" and kind == "cpu" else None
    host_machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    symbols = kernel_symbols(prog)
    required = set(prog.required_module_files())
    for mod in prog.modules:
        name = mod.binary_filename
        state = cap.module_state(name)
        if state != PRESENT:
            if name in required:
                _, message, hint = cap.module_problem(name)
                out.append(Finding("modules", FAIL, message, hint))
            else:
                out.append(Finding("modules", WARN, f"module file {name!r} is {state}; no kernel of the graph "
                                   "uses it, so the file still loads", "Nothing to do, or copy it for completeness."))
            continue
        data = cap.module_bytes(name)
        recorded = digests.get(name)
        if mod.binary_digest:
            want, ok = True, hashlib.sha256(data).hexdigest() == mod.binary_digest
        elif recorded is not None:
            want, ok = True, recorded.matches(data)
        else:
            want, ok = False, True
        if not ok:
            out.append(Finding("modules", FAIL, f"module file {name!r} does not match its recorded SHA-256",
                               "The module was replaced or corrupted; restore the original or recapture."))
            continue
        out.append(Finding("modules", OK, f"{name}: present" + (", hash matches" if want else
                                                                 " (no hash recorded)")))
        if prog.device == "cpu":
            try:
                info = read_object(data, name)
            except Exception as e:  # noqa: BLE001  (WrpModuleError with a message)
                out.append(Finding("cpu-object", FAIL, str(e), "Recapture the graph."))
                continue
            if info.machine != host_machine:
                out.append(Finding("cpu-target", FAIL, f"{name} is {info.machine} code; this host is {host_machine}",
                                   f"Recapture on a {host_machine} machine."))
            tag = re.search(r"\.cpu([0-9a-f]{8})\.o$", name)
            if tag and host_tags is not None and tag.group(1) not in host_tags:
                out.append(Finding("cpu-target", WARN,
                                   f"{name} was built for another CPU target (LLVM version, triple or ISA features "
                                   "differ from this host's)",
                                   "If the replay crashes with an illegal instruction, recapture on this host."))
            for msg in check_kernel_symbols(info, symbols.get(mod.module_hash, []), name):
                out.append(Finding("kernel-symbols", FAIL, msg, "The file was altered; recapture it."))
            if not check_kernel_symbols(info, symbols.get(mod.module_hash, []), name):
                out.append(Finding("kernel-symbols", OK, f"{name} defines every kernel the graph names"))
            out.extend(overload_findings(prog, mod, info))
    return out


def overload_findings(prog: m.Program, mod: m.Module, info) -> list:
    """Warn when a launched kernel has several compiled overloads in its module.

    The file records one kernel per (module, key), so every launch of an
    overloaded generic kernel replays the recorded overload's code.
    """
    launches = prog.launch_counts()
    out = []
    for k in prog.kernels:
        if k.module_hash != mod.module_hash or launches.get((k.module_hash, k.kernel_key), 0) < 2:
            continue
        pat = re.compile(re.escape(k.kernel_key) + r"_[0-9a-f]{8}_cpu_forward")
        n = sum(1 for sym in info.defined if pat.fullmatch(sym))
        if n > 1:
            out.append(Finding(
                "lint-overloads", WARN,
                f"kernel {k.kernel_key!r} has {n} compiled overloads in {mod.binary_filename} but the file records "
                "one: if the graph launches several overloads, the replay runs one overload's code for all",
                "Give each overload its own kernel key before capturing (e.g. wp.kernel(fn, key=...))."))
    return out
