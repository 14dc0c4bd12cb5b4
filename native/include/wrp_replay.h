/*
 * wrp_replay.h -- replay NVIDIA Warp captured graphs (.wrp, WRP1 format 18,
 * and .wrpk bundles) from C or C++, without Python.
 *
 * Captures of older Warp releases (formats 3, 10, 13-16, written by Warp
 * 1.13 to 1.18) are read and validated under their own format's rules, so
 * they open with validate_only; opening one to replay validates it first and
 * then fails with WRP_ERR_INCOMPATIBLE, whose message names the format, who
 * wrote it and the `wrp upgrade IN OUT` command that converts it.
 *
 * A program is opened from a .wrp file (plus the module files in its
 * `<stem>_modules/` directory), from a single-file .wrpk bundle (module
 * binaries inside; see schema/WRPK-FORMAT.md), or from memory.  The kind is
 * detected by the file's magic bytes, not its name.  The file is parsed and
 * validated completely by this library before any byte of it reaches Warp;
 * then Warp's own native runtime (warp.so, and warp-clang.so for CPU graphs,
 * from the installed warp-lang wheel) is loaded with dlopen and replays it.
 *
 * A .wrpk is memory-mapped, never unpacked: its header, the SHA-256 of its
 * manifest, the manifest FlatBuffer (flatbuffers::Verifier plus wrpkit's own
 * rules), the layout of its blob area and, unless verify_checksums is 0,
 * every blob's SHA-256 are checked first.  The program's records are then
 * re-encoded as the WRP1 image Warp's loader takes (region data copied once
 * from the mapping) and validated exactly like a .wrp; module binaries are
 * handed to Warp straight from the mapping.  A checksum failure is
 * WRP_ERR_INVALID_FILE and its message names the blob ("region 3 initial
 * data", "module wp___main___1a2b.o").
 *
 * Typical use:
 *
 *     wrp_options opts;
 *     wrp_options_init(&opts);
 *     opts.device = "cpu";
 *     wrp_program* p = NULL;
 *     if (wrp_program_open("sim.wrp", &opts, &p) != WRP_OK) {
 *         fprintf(stderr, "%s\n", wrp_last_error());
 *         return 1;
 *     }
 *     wrp_program_set(p, "x", x_bytes, x_size);
 *     wrp_program_run(p, 1);
 *     wrp_program_get(p, "y", y_bytes, y_size);
 *     wrp_program_destroy(p);
 *
 * Errors
 *   Every function that can fail returns a wrp_status.  On failure, a complete
 *   message (including Warp's own error string, and Warp's stderr output when
 *   `capture_warp_stderr` is set) is available from wrp_last_error() on the
 *   same thread, including for a failed wrp_program_open().
 *   No C++ exception ever leaves this API.
 *
 * Files that change while they are read
 *   Captures and module files are memory-mapped.  A file truncated (or
 *   rewritten in place) by another program while it is mapped makes the
 *   kernel send SIGBUS on the next read of a page past its new end.  The
 *   first time this library maps a file it installs a process-wide SIGBUS
 *   handler (sigaction, SA_SIGINFO | SA_ONSTACK) and registers every file it
 *   maps (a lock-free table of up to 256 ranges, removed at unmap):
 *   - a fault in one of its files while the library hashes it (checksum
 *     verification of wrp_program_open) makes that call fail with
 *     WRP_ERR_INVALID_FILE and "<file> PATH changed while being read ...";
 *   - a fault in one of its files anywhere else (a load into the device
 *     after the checks) cannot be resumed: the handler writes
 *     "error: file PATH changed while being read ..." on stderr and ends the
 *     process with _exit(3) (exit 3: a file that cannot be used), rather
 *     than letting it die of SIGBUS;
 *   - a SIGBUS anywhere else goes to the disposition the handler replaced
 *     (the host's own handler installed before, or the default action).
 *   A host that installs its own SIGBUS handler after opening a program
 *   replaces this one (and gets the plain SIGBUS, as without it); one that
 *   chains to the previous handler keeps the message.
 *   wrp_guard_mapping() puts a host's own mapping under the same handler.
 *
 * Thread safety
 *   - wrp_last_error() is thread-local: each thread sees the message of its
 *     own last failing call.
 *   - Warp's runtime keeps process-global state (its error buffer, its mesh
 *     registry, warp-clang's JIT session, the CPU tile scratch storage), so
 *     every call that enters Warp (wrp_program_open, wrp_program_open_memory,
 *     wrp_program_run, wrp_program_set, wrp_program_get,
 *     wrp_program_destroy) takes one process-wide lock inside this library.
 *     Distinct programs may therefore be used from distinct threads without
 *     external locking, but those calls are serialized, not parallel.  The
 *     lock is fair: it is handed over in the order it was asked for (FIFO),
 *     so a thread waits at most for the calls queued ahead of it (with T
 *     threads each running one replay at a time: about T - 1 replays).
 *     Calls that only read what the open recorded (device, versions, ops,
 *     bindings, warnings, wrp_program_data_ptr) take no lock.
 *   - One program is NOT thread-safe: calls on the same wrp_program must be
 *     externally synchronized, and memory obtained from
 *     wrp_program_data_ptr() must not be accessed while that program runs.
 *   - With capture_warp_stderr set, file descriptor 2 of the whole process is
 *     redirected while Warp is called; output other threads write to stderr
 *     in that window is captured (and discarded) too.
 *   - If the process also uses Warp from Python and both resolve to the same
 *     warp.so, Warp's state is shared and the lock above does not cover the
 *     Python side.  This library turns off Warp's echo of its error string to
 *     stderr (wp_set_error_output_enabled(0)) for the whole process.
 *
 * Locating Warp (first match wins)
 *   1. wrp_options.warp_lib_dir;
 *   2. the environment variable WRP_WARP_LIB_DIR;
 *   3. paths recorded at build time relative to this library (installed in
 *      site-packages/wrpkit/_native/lib: ../../../warp/bin) or to the
 *      wrp-replay executable.
 *   The directory must hold warp.so (and warp-clang.so for CPU graphs) whose
 *   wp_version() equals the Warp version that recorded the file.  Warp is
 *   loaded once per process; later opens must resolve to the same directory.
 */
