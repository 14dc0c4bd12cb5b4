"""The C++ replayer's C API (``native/include/wrp_replay.h``) through ctypes, in this process.

Used by the debugging tools (:mod:`wrpkit.debug.stepper`) to step a rewritten program with the native
engine without spawning a process per op.  Only what they need is bound.
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from ...errors import WrpError, WrpFormatError, WrpOutOfMemoryError, WrpRuntimeError, WrpVersionError
from .engines import native_paths


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("device", ctypes.c_char_p), ("warp_lib_dir", ctypes.c_char_p),
                ("skip_checks", ctypes.c_int), ("validate_only", ctypes.c_int),
                ("capture_warp_stderr", ctypes.c_int), ("max_file_bytes", ctypes.c_uint64),
                ("max_memory_bytes", ctypes.c_uint64), ("verify_checksums", ctypes.c_int),
                ("allow_raw_pointers", ctypes.c_int), ("modules_dir", ctypes.c_char_p),
                ("modules_optional", ctypes.c_int), ("op_limit", ctypes.c_uint64),
                # NULL here: this process has checked the file before it opens it
                ("before_allocate", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
                ("before_allocate_user_data", ctypes.c_void_p),
                # signed captures (schema/SIGNATURE-RULES.md): PEM files or folders, and the .sig path
                ("trusted_keys", ctypes.POINTER(ctypes.c_char_p)), ("num_trusted_keys", ctypes.c_size_t),
                ("signature_path", ctypes.c_char_p),
                # a copy of the graph that writes the op slot before each op (wrpkit.op_slots)
                ("op_slots", ctypes.c_int)]


class _Module(ctypes.Structure):
    _fields_ = [("filename", ctypes.c_char_p), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


@functools.lru_cache(maxsize=None)
def library():
    """``libwrp_replay`` loaded, its functions typed (once per process).

    Raises:
        WrpError: It is not built, or is from another build than this package.
    """
    lib = ctypes.CDLL(os.fspath(native_paths().require_library()))
    lib.wrp_options_init.argtypes = [ctypes.POINTER(_Options)]
    lib.wrp_last_error.restype = ctypes.c_char_p
    lib.wrp_last_error_bytes.restype = ctypes.c_uint64
    lib.wrp_program_open_memory.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_Module),
                                            ctypes.c_size_t, ctypes.POINTER(_Options),
                                            ctypes.POINTER(ctypes.c_void_p)]
    lib.wrp_program_destroy.argtypes = [ctypes.c_void_p]
    lib.wrp_program_device.argtypes = [ctypes.c_void_p]
    lib.wrp_program_device.restype = ctypes.c_char_p
    for fn in (lib.wrp_program_set, lib.wrp_program_get):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    lib.wrp_program_data_ptr.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_size_t)]
    lib.wrp_program_run.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.wrp_verify_signature.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Options)]
    lib.wrp_program_op_slot.argtypes = [ctypes.c_void_p]
    lib.wrp_program_op_slot.restype = ctypes.c_void_p
    lib.wrp_program_op_slots_missing.argtypes = [ctypes.c_void_p]
    lib.wrp_program_op_slots_missing.restype = ctypes.c_char_p
    lib.wrp_guard_op_slot.argtypes = [ctypes.c_void_p, ctypes.c_int]
    _check_options_layout(lib)
    return lib


def verify_signature(path, trusted_keys=(), signature_path=None, modules_dir=None) -> tuple:
    """The C++ verdict on a capture's signature (``wrp_verify_signature``), for parity with Python's.

    Args:
        path: The capture (``.wrp``, ``.wrpk`` or ``.json``), as given.
        trusted_keys: PEM files or folders of ``*.pem``; empty: the library reads
            ``WRPKIT_TRUSTED_KEYS`` itself (and with neither says "no trusted keys given").
        signature_path: The signature; None for ``STEM.sig`` beside the capture.
        modules_dir: A ``.wrp``'s modules folder; None for ``<stem>_modules/`` beside it.

    Returns:
        ``(status, message)``: 0 and "" when it is signed by a trusted key and unchanged; else the
        ``wrp_status`` (8: unsigned, untrusted or changed; 1: a bad key path; 2: an unreadable file)
        and the library's message.
    """
    lib = library()
    opts = _Options()
    lib.wrp_options_init(ctypes.byref(opts))
    keys = [os.fsencode(k) for k in trusted_keys]
    array = (ctypes.c_char_p * max(1, len(keys)))(*keys)
    opts.trusted_keys = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p)) if keys else None
    opts.num_trusted_keys = len(keys)
    sig = os.fsencode(signature_path) if signature_path is not None else None
    mods = os.fsencode(modules_dir) if modules_dir is not None else None
    opts.signature_path = sig
    opts.modules_dir = mods
    rc = lib.wrp_verify_signature(os.fsencode(path), ctypes.byref(opts))
    return rc, ("" if rc == 0 else (lib.wrp_last_error() or b"").decode(errors="replace"))


def _check_options_layout(lib) -> None:
    """Refuse a library whose ``wrp_options`` differs in size from :class:`_Options`.

    ``wrp_options_init`` zero-fills ``sizeof(wrp_options)`` bytes: given a
    smaller ctypes struct it would write past it into Python's heap.  So it
    first fills a scratch buffer, larger than any version of the struct, and
    the struct size it records there is compared with this mirror's.
    """
    scratch = ctypes.create_string_buffer(4096)
    lib.wrp_options_init(ctypes.cast(scratch, ctypes.POINTER(_Options)))
    native = ctypes.c_uint32.from_buffer(scratch).value
    if native != ctypes.sizeof(_Options):
        raise WrpError(f"{native_paths().require_library()} has a wrp_options of {native} bytes, but wrpkit's mirror of it has "
                       f"{ctypes.sizeof(_Options)}: the library and the Python package are from different builds",
                       hint="Reinstall wrpkit (`pip install .`) so that both come from one build, or use "
                            "--engine python.")


class NativeGraph:
    """A graph opened from memory through the C API (its `wrp_program` handle): what `wp.Graph` is on
    Warp's route, under the one :class:`~wrpkit.run.load.program.Program` a user loads.

    Args:
        wrp_bytes: The WRP1 image.
        modules: ``{binary file name: bytes}``.
        device: The device string.
        op_slots: Give Warp the graph with an op slot written before each op
            (:mod:`wrpkit.op_slots`); :meth:`guard_op_slot` then copies it out as the process dies.
        allow_raw_pointers: Run kernel arguments that look like live pointers (the caller decided).
        op_limit: Give Warp only the graph's first ``op_limit`` top-level ops (0: all; not with ``op_slots``).
    """

    def __init__(self, wrp_bytes, modules: dict, device: str, op_slots: bool = False,
                 allow_raw_pointers: bool = False, op_limit: int = 0):
        lib = self.lib = library()
        opts = _Options()
        lib.wrp_options_init(ctypes.byref(opts))
        opts.op_slots = int(bool(op_slots))
        opts.op_limit = int(op_limit)
        opts.allow_raw_pointers = int(bool(allow_raw_pointers))
        self._device_b = str(device).encode()
        opts.device = self._device_b
        buf = np.frombuffer(wrp_bytes, dtype=np.uint8)
        keep = [buf]
        mods = (_Module * max(1, len(modules)))()
        for i, (name, data) in enumerate(modules.items()):
            arr = np.frombuffer(data, dtype=np.uint8)
            keep.append(arr)
            fname = name.encode()
            keep.append(fname)
            mods[i] = _Module(fname, arr.ctypes.data if arr.size else None, arr.size)
        handle = ctypes.c_void_p()
        rc = lib.wrp_program_open_memory(buf.ctypes.data, buf.size, mods, len(modules), ctypes.byref(opts),
                                         ctypes.byref(handle))
        if rc != 0:
            msg = (lib.wrp_last_error() or b"").decode(errors="replace")
            if rc == 5:  # WRP_ERR_OUT_OF_MEMORY: the one status, with the size asked for
                raise WrpOutOfMemoryError(f"the native replayer could not open the program: {msg}",
                                          requested=int(lib.wrp_last_error_bytes()) or None, device=str(device),
                                          hint="Free memory or replay on a larger device.")
            # 2: invalid file; 7: another Warp version, or an older format (`wrp upgrade` converts it)
            cls = {2: WrpFormatError, 7: WrpVersionError}.get(rc, WrpRuntimeError)
            raise cls(f"the native replayer could not open the program: {msg}")
        self.handle = handle
        self.device = (lib.wrp_program_device(handle) or b"cpu").decode()
        self._sizes = {}

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = (self.lib.wrp_last_error() or b"").decode(errors="replace")
            raise WrpRuntimeError(f"native replayer: {what} failed: {msg}")

    def _ptr(self, name: str) -> tuple:
        ptr, size = ctypes.c_void_p(), ctypes.c_size_t()
        self._check(self.lib.wrp_program_data_ptr(self.handle, name.encode(), ctypes.byref(ptr), ctypes.byref(size)),
                    f"data_ptr({name!r})")
        return ptr.value or 0, size.value

    def view(self, name: str) -> np.ndarray:
        """Zero-copy uint8 view of a binding (CPU programs only)."""
        ptr, size = self._ptr(name)
        if not size:
            return np.zeros(0, dtype=np.uint8)
        return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(ptr))

    def size(self, name: str) -> int:
        s = self._sizes.get(name)
        if s is None:
            s = self._sizes[name] = self._ptr(name)[1]
        return s

    def get(self, name: str) -> np.ndarray:
        out = np.empty(self.size(name), dtype=np.uint8)
        self._check(self.lib.wrp_program_get(self.handle, name.encode(), out.ctypes.data, out.size),
                    f"get({name!r})")
        return out

    def set(self, name: str, value) -> None:
        arr = np.ascontiguousarray(np.asarray(value)).reshape(-1).view(np.uint8)
        if arr.size != self.size(name):
            raise WrpError(f"input {name!r} has {arr.size} bytes but the binding holds {self.size(name)}")
        self._check(self.lib.wrp_program_set(self.handle, name.encode(), arr.ctypes.data, arr.size),
                    f"set({name!r})")

    def run(self, count: int = 1) -> None:
        self._check(self.lib.wrp_program_run(self.handle, count), "run")

    def guard_op_slot(self, fd: int) -> None:
        """Copy the op slot into memory file ``fd`` (offset 0) if this process dies of a crash signal.

        Raises:
            WrpError: The program holds no op slot (not opened with ``op_slots``, or its graph cannot
                hold them: the message says why).
        """
        slot = self.lib.wrp_program_op_slot(self.handle)
        if not slot:
            why = (self.lib.wrp_program_op_slots_missing(self.handle) or b"").decode(errors="replace")
            raise WrpError(f"no op slot: {why or 'the program was not opened with op slots'}")
        self._check(self.lib.wrp_guard_op_slot(slot, fd), "guard_op_slot")

    def close(self) -> None:
        if self.handle:
            self.lib.wrp_program_destroy(self.handle)
            self.handle = None
