"""Shared helpers of the tests of native/ (tests/native/test_native_*.py).

Captures are made with stock Warp at test time (tests/programs.py's one
capture cache, and two small programs defined here); ``run`` runs a native
binary with ``env -i PATH=/usr/bin:/bin`` and fails on a signal or a hang.
The session fixtures (the CMake builds, the captures, the bundles) are in
tests/native_fixtures.py.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import warp as wp

from conftest import cmake_python_args
import programs  # the shared registry of real Warp programs (tests/programs.py)
from wrpkit import model as m
from wrpkit.formats import wrp1_layout
from wrpkit.formats.wrp1 import decode_wrp1

wp.init()


ROOT = Path(__file__).resolve().parents[1]


WARP_BIN = Path(wp.__file__).resolve().parent / "bin"


CLEAN_ENV = {"PATH": "/usr/bin:/bin"}  # what `env -i PATH=/usr/bin:/bin` leaves


PROGRAMS = dict(programs.PROGRAMS)


@wp.kernel
def k_saxpb(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), a: wp.float32):
    i = wp.tid()
    y[i] = x[i] * a + float(i)


@wp.kernel
def k_vec_norms(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = wp.length(v[i])


@dataclass
class LocalProgram:
    name: str
    make_arrays: object
    step: object
    inputs: list
    outputs: list

    @property
    def bindings(self):
        return list(dict.fromkeys([*self.inputs, *self.outputs]))


def _saxpb_arrays(device):
    return {
        "x": wp.array(np.arange(16, dtype=np.float32) * 0.5, dtype=wp.float32, device=device),
        "y": wp.zeros(16, dtype=wp.float32, device=device),
    }


def _saxpb_step(a):
    wp.launch(k_saxpb, dim=16, inputs=[a["x"], a["y"], 3.0], device=a["x"].device)


def _norms_arrays(device):
    rng = np.random.default_rng(7)
    return {
        "v": wp.array(rng.standard_normal((6, 3)).astype(np.float32), dtype=wp.vec3, device=device),
        "n": wp.zeros(6, dtype=wp.float32, device=device),
    }


def _norms_step(a):
    a["n"].zero_()
    wp.launch(k_vec_norms, dim=6, inputs=[a["v"], a["n"]], device=a["v"].device)


LOCAL = {
    "saxpb": LocalProgram("saxpb", _saxpb_arrays, _saxpb_step, ["x"], ["y"]),
    "norms": LocalProgram("norms", _norms_arrays, _norms_step, ["v"], ["n"]),
}


@dataclass
class Build:
    dir: Path
    exe: Path
    lib: Path
    include: Path


def cmake_build(tmp_path_factory, name, *args, targets=()) -> Path:
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("cmake is not installed: the native tests need CMake >= 3.18 and a C++17 compiler")
    bdir = tmp_path_factory.mktemp(name)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = [[cmake, "-S", str(ROOT), "-B", str(bdir), *gen, *cmake_python_args(), *args],
             [cmake, "--build", str(bdir), "--parallel", str(os.cpu_count() or 2)]
             + (["--target", *targets] if targets else [])]
    for cmd in steps:
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return bdir


def run(exe, *args, env=None, timeout=60, check_rc=None):
    """Run ``exe``; a signal or a hang is always a failure."""
    try:
        res = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace",
                             env=CLEAN_ENV if env is None else env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{exe} {' '.join(map(str, args))} hung for {timeout} s")
    assert res.returncode >= 0, f"killed by signal {-res.returncode}: {args}\n{res.stderr}"
    if check_rc is not None:
        assert res.returncode == check_rc, f"{args}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def copy_capture(src: Path, dst_dir: Path, stem="g", data: bytes = None) -> Path:
    """Copy a capture (``.wrp`` and ``<stem>_modules/``), optionally replacing its bytes."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / f"{stem}.wrp"
    dst.write_bytes(src.read_bytes() if data is None else data)
    mods = src.with_name(src.stem + "_modules")
    if mods.is_dir():
        shutil.copytree(mods, dst_dir / f"{stem}_modules", dirs_exist_ok=True)
    return dst