#ifndef WRP_REPLAY_H
#define WRP_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define WRP_API __declspec(dllexport)
#else
#define WRP_API __attribute__((visibility("default")))
#endif

/* Version of this C API; bumped on incompatible changes. */
#define WRP_REPLAY_API_VERSION 1

typedef enum wrp_status {
    WRP_OK = 0,
    /* A bad call: NULL argument, unknown binding name, size mismatch, bad
     * device string, device family differing from the file's, or an
     * operation the program was not opened for (validate_only). */
    WRP_ERR_INVALID_ARGUMENT = 1,
    /* The .wrp or .wrpk or one of its module files is malformed, unsafe,
     * missing or unreadable, or fails a checksum.  The message names the
     * field (or the blob) and the byte offset. */
    WRP_ERR_INVALID_FILE = 2,
    /* Warp's runtime could not be found or loaded, has the wrong version,
     * or failed to load or replay the graph. */
    WRP_ERR_RUNTIME = 3,
    /* The requested CUDA device does not exist (or no CUDA driver). */
    WRP_ERR_NO_DEVICE = 4,
    /* Out of memory, wherever it happens, with the size asked for and the
     * device in the message: the file's declared memory does not fit the
     * device's free memory (or max_memory_bytes), mapping the file failed for
     * lack of address space or memory, this library's own allocation failed,
     * or Warp's did (its stderr reason is read back).  wrp-replay exits 3. */
    WRP_ERR_OUT_OF_MEMORY = 5,
    /* A bug in this library. */
    WRP_ERR_INTERNAL = 6,
    /* The file was recorded with another Warp version than the runtime's
     * (Warp only loads captures of its own version): recapture it.  Also a
     * replay of an older format (see wrp_program_format_version): convert it
     * with `wrp upgrade IN OUT`. */
    WRP_ERR_INCOMPATIBLE = 7,
    /* Trusted keys were given (wrp_options.trusted_keys, or the environment
     * variable WRPKIT_TRUSTED_KEYS) and the capture is unsigned, signed by no
     * trusted key, or changed after signing (schema/SIGNATURE-RULES.md,
     * steps 1-6).  The message starts with the rule's words: "not signed:",
     * "signature malformed:", "not signed by a trusted key:", "not covered by
     * the signature:", "changed after signing:", "removed after signing:" or
     * "added after signing:".  Nothing of the file was decoded and nothing
     * was loaded into Warp.  wrp-replay exits 3. */
    WRP_ERR_UNTRUSTED = 8
} wrp_status;

