// wrpk_reader.h -- the .wrpk bundle (schema/WRPK-FORMAT.md): check it all,
// then rebuild the WRP1 image Warp's loader takes.
//
// decode_wrpk() performs every check of WRPK-FORMAT.md "What a reader checks"
// in its order, as wrpkit/formats/wrpk/reader.py (decode_wrpk) does:
//   1. the 128-byte header and the zero padding after the manifest;
//   2. the manifest's SHA-256 (always);
//   3. the FlatBuffer: identifier "WRPK", flatbuffers::Verifier (bounds,
//      alignment, vtables, strings, nesting depth, table count), then what the
//      Verifier does not check: booleans 0 or 1, union types known and their
//      tables present, 8-byte alignment and zero padding of Relocation
//      vectors, the Operation entries walked (shared IF/WHILE bodies) and
//      the size of the records as WRP1 (shared tables);
//   4. model consistency (format version, device and arch, ascending region
//      ids, region data blobs, launch shapes and adjoint params, variable
//      parts that must not be empty);
//   5. every Blob: 32-byte SHA-256, 64-byte-aligned offset inside the blob
//      area, blobs tiling the area with zero padding;
//   6. every blob's SHA-256 (unless verify_checksums is false).
// Then the program's records are re-encoded as WRP1 bytes (byte-identical to
// `wrp convert X.wrpk X.wrp`) in an anonymous mapping.  Region data is not
// copied where it can be mapped: with WrpkOptions::map_source_pages, the
// whole pages of a region's data that line up with the caller's buffer (a
// MAP_SHARED mapping of the bundle; container version 2 places large region
// data so that they do) are mapped from it with mremap(), so the image holds
// the file's page-cache pages rather than a second copy of the data; the
// partial pages at either end, and everything else, are copied once.
// Module binaries are NOT copied: the result points into the caller's buffer
// (typically the bundle's read-only mapping).
//
// Failures throw wrp::Error(WRP_ERR_INVALID_FILE): "<field> at byte <offset
// in the bundle>: <what>".  Checksum failures name the blob ("region 3
// initial data", "module wp___main___x.o").  The WRP1 image itself is then
// validated by the caller with validate_wrp1(), like any .wrp.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wrp {

// True when `data` starts like a .wrpk ("WRPK"); the full magic, with its
// text-mode-transfer guard bytes, is checked by decode_wrpk().
bool is_wrpk(const uint8_t* data, size_t size);

struct WrpkOptions {
    // Verify each blob's SHA-256 (step 6).  Steps 1-5 always run.
    bool verify_checksums = true;
    // Largest WRP1 image to build (ValidationLimits::max_file_bytes).
    uint64_t max_image_bytes = ~uint64_t(0);
    // Copy region data into the image.  False for a program that is only validated and
    // listed (--list, validate_only): the image's data bytes are then left untouched (never
    // read: the validator skips them), so listing a bundle costs its records, not its data.
    bool copy_region_data = true;
    // The caller's buffer is a MAP_SHARED mapping (Program::open_file's MappedFile): map the
    // region data's pages from it instead of copying them (falls back to copying otherwise).
    bool map_source_pages = false;
    // Step 6 for region data that no validation reads (every region but a mesh's): leave it to
    // the caller (WrpkBundle::deferred), who verifies it while Warp loads and fails the load on a
    // mismatch.  Module binaries and mesh regions are always verified here.
    bool defer_region_checksums = false;
};

// A blob whose SHA-256 is still to be verified (WrpkOptions::defer_region_checksums).
struct WrpkChecksum {
    std::string name;  // "region 3 initial data"
    std::string path;  // "regions[2].data"
    uint64_t offset;   // of the blob in the bundle
    const uint8_t* data;
    size_t size;
    std::array<uint8_t, 32> sha256;
    // Chunk digests (WRPK-FORMAT.md "Chunk digests"): when chunk_length is set, the blob is
    // verified chunk by chunk against chunk_sha (32 bytes per chunk, inside the bundle) instead
    // of against sha256, so that one large blob is hashed on several cores.
    uint64_t chunk_length = 0;
    const uint8_t* chunk_sha = nullptr;
};