def npy_input(arr: wp.array) -> np.ndarray:
    """A binding's contents as an .npy-able array: typed when plain, else raw bytes."""
    a = arr.numpy()
    return a if a.dtype.fields is None else np.frombuffer(a.tobytes(), np.uint8)


def sections(buf):
    """The section table: ``[(type, flags, offset, size, uncompressed_size)]``, in file order."""
    header = dict(zip(("magic", "version", "flags", "num_sections", "section_table_offset"),
                      wrp1_layout.FILE_HEADER.unpack_from(buf)))
    return [wrp1_layout.SECTION_ENTRY.unpack_from(buf, header["section_table_offset"]
                                                  + wrp1_layout.SECTION_ENTRY_SIZE * i)
            for i in range(header["num_sections"])]


def _string_size(text: str) -> int:
    return 4 + len(text.encode())  # a u32 length, then the bytes (wrp1_decode.Cursor.string)


def metadata_fields(buf):
    """File offsets of interesting metadata fields, from the codec's decode of ``buf``.

    The decoder (``wrpkit.formats.wrp1``) gives each string's length; the record
    order and sizes are those it reads in ``wrp1_decode.decode_metadata``, for the file's format.
    """
    prog = decode_wrp1(bytes(buf))
    layout = wrp1_layout.LAYOUTS[prog.format_version]
    pos = sections(buf)[0][2] + 4  # after the metadata's format version
    f = {"version_len": pos, "version": pos + 4}
    pos += _string_size(prog.warp_version)
    f["arch"] = pos
    f["num_modules"], f["num_kernels"], f["num_bindings"] = pos + 4, pos + 8, pos + 12
    pos += 4 + 5 * 4  # the arch, then five counts
    modules = []
    for mod in prog.modules:
        rec = {"at": pos, "hash": pos}
        pos += _string_size(mod.module_hash)
        rec["name"] = pos
        pos += _string_size(mod.module_name)
        rec["filename"] = pos
        pos += _string_size(mod.binary_filename)
        rec["arch"] = pos
        pos += 4
        if layout.module_extras:
            pos += sum(map(_string_size, (mod.binary_digest, mod.source_filename, mod.source_digest)))
            pos += 2 + layout.recipe.size  # binary kind, fallback reason, compile recipe
        modules.append(rec)
    f["modules"] = modules
    f["kernels_at"] = pos
    return f


def op_offsets(buf):
    """``[(offset, type, total_size)]`` of the top-level ops, from the codec's decode of ``buf``."""
    return [(op.at, *wrp1_layout.OP_HEADER.unpack_from(buf, op.at)) for op in decode_wrp1(bytes(buf)).ops]


def record_bytes(buf):
    """Offsets of record bytes (no region contents and no launch argument values)."""
    prog = decode_wrp1(bytes(buf))
    layout = wrp1_layout.LAYOUTS[prog.format_version]
    secs = sections(buf)
    out = list(range(0, secs[0][2]))  # header and section table
    out += list(range(secs[0][2], secs[0][2] + secs[0][3]))  # metadata
    mem = secs[1][2]
    out += list(range(mem, mem + 4))  # region count
    for region in prog.regions:
        out += list(range(region.at, region.at + wrp1_layout.REGION_RECORD.size))

    def walk(ops):
        res = []
        for op in ops:
            _, total = wrp1_layout.OP_HEADER.unpack_from(buf, op.at)
            if isinstance(op, m.KernelLaunch):
                res += list(range(op.at, op.at + total - len(op.value_data)))
            elif isinstance(op, (m.If, m.While)):
                res += list(range(op.at, op.at + wrp1_layout.OP_HEADER.size + layout.ops[op.op_type].size))
                res += walk([*op.then_ops, *op.else_ops] if isinstance(op, m.If) else op.body)
            else:
                res += list(range(op.at, op.at + total))
        return res

    ops = secs[2][2]
    out += list(range(ops, ops + 4)) + walk(prog.ops)
    return out


