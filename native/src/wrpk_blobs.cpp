// wrpk_blobs.cpp -- see wrpk_blobs.h (the bundle's header, blob area and checksums, and the WRP1
// image's memory), and the checksum verifier and image buffer of wrpk_reader.h.
#include "wrpk_blobs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <sys/mman.h>
#include <unistd.h>

#include "byte_reader.h"
#include "checked_math.h"
#include "error.h"
#include "mapped_file.h"
#include "sha256.h"
#include "wrpk_layout.h"

namespace wrp {
namespace wrpk_blobs {

// The header's layout, the tiling rules and the limits (generated from wrpkit/formats/wrpk/tables.py).
using namespace wrpk_layout;

namespace {

constexpr uint64_t align64(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

template <typename T> T header_field(const uint8_t* data, const HeaderField& f)
{
    static_assert(sizeof(T) <= 8, "header fields read as integers are at most 8 bytes");
    return load<T>(data + f.offset);
}

bool known_version(uint32_t v)
{
    for (uint32_t k : kContainerVersions)
        if (k == v)
            return true;
    return false;
}

}  // namespace

HeaderValues check_header(const uint8_t* data, size_t size)
{
    static_assert(kHeaderReserved.offset + kHeaderReserved.size == kHeaderSize, "the header's fields fill it");
    if (size < kHeaderSize)
        fail_invalid_at("header", 0, "file is %zu bytes, too small for the %llu-byte WRPK header; the file is "
                        "truncated or is not a .wrpk bundle", size, static_cast<unsigned long long>(kHeaderSize));
    if (std::memcmp(data + kHeaderMagic.offset, kMagic, kHeaderMagic.size) != 0) {
        bool text_mode = std::memcmp(data, "WRPK", 4) == 0;
        fail_invalid_at(kHeaderMagic.name, kHeaderMagic.offset, "bad magic %s, expected \"WRPK\\r\\n\\x1a\\n\": %s%s",
                        quoted(std::string(reinterpret_cast<const char*>(data), 8)).c_str(),
                        std::memcmp(data, "WRP1", 4) == 0 ? "a WRP1 .wrp capture" : "not a .wrpk bundle",
                        text_mode ? " (a mangled line-ending guard means a text-mode transfer: copy the file in binary "
                                    "mode)" : "");
    }
    HeaderValues h;
    h.version = header_field<uint32_t>(data, kHeaderContainerVersion);
    if (!known_version(h.version)) {
        std::string known;
        for (uint32_t k : kContainerVersions)
            known += (known.empty() ? "" : " and ") + std::to_string(k);
        fail_invalid_at(kHeaderContainerVersion.name, kHeaderContainerVersion.offset,
                        "container version %u is not supported (this build reads %s); rebuild the bundle with this "
                        "wrpkit", h.version, known.c_str());
    }
    if (uint32_t flags = header_field<uint32_t>(data, kHeaderFlags))
        fail_invalid_at(kHeaderFlags.name, kHeaderFlags.offset, "flags must be 0, found 0x%x", flags);
    for (uint32_t i = 0; i < kHeaderReserved.size; i++)
        if (data[kHeaderReserved.offset + i])
            fail_invalid_at(kHeaderReserved.name, kHeaderReserved.offset, "reserved bytes must be zero");
    uint64_t moff = header_field<uint64_t>(data, kHeaderManifestOffset);
    uint64_t msize = header_field<uint64_t>(data, kHeaderManifestSize);
    uint64_t boff = header_field<uint64_t>(data, kHeaderBlobAreaOffset);
    uint64_t bsize = header_field<uint64_t>(data, kHeaderBlobAreaSize);
    if (moff != kHeaderSize)
        fail_invalid_at(kHeaderManifestOffset.name, kHeaderManifestOffset.offset,
                        "manifest must start at byte %llu, found %llu", static_cast<unsigned long long>(kHeaderSize),
                        static_cast<unsigned long long>(moff));
    if (msize < 8 || msize > kMaxManifest)
        fail_invalid_at(kHeaderManifestSize.name, kHeaderManifestSize.offset,
                        "manifest size %llu is not between 8 bytes and 2 GiB", static_cast<unsigned long long>(msize));
    uint64_t expect = align64(kHeaderSize + msize);
    if (boff != expect)
        fail_invalid_at(kHeaderBlobAreaOffset.name, kHeaderBlobAreaOffset.offset,
                        "blob area must start at byte %llu (the manifest's end rounded up to %llu), found %llu",
                        static_cast<unsigned long long>(expect), static_cast<unsigned long long>(kAlign),
                        static_cast<unsigned long long>(boff));
    if (boff > size || bsize != size - boff) {
        bool truncated = boff > size || bsize > size - boff;
        fail_invalid_at(kHeaderBlobAreaSize.name, kHeaderBlobAreaSize.offset,
                        "file is %zu bytes but its header describes %s bytes (%s); the file is truncated or is not a "
                        ".wrpk bundle",
                        size, bsize > UINT64_MAX - boff ? "more than 2^64" : std::to_string(boff + bsize).c_str(),
                        truncated ? "truncated" : "trailing bytes");
    }
    h.manifest_size = msize;
    h.blob_off = boff;
    h.blob_size = bsize;
    return h;
}

namespace {

// Where the tiling rule puts a blob of `length` bytes after a blob ending at `end`
// (wrpkit.formats.wrpk.tables.place_blob).  `memory_offset`: for region data, its
// offset in the WRP1 MEMORY section, else kNotMapped.  Returns false on overflow.

bool place_blob(uint64_t end, uint64_t length, uint64_t memory_offset, uint32_t version, uint64_t* out)
{
    if (version >= kMapFromVersion && memory_offset != kNotMapped && length >= kMapMinBlob) {
        static_assert(kMapAlign && (kMapAlign & (kMapAlign - 1)) == 0, "kMapAlign is a power of two");
        uint64_t pad = (memory_offset - end) & (kMapAlign - 1);  // (memory_offset - end) mod kMapAlign
        return add_ok(end, pad, out);
    }
    if (end > UINT64_MAX - (kAlign - 1))
        return false;
    *out = align64(end);
    return true;
}

// How many chunk digests a blob of `length` bytes has (tables.chunk_count in wrpkit).
uint64_t chunk_count(uint64_t length, uint64_t chunk_length)
{
    return length / chunk_length + (length % chunk_length != 0);
}

// A blob's chunk digest fields (WRPK-FORMAT.md "Chunk digests"; blobs.check_chunk_fields in wrpkit):
// chunk_length 0 and no digests, or a power of two >= kMinDigestChunk and 32 bytes per chunk.
void check_chunk_fields(const BlobRef& b)
{
    if (b.chunk_length == 0) {
        if (b.chunk_sha_len)
            fail_invalid_at(b.path + ".chunk_sha256", b.at, "chunk digests of %s are given but its chunk_length is 0",
                            b.name.c_str());
        return;
    }
    if (!is_pow2(b.chunk_length) || b.chunk_length < kMinDigestChunk)
        fail_invalid_at(b.path + ".chunk_length", b.at, "chunk_length %llu of %s is not a power of two of at least "
                        "%llu", static_cast<unsigned long long>(b.chunk_length), b.name.c_str(),
                        static_cast<unsigned long long>(kMinDigestChunk));
    uint64_t chunks = chunk_count(b.length, b.chunk_length);
    if (uint64_t(b.chunk_sha_len) != 32 * chunks)
        fail_invalid_at(b.path + ".chunk_sha256", b.at, "chunk digests of %s must be %llu bytes (32 per %llu-byte "
                        "chunk), found %u", b.name.c_str(), static_cast<unsigned long long>(32 * chunks),
                        static_cast<unsigned long long>(b.chunk_length), b.chunk_sha_len);
}

}  // namespace

// Step 5, and step 6 for every blob, except that region data other than mesh regions
// (`deferrable`) goes to `deferred` when it is given.
void check_blobs(std::vector<BlobRef>& blobs, const uint8_t* data, uint64_t boff, uint64_t bsize, uint32_t version,
                 bool verify, std::vector<WrpkChecksum>* deferred)
{
    std::vector<BlobRef*> entries;
    for (BlobRef& b : blobs) {
        if (version < kMapFromVersion || b.length < kMapMinBlob)
            b.memory_offset = kNotMapped;  // this blob keeps the 64-byte rule
        if (b.length == 0) {
            if (b.offset || b.sha_len || b.chunk_length || b.chunk_sha_len)
                fail_invalid_at(b.path, b.at, "empty blob of %s must have offset 0 and no SHA-256", b.name.c_str());
        } else {
            if (b.sha_len != 32)
                fail_invalid_at(b.path + ".sha256", b.at, "SHA-256 of %s must be 32 bytes, found %u", b.name.c_str(),
                                b.sha_len);
            check_chunk_fields(b);
            if (b.memory_offset == kNotMapped && b.offset % kAlign)
                fail_invalid_at(b.path + ".offset", b.at, "blob offset %llu of %s is not a multiple of %llu",
                                static_cast<unsigned long long>(b.offset), b.name.c_str(),
                                static_cast<unsigned long long>(kAlign));
            if (!range_fits(b.offset, b.length, bsize))
                fail_invalid_at(b.path + ".length", b.at, "blob of %s (%llu bytes at %llu) runs past the %llu-byte blob "
                                "area", b.name.c_str(), static_cast<unsigned long long>(b.length),
                                static_cast<unsigned long long>(b.offset), static_cast<unsigned long long>(bsize));
            entries.push_back(&b);
        }
        if (b.data_out) {
            *b.data_out = data + boff + b.offset;
            *b.size_out = static_cast<size_t>(b.length);
        }
    }
    // The blobs tile the blob area in offset order: each where place_blob()
    // puts it after the previous one, zeros between.
    std::stable_sort(entries.begin(), entries.end(), [](const BlobRef* x, const BlobRef* y) {
        return x->offset != y->offset ? x->offset < y->offset : x->length < y->length;
    });
    uint64_t pos = 0;
    for (const BlobRef* b : entries) {
        uint64_t expect = 0;
        if (!place_blob(pos, b->length, b->memory_offset, version, &expect) || b->offset != expect)
            fail_invalid_at(b->path + ".offset", b->at, "blob of %s at %llu %s (expected at %llu)", b->name.c_str(),
                            static_cast<unsigned long long>(b->offset),
                            b->offset < pos ? "overlaps the previous blob" : "leaves a gap after the previous blob",
                            static_cast<unsigned long long>(expect));
        for (uint64_t i = pos; i < b->offset; i++)
            if (data[boff + i])
                fail_invalid_at("blob_area", boff + pos, "padding between blobs must be zero");
        pos = b->offset + b->length;
    }
    if (pos != bsize)
        fail_invalid_at("header.blob_area_size", 40, "the blobs end at %llu but the blob area is %llu bytes",
                        static_cast<unsigned long long>(pos), static_cast<unsigned long long>(bsize));
    if (!verify)
        return;
    std::vector<WrpkChecksum> now;
    for (const BlobRef* b : entries) {
        WrpkChecksum check{b->name, b->path, boff + b->offset, data + boff + b->offset,
                           static_cast<size_t>(b->length), {}, b->chunk_length, b->chunk_sha};
        std::memcpy(check.sha256.data(), b->sha, 32);
        if (deferred && b->deferrable)
            deferred->push_back(std::move(check));  // the caller verifies it while Warp loads
        else
            now.push_back(std::move(check));
    }
    verify_checksums(now);
}

size_t page_size()
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 && is_pow2(static_cast<uint64_t>(page)) ? static_cast<size_t>(page) : 0;
}

ImagePlacer::ImagePlacer(bool enabled, uint64_t memory_section, const std::vector<RegionOut>& regions,
            const std::vector<char>& mappable)
    : page_(page_size())
{
    if (!enabled || !page_)
        return;
    const RegionOut* best = nullptr;
    for (size_t i = 0; i < regions.size(); i++)
        if (mappable[i] && regions[i].data_size >= 2 * page_ && (!best || regions[i].data_size > best->data_size))
            best = &regions[i];
    if (!best)
        return;
    // image + memory_section + memory_offset == data  (mod page): unsigned wrap-around is intended.
    uint64_t src = reinterpret_cast<uintptr_t>(best->data);
    shift_ = static_cast<size_t>((src - memory_section - best->memory_offset) & (page_ - 1));
    enabled_ = true;
}

size_t ImagePlacer::place(uint8_t* dst, const uint8_t* src, size_t n)
{
    uintptr_t d = reinterpret_cast<uintptr_t>(dst);
    if (enabled_ && n >= 2 * page_ && (d - reinterpret_cast<uintptr_t>(src)) % page_ == 0) {
        uintptr_t lo = (d + page_ - 1) & ~uintptr_t(page_ - 1), hi = (d + n) & ~uintptr_t(page_ - 1);
        if (hi > lo) {
            size_t head = lo - d, middle = hi - lo;
            void* at = reinterpret_cast<void*>(lo);
            // old_size 0: a second mapping of the same (shared) pages, replacing the reserved ones.
            void* r = mremap(const_cast<uint8_t*>(src + head), 0, middle, MREMAP_MAYMOVE | MREMAP_FIXED, at);
            if (r == at) {
                guard_alias(at, middle, src + head);  // the file's pages: a fault there names the file too
                std::memcpy(dst, src, head);
                std::memcpy(reinterpret_cast<uint8_t*>(hi), src + head + middle, n - head - middle);
                return middle;
            }
            // Not a shared mapping: copy this region and every later one.  The reserved
            // pages are put back in case the failed call dropped them.
            enabled_ = false;
            if (r != MAP_FAILED || mmap(at, middle, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED
                                        | MAP_NORESERVE, -1, 0) == MAP_FAILED)
                fail_out_of_memory(middle, "out of memory on the host: cannot map %zu bytes of the bundle's "
                                   "WRP1 image", middle);
        }
    }
    std::memcpy(dst, src, n);
    return 0;
}

}  // namespace wrpk_blobs

using wrpk_blobs::chunk_count;
using wrpk_blobs::page_size;

bool is_wrpk(const uint8_t* data, size_t size) { return data && size >= 4 && std::memcmp(data, "WRPK", 4) == 0; }

ChecksumVerifier::ChecksumVerifier(const std::vector<WrpkChecksum>& checks)
{
    std::vector<const WrpkChecksum*> whole;
    for (const WrpkChecksum& c : checks)
        if (!c.chunk_length)
            whole.push_back(&c);
    std::stable_sort(whole.begin(), whole.end(), [](const WrpkChecksum* x, const WrpkChecksum* y) {
        return x->size > y->size;
    });
    for (const WrpkChecksum* c : whole)
        items_.push_back(Item{c, 0, c->size, ~uint64_t(0)});
    for (const WrpkChecksum& c : checks) {
        if (!c.chunk_length)
            continue;
        // check_chunk_fields() checked chunk_length and the digests' size against the blob's.
        for (uint64_t begin = 0, k = 0; begin < c.size; begin += c.chunk_length, k++)
            items_.push_back(Item{&c, begin, std::min<uint64_t>(c.size, begin + c.chunk_length), k});
    }
    for (const WrpkChecksum& c : checks)
        bytes_ += c.size;
}

void ChecksumVerifier::verify(size_t index)
{
    const Item& it = items_[index];
    const WrpkChecksum& c = *it.check;
    const bool whole = it.chunk == ~uint64_t(0);
    const uint8_t* expect = whole ? c.sha256.data() : c.chunk_sha + 32 * it.chunk;
    uint8_t digest[32];
    // The bytes are the mapped file's: one truncated meanwhile faults here, which guarded_read turns
    // into "... changed while being read" (sha256 holds nothing to destroy: a siglongjmp is safe).
    struct HashJob {
        const uint8_t* data;
        size_t size;
        uint8_t* out;
    } job{c.data + it.begin, static_cast<size_t>(it.end - it.begin), digest};
    const void* fault_at = nullptr;
    bool read = guarded_read([](void* a) {
        auto* j = static_cast<HashJob*>(a);
        sha256(j->data, j->size, j->out);
    }, &job, &fault_at);
    if (read && std::memcmp(digest, expect, 32) == 0)
        return;
    failed_.store(true, std::memory_order_relaxed);
    try {
        if (!read)
            fail(WRP_ERR_INVALID_FILE, "%s", mapped_fault_message(fault_at).c_str());
        if (whole)
            fail_invalid_at(c.path, c.offset,
                            "integrity check failed: SHA-256 of %s does not match (%zu bytes, SHA-256 %s, recorded "
                            "%s): the bundle was altered or corrupted; rebuild it from the original capture",
                            c.name.c_str(), c.size, to_hex(digest, 32).c_str(), to_hex(expect, 32).c_str());
        uint64_t chunks = chunk_count(c.size, c.chunk_length);
        fail_invalid_at(c.path + ".chunk_sha256", c.offset + it.begin,
                        "integrity check failed: SHA-256 of %s does not match in chunk %llu of %llu (bytes %llu..%llu "
                        "of %zu, SHA-256 %s, recorded %s): the bundle was altered or corrupted; rebuild it from the "
                        "original capture", c.name.c_str(), static_cast<unsigned long long>(it.chunk),
                        static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(it.begin),
                        static_cast<unsigned long long>(it.end), c.size, to_hex(digest, 32).c_str(),
                        to_hex(expect, 32).c_str());
    } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (index < error_index_) {
            error_index_ = index;
            error_ = std::current_exception();
        }
    }
}