/* Options for opening a program.  Always call wrp_options_init() first so
 * that fields added in later versions get their defaults. */
typedef struct wrp_options {
    /* sizeof(wrp_options), set by wrp_options_init(). */
    uint32_t struct_size;
    /* "cpu", "cuda:N" ("cuda" means "cuda:0"), or "auto" (the default when
     * NULL or ""): the file's own family, "cpu" or "cuda:0".  An explicit
     * device must match the family the file was captured for. */
    const char* device;
    /* Directory holding warp.so and warp-clang.so (site-packages/warp/bin
     * of warp-lang); NULL to search (see "Locating Warp" above). */
    const char* warp_lib_dir;
    /* Nonzero: skip the semantic checks (region ranges of ops, relocations,
     * bindings, meshes and pointer locations; kernel and module references;
     * module ELF symbol tables; annotation digests).  The structural parse
     * (bounds, record sizes, counts, caps) always runs.  Only for trusted
     * files. */
    int skip_checks;
    /* Nonzero: only parse and validate the file and its module files; Warp
     * is not loaded, and run/set/get/data_ptr fail.  Bindings can be listed. */
    int validate_only;
    /* Nonzero: redirect the process's stderr while calling into Warp and
     * append what Warp prints there to error messages (see Thread safety). */
    int capture_warp_stderr;
    /* Largest file accepted, in bytes; 0 = no fixed cap (a file is bounded
     * by 64-bit sizes and by what can be mapped; a region with data by the
     * file's own size). */
    uint64_t max_file_bytes;
    /* Memory the open may allocate, in bytes.  Warp allocates (and zeroes)
     * every memory region when the program opens, so before anything is
     * allocated the total of the file's regions is compared with this, or,
     * when 0 (the default), with the device's free memory (CPU: the least
     * of MemAvailable, the room under the process's memory cgroup and its
     * ancestors (v2 memory.max - memory.current, v1 memory.limit_in_bytes -
     * memory.usage_in_bytes, inactive page cache counted as room) and
     * RLIMIT_AS less the address space in use, checked again once Warp's
     * libraries are loaded; CUDA: the device's free memory).  A file that does not fit fails with
     * WRP_ERR_OUT_OF_MEMORY, naming the total, the largest regions and the
     * device's figure. */
    uint64_t max_memory_bytes;
    /* .wrpk bundles only: nonzero (the default set by wrp_options_init) to
     * verify the SHA-256 of every blob (region data, module binaries and
     * sources) before any of it is used.  Zero skips only those hashes, for
     * trusted files; the header, the manifest's own SHA-256 and every
     * structural check always run.  Note: a zero-filled struct disables it,
     * another reason to always start from wrp_options_init(). */
    int verify_checksums;
    /* Nonzero: run a file whose kernel arguments hold what looks like a live
     * process pointer with no relocation (a HashGrid, Bvh or Volume id passed
     * as uint64; wrpkit's lint-pointer).  Zero (the default) refuses it with
     * WRP_ERR_INVALID_FILE: such a pointer dangles in a new process. */
    int allow_raw_pointers;
    /* .wrp only: the directory holding its module files; NULL or "" for
     * `<stem>_modules/` beside the path (or, when the path is a symbolic link
     * and there is none beside it, beside the link's target).  Trusted like
     * the path: a symbolic link to the directory is followed.  Module file
     * names inside it come from the file and are never followed. */
    const char* modules_dir;
    /* With validate_only: nonzero to list a .wrp whose modules directory does
     * not exist (its module files are then not checked); a directory that
     * exists is checked as usual. */
    int modules_optional;
    /* 0 (the default): replay the whole graph.  N > 0: Warp is given only the
     * graph's first N top-level ops (a prefix; N >= the op count is the whole
     * graph), to replay part of a graph.  (A crashing op is named by
     * op_slots, not by prefixes.) */
    uint64_t op_limit;
    /* Called by wrp_program_open*() once the file is validated and its
     * declared memory checked against the device, just before Warp
     * allocates anything, with that declared total in bytes; NULL (the
     * default) goes straight on.  Return 0 to go on; anything else
     * abandons the open with WRP_ERR_RUNTIME and nothing allocated.  It is
     * called without the process-wide lock held (see Thread safety), on the
     * opening thread.  wrp-replay's --approve-fd uses it so that a caller
     * can finish its own checks while the file is mapped and validated. */
    int (*before_allocate)(void* user_data, uint64_t declared_bytes);
    /* Passed to before_allocate as is. */
    void* before_allocate_user_data;
    /* Signed captures (schema/SIGNATURE-RULES.md): paths of PEM files (EC
     * public keys on P-256, P-384 or P-521, and/or CA certificates) or of
     * directories whose *.pem files are all loaded.  With num_trusted_keys
     * > 0, wrp_program_open() refuses a file that is not signed by one of
     * them with WRP_ERR_UNTRUSTED, checked right after the file is mapped,
     * before it is decoded and before anything is loaded into Warp; the
     * module files of a .wrp are read once, hashed, and exactly those bytes
     * are loaded.  The signed set of a .wrp `DIR/STEM.wrp` (told by its
     * bytes, as the loader tells it) is STEM.wrp plus every entry of its
     * modules directory (see modules_dir) that is not a directory, named
     * `STEM_modules/NAME` (a symbolic link there is refused); of a .wrpk, the
     * one file.  With none given (the default: NULL, 0), the environment
     * variable WRPKIT_TRUSTED_KEYS (paths separated by ':'; unset or empty:
     * no requirement) is used instead.  A key path that is missing,
     * unreadable, holds a private key or no public key or certificate is
     * WRP_ERR_INVALID_ARGUMENT; a signature or module file that exists but
     * cannot be read, WRP_ERR_INVALID_FILE.  wrp_program_open_memory()
     * ignores these fields and the environment: its caller verified the
     * bytes. */
    const char* const* trusted_keys;
    size_t num_trusted_keys;
    /* The signature (an OpenSSF model-signing bundle, as `wrp sign` and
     * `model_signing sign` write); NULL or "" for `DIR/STEM.sig` beside the
     * file (its last suffix replaced by ".sig"). */
    const char* signature_path;
    /* CPU replays of current-format files: nonzero to give Warp a copy of the
     * graph that writes an op slot (wrpkit/op_slots.py: 128 bytes naming the
     * op, its top-level index and its path inside IF/WHILE bodies) before
     * every op, so that a crash can be traced to its op with no second run
     * (see wrp_program_op_slot, wrp_guard_op_slot).  The copy holds the whole
     * file once more while Warp loads it.  Zero (the default): Warp gets the
     * file as it is.  Not with op_limit (WRP_ERR_INVALID_ARGUMENT). */
    int op_slots;
} wrp_options;