def _relocation_to_missing_region(caps, dst: Path) -> tuple:
    """``(source capture, copy in dst)``: local_saxpb with its first launch's relocation 0 pointing at
    region 999 (structurally valid, semantically invalid)."""
    src = caps["local_saxpb"]
    data = bytearray(src.read_bytes())
    op = op_offsets(data)[0][0]
    kl, hl, nparams = struct.unpack_from("<HHH", data, op + 64)
    struct.pack_into("<i", data, op + 80 + kl + hl + 16 * nparams + 4, 999)  # relocation 0 -> region 999
    return src, copy_capture(src, dst, data=bytes(data))


# Builds an Annotations FlatBuffer with the Python code the build generated
# from schema/wrp.fbs, in a child process so that its `wrpkit.formats.fbs` package
# does not shadow the repository's `wrpkit` in this one.
ANNOTATIONS_SCRIPT = r"""
import json, sys
import flatbuffers
from wrpkit.formats.fbs import Annotations, ArraySignature, DataType, ModuleDigest
spec = json.load(sys.stdin)
ann = Annotations.AnnotationsT()
ann.producer = "test_native"
ann.signature = []
for name, scalar, dshape, size, shape, strides in spec["signatures"]:
    s = ArraySignature.ArraySignatureT()
    s.name, s.shape, s.strides, s.isInput, s.isOutput = name, shape, strides, True, True
    s.dtype = DataType.DataTypeT()
    s.dtype.name, s.dtype.scalar, s.dtype.shape, s.dtype.size = "t", scalar, dshape, size
    ann.signature.append(s)
ann.moduleDigests = []
for filename, sha, size in spec["digests"]:
    d = ModuleDigest.ModuleDigestT()
    d.binaryFilename, d.sha256, d.size = filename, bytes.fromhex(sha), size
    ann.moduleDigests.append(d)
b = flatbuffers.Builder(256)
b.Finish(ann.Pack(b), file_identifier=b"WRPK")
sys.stdout.buffer.write(bytes(b.Output()))
"""


def convert_with_cli(jobs, parallel=3):
    """Run ``python -m wrpkit.cli convert SRC DST`` for every ``(src, dst)``, a few at a time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    pending = list(jobs)
    while pending:
        batch, pending = pending[:parallel], pending[parallel:]
        procs = [(src, dst, subprocess.Popen([sys.executable, "-m", "wrpkit.cli", "convert", "-q", str(src), str(dst)],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                             env=env)) for src, dst in batch]
        for src, dst, proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and dst.is_file(), f"convert {src} {dst} failed:\n{out}\n{err}"


def wrpk_layout(path: Path):
    """``(header, {blob name: (file offset, length)})`` of a bundle, read with wrpkit's own decoder."""
    from wrpkit.formats.wrpk.blobs import read_header  # noqa: PLC0415
    from wrpkit.formats.wrpk.reader import decode_wrpk  # noqa: PLC0415

    buf = path.read_bytes()
    header = read_header(buf)
    prog = decode_wrpk(buf)
    base = np.frombuffer(buf, np.uint8).ctypes.data

    def where(view):
        return int(np.frombuffer(view, np.uint8).ctypes.data - base), len(view)

    blobs = {}
    for r in prog.regions:
        if r.has_initial_data and r.size:
            blobs[f"region {r.region_id} initial data"] = where(r.data)
    for mod in prog.modules:
        if mod.binary is not None and len(mod.binary):
            blobs[f"module {mod.binary_filename}"] = where(mod.binary)
    return header, blobs


