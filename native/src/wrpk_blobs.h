// wrpk_blobs.h -- the container half of the .wrpk reader (wrpk_reader.cpp reads the manifest):
// the 128-byte header, the blob area (tiling, padding, SHA-256 of every blob) and the placing of
// region data into the WRP1 image.  The checks are WRPK-FORMAT.md "What a reader checks", steps
// 1, 5 and 6, as wrpkit/formats/wrpk/blobs.py makes them.  Internal to the reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wrpk_reader.h"

namespace wrp {
namespace wrpk_blobs {

// BlobRef::memory_offset of a blob that is not region data.
constexpr uint64_t kNotMapped = ~uint64_t(0);

struct BlobRef {
    std::string name;  // "region 3 initial data"
    std::string path;  // "regions[2].data"
    uint64_t offset;
    uint64_t length;
    const uint8_t* sha;
    uint32_t sha_len;
    uint64_t at;  // bundle offset of the Blob table
    const uint8_t** data_out;
    size_t* size_out;
    // Region data: its offset in the WRP1 MEMORY section (the version-2 tiling rule); else kNotMapped.
    uint64_t memory_offset;
    // Region data: the region's id (0 for a module's blob).
    uint32_t region_id;
    // Region data that no validation reads (not a mesh's): its checksum may be verified while Warp loads.
    bool deferrable = false;
    // Chunk digests (Blob.chunk_length / chunk_sha256): 0 and none when the writer left them out.
    uint64_t chunk_length = 0;
    const uint8_t* chunk_sha = nullptr;
    uint32_t chunk_sha_len = 0;
};

struct RegionOut {
    uint32_t id;
    uint32_t element_size;
    uint64_t size;
    bool has_data;
    uint64_t memory_offset;  // of its data (if any) in the WRP1 MEMORY section
    const uint8_t* data = nullptr;
    size_t data_size = 0;
};

struct HeaderValues {
    uint32_t version;
    uint64_t manifest_size;
    uint64_t blob_off;
    uint64_t blob_size;
};

// Step 1: the header's fields (and the file's size against them).
HeaderValues check_header(const uint8_t* data, size_t size);

// Steps 5 and 6 for every blob, except that region data other than mesh regions
// (`deferrable`) goes to `deferred` when it is given.  Points each blob's data_out into `data`.
void check_blobs(std::vector<BlobRef>& blobs, const uint8_t* data, uint64_t boff, uint64_t bsize, uint32_t version,
                 bool verify, std::vector<WrpkChecksum>* deferred);

// The system's page size, or 0 if it is not a power of two.
size_t page_size();

// Puts region data into the image: the whole pages of a region's data are mapped from
// the caller's buffer where they line up (dst and src congruent modulo the page size),
// the rest is copied.  The image is reserved at the shift that lines up the largest
// region's data; a version-2 bundle places every large region so that all of them do.
class ImagePlacer {
public:
    ImagePlacer(bool enabled, uint64_t memory_section, const std::vector<RegionOut>& regions,
                const std::vector<char>& mappable);

    size_t shift() const { return shift_; }

    // Put `n` bytes of `src` at `dst`; returns how many of them were mapped rather than copied.
    size_t place(uint8_t* dst, const uint8_t* src, size_t n);

private:
    size_t page_;
    size_t shift_ = 0;
    bool enabled_ = false;
};

}  // namespace wrpk_blobs
}  // namespace wrp