/* One module file given to wrp_program_open_memory(): `filename` is the name
 * recorded in the .wrp (the basename inside <stem>_modules/). */
typedef struct wrp_module_bytes {
    const char* filename;
    const void* data;
    size_t size;
} wrp_module_bytes;

/* Scalar kinds of a typed binding signature (values of wrp.fbs ScalarKind). */
typedef enum wrp_scalar_kind {
    WRP_SCALAR_UNKNOWN = 0, /* a struct, or no signature */
    WRP_SCALAR_BOOL = 1,
    WRP_SCALAR_INT8 = 2,
    WRP_SCALAR_UINT8 = 3,
    WRP_SCALAR_INT16 = 4,
    WRP_SCALAR_UINT16 = 5,
    WRP_SCALAR_INT32 = 6,
    WRP_SCALAR_UINT32 = 7,
    WRP_SCALAR_INT64 = 8,
    WRP_SCALAR_UINT64 = 9,
    WRP_SCALAR_FLOAT16 = 10,
    WRP_SCALAR_FLOAT32 = 11,
    WRP_SCALAR_FLOAT64 = 12
} wrp_scalar_kind;

/* Description of one binding (a named graph parameter).  All pointers are
 * owned by the program and stay valid until wrp_program_destroy(). */
typedef struct wrp_binding_info {
    const char* name;
    /* Byte size of the binding's memory region: exactly the size that
     * wrp_program_set()/wrp_program_get() copy. */
    uint64_t size;
    uint32_t region_id;
    /* Nonzero when the file carries wrpkit's typed signature for it; the
     * fields below are then meaningful, else dtype is NULL and ndim 0. */
    int has_signature;
    /* Warp's dtype name ("float32", "vec3f", a struct's name, ...). */
    const char* dtype;
    /* Scalar of the dtype (WRP_SCALAR_UNKNOWN for structs). */
    wrp_scalar_kind scalar;
    /* Byte size of one element, and the dtype's own shape ([] for scalars,
     * [n] for vectors, [rows, cols] for matrices). */
    uint32_t dtype_size;
    uint32_t dtype_ndim;
    const uint32_t* dtype_shape;
    /* The array view: shape (outermost first), byte strides, and the byte
     * offset of element 0 inside the region. */
    uint32_t ndim;
    const int64_t* shape;
    const int64_t* strides;
    uint64_t byte_offset;
    int is_input;
    int is_output;
} wrp_binding_info;

