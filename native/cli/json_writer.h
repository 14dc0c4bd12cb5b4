// json_writer.h -- just enough JSON output for `wrp-replay --json`.
#pragma once

#include <cstdio>
#include <string>

namespace wrpcli {

inline std::string json_string(const std::string& s)
{
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    return out + "\"";
}

// The one JSON line --json prints for a failure; `extra` adds members (", \"crash\": {...}").
inline std::string error_json(const std::string& message, int code, const std::string& extra = "")
{
    return "{\"error\": " + json_string(message) + ", \"exit_code\": " + std::to_string(code) + extra + "}\n";
}

inline std::string json_number(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6f", v);
    return buf;
}

}  // namespace wrpcli
