// sha256_check.cpp -- test tool (not installed): SHA-256 of files, by the
// code libwrp_replay uses (SHA extensions where the CPU has them) and by the
// portable code, so that tests can compare both with Python's hashlib.
//
//   sha256-check FILE...
//
// prints "accelerated: yes|no", then per file "<sha256()> <sha256_portable()> <path>".
// Exit status: 0 ok, 1 a file could not be read, 2 usage.
#include <cstdio>
#include <vector>

#include "sha256.h"

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: sha256-check FILE...\n");
        return 2;
    }
    std::printf("accelerated: %s\n", wrp::sha256_uses_cpu_extensions() ? "yes" : "no");
    for (int i = 1; i < argc; i++) {
        FILE* f = std::fopen(argv[i], "rb");
        if (!f)
            return 1;
        std::vector<uint8_t> data;
        uint8_t buf[1 << 16];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
            data.insert(data.end(), buf, buf + n);
        std::fclose(f);
        uint8_t fast[32], plain[32];
        wrp::sha256(data.data(), data.size(), fast);
        wrp::sha256_portable(data.data(), data.size(), plain);
        std::printf("%s %s %s\n", wrp::to_hex(fast, 32).c_str(), wrp::to_hex(plain, 32).c_str(), argv[i]);
    }
    return 0;
}