void ChecksumVerifier::work() noexcept
{
    while (!failed_.load(std::memory_order_relaxed)) {
        size_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= items_.size())
            return;
        verify(i);
    }
}

void ChecksumVerifier::rethrow() const
{
    if (error_)
        std::rethrow_exception(error_);
}

namespace {

// Below this much hashing, a caller that is free verifies alone (a thread costs more than it saves).
constexpr uint64_t kParallelHashBytes = 8u << 20;
// No more hashing threads than this, however many cores (memory bandwidth is shared).
constexpr size_t kMaxHashThreads = 32;

}  // namespace

VerifierThreads::VerifierThreads(ChecksumVerifier& verifier, bool busy_caller)
{
    size_t cores = std::thread::hardware_concurrency();
    size_t want = cores > 1 ? cores - 1 : 1;
    if (!busy_caller)
        want = verifier.bytes() < kParallelHashBytes || verifier.items() < 2 ? 0 : std::min(want, verifier.items() - 1);
    want = std::min({want, verifier.items(), kMaxHashThreads});
    for (size_t i = 0; i < want; i++) {
        try {
            threads_.emplace_back([&verifier] { verifier.work(); });
        } catch (const std::system_error&) {
            break;  // the caller's own work() covers what these threads would have done
        }
    }
}