// Verifies checksums on every thread that calls work(): each chunk of a blob with chunk
// digests, and each other blob whole, is one item, taken in turn through an atomic counter
// (whole blobs first, largest first: they take longest).  The checks' bytes must outlive it.
class ChecksumVerifier {
public:
    explicit ChecksumVerifier(const std::vector<WrpkChecksum>& checks);
    ChecksumVerifier(const ChecksumVerifier&) = delete;
    ChecksumVerifier& operator=(const ChecksumVerifier&) = delete;

    // Verify items until none is left or one has failed; safe to call on many threads at once.
    void work() noexcept;
    // Once every work() has returned: throws wrp::Error(WRP_ERR_INVALID_FILE) naming the blob
    // (and for a chunk, its byte range) of the first failed item found.
    void rethrow() const;
    size_t items() const { return items_.size(); }
    uint64_t bytes() const { return bytes_; }

private:
    struct Item {
        const WrpkChecksum* check;
        uint64_t begin, end;  // byte range in the blob
        uint64_t chunk;       // index of the chunk; ~0 for a whole blob
    };
    void verify(size_t index);

    std::vector<Item> items_;
    uint64_t bytes_ = 0;
    std::atomic<size_t> next_{0};
    std::atomic<bool> failed_{false};
    std::mutex mutex_;  // guards error_ and error_index_
    std::exception_ptr error_;
    size_t error_index_ = SIZE_MAX;
};

// Threads that call verifier.work() as soon as they start: for `busy_caller` (the caller
// loads the program meanwhile and joins the work after) hardware_concurrency() - 1 of them,
// at least 1; otherwise the caller works at once, and threads are started only for large
// work.  Never more than there are items.  A thread the system refuses is simply not started:
// the caller's own work() still verifies every item.
class VerifierThreads {
public:
    VerifierThreads(ChecksumVerifier& verifier, bool busy_caller);
    VerifierThreads(const VerifierThreads&) = delete;
    VerifierThreads& operator=(const VerifierThreads&) = delete;
    ~VerifierThreads() { join(); }
    void join();
    size_t count() const { return threads_.size(); }

private:
    std::vector<std::thread> threads_;
};

// Throws wrp::Error(WRP_ERR_INVALID_FILE) naming the first blob (or chunk) whose bytes do not
// match; verifies on several threads when there is much to hash.
void verify_checksums(const std::vector<WrpkChecksum>& checks);

// The WRP1 image: zeroed anonymous memory, possibly with file pages mapped into it.
class ImageBuffer {
public:
    ImageBuffer() = default;
    ImageBuffer(ImageBuffer&& other) noexcept;
    ImageBuffer& operator=(ImageBuffer&& other) noexcept;
    ImageBuffer(const ImageBuffer&) = delete;
    ImageBuffer& operator=(const ImageBuffer&) = delete;
    ~ImageBuffer();

    // `size` bytes whose first byte lies `shift` bytes past a page boundary, so that pages
    // of a mapped file can be placed at the image offsets their data belongs at.
    // Throws wrp::Error(WRP_ERR_OUT_OF_MEMORY) if the address space cannot be reserved.
    static ImageBuffer reserve(size_t size, size_t shift);

    uint8_t* get() const { return data_; }

private:
    void* base_ = nullptr;
    size_t length_ = 0;
    uint8_t* data_ = nullptr;
};

// One Module record of the bundle and its binary blob, if it carries one.
struct WrpkModule {
    std::string binary_filename;
    bool has_binary = false;
    const uint8_t* data = nullptr;  // inside the bundle's bytes
    size_t size = 0;
};

struct WrpkBundle {
    ImageBuffer image;  // the program as a WRP1 file
    size_t image_size = 0;
    size_t mapped_bytes = 0;  // of region data mapped from the caller's buffer, not copied
    std::vector<WrpkChecksum> deferred;  // with defer_region_checksums: still to verify
    std::vector<WrpkModule> modules;  // in manifest order
};

WrpkBundle decode_wrpk(const uint8_t* data, size_t size, const WrpkOptions& options);

// Where validate_wrp1() offsets point when it checks the image of a bundle.
extern const char* const kWrpkImageOffsetNote;

}  // namespace wrp