typedef struct wrp_program wrp_program;

/* Fill *opts with the defaults. */
WRP_API void wrp_options_init(wrp_options* opts);

/* Version string of this library, e.g. "0.1.0". */
WRP_API const char* wrp_library_version(void);

/* Put [data, data + size), a read-only mapping of a file made by the caller,
 * under this library's SIGBUS handler (see "Files that change while they are
 * read"): a fault in it writes `line` (copied; a newline is added) to stderr
 * and ends the process with _exit(3).  Installs the handler if not yet
 * installed.  Returns 1, or 0 when the table is full or an argument is NULL.
 * Thread-safe; not async-signal-safe.  wrpkit's Python tools use it for the
 * files they map. */
WRP_API int wrp_guard_mapping(const void* data, size_t size, const char* line);

/* Register [data, data + size), a second mapping of pages of a guarded range
 * (mremap with old_size 0), under the line of the range that holds `original`
 * (nothing when none does). */
WRP_API void wrp_guard_alias(const void* data, size_t size, const void* original);

/* Remove every range registered inside [data, data + size) (call before munmap). */
WRP_API void wrp_unguard_mapping(const void* data, size_t size);

/* Message of the last failing call made by this thread ("" if none).
 * Valid until this thread's next call into this library. */
WRP_API const char* wrp_last_error(void);

/* When this thread's last failing call returned WRP_ERR_OUT_OF_MEMORY: the
 * bytes it asked for (the capture's declared total, or the mapping or
 * allocation that failed; the message names the same figure).  0 when the
 * last call did not run out of memory, or the size is unknown (an allocation
 * of this library's own).  Thread-local, like wrp_last_error(). */
WRP_API uint64_t wrp_last_error_bytes(void);

/* Open `path`: a .wrp file (its modules are read from `<stem>_modules/`
 * beside it, where stem is the path without ".wrp") or a .wrpk bundle (which
 * needs nothing beside it).  The file must be a regular file; a symbolic
 * link given as `path` is followed (the path is the caller's; see
 * wrp_options.modules_dir for where modules are looked for).  Each module
 * file is read once into memory, checked, and exactly those bytes are loaded,
 * so hard-linked module files are accepted; a module file that is a symbolic
 * link is refused.  `opts` may be NULL for defaults.  When trusted keys are
 * given (wrp_options.trusted_keys, else $WRPKIT_TRUSTED_KEYS), the file's
 * signature is checked first and a refusal is WRP_ERR_UNTRUSTED.
 * On success *out_program receives the program; on failure it is set to
 * NULL and wrp_last_error() explains why. */
