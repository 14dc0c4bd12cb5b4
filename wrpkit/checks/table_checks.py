"""Validation of a program's tables: modules, kernels, bindings, meshes, pointer
locations, regions and wrpkit's annotations (schema/VALIDATION-RULES.md,
"Metadata semantics" and "Annotations").

:class:`TableChecks` also holds the state every other check reads (the
program's region and kernel maps, its format's layout) and the two ways a
check reports (:meth:`TableChecks.err`, :meth:`TableChecks.span`); the op
checks (:mod:`wrpkit.checks.op_checks`, :mod:`wrpkit.checks.launch_checks`)
are mixins over it, composed in :mod:`wrpkit.checks.validate`.
"""

from __future__ import annotations

import array
import re
import sys

from .. import model as m
from ..binding_roles import binding_split
from ..formats.annotations import SCALAR_SIZES
from ..formats.wrp1_layout import CURRENT_FORMAT, LAYOUTS
from ..module_dirs import is_plain_basename
from .module_files import backward_launched
from .problem import Problem
from .sources import MAX_TEXT

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Largest int32: Warp's counts and extents are 32-bit signed.
INT_MAX = 0x7FFFFFFF


class TableChecks:
    """The checker's state and reporting, and the checks of a program's tables."""

    def __init__(self, prog: m.Program, annotations=None):
        self.prog = prog
        self.regions = prog.region_map()
        self.kernels = {(k.module_hash, k.kernel_key): k for k in prog.kernels}
        self.kernels_by_key = {k.kernel_key: k for k in prog.kernels}  # formats 3/10 (checks/legacy.py)
        self.mesh_ptrs = {me.original_ptr for me in prog.meshes}
        self.layout = LAYOUTS.get(prog.format_version, LAYOUTS[CURRENT_FORMAT])
        self.problems: list = []
        self.kernel_sigs = self._kernel_signatures(prog, annotations)
        self.clean: set = set()  # ids of leaf op objects that passed (the program keeps them alive)

    def _kernel_signatures(self, prog, decoded=None):
        """``{(module_hash, kernel_key): KernelSignature}`` from wrpkit's annotations, after checking
        the annotations against the rest of the file (as the C++ validator's annotations.cpp does)."""
        if not prog.annotations:
            return {}
        from ..formats.annotations import read_annotations  # noqa: PLC0415
        from ..errors import WrpError  # noqa: PLC0415

        try:
            ann = decoded if decoded is not None else read_annotations(prog)
        except WrpError as e:
            self.err("annotations", f"malformed annotations: {e.message}")
            return {}
        if ann is None:
            return {}
        self._binding_signatures(ann)
        self._module_digests(ann)
        self._call_sites(ann)
        out = {}
        for i, k in enumerate(ann.kernel_signatures):
            w = f"annotations.kernel_signatures[{i}]"
            key = (k.module_hash, k.kernel_key)
            if key not in self.kernels:
                self.err(w, f"kernel {k.kernel_key!r} of module {k.module_hash[:12]} is not in the kernel table")
            elif key in out:
                self.err(w, f"kernel {k.kernel_key!r} has two signatures")
            if len(k.source_file) > MAX_TEXT:
                self.err(w, f"source_file is {len(k.source_file)} characters (at most {MAX_TEXT})", severity="warning")
            for j, a in enumerate(k.arguments):
                if a.ndim > 4:
                    self.err(f"{w}.arguments[{j}]", f"argument {a.name!r} declares ndim {a.ndim} (at most 4)")
            out.setdefault(key, k)
        return out

    def _binding_signatures(self, ann):
        from ..formats.annotations import ScalarKind  # noqa: PLC0415

        bindings = {b.name: b.region_id for b in self.prog.bindings}
        seen = set()
        for i, s in enumerate(ann.signature):
            w = f"annotations.signature[{i}]"
            if s.name not in bindings:
                self.err(w, f"binding {s.name!r} does not exist")
                continue
            if s.name in seen:
                self.err(w, f"binding {s.name!r} has two signatures")
                continue
            seen.add(s.name)
            dt = s.dtype
            if dt.scalar > max(ScalarKind):
                self.err(w, f"dtype has an unknown scalar kind {int(dt.scalar)}")
                continue
            if len(dt.shape) > 2 or any(not 1 <= v <= 4096 for v in dt.shape):
                self.err(w, f"dtype shape {tuple(dt.shape)} is not 0 to 2 extents of 1..4096")
                continue
            if dt.size == 0:
                self.err(w, "element size is zero (or the dtype is missing)")
                continue
            lanes = 1
            for v in dt.shape:
                lanes *= v
            if dt.scalar != ScalarKind.UNKNOWN and SCALAR_SIZES[dt.scalar] * lanes != dt.size:
                self.err(w, f"element size {dt.size} is not {lanes} scalars of {SCALAR_SIZES[dt.scalar]} bytes")
                continue
            if len(s.shape) > 4 or len(s.strides) != len(s.shape):
                self.err(w, f"{len(s.shape)} dimensions with {len(s.strides)} strides (need equal counts, at most 4)")
                continue
            if any(not 0 <= d <= INT_MAX for d in s.shape) or any(not -INT_MAX - 1 <= st <= INT_MAX
                                                                    for st in s.strides):
                self.err(w, f"shape {tuple(s.shape)} or strides {tuple(s.strides)} out of the int32 range")
                continue
            reg = self.regions.get(bindings[s.name])
            if reg is None:
                continue  # reported with the binding
            if 0 in s.shape:
                continue  # an empty view addresses nothing
            lo, hi = s.extent()
            if lo < 0 or hi > reg.size:
                self.err(w, f"the view of {s.name!r} addresses bytes [{lo}, {hi}) outside region "
                            f"{reg.region_id} of {reg.size} bytes")

    def _call_sites(self, ann):
        """Call sites are a help for people, not for replay: what is wrong with them is a warning
        (tools then ignore that call site), never an error."""
        from .sources import MAX_FRAMES, MAX_PATH, MAX_UNRECORDED, iter_op_paths, path_text, resolve  # noqa: PLC0415

        if len(ann.source_root) > MAX_TEXT:
            self.err("annotations.source_root", f"is {len(ann.source_root)} characters (at most {MAX_TEXT})",
                     severity="warning")
        if len(ann.unrecorded_calls) > MAX_UNRECORDED:
            self.err("annotations.unrecorded_calls", f"{len(ann.unrecorded_calls)} entries (at most "
                     f"{MAX_UNRECORDED}; the rest are ignored)", severity="warning")
        for i, u in enumerate(ann.unrecorded_calls[:MAX_UNRECORDED]):
            if len(u.call) > MAX_TEXT or len(u.frames) > MAX_FRAMES or any(
                    len(f.file) > MAX_TEXT or len(f.function) > MAX_TEXT for f in u.frames):
                self.err(f"annotations.unrecorded_calls[{i}]", f"a call text or stack longer than allowed ("
                         f"{MAX_TEXT} characters, {MAX_FRAMES} frames; ignored)", severity="warning")
        if not ann.call_sites:
            return
        total = sum(1 for _ in iter_op_paths(self.prog.ops))
        if len(ann.call_sites) > total:
            self.err("annotations.call_sites", f"{len(ann.call_sites)} call sites for {total} ops", severity="warning")
        seen = set()
        for i, c in enumerate(ann.call_sites):
            w = f"annotations.call_sites[{i}]"
            path = tuple(c.op_path)
            if len(path) > MAX_PATH or resolve(self.prog.ops, path) is None:
                shown = path_text(path[:MAX_PATH]) if len(path) % 2 else list(path[:MAX_PATH])
                self.err(w, f"op path {shown} names no op of this capture (ignored)", severity="warning")
            elif path in seen:
                self.err(w, f"op {path_text(path)} has two call sites (the first is used)", severity="warning")
            seen.add(path)
            if len(c.frames) > MAX_FRAMES:
                self.err(w, f"{len(c.frames)} stack frames (at most {MAX_FRAMES}; the rest are ignored)",
                         severity="warning")
            for j, f in enumerate(c.frames[:MAX_FRAMES]):
                if len(f.file) > MAX_TEXT or len(f.function) > MAX_TEXT:
                    self.err(f"{w}.frames[{j}]", f"a file or function name longer than {MAX_TEXT} characters",
                             severity="warning")

    def _module_digests(self, ann):
        names = {mod.binary_filename for mod in self.prog.modules}
        seen = set()
        for i, d in enumerate(ann.module_digests):
            w = f"annotations.module_digests[{i}]"
            if not is_plain_basename(d.binary_filename):
                self.err(w, f"{d.binary_filename!r} is not a plain file name")
            elif d.binary_filename not in names:
                self.err(w, f"{d.binary_filename!r} is not a module of this graph")
            elif d.binary_filename in seen:
                self.err(w, f"{d.binary_filename!r} has two digests")
            if len(d.sha256) != 32:
                self.err(w, "SHA-256 must be 32 bytes")
            seen.add(d.binary_filename)

    def err(self, where, msg, offset=None, severity="error"):
        self.problems.append(Problem(where, msg, offset, severity))

    def span(self, where, at, region_id, offset, nbytes, what="range", allow_absent=False):
        """Check that [offset, offset + nbytes) lies inside region ``region_id``."""
        if region_id == -1 and allow_absent:
            return
        r = self.regions.get(region_id)
        if r is None:
            self.err(where, f"{what}: region {region_id} does not exist", at)
            return
        if offset < 0 or nbytes < 0 or offset + nbytes > r.size:
            self.err(where, f"{what}: bytes [{offset}, {offset + nbytes}) fall outside region {region_id} "
                            f"of {r.size} bytes", at)

    # -- metadata ----------------------------------------------------------

    def metadata(self):
        p = self.prog
        cpu = p.device_type == m.DeviceType.CPU
        seen = set()
        for i, mod in enumerate(p.modules):
            w = f"modules[{i}]"
            if not mod.module_hash:
                self.err(w, "module hash is empty")
            elif not _HEX64.match(mod.module_hash):
                self.err(w, f"module hash {mod.module_hash!r} is not 64 lowercase hex characters")
            if mod.module_hash in seen:
                self.err(w, f"duplicate module hash {mod.module_hash}")
            seen.add(mod.module_hash)
            if not is_plain_basename(mod.binary_filename):
                self.err(w, f"binary file name {mod.binary_filename!r} is not a plain file name "
                            "(no '/', '\\\\', ':', NUL, '.' or '..')")
            if cpu and mod.target_arch != 0:
                self.err(w, f"CPU module has target arch {mod.target_arch}, expected 0")
            if cpu and (mod.binary_digest or mod.source_filename or mod.source_digest or mod.binary_kind != 0
                        or mod.fallback_reason != 1 or mod.recipe != m.CudaCompileRecipe()):
                self.err(w, "a CPU module must carry no CUDA artifact metadata (digests, source, kind, recipe)")
            if not cpu and not 1 <= mod.target_arch <= 0x7FFFFFFF:
                self.err(w, f"CUDA module needs a target arch between 1 and 2^31-1, found {mod.target_arch}")
            if mod.binary_kind > 2:
                self.err(w, f"binary kind {mod.binary_kind} is not NONE, PTX or CUBIN")
            if mod.fallback_reason > 6:
                self.err(w, f"fallback reason {mod.fallback_reason} is out of range 0..6")
            r = mod.recipe
            if r.optimization_level > 3 or r.arch_suffix > 2 or any(
                    v > 1 for v in (r.debug, r.verify_fp, r.fast_math, r.fuse_fp, r.lineinfo)):
                self.err(w, "CUDA compile recipe has out-of-range fields")
            if not cpu:
                self._cuda_module(w, mod)
            if mod.source_filename and not is_plain_basename(mod.source_filename):
                self.err(w, f"source file name {mod.source_filename!r} is not a plain file name")
        hashes = {mod.module_hash for mod in p.modules}
        seen_k = set()
        for i, k in enumerate(p.kernels):
            w = f"kernels[{i}]"
            key = (k.module_hash, k.kernel_key)
            if key in seen_k:
                self.err(w, f"duplicate kernel {k.kernel_key!r} in module {k.module_hash[:12]}")
            seen_k.add(key)
            if k.module_hash not in hashes:
                self.err(w, f"kernel {k.kernel_key!r} refers to module {k.module_hash[:12]}, which is not recorded")
            if not k.kernel_key or not k.forward_name:
                self.err(w, "kernel key or forward symbol name is empty")
            # Symbol names are looked up in the module's ELF symbols; Warp only writes C identifiers.
            if k.forward_name and not _C_IDENT.match(k.forward_name):
                self.err(w, f"forward symbol {k.forward_name!r} is not a C identifier")
            # A backward symbol is only looked up where a backward launch uses it (as Warp
            # replays a module without one): unused, a malformed name is only a warning.
            if k.backward_name and not _C_IDENT.match(k.backward_name):
                used = key in backward_launched(p)
                self.err(w, f"backward symbol {k.backward_name!r} is not a C identifier"
                         + ("" if used else " (no backward launch uses it, so it is never looked up)"),
                         severity="error" if used else "warning")
        names = {}
        for i, b in enumerate(p.bindings):
            w = f"bindings[{i}]"
            if not b.name:
                self.err(w, "binding name is empty")
            # The same name in capture_save's inputs and outputs (an in-place
            # binding) is written twice with one region: legal.  Another region
            # under a name already written resolves as Warp's loader resolves
            # it (the last record wins), so it is only a warning.
            if b.name in names and names[b.name] != b.region_id:
                self.err(w, f"binding {b.name!r} names region {b.region_id} here but region {names[b.name]} "
                         f"before; Warp uses the last, region {b.region_id}", severity="warning")
            names[b.name] = b.region_id
            if b.region_id not in self.regions:
                self.err(w, f"binding {b.name!r} refers to region {b.region_id}, which does not exist")
        if binding_split([b.name for b in p.bindings]) is None:
            # Warp writes capture_save's inputs, then its outputs, each once; a
            # graph saved twice keeps every save's names (Warp's APIC state
            # accumulates them).  Stock Warp loads that file, so: a warning.
            self.err("bindings", "binding names repeat: the list is not one capture_save's inputs then outputs "
                     "(was capture_save called twice on one graph?); each name resolves to its last record, "
                     "as in Warp's loader", severity="warning")
        mesh_ids = set()
        for i, me in enumerate(p.meshes):
            self._mesh(f"meshes[{i}]", me, mesh_ids)
        for i, pl in enumerate(p.pointer_locations):
            w = f"pointer_locations[{i}]"
            if pl.region_id not in self.regions:
                self.err(w, f"pointer-location region {pl.region_id} does not exist")
                continue
            if pl.count == 0:
                continue
            if pl.stride == 0 and pl.count != 1:
                self.err(w, "stride 0 is only allowed with count 1")
                continue
            self.span(w, None, pl.region_id, pl.offset, (pl.count - 1) * pl.stride + 8, "handle slots")
        for r in p.regions:
            if r.has_initial_data and r.data is not None and len(r.data) != r.size:
                self.err(f"regions[{r.region_id}]", "initial data length differs from the region size", r.at)

    def _mesh(self, w, me, mesh_ids):
        """Warp rebuilds each mesh at load from region memory (apic_create_meshes); its BVH build
        reads ``points[indices[k]]``, so every triangle index in initial data must be a point."""
        if me.num_points < 0 or me.num_tris < 0:
            self.err(w, f"negative point or triangle count ({me.num_points}, {me.num_tris})")
            return
        if me.bvh_constructor > 2:
            self.err(w, f"BVH constructor {me.bvh_constructor} is not 0 (SAH), 1 or 2")
        if me.bvh_leaf_size < 1:
            self.err(w, "BVH leaf size must be at least 1")
        if me.original_ptr == 0:
            self.err(w, "mesh has a zero original id")
        elif me.original_ptr in mesh_ids:
            self.err(w, f"mesh id {me.original_ptr:#x} appears twice")
        mesh_ids.add(me.original_ptr)
        self.span(w, None, me.points_region_id, 0, 12 * me.num_points, "points")
        self.span(w, None, me.indices_region_id, 0, 12 * me.num_tris, "indices")
        if me.velocities_region_id:
            self.span(w, None, me.velocities_region_id, 0, 12 * me.num_points, "velocities")
        if me.num_tris > 0 and me.num_points == 0:
            self.err(w, "mesh has triangles but no points")
            return
        reg = self.regions.get(me.indices_region_id)
        n = 3 * me.num_tris
        if reg is None or not reg.has_initial_data or reg.data is None or len(reg.data) < 4 * n:
            return
        idx = array.array("i")
        idx.frombytes(bytes(reg.data[:4 * n]))
        if sys.byteorder != "little":  # pragma: no cover
            idx.byteswap()
        if n and (min(idx) < 0 or max(idx) >= me.num_points):
            k = next(k for k, v in enumerate(idx) if v < 0 or v >= me.num_points)
            self.err(w, f"triangle index {idx[k]} (entry {k} of region {reg.region_id}) is outside "
                        f"0..{me.num_points - 1}", reg.at + 24 + 4 * k if reg.at >= 0 else None)

    def _cuda_module(self, w, mod):
        if not mod.binary_digest:
            if (mod.source_filename or mod.source_digest or mod.binary_kind != 0 or mod.fallback_reason != 1
                    or mod.recipe != m.CudaCompileRecipe()):
                self.err(w, "CUDA binary-only module carries incomplete artifact metadata")
            return
        if not _HEX64.match(mod.binary_digest):
            self.err(w, "binary digest is not a SHA-256 hex string")
        ext = {1: ".ptx", 2: ".cubin"}.get(mod.binary_kind)
        if ext is None:
            self.err(w, "module with a digest must be PTX or CUBIN")
        elif not mod.binary_filename.endswith(ext):
            self.err(w, f"binary file name must end in {ext}")
        if bool(mod.source_filename) != bool(mod.source_digest):
            self.err(w, "source file name and digest must be both set or both empty")
        if mod.source_filename and not mod.source_filename.endswith(".cu"):
            self.err(w, "source file name must end in .cu")
        if mod.source_digest and not _HEX64.match(mod.source_digest):
            self.err(w, "source digest is not a SHA-256 hex string")
        if mod.recipe.arch_suffix == 1 and mod.target_arch < 90:
            self.err(w, "arch suffix 'a' needs sm_90 or later")
        if mod.recipe.arch_suffix == 2 and mod.target_arch < 100:
            self.err(w, "arch suffix 'f' needs sm_100 or later")
        if mod.fallback_reason == 0 and not mod.source_filename:
            self.err(w, "fallback reason AVAILABLE needs a source file")
