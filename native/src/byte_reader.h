// byte_reader.h -- bounds-checked little-endian reads from an untrusted image.
//
// Offsets are absolute positions in the file, so every error message can say
// exactly where the bad byte is.  A reader is confined to [begin, end) (one
// section or one record); nothing outside that window can be read through it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "WRP1 files are little-endian and are read in place; a little-endian host is required"
#endif

namespace wrp {

// Unchecked load of a little-endian T at `p` (any alignment).  Callers have
// already checked that sizeof(T) bytes are available.
template <typename T> inline T load(const uint8_t* p)
{
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Strict UTF-8, as Python's decoder accepts it: no overlong forms, no
// surrogates, nothing above U+10FFFF.  wrpkit refuses strings that are not.
inline bool is_utf8(const uint8_t* s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t min, cp;
        if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; cp = c & 0x07; }
        else return false;
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

inline bool is_utf8(const std::string& s) { return is_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

class ByteReader {
public:
    // `where` names the structure being read, e.g. "metadata.modules[3]".
    ByteReader(const uint8_t* image, uint64_t begin, uint64_t end, std::string where)
        : image_(image)
        , pos_(begin)
        , end_(end)
        , where_(std::move(where))
    {
    }

    uint64_t pos() const { return pos_; }
    uint64_t end() const { return end_; }
    uint64_t remaining() const { return end_ - pos_; }
    const std::string& where() const { return where_; }
    void set_where(std::string where) { where_ = std::move(where); }

    template <typename T> T read(const char* field)
    {
        need(sizeof(T), field);
        T v = load<T>(image_ + pos_);
        pos_ += sizeof(T);
        return v;
    }

    // A WRP1 string: u32 length then that many bytes (no NUL).  Strings that
    // later become C strings for Warp or file names must not contain NUL, so
    // that is checked here once for all of them.
    std::string read_string(const char* field, uint32_t max_len)
    {
        uint64_t at = pos_;
        uint32_t len = read<uint32_t>(field);
        if (len > max_len)
            fail_invalid_at(where_ + "." + field, at, "string length %u exceeds the limit of %u bytes", len, max_len);
        if (len > remaining())
            fail_invalid_at(where_ + "." + field, at, "string length %u runs past the end (%llu bytes left)", len,
                            static_cast<unsigned long long>(remaining()));
        std::string s(reinterpret_cast<const char*>(image_ + pos_), len);
        if (s.find('\0') != std::string::npos)
            fail_invalid_at(where_ + "." + field, at, "string contains a NUL byte");
        if (!is_utf8(s))
            fail_invalid_at(where_ + "." + field, at, "string is not valid UTF-8");
        pos_ += len;
        return s;
    }

    // Skip `n` bytes (e.g. region data) after checking they are present.
    void skip(uint64_t n, const char* field)
    {
        need(n, field);
        pos_ += n;
    }

    void need(uint64_t n, const char* field) const
    {
        if (n > remaining())
            fail_invalid_at(where_ + "." + field, pos_, "truncated: needs %llu bytes, %llu left",
                            static_cast<unsigned long long>(n), static_cast<unsigned long long>(remaining()));
    }

private:
    const uint8_t* image_;
    uint64_t pos_;
    uint64_t end_;
    std::string where_;
};

}  // namespace wrp