WRP_API wrp_status wrp_program_open(const char* path, const wrp_options* opts, wrp_program** out_program);

/* Open a program from memory: the bytes of the .wrp and the module files the
 * graph names, or the bytes of a .wrpk (whose own module binaries are used;
 * `modules` then only supplies a binary the bundle does not carry).  Buffers
 * are only read during the call (the library copies what it keeps).  A .wrpk
 * held in one MAP_SHARED mapping of its file (as wrp_program_open maps it) has
 * its region data pages mapped, not copied, into the image Warp loads from.
 * Entries the graph does not use are ignored.  No signature is checked
 * here (the trust fields of wrp_options and WRPKIT_TRUSTED_KEYS are
 * ignored): the caller verified the bytes it passes. */
WRP_API wrp_status wrp_program_open_memory(
    const void* wrp_data,
    size_t wrp_size,
    const wrp_module_bytes* modules,
    size_t num_modules,
    const wrp_options* opts,
    wrp_program** out_program
);

/* Only the signature check of wrp_program_open() (schema/SIGNATURE-RULES.md)
 * on `path` (any file: .wrp, .wrpk, or the .json form): WRP_OK when it is
 * signed by a trusted key and unchanged, WRP_ERR_UNTRUSTED with the verdict
 * in wrp_last_error() when not.  Uses opts->trusted_keys, signature_path,
 * modules_dir and max_file_bytes (opts may be NULL); with no trusted keys
 * there, the environment variable WRPKIT_TRUSTED_KEYS, and with neither it
 * fails with WRP_ERR_INVALID_ARGUMENT ("no trusted keys given").  A file
 * that cannot be read is WRP_ERR_INVALID_FILE.  Warp is never loaded. */
WRP_API wrp_status wrp_verify_signature(const char* path, const wrp_options* opts);

/* Release the program and everything Warp allocated for it.  NULL is
 * accepted.  Never fails. */
WRP_API void wrp_program_destroy(wrp_program* program);

/* Device family of the file ("cpu" or "cuda") and the device it runs on
 * ("cpu" or "cuda:N"), and the Warp version that recorded it. */
WRP_API const char* wrp_program_device(const wrp_program* program);
WRP_API const char* wrp_program_warp_version(const wrp_program* program);

/* The file's APIC format version (18 for Warp 1.19; 3, 10 and 13-16 for the
 * captures of Warp 1.13 to 1.18, which open only with validate_only; 0 for
 * NULL), and who wrote it, e.g. "format 16 (written by Warp 1.18.0)".  The
 * string is owned by the program; valid until wrp_program_destroy().  Older
 * formats record no Warp version: wrp_program_warp_version() gives "". */
WRP_API uint32_t wrp_program_format_version(const wrp_program* program);
WRP_API const char* wrp_program_format_description(const wrp_program* program);

/* "" when this library replays the file's format; else the reason a replay
 * (opening without validate_only) fails with WRP_ERR_INCOMPATIBLE, e.g.
 * "format 16 (written by Warp 1.18.0): Warp 1.19.0 loads only format 18;
 * convert it with `wrp upgrade IN OUT`".  Owned by the program. */
WRP_API const char* wrp_program_upgrade_message(const wrp_program* program);

/* What wrp-replay says when a replay dies of a fatal signal and the op is
 * not known (Warp runs the whole graph in one call): which modules had their
 * SHA-256 verified before they ran.  Owned by the program; valid until
 * wrp_program_destroy(). */
WRP_API const char* wrp_program_crash_context(const wrp_program* program);

/* Lint warnings of the file: findings that are no errors, in the words
 * `wrp validate` prints them (e.g. "ops[3]: launch of kernel 'k' runs 300
 * threads but its largest array argument holds 256 elements: ...", a launch
 * past its arrays unless the kernel guards its indices).  Counted with
 * semantic checks only.  Owned by the program; "" for an index out of range. */
WRP_API size_t wrp_program_num_warnings(const wrp_program* program);
WRP_API const char* wrp_program_warning(const wrp_program* program, size_t index);

