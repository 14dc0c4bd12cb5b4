"""Validation of a capture's module files: present, safe, matching their
recorded SHA-256, and defining the kernel symbols the graph names
(schema/VALIDATION-RULES.md, "Module pinning").

``wrp validate`` (:func:`wrpkit.checks.validate.validate_capture`), ``wrp check``,
the loader (:func:`wrpkit.run.load.prepare.prepare`), ``wrp convert`` and
``wrp upgrade`` apply these rules from here.
"""

from __future__ import annotations

from .. import model as m
from .problem import Problem


def backward_launched(prog: m.Program) -> set:
    """``{(module_hash, kernel_key)}`` of the kernels some backward launch runs."""
    return {(op.module_hash, op.kernel_key) for _, op in m.walk_ops(prog.ops)
            if isinstance(op, m.KernelLaunch) and not op.is_forward}


def kernel_symbols(prog: m.Program) -> dict:
    """``{module_hash: [symbol, ...]}`` a replay looks up: every forward symbol, and the
    backward symbols of kernels that a backward launch runs."""
    used = backward_launched(prog)
    out: dict = {}
    for k in prog.kernels:
        names = out.setdefault(k.module_hash, [])
        names.append(k.forward_name)
        if (k.module_hash, k.kernel_key) in used:
            names.append(k.backward_name)
    return out


def unused_backward_problems(prog: m.Program, files) -> list:
    """Warnings for backward symbols that no launch uses and that their module does not define."""
    from .elf import read_object  # noqa: PLC0415
    from ..errors import WrpError  # noqa: PLC0415

    used = backward_launched(prog)
    out = []
    infos: dict = {}
    for i, k in enumerate(prog.kernels):
        if not k.backward_name or (k.module_hash, k.kernel_key) in used:
            continue
        mod = next((mo for mo in prog.modules if mo.module_hash == k.module_hash), None)
        if mod is None or files.get(mod.binary_filename) is None or prog.device_type != m.DeviceType.CPU:
            continue
        if mod.binary_filename not in infos:
            try:
                infos[mod.binary_filename] = read_object(files[mod.binary_filename], mod.binary_filename)
            except WrpError:
                infos[mod.binary_filename] = None
        info = infos[mod.binary_filename]
        if info is not None and k.backward_name not in info.defined:
            out.append(Problem(f"kernels[{i}]", f"backward symbol {k.backward_name!r} of kernel {k.kernel_key!r} "
                                                f"is not defined in {mod.binary_filename!r}; no backward launch "
                                                "uses it, so it is never looked up", severity="warning"))
    return out


def check_module_symbols(prog: m.Program, files) -> list:
    """Pin the code of a CPU capture's modules before any of it is loaded.

    Every kernel symbol the graph names must be *defined* in its own module's
    ELF object, and no kernel symbol may name a C library function.

    Args:
        prog: The program.
        files: ``{binary_filename: bytes}`` of the module files.

    Returns:
        A list of :class:`Problem` (empty for CUDA programs: they carry no ELF).
    """
    from .elf import check_kernel_symbols, read_object  # noqa: PLC0415
    from ..errors import WrpError  # noqa: PLC0415

    if prog.device_type != m.DeviceType.CPU:
        return []
    symbols = kernel_symbols(prog)
    out = []
    for i, mod in enumerate(prog.modules):
        data = files.get(mod.binary_filename)
        if data is None:
            continue
        try:
            info = read_object(data, mod.binary_filename)
        except WrpError as e:
            out.append(Problem(f"modules[{i}]", e.message))
            continue
        for msg in check_kernel_symbols(info, symbols.get(mod.module_hash, []), mod.binary_filename):
            out.append(Problem(f"modules[{i}]", msg))
    return out


def validate_modules(capture) -> list:
    """Check that every module file the graph names is present, non-empty, safe,
    and defines the kernel symbols the graph names.

    Args:
        capture: A :class:`wrpkit.formats.container.Capture`.

    Returns:
        A list of :class:`Problem`.
    """
    from ..formats.container import PRESENT, UNSAFE  # noqa: PLC0415

    prog = capture.program
    out = []
    files = {}
    required = set(prog.required_module_files())
    where = capture.modules_dir if capture.modules_dir is not None else "the bundle"
    for i, mod in enumerate(prog.modules):
        names = [mod.binary_filename] + ([mod.source_filename] if mod.source_filename else [])
        for name in names:
            state = capture.module_state(name)
            if state == PRESENT:
                if name == mod.binary_filename:
                    files[name] = capture.module_bytes(name)
            elif name in required or state == UNSAFE:
                _, message, hint = capture.module_problem(name)
                out.append(Problem(f"modules[{i}]", f"{message} (fix: {hint})"))
            else:
                # Warp's loader never reads it (see Program.required_module_files): the file loads without it.
                what = "exported source (Warp's compile fallback)" if name != mod.binary_filename else \
                    "binary of a module no kernel uses"
                out.append(Problem(f"modules[{i}]", f"module file {name!r}, the {what}, is {state} in {where}",
                                   severity="warning"))
    return (out + check_module_digests(prog, files) + check_module_symbols(prog, files)
            + unused_backward_problems(prog, files))


def check_module_digests(prog: m.Program, files, annotations=None) -> list:
    """Module files must match the SHA-256 wrpkit recorded in the annotations, when it recorded one.

    The one statement of this rule: ``wrp validate`` and the loader
    (:func:`wrpkit.run.load.prepare.prepare`) both apply it.

    Args:
        prog: The program.
        files: ``{binary_filename: bytes}`` of the module files there are.
        annotations: ``prog``'s decoded annotations, when the caller has them (read here otherwise).

    Returns:
        A list of :class:`Problem`, one per module file that does not match.
    """
    from ..formats.annotations import read_annotations  # noqa: PLC0415
    from ..errors import WrpError  # noqa: PLC0415

    ann = annotations
    if ann is None:
        try:
            ann = read_annotations(prog)
        except WrpError:
            return []  # reported by validate_program
    if ann is None:
        return []
    digests = ann.digest_map()
    out = []
    for i, mod in enumerate(prog.modules):
        d = digests.get(mod.binary_filename)
        data = files.get(mod.binary_filename)
        if d is not None and data is not None and not d.matches(data):
            out.append(Problem(f"modules[{i}]", f"module file {mod.binary_filename!r} does not match the SHA-256 "
                                                "recorded when the capture was saved"))
    return out
