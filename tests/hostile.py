"""Generate hostile variants of a real capture (used by tests and bench/hostile.py).

Each :class:`Variant` is a ``.wrp`` (with its ``<stem>_modules/``) written
into its own folder: truncated, bit-flipped, lying about lengths and sizes,
with hostile nesting, relocations, array descriptors, launch sizes, kernel
symbol names, module names and module files, or not a regular file at all.
Every tool must either refuse such a file with a clear error or replay a file
that is genuinely valid; none may crash, hang or leave output behind.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from wrpkit import model as m
from wrpkit.formats.container import open_capture
from wrpkit.module_dirs import modules_dir_for
from wrpkit.formats.wrp1 import encode_wrp1


@dataclass
class Variant:
    """One hostile file.

    Attributes:
        name: Unique, file-system-safe name.
        category: What kind of damage (``truncate``, ``bitflip``, ...).
        path: The ``.wrp`` (or FIFO / directory) to feed to the tools.
        must_refuse: True when no tool may accept it (structural damage);
            False when accepting and replaying it is also fine.
    """

    name: str
    category: str
    path: Path
    must_refuse: bool = True


class _Maker:
    def __init__(self, src: Path, out: Path):
        self.src, self.out = Path(src), Path(out)
        self.data = self.src.read_bytes()
        with open_capture(self.src) as cap:
            self.modules = {k: bytes(v) for k, v in cap.module_files().items()}
        self.variants: list = []

    def fresh(self):
        """A decoded copy of the source program (safe to edit)."""
        from wrpkit.formats.wrp1 import decode_wrp1

        return decode_wrp1(bytes(self.data))

    def emit(self, name, category, data: bytes, modules=None, must_refuse=True) -> Variant:
        d = self.out / name
        d.mkdir(parents=True, exist_ok=True)
        path = d / "g.wrp"
        path.write_bytes(data)
        mods = self.modules if modules is None else modules
        if mods:
            md = modules_dir_for(path)
            md.mkdir(exist_ok=True)
            for fname, content in mods.items():
                (md / fname).write_bytes(content)
        v = Variant(name, category, path, must_refuse)
        self.variants.append(v)
        return v

    def emit_prog(self, name, category, edit, must_refuse=True):
        prog = self.fresh()
        edit(prog)
        return self.emit(name, category, encode_wrp1(prog), must_refuse=must_refuse)


def _sections(data):
    n = struct.unpack_from("<I", data, 12)[0]
    return [struct.unpack_from("<IIQQQ", data, 64 + 32 * i) for i in range(min(n, 8))]


def _first_launch(prog):
    for _, op in m.walk_ops(prog.ops):
        if isinstance(op, m.KernelLaunch) and op.relocations:
            return op
    raise LookupError("no kernel launch with relocations")


def generate(src, out, *, dense: bool = False) -> list:
    """Write hostile variants of capture ``src`` into folder ``out``.

    Args:
        src: A real ``.wrp`` (with modules) that has at least one kernel launch.
        out: Folder for the variants (created).
        dense: Flip bits at every byte of the records instead of a sample.

    Returns:
        The list of :class:`Variant`.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mk = _Maker(src, out)
    data = mk.data
    size = len(data)
    secs = _sections(data)

    # -- truncation at every section boundary and at many offsets -------------
    cuts = {0, 1, 4, 8, 63, 64, 65, 159, 160, 161, size - 1}
    for _, _, off, n, _ in secs:
        cuts |= {off - 1, off, off + 1, off + 4, off + n - 1}
    cuts |= set(range(0, size, max(1, size // 40)))
    for c in sorted(x for x in cuts if 0 <= x < size):
        mk.emit(f"truncate_{c}", "truncate", data[:c])

    # -- bit flips and boundary values in header, section table and records --
    flips = list(range(0, 160)) if dense else list(range(0, 160, 3))
    meta_off, meta_n = secs[0][2], secs[0][3]
    ops_off = secs[2][2]
    flips += list(range(meta_off, meta_off + min(meta_n, 48 if not dense else meta_n)))
    flips += list(range(ops_off, ops_off + (120 if dense else 88), 1 if dense else 2))
    for pos in sorted(set(p for p in flips if p < size)):
        bad = bytearray(data)
        bad[pos] ^= 0x80
        # Flips inside launch value fields may yield a valid file; replaying it is fine.
        mk.emit(f"bitflip_{pos}", "bitflip", bytes(bad), must_refuse=pos < 160)
    for pos, fmt, val in ((4, "<I", 0xFFFFFFFF), (12, "<I", 0), (12, "<I", 64), (12, "<I", 0xFFFFFFFF),
                          (16, "<Q", 2**63), (24, "<B", 0xFF), (28, "<I", 0x80000000), (8, "<I", 1)):
        bad = bytearray(data)
        struct.pack_into(fmt, bad, pos, val)
        mk.emit(f"header_{pos}_{val:x}", "header", bytes(bad))

    # -- huge length fields ----------------------------------------------------
    for i, (_, _, off, n, _) in enumerate(secs[:3]):
        for val in (2**31, 2**63, 2**64 - 1):
            bad = bytearray(data)
            struct.pack_into("<Q", bad, 64 + 32 * i + 16, val)
            struct.pack_into("<Q", bad, 64 + 32 * i + 24, val)
            mk.emit(f"section{i}_size_{val:x}", "huge", bytes(bad))
        bad = bytearray(data)
        struct.pack_into("<Q", bad, 64 + 32 * i + 8, 2**63)
        mk.emit(f"section{i}_offset_huge", "huge", bytes(bad))
    for rel, label in ((4, "version_string_len"), (4 + 4 + 6 + 4, "num_modules"), (4 + 4 + 6 + 8, "num_kernels")):
        for val in (2**31, 2**32 - 1):
            bad = bytearray(data)
            struct.pack_into("<I", bad, meta_off + rel, val)
            mk.emit(f"meta_{label}_{val:x}", "huge", bytes(bad))
    mem_off = secs[1][2]
    for rel, fmt, val, label in ((0, "<I", 2**31, "region_count"), (4 + 8, "<Q", 2**63, "region_size"),
                                 (4 + 8, "<Q", 2**40, "region_size_2p40")):
        bad = bytearray(data)
        struct.pack_into(fmt, bad, mem_off + rel, val)
        mk.emit(f"mem_{label}", "huge", bytes(bad))
    for val in (2**31, 2**32 - 1):
        bad = bytearray(data)
        struct.pack_into("<I", bad, ops_off, val)
        mk.emit(f"op_count_{val:x}", "huge", bytes(bad))

    # -- duplicate and overlapping sections ------------------------------------
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 64 + 32 + 8, secs[0][2])  # MEMORY starts where METADATA does
    mk.emit("overlap_memory_on_metadata", "sections", bytes(bad))
    bad = bytearray(data)
    struct.pack_into("<I", bad, 64 + 32, 1)  # two METADATA entries
    mk.emit("duplicate_metadata", "sections", bytes(bad))
    bad = bytearray(data)
    struct.pack_into("<I", bad, 64 + 64, 7)  # unknown section type
    mk.emit("unknown_section_type", "sections", bytes(bad))
    mk.emit("trailing_garbage", "sections", data + b"\0garbage")

    # -- op total_size lies ---------------------------------------------------
    first_total = struct.unpack_from("<I", data, ops_off + 8)[0]
    for lie in (0, 7, 8, first_total - 1, first_total + 1, first_total * 2, 2**32 - 1):
        bad = bytearray(data)
        struct.pack_into("<I", bad, ops_off + 8, lie)
        mk.emit(f"op_total_size_{lie}", "op-size", bytes(bad))

    # -- hostile nested bodies -------------------------------------------------
    def deep_nesting(prog, depth=200):
        cond = prog.regions[0].region_id
        body = prog.ops
        for _ in range(depth):
            body = [m.If(cond, 0, body, [])]
        prog.ops = body

    mk.emit_prog("nested_200_ifs", "nesting", deep_nesting)

    def while_with_else(prog):
        prog.ops = [m.While(prog.regions[0].region_id, 0, list(prog.ops))] + []

    v = mk.emit_prog("while_base", "nesting", while_with_else, must_refuse=False)
    raw = bytearray(v.path.read_bytes())
    struct.pack_into("<II", raw, ops_off + 4 + 32, 8, 1)  # branch_b_size/op_count on a WHILE
    mk.emit("while_with_else_branch", "nesting", bytes(raw))
    mk.variants.remove(v)
    shutil.rmtree(v.path.parent)

    def if_count_mismatch(prog):
        prog.ops = [m.If(prog.regions[0].region_id, 0, list(prog.ops), [])]

    v = mk.emit_prog("if_base", "nesting", if_count_mismatch, must_refuse=False)
    raw = bytearray(v.path.read_bytes())
    struct.pack_into("<I", raw, ops_off + 4 + 28, 2**31)  # branch_a_op_count lies
    mk.emit("if_branch_count_lie", "nesting", bytes(raw))
    mk.variants.remove(v)
    shutil.rmtree(v.path.parent)

    # -- out-of-range relocations ----------------------------------------------
    def reloc(field, value):
        def edit(prog):
            op = _first_launch(prog)
            r = op.relocations[0]
            op.relocations[0] = r._replace(**{field: value})
        return edit

    mk.emit_prog("reloc_region_999", "reloc", reloc("region_id", 999))
    mk.emit_prog("reloc_offset_past_region", "reloc", reloc("region_offset", 2**40))
    mk.emit_prog("reloc_slot_past_blob", "reloc", reloc("value_byte_offset", 2**20))
    mk.emit_prog("reloc_kind_7", "reloc", reloc("kind", 7))
    mk.emit_prog("reloc_handle_unknown", "reloc", lambda p: reloc("kind", 2)(p) or reloc("region_id", -1)(p)
                 or reloc("region_offset", 0xDEADBEEF)(p))

    # -- array shapes and strides larger than their region ----------------------
    def array_field(offset, fmt, value):
        def edit(prog):
            # The first array descriptor (a DATA_PTR slot followed by a grad slot)
            # of more than one element, so that a huge stride really overruns.
            for _, op in m.walk_ops(prog.ops):
                if not isinstance(op, m.KernelLaunch):
                    continue
                for p, rels in op.param_relocations():
                    slots = {r.value_byte_offset: r for r in rels}
                    for off, r in slots.items():
                        if (r.kind == m.RelocKind.DATA_PTR and off + 8 in slots and off + 56 <= p.value_size
                                and struct.unpack_from("<i", op.value_data, p.value_offset + off + 16)[0] > 1):
                            blob = bytearray(op.value_data)
                            struct.pack_into(fmt, blob, p.value_offset + off + offset, value)
                            op.value_data = bytes(blob)
                            return
            raise LookupError("no array argument")
        return edit

    mk.emit_prog("array_shape_huge", "array", array_field(16, "<i", 2**30))
    mk.emit_prog("array_stride_huge", "array", array_field(32, "<i", 2**30))
    mk.emit_prog("array_shape_negative", "array", array_field(16, "<i", -5))
    mk.emit_prog("array_ndim_9", "array", array_field(48, "<H", 9))

    # -- launch sizes of 2^40 --------------------------------------------------
    def huge_launch(prog):
        op = _first_launch(prog)
        op.size = op.dim = 2**40
        op.shape = (2**31, 2**9, 0, 0)
        op.ndim = 2

    mk.emit_prog("launch_2p40", "launch", huge_launch)

    def launch_key_unknown(prog):
        _first_launch(prog).kernel_key = "not_a_kernel"

    mk.emit_prog("launch_unknown_kernel", "launch", launch_key_unknown)

    # -- kernel symbol names of libc functions ---------------------------------
    for sym in ("free", "printf", "system", "exit"):
        def libc(prog, sym=sym):
            prog.kernels[0].forward_name = sym
        mk.emit_prog(f"kernel_symbol_{sym}", "symbols", libc)

    # -- path-traversal module names --------------------------------------------
    for label, name in (("dotdot", "../../etc/passwd"), ("absolute", "/etc/passwd"), ("subdir", "sub/x.o"),
                        ("backslash", "..\\x.o"), ("colon", "c:x.o"), ("dot", "."), ("empty", "")):
        def traversal(prog, name=name):
            prog.modules[0].binary_filename = name
        mk.emit_prog(f"module_name_{label}", "module-name", traversal)

    # -- module files: missing, empty, corrupted, swapped, symlinked, FIFO ------
    first = next(iter(mk.modules))
    mk.emit("module_missing", "module-file", data, modules={})
    mk.emit("module_empty", "module-file", data, modules={**mk.modules, first: b""})
    mk.emit("module_garbage", "module-file", data, modules={**mk.modules, first: os.urandom(4096)})
    truncated = mk.modules[first][: len(mk.modules[first]) // 2]
    mk.emit("module_truncated", "module-file", data, modules={**mk.modules, first: truncated})
    flipped = bytearray(mk.modules[first])
    for i in range(64, len(flipped), 97):
        flipped[i] ^= 0xFF
    mk.emit("module_corrupted", "module-file", data, modules={**mk.modules, first: bytes(flipped)})
    v = mk.emit("module_symlink", "module-file", data, modules={})
    md = modules_dir_for(v.path)
    md.mkdir(exist_ok=True)
    real = v.path.parent / "real.o"
    real.write_bytes(mk.modules[first])
    os.symlink(real, md / first)
    v = mk.emit("module_fifo", "module-file", data, modules={})
    md = modules_dir_for(v.path)
    md.mkdir(exist_ok=True)
    os.mkfifo(md / first)
    # Accepted: each module is read once, checked, and those bytes are loaded (VALIDATION-RULES.md).
    v = mk.emit("module_hardlink", "module-file", data, modules={}, must_refuse=False)
    md = modules_dir_for(v.path)
    md.mkdir(exist_ok=True)
    os.link(real, md / first)
    mk.emit("module_extra_file_ignored", "module-file", data,
            modules={**mk.modules, "evil.o": os.urandom(512)}, must_refuse=False)

    # -- not a regular file -------------------------------------------------------
    d = out / "wrp_fifo"
    d.mkdir(exist_ok=True)
    os.mkfifo(d / "g.wrp")
    mk.variants.append(Variant("wrp_fifo", "not-a-file", d / "g.wrp"))
    d = out / "wrp_directory"
    (d / "g.wrp").mkdir(parents=True, exist_ok=True)
    mk.variants.append(Variant("wrp_directory", "not-a-file", d / "g.wrp"))
    d = out / "wrp_symlink"
    d.mkdir(exist_ok=True)
    (d / "real.wrp").write_bytes(data)
    os.symlink(d / "real.wrp", d / "g.wrp")
    # A link the user names is followed (its target is the control's bytes; no modules beside either).
    mk.variants.append(Variant("wrp_symlink", "not-a-file", d / "g.wrp"))

    # -- the control -------------------------------------------------------------
    mk.emit("control", "control", data, must_refuse=False)
    return mk.variants


def swapped_module_variant(src, other, out) -> Variant:
    """A variant whose module file is replaced by another capture's module under the same name."""
    out = Path(out)
    mk = _Maker(src, out)
    first = next(iter(mk.modules))
    with open_capture(other) as cap:
        others = [bytes(v) for k, v in cap.module_files().items() if k != first]
    if not others:
        raise ValueError(f"{other} has no module other than {first}")
    other_mod = others[0]
    return mk.emit("module_swapped", "module-file", mk.data, modules={**mk.modules, first: other_mod})
