// wrpk_unpack.cpp -- test tool (not installed): write the WRP1 image that
// libwrp_replay rebuilds from a .wrpk, and the module binaries it hands to
// Warp, so tests can compare them byte for byte with `wrp convert`'s output.
//
//   wrpk-unpack BUNDLE.wrpk OUT.wrp [--no-verify]
//
// writes OUT.wrp and OUT_modules/<binary_filename> for every module binary
// the bundle carries.  Exit status: 0 ok, 3 invalid bundle, 2 usage.
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>

#include "error.h"
#include "mapped_file.h"
#include "module_files.h"
#include "wrp1_validator.h"
#include "wrpk_reader.h"

namespace {

bool write_file(const std::string& path, const uint8_t* data, size_t size)
{
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f)
        return false;
    bool ok = std::fwrite(data, 1, size, f) == size;
    return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 3 || argc > 4 || (argc == 4 && std::strcmp(argv[3], "--no-verify") != 0)) {
        std::fprintf(stderr, "usage: wrpk-unpack BUNDLE.wrpk OUT.wrp [--no-verify]\n");
        return 2;
    }
    try {
        wrp::MappedFile file = wrp::MappedFile::open(argv[1], uint64_t(1) << 40, "file");
        wrp::WrpkOptions opts;
        opts.verify_checksums = argc != 4;
        opts.map_source_pages = true;  // MappedFile is MAP_SHARED: the image maps the data pages
        wrp::WrpkBundle b = wrp::decode_wrpk(file.data(), file.size(), opts);
        {
            wrp::OffsetNote note(wrp::kWrpkImageOffsetNote);
            wrp::validate_wrp1(b.image.get(), b.image_size, wrp::ValidationLimits());
        }
        std::string out = argv[2];
        if (!write_file(out, b.image.get(), b.image_size)) {
            std::perror(out.c_str());
            return 1;
        }
        std::string dir = wrp::modules_dir_for(out);
        for (const wrp::WrpkModule& m : b.modules) {
            if (!m.has_binary || !wrp::is_plain_basename(m.binary_filename))
                continue;
            mkdir(dir.c_str(), 0755);
            if (!write_file(dir + "/" + m.binary_filename, m.data, m.size)) {
                std::perror(m.binary_filename.c_str());
                return 1;
            }
        }
    } catch (const wrp::Error& e) {
        std::fprintf(stderr, "wrpk-unpack: error: %s\n", e.what());
        return e.status() == WRP_ERR_INVALID_FILE ? 3 : 1;
    }
    return 0;
}