def tamper_cases(bundle: Path, seed=11):
    """``[(kind, position, blob name or None)]``: bytes of a bundle to flip, covering every part of it."""
    header, blobs = wrpk_layout(bundle)
    rng = random.Random(seed)
    mend = 128 + header.manifest_size
    cases = [("header", pos, None) for pos in range(128)]
    cases += [("manifest", pos, None)
              for pos in sorted({128, 129, 132, mend - 1, *rng.sample(range(128, mend), min(48, mend - 128))})]
    cases += [("padding", pos, None) for pos in range(mend, header.blob_area_offset)]
    ends = sorted((off, off + n) for off, n in blobs.values())
    for (_, end), (start, _) in zip(ends, ends[1:]):
        cases += [("padding", pos, None) for pos in range(end, start)]
    for name, (off, n) in blobs.items():
        for pos in sorted({off, off + n - 1, off + n // 2, *rng.sample(range(off, off + n), min(12, n))}):
            cases.append(("blob", pos, name))
    return header, blobs, cases


@dataclass
class Hostile:
    name: str
    data: bytes = None       # the .wrp bytes (None: `setup` builds the case)
    must_refuse: bool = True
    setup: object = None     # callable(dir) -> path, for special files
    refusal: int = 3         # the exit code of a refusal: 3 (the file), or 2 for a path that is missing or no file


def base_for_hostile(caps) -> Path:
    for name in ("tape", "structs", "views", "local_norms"):
        if name in caps:
            return caps[name]


def hostile_cases(caps, dense=False):
    """Self-contained hostile variants of one real capture."""
    src = base_for_hostile(caps)
    data = src.read_bytes()
    size = len(data)
    cases = []
    # Truncation at section boundaries and at many offsets.
    cuts = {0, 1, 3, 4, 8, 63, 64, 65, 96, 159, 160, 161, size - 1}
    for _, _, off, n, _ in sections(data):
        cuts |= {off - 1, off + 1, off + 4, off + n - 1}
    cuts |= set(range(0, size, max(1, size // (60 if dense else 25))))
    cases += [Hostile(f"truncate_{c}", data[:c]) for c in sorted(cuts) if 0 <= c < size]
    # One flipped bit in every byte of the header and section table: always invalid.
    for pos in range(0, 160, 1 if dense else 3):
        b = bytearray(data)
        b[pos] ^= 1 << (pos % 8)
        cases.append(Hostile(f"flip_header_{pos}", bytes(b)))
    # Flipped bits in records: refused, or still a valid file that replays.
    rng = random.Random(4)
    recs = [p for p in record_bytes(data) if p >= 160]
    for pos in sorted(rng.sample(recs, min(len(recs), 400 if dense else 120))):
        b = bytearray(data)
        b[pos] ^= 1 << rng.randrange(8)
        cases.append(Hostile(f"flip_record_{pos}", bytes(b), must_refuse=False))
    # Lengths and counts that lie.
    f = metadata_fields(data)
    mem, ops = sections(data)[1][2], sections(data)[2][2]
    first_op = op_offsets(data)[0]
    lies = [(f["version_len"], "<I", 2**32 - 1), (f["num_modules"], "<I", 2**32 - 1),
            (f["num_kernels"], "<I", 2**28), (f["num_bindings"], "<I", 2**31),
            (f["modules"][0]["filename"], "<I", 2**31 - 1), (mem, "<I", 2**32 - 1), (mem + 4 + 8, "<Q", 2**63),
            (mem + 4 + 8, "<Q", 2**40), (ops, "<I", 2**32 - 1), (first_op[0] + 4, "<I", 2**32 - 1),
            (first_op[0] + 4, "<I", 7), (64 + 32 + 16, "<Q", 2**64 - 1), (64 + 8, "<Q", 2**63)]
    if first_op[1] == 1:
        lies += [(first_op[0] + 72, "<I", 2**32 - 1), (first_op[0] + 76, "<I", 2**32 - 1),
                 (first_op[0] + 64, "<H", 0xFFFF), (first_op[0] + 28, "<Q", 2**40),
                 (first_op[0] + 8, "<I", 0)]
    for i, (pos, fmt, val) in enumerate(lies):
        b = bytearray(data)
        struct.pack_into(fmt, b, pos, val)
        cases.append(Hostile(f"lie_{i}_{pos}", bytes(b)))
    # Ops Warp reserves, or that hold process-local pointers, or are unknown.
    for t in (3, 17, 18, 19, 20, 0xFFFFFFFF):
        b = bytearray(data)
        struct.pack_into("<I", b, first_op[0], t)
        cases.append(Hostile(f"op_type_{t}", bytes(b)))
    cases.append(Hostile("trailing_byte", data + b"\0"))
    cases.append(Hostile("not_wrp", b"PK\x03\x04" + bytes(200)))
    return src, cases


def special_cases(src: Path):
    """Files that are not what they claim, and broken module directories."""
    data = src.read_bytes()
    mods = src.with_name(src.stem + "_modules")
    module = next(mods.iterdir()).name

    def with_modules(edit):
        def setup(d):
            path = copy_capture(src, d)
            edit(d / "g_modules")
            return path
        return setup

    def garbage(md):
        (md / module).write_bytes(os.urandom(4096))

    def truncated(md):
        (md / module).write_bytes((md / module).read_bytes()[:300])

    def renamed_symbols(md):
        raw = (md / module).read_bytes()
        (md / module).write_bytes(raw.replace(b"_cpu_forward", b"_cpu_fXrward"))

    def broken_sections(md):
        raw = bytearray((md / module).read_bytes())
        struct.pack_into("<Q", raw, 40, len(raw) - 8)  # section header table past the end
        (md / module).write_bytes(bytes(raw))

    def symlinked(md):
        real = md.parent / "real.o"
        (md / module).rename(real)
        os.symlink(real, md / module)

    def fifo(md):
        (md / module).unlink()
        os.mkfifo(md / module)

    def directory(md):
        (md / module).unlink()
        (md / module).mkdir()

    def dir_symlink(md):
        shutil.move(str(md), str(md.parent / "real_modules"))
        os.symlink(md.parent / "real_modules", md)

    def wrp_fifo(d):
        d.mkdir(parents=True, exist_ok=True)
        os.mkfifo(d / "g.wrp")
        return d / "g.wrp"

    def wrp_dir(d):
        (d / "g.wrp").mkdir(parents=True)
        return d / "g.wrp"

    def wrp_symlink(d):
        copy_capture(src, d, stem="real")
        os.symlink(d / "real.wrp", d / "g.wrp")
        return d / "g.wrp"

    def wrp_empty(d):
        d.mkdir(parents=True, exist_ok=True)
        (d / "g.wrp").write_bytes(b"")
        return d / "g.wrp"

    def no_module_dir(d):
        d.mkdir(parents=True)
        (d / "g.wrp").write_bytes(data)
        return d / "g.wrp"

    return [
        Hostile("module_dir_missing", setup=no_module_dir),
        Hostile("module_missing", setup=with_modules(lambda md: (md / module).unlink())),
        Hostile("module_empty", setup=with_modules(lambda md: (md / module).write_bytes(b""))),
        Hostile("module_garbage", setup=with_modules(garbage)),
        Hostile("module_truncated", setup=with_modules(truncated)),
        Hostile("module_wrong_symbols", setup=with_modules(renamed_symbols)),
        Hostile("module_broken_sections", setup=with_modules(broken_sections)),
        Hostile("module_symlink", setup=with_modules(symlinked)),
        Hostile("module_fifo", setup=with_modules(fifo)),
        Hostile("module_directory", setup=with_modules(directory)),
        Hostile("modules_dir_symlink", setup=with_modules(dir_symlink), must_refuse=False),
        # A path that is no regular file is a usage error (2), as in every wrp command.
        Hostile("wrp_fifo", setup=wrp_fifo, refusal=2),
        Hostile("wrp_directory", setup=wrp_dir, refusal=2),
        Hostile("wrp_symlink", setup=wrp_symlink, must_refuse=False),
        Hostile("wrp_empty", setup=wrp_empty),
        Hostile("wrp_missing", setup=lambda d: d / "absent.wrp", refusal=2),
    ]


def materialize(case: Hostile, src: Path, d: Path) -> Path:
    return case.setup(d) if case.setup else copy_capture(src, d, data=case.data)


LEGACY_ROOT = ROOT / "tests" / "fixtures" / "legacy"


LEGACY = sorted(LEGACY_ROOT.glob("*/*.wrp"))