void VerifierThreads::join()
{
    for (std::thread& t : threads_)
        if (t.joinable())
            t.join();
    threads_.clear();
}

void verify_checksums(const std::vector<WrpkChecksum>& checks)
{
    if (checks.empty())
        return;
    ChecksumVerifier verifier(checks);
    {
        VerifierThreads threads(verifier, false);
        verifier.work();
    }
    verifier.rethrow();
}

ImageBuffer::ImageBuffer(ImageBuffer&& other) noexcept
    : base_(other.base_)
    , length_(other.length_)
    , data_(other.data_)
{
    other.base_ = nullptr;
    other.length_ = 0;
    other.data_ = nullptr;
}

ImageBuffer& ImageBuffer::operator=(ImageBuffer&& other) noexcept
{
    if (this != &other) {
        this->~ImageBuffer();
        new (this) ImageBuffer(std::move(other));
    }
    return *this;
}

ImageBuffer::~ImageBuffer()
{
    if (base_) {
        unguard_range(base_, length_);
        munmap(base_, length_);  // the reserved memory and every file page mapped into it
    }
}

ImageBuffer ImageBuffer::reserve(size_t size, size_t shift)
{
    size_t page = page_size() ? page_size() : 4096;
    uint64_t length = 0;
    if (!add_ok(size, shift, &length) || !add_ok(length, page - 1, &length) || length > SIZE_MAX)
        fail_out_of_memory(size, "out of memory on the host: a WRP1 image of %zu bytes does not fit the address "
                           "space", size);
    length &= ~uint64_t(page - 1);
    // Never touched pages cost nothing: listing a bundle (validate_only) leaves its data pages alone.
    void* p = mmap(nullptr, static_cast<size_t>(length), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        fail_out_of_memory(length, "out of memory on the host: cannot reserve %zu bytes for the bundle's WRP1 "
                           "image: %s", static_cast<size_t>(length), std::strerror(errno));
    ImageBuffer b;
    b.base_ = p;
    b.length_ = static_cast<size_t>(length);
    b.data_ = static_cast<uint8_t*>(p) + shift;
    return b;
}

}  // namespace wrp