/* Number of top-level ops of the graph (as `wrp inspect --ops` numbers them;
 * an IF or WHILE counts once); 0 for a NULL program. */
WRP_API size_t wrp_program_num_ops(const wrp_program* program);

/* What a crash report says about top-level op `index`; see
 * wrp_program_op_info().  Strings are owned by the program and valid until
 * the next wrp_program_op_info() call on it or wrp_program_destroy(). */
typedef struct wrp_op_info {
    /* "op 3 (KERNEL_LAUNCH of kernel 'k', module 'wp_m.o')" */
    const char* summary;
    /* The op's type name: "KERNEL_LAUNCH", "MEMCPY_H2D", "WHILE", ... */
    const char* kind;
    /* A launch's kernel key and module file name; "" for other ops. */
    const char* kernel;
    const char* module;
    /* Nonzero when that module's SHA-256 was verified before it ran. */
    int module_verified;
    /* What that means for a crash, e.g. "Module 'wp_m.o': no digest was
     * recorded, so corrupt or mismatched kernel code cannot be caught ...";
     * for an op that launches no kernel, the text of
     * wrp_program_crash_context(). */
    const char* note;
} wrp_op_info;

/* Describe top-level op `index` (0 <= index < wrp_program_num_ops()). */
WRP_API wrp_status wrp_program_op_info(wrp_program* program, size_t index, wrp_op_info* out_info);

/* The same for the op an op slot names: op `seq` counting every op at every
 * depth in file order (the slot's seq), inside top-level op `index`; the
 * summary names `index` with the nested op's kind, kernel and module. */
WRP_API wrp_status wrp_program_slot_op_info(wrp_program* program, size_t index, size_t seq, wrp_op_info* out_info);

/* Number of bindings; 0 for a NULL program. */
WRP_API size_t wrp_program_num_bindings(const wrp_program* program);

/* Describe binding `index` (0 <= index < wrp_program_num_bindings()). */
WRP_API wrp_status wrp_program_binding(const wrp_program* program, size_t index, wrp_binding_info* out_info);

/* Index of the binding called `name`. */
WRP_API wrp_status wrp_program_find_binding(const wrp_program* program, const char* name, size_t* out_index);

/* Copy `size` bytes into / out of binding `name`.  `size` must equal the
 * binding's size exactly.  For CUDA programs the copies are complete when
 * the call returns. */
WRP_API wrp_status wrp_program_set(wrp_program* program, const char* name, const void* data, size_t size);
WRP_API wrp_status wrp_program_get(wrp_program* program, const char* name, void* data, size_t size);

/* Zero-copy access: the address of binding `name`'s memory (a host pointer
 * for CPU programs, a CUDA device pointer for CUDA programs) and its size.
 * Valid until wrp_program_destroy(); replays read and write it in place. */
WRP_API wrp_status wrp_program_data_ptr(wrp_program* program, const char* name, void** out_ptr, size_t* out_size);

/* The op slot of a program opened with op_slots: the address of the
 * 128-byte record the replay writes before each op (host memory, valid until
 * wrp_program_destroy()), or NULL when op_slots was not asked for or the graph
 * cannot hold slots (a CUDA program, an older format, no ops); then
 * wrp_program_op_slots_missing() says why (else ""). */
WRP_API const void* wrp_program_op_slot(const wrp_program* program);
WRP_API const char* wrp_program_op_slots_missing(const wrp_program* program);

/* Install a handler for the fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGABRT) that, as the process dies, writes the 128 bytes at `slot` to file
 * descriptor `fd` at offset 0 (a shared memory file the parent reads after the
 * process died), then hands the signal to the handler that was there before
 * (or the default action).  Async-signal-safe.  Calling it again replaces the
 * slot and fd; `slot` NULL uninstalls it. */
WRP_API wrp_status wrp_guard_op_slot(const void* slot, int fd);

/* Replay the whole graph `count` times, one after the other.  Returns when
 * all replays have completed (CUDA: after synchronizing the stream). */
WRP_API wrp_status wrp_program_run(wrp_program* program, uint32_t count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WRP_REPLAY_H */
