// signature.cpp -- see signature.h; the rules are schema/SIGNATURE-RULES.md, in its order.
#include "signature.h"
#include "signature_internal.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unordered_set>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "error.h"
#include "mapped_file.h"
#include "module_files.h"

namespace wrp {

using namespace sig;

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxBundleBytes = uint64_t(64) << 20;     // step 2: refused before it is read
constexpr size_t kMaxSigBytes = 512;
constexpr size_t kMaxResources = 1000000;
constexpr size_t kMaxNameBytes = 4096;
constexpr long kMaxJsonDepth = 64;                           // a deeper document is no bundle (as Python's)
constexpr uint64_t kMaxKeptModuleBytes = uint64_t(1) << 30;  // the loader's cap on a module file

const char* const kBundleMediaPrefix = "application/vnd.dev.sigstore.bundle";
const char* const kPayloadType = "application/vnd.in-toto+json";
const char* const kStatementType = "https://in-toto.io/Statement/v1";
const char* const kPredicateType = "https://model_signing/signature/v1.0";

// --- text ----------------------------------------------------------------------------------

std::string hex(const uint8_t* bytes, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    std::string s(n * 2, '0');
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = digits[bytes[i] >> 4];
        s[2 * i + 1] = digits[bytes[i] & 15];
    }
    return s;
}

bool is_lower_hex64(const std::string& s)
{
    return s.size() == 64 &&
        std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string basename_of(const std::string& path)
{
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Strict base64: the standard alphabet, a length that is a multiple of 4, at most two '=' and only
// at the end.  False (and `out` unspecified) for anything else or a result over `max_out` bytes.
bool decode_base64(const std::string& text, std::string& out, size_t max_out)
{
    if (text.size() % 4 != 0)
        return false;
    size_t pad = 0;
    while (pad < text.size() && text[text.size() - 1 - pad] == '=')
        pad++;
    if (pad > 2)
        return false;
    size_t decoded = text.size() / 4 * 3 - pad;
    if (decoded > max_out)
        return false;
    out.clear();
    out.reserve(decoded);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < text.size() - pad; i++) {
        char c = text[i];
        uint32_t v;
        if (c >= 'A' && c <= 'Z')
            v = static_cast<uint32_t>(c - 'A');
        else if (c >= 'a' && c <= 'z')
            v = static_cast<uint32_t>(c - 'a' + 26);
        else if (c >= '0' && c <= '9')
            v = static_cast<uint32_t>(c - '0' + 52);
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else
            return false;
        acc = (acc << 6) | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xff);
        }
    }
    return out.size() == decoded;
}

// Whether no bracket of JSON text nests deeper than `cap` (strings skipped; counted exactly as
// wrpkit/formats/signature.py counts, so that both refuse the same documents).
bool json_depth_ok(const char* p, size_t n, long cap)
{
    long depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > cap)
                return false;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return true;
}

const json* member(const json& object, const char* key)
{
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
}

const std::string* string_member(const json& object, const char* key)
{
    const json* v = member(object, key);
    return v && v->is_string() ? v->get_ptr<const std::string*>() : nullptr;
}

// --- keys ----------------------------------------------------------------------------------

// The digest a signer certificate's EC key signs with: by its size (256: SHA-256, 384: SHA-384,
// 521: SHA-512, others SHA-256), as model-signing picks it; NULL for a key that is not EC.
const EVP_MD* size_digest(EVP_PKEY* k)
{
    if (!k || EVP_PKEY_get_base_id(k) != EVP_PKEY_EC)
        return nullptr;
    int bits = EVP_PKEY_get_bits(k);
    return bits == 384 ? EVP_sha384() : bits == 521 ? EVP_sha512() : EVP_sha256();
}

bool verify_ecdsa(EVP_PKEY* k, const std::string& sig, const std::string& message)
{
    const EVP_MD* md = size_digest(k);
    if (!md)
        return false;
    MdCtxPtr ctx(EVP_MD_CTX_new());
    if (!ctx)
        out_of_memory_in_openssl();
    bool ok = EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, k) == 1 &&
        EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                         reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
    ERR_clear_error();
    return ok;
}

}  // namespace

// --- shared with signature_keys.cpp (signature_internal.h) ---------------------------------

namespace sig {

std::string one_line(const std::string& s)
{
    std::string out;
    for (char ch : s) {
        unsigned char c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out;
}

std::string sha256_hex(const void* data, size_t size)
{
    uint8_t out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(data, size, out, &len, EVP_sha256(), nullptr) != 1 || len != 32) {
        ERR_clear_error();
        fail(WRP_ERR_INTERNAL, "SHA-256 failed in OpenSSL");
    }
    return hex(out, len);
}

bool read_fd(int fd, size_t limit, std::string& out, int& err)
{
    out.clear();
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = errno;
            return false;
        }
        if (n == 0)
            return true;
        out.append(buf, std::min(static_cast<size_t>(n), limit + 1 - out.size()));
        if (out.size() > limit)
            return true;
    }
}

}  // namespace sig

// --- the checks ----------------------------------------------------------------------------

namespace {

[[noreturn]] void untrusted(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void untrusted(const char* fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    std::string s = vformat(fmt, args);
    va_end(args);
    throw Error(WRP_ERR_UNTRUSTED, s);
}

// "signature malformed: PATH: DETAIL".
class Malformed {
public:
    explicit Malformed(const std::string& shown_path)
        : path_(shown_path)
    {
    }
    [[noreturn]] void operator()(const char* fmt, ...) const __attribute__((format(printf, 2, 3)))
    {
        va_list args;
        va_start(args, fmt);
        std::string detail = vformat(fmt, args);
        va_end(args);
        throw Error(WRP_ERR_UNTRUSTED, "signature malformed: " + path_ + ": " + detail);
    }

private:
    std::string path_;
};

json parse_json(const char* data, size_t size, const Malformed& malformed, const char* what)
{
    if (!json_depth_ok(data, size, kMaxJsonDepth))
        malformed("%s nests deeper than %ld levels", what, kMaxJsonDepth);
    // A byte order mark is no JSON (nlohmann would skip it; Python's json refuses it).
    if (size >= 3 && std::memcmp(data, "\xef\xbb\xbf", 3) == 0)
        malformed("%s is not JSON (it starts with a byte order mark)", what);
    json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        malformed("%s is not valid JSON", what);
    return j;
}

struct Bundle {
    std::string payload;  // decoded
    std::string sig;      // decoded DER
    bool key_bundle = false;
    bool has_hint = false;
    std::string hint;
    std::vector<std::string> certs;  // decoded DER, the signer's first
};

// Step 2.
Bundle parse_bundle(const uint8_t* bytes, size_t size, const Malformed& malformed)
{
    json root = parse_json(reinterpret_cast<const char*>(bytes), size, malformed, "the bundle");
    if (!root.is_object())
        malformed("the bundle is not a JSON object");
    const std::string* media = string_member(root, "mediaType");
    if (!media || media->compare(0, std::strlen(kBundleMediaPrefix), kBundleMediaPrefix) != 0)
        malformed("mediaType is not a string starting \"%s\"", kBundleMediaPrefix);
    const json* env = member(root, "dsseEnvelope");
    if (!env || !env->is_object())
        malformed("dsseEnvelope is not an object");
    const std::string* type = string_member(*env, "payloadType");
    if (!type || *type != kPayloadType)
        malformed("dsseEnvelope.payloadType is not \"%s\"", kPayloadType);
    Bundle b;
    const std::string* payload = string_member(*env, "payload");
    if (!payload || !decode_base64(*payload, b.payload, payload->size()))
        malformed("dsseEnvelope.payload is not a padded standard base64 string");
    const json* sigs = member(*env, "signatures");
    if (!sigs || !sigs->is_array() || sigs->empty())
        malformed("dsseEnvelope.signatures is not a non-empty array");
    const json& first = (*sigs)[0];
    const std::string* sig = first.is_object() ? string_member(first, "sig") : nullptr;
    if (!sig || !decode_base64(*sig, b.sig, kMaxSigBytes) || b.sig.empty())
        malformed("dsseEnvelope.signatures[0].sig is not base64 of 1 to %zu bytes", kMaxSigBytes);
    const json* vm = member(root, "verificationMaterial");
    if (!vm || !vm->is_object())
        malformed("verificationMaterial is not an object");
    if (const json* pk = member(*vm, "publicKey")) {
        if (!pk->is_object())
            malformed("verificationMaterial.publicKey is not an object");
        b.key_bundle = true;
        if (const json* hint = member(*pk, "hint")) {
            if (!hint->is_string() || !is_lower_hex64(hint->get_ref<const std::string&>()))
                malformed("verificationMaterial.publicKey.hint is not 64 lowercase hex digits");
            b.has_hint = true;
            b.hint = hint->get<std::string>();
        }
        return b;
    }
    const json* chain = member(*vm, "x509CertificateChain");
    if (!chain)
        malformed("verificationMaterial has neither publicKey nor x509CertificateChain");
    if (!chain->is_object())
        malformed("verificationMaterial.x509CertificateChain is not an object");
    const json* certs = member(*chain, "certificates");
    if (!certs || !certs->is_array() || certs->empty())
        malformed("verificationMaterial.x509CertificateChain.certificates is not a non-empty array");
    for (size_t i = 0; i < certs->size(); i++) {
        const json& c = (*certs)[i];
        const std::string* raw = c.is_object() ? string_member(c, "rawBytes") : nullptr;
        std::string der;
        if (!raw || !decode_base64(*raw, der, raw->size()))
            malformed("verificationMaterial.x509CertificateChain.certificates[%zu].rawBytes is not base64", i);
        b.certs.push_back(std::move(der));
    }
    return b;
}

std::string pae(const std::string& payload)
{
    return "DSSEv1 " + std::to_string(std::strlen(kPayloadType)) + " " + kPayloadType + " " +
        std::to_string(payload.size()) + " " + payload;
}

X509Ptr parse_der_certificate(const std::string& der)
{
    const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
    if (der.size() > static_cast<size_t>(INT32_MAX))
        return nullptr;
    X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
    ERR_clear_error();
    if (cert && p != reinterpret_cast<const unsigned char*>(der.data()) + der.size())
        cert.reset();
    return cert;
}

// Step 3 for a certificate bundle: the signer's public key once its chain and usage are accepted, else NULL.
EVP_PKEY* accepted_signer_key(const std::vector<X509Ptr>& chain, const TrustedKeys::Impl& keys)
{
    if (keys.certs.empty())
        return nullptr;
    X509* leaf = chain[0].get();
    StorePtr store(X509_STORE_new());
    CertStackPtr untrusted_certs(sk_X509_new_null());
    StoreCtxPtr ctx(X509_STORE_CTX_new());
    if (!store || !untrusted_certs || !ctx)
        out_of_memory_in_openssl();
    for (const X509Ptr& c : keys.certs)
        X509_STORE_add_cert(store.get(), c.get());  // takes its own reference; a duplicate is no error
    for (size_t i = 1; i < chain.size(); i++) {
        if (X509_up_ref(chain[i].get()) != 1)
            out_of_memory_in_openssl();
        if (!sk_X509_push(untrusted_certs.get(), chain[i].get())) {
            X509_free(chain[i].get());
            out_of_memory_in_openssl();
        }
    }
    ERR_clear_error();
    // As model-signing: the chain is checked as of the signer certificate's own notBefore.
    struct tm tm;
    std::memset(&tm, 0, sizeof(tm));
    const ASN1_TIME* not_before = X509_get0_notBefore(leaf);
    if (!not_before || ASN1_TIME_to_tm(not_before, &tm) != 1) {
        ERR_clear_error();
        return nullptr;
    }
    time_t when = timegm(&tm);
    if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted_certs.get()) != 1) {
        ERR_clear_error();
        return nullptr;
    }
    X509_STORE_CTX_set_time(ctx.get(), 0, when);
    int verified = X509_verify_cert(ctx.get());
    ERR_clear_error();
    if (verified != 1)
        return nullptr;
    // KeyUsage digitalSignature, else ExtendedKeyUsage codeSigning.
    uint32_t flags = X509_get_extension_flags(leaf);
    bool can_sign = (flags & EXFLAG_KUSAGE) && (X509_get_key_usage(leaf) & KU_DIGITAL_SIGNATURE);
    if (!can_sign)
        can_sign = (flags & EXFLAG_XKUSAGE) && (X509_get_extended_key_usage(leaf) & XKU_CODE_SIGN);
    ERR_clear_error();
    if (!can_sign)
        return nullptr;
    EVP_PKEY* key = X509_get0_pubkey(leaf);
    ERR_clear_error();
    return key;
}

// Step 3.
void check_signer(const Bundle& b, const TrustedKeys& trusted, const std::string& shown)
{
    const TrustedKeys::Impl& keys = trusted.impl();
    const std::string signed_bytes = pae(b.payload);
    std::string signer;
    if (b.key_bundle) {
        for (size_t i = 0; i < keys.keys.size(); i++) {
            if (b.has_hint && keys.fingerprints[i] != b.hint)
                continue;
            if (verify_ecdsa(keys.keys[i].get(), b.sig, signed_bytes))
                return;
        }
        signer = b.has_hint ? "by sha256:" + b.hint.substr(0, 16) : "with no key hint";
    } else {
        // A certificate that does not parse chains to nothing: no trusted key signed it.
        std::vector<X509Ptr> chain;
        for (size_t i = 0; i < b.certs.size(); i++) {
            X509Ptr c = parse_der_certificate(b.certs[i]);
            if (!c)
                break;
            chain.push_back(std::move(c));
        }
        EVP_PKEY* key = chain.size() == b.certs.size() ? accepted_signer_key(chain, keys) : nullptr;
        if (key && verify_ecdsa(key, b.sig, signed_bytes))
            return;
        signer = "by sha256:" + sha256_hex(b.certs[0].data(), b.certs[0].size()).substr(0, 16);
    }
    untrusted("not signed by a trusted key: %s was signed %s (%zu trusted key(s))", shown.c_str(), signer.c_str(),
              keys.count);
}

// A resource name: 1 to 4096 bytes, no NUL or backslash, not absolute, no empty, "." or ".." part.
bool valid_resource_name(const std::string& name)
{
    if (name.empty() || name.size() > kMaxNameBytes || name[0] == '/')
        return false;
    if (name.find('\0') != std::string::npos || name.find('\\') != std::string::npos)
        return false;
    size_t start = 0;
    for (;;) {
        size_t slash = name.find('/', start);
        std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        if (part.empty() || part == "." || part == "..")
            return false;
        if (slash == std::string::npos)
            return true;
        start = slash + 1;
    }
}

// Step 4: name -> digest (hex) of every resource.
std::map<std::string, std::string> parse_statement(const std::string& payload, const Malformed& malformed)
{
    json st = parse_json(payload.data(), payload.size(), malformed, "the statement (payload)");
    if (!st.is_object())
        malformed("the statement is not a JSON object");
    const std::string* type = string_member(st, "_type");
    if (!type || *type != kStatementType)
        malformed("the statement's _type is not \"%s\"", kStatementType);
    const std::string* ptype = string_member(st, "predicateType");
    if (!ptype || *ptype != kPredicateType)
        malformed("the statement's predicateType is not \"%s\"", kPredicateType);
    const json* subject = member(st, "subject");
    if (!subject || !subject->is_array() || subject->size() != 1 || !(*subject)[0].is_object())
        malformed("the statement's subject is not an array of exactly one object");
    const json* sdigest = member((*subject)[0], "digest");
    const std::string* subject_sha = sdigest && sdigest->is_object() ? string_member(*sdigest, "sha256") : nullptr;
    if (!subject_sha || !is_lower_hex64(*subject_sha))
        malformed("subject[0].digest.sha256 is not 64 lowercase hex digits");
    const json* predicate = member(st, "predicate");
    if (!predicate || !predicate->is_object())
        malformed("the statement's predicate is not an object");
    const json* ser = member(*predicate, "serialization");
    const std::string* method = ser && ser->is_object() ? string_member(*ser, "method") : nullptr;
    if (!method || *method != "files")
        malformed("predicate.serialization.method is not \"files\"");
    const json* resources = member(*predicate, "resources");
    if (!resources || !resources->is_array())
        malformed("predicate.resources is not an array");
    if (resources->size() > kMaxResources)
        malformed("predicate.resources lists %zu files, over the limit of %zu", resources->size(), kMaxResources);
    std::map<std::string, std::string> out;
    std::string concatenated;  // the resources' digests, 32 bytes each, in their listed order
    concatenated.reserve(resources->size() * 32);
    for (size_t i = 0; i < resources->size(); i++) {
        const json& r = (*resources)[i];
        if (!r.is_object())
            malformed("predicate.resources[%zu] is not an object", i);
        const std::string* name = string_member(r, "name");
        if (!name || !valid_resource_name(*name))
            malformed("predicate.resources[%zu].name is not a relative path of 1 to %zu bytes without empty, "
                      "\".\" or \"..\" parts, NUL or backslash", i, kMaxNameBytes);
        const std::string* algorithm = string_member(r, "algorithm");
        if (!algorithm || *algorithm != "sha256")
            malformed("predicate.resources[%zu].algorithm is not \"sha256\"", i);
        const std::string* digest = string_member(r, "digest");
        if (!digest || !is_lower_hex64(*digest))
            malformed("predicate.resources[%zu].digest is not 64 lowercase hex digits", i);
        if (!out.emplace(*name, *digest).second)
            malformed("predicate.resources[%zu].name %s is listed twice", i, one_line(*name).c_str());
        for (size_t k = 0; k < 64; k += 2) {
            auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
            concatenated += static_cast<char>(nibble((*digest)[k]) * 16 + nibble((*digest)[k + 1]));
        }
    }
    if (sha256_hex(concatenated.data(), concatenated.size()) != *subject_sha)
        malformed("subject[0].digest.sha256 is not the SHA-256 of the resources' digests");
    return out;
}

// A modules folder entry read whole (hashed as it is read).  Returns false when it is not a regular
// file (a symbolic link is never followed: "changed after signing"); `kept` says whether `bytes`
// holds it (at most 1 GiB, the loader's limit).  A file that cannot be read: WRP_ERR_INVALID_FILE.
bool hash_module_entry(int dirfd, const std::string& name, const std::string& display, std::string* digest_hex,
                       bool* kept, std::vector<uint8_t>* bytes)
{
    *kept = false;
    int fd = openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        struct stat lst;
        if (err == ELOOP || (fstatat(dirfd, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode)))
            return false;
        fail(WRP_ERR_INVALID_FILE, "cannot read module file %s: %s", display.c_str(), std::strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return false;
    }
    bool keep = static_cast<uint64_t>(st.st_size) <= kMaxKeptModuleBytes;
    MdCtxPtr ctx(EVP_MD_CTX_new());
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
        close(fd);
        ERR_clear_error();
        out_of_memory_in_openssl();
    }
    try {
        bytes->clear();
        if (keep)
            bytes->reserve(static_cast<size_t>(st.st_size));
        std::vector<uint8_t> chunk(1 << 20);
        uint64_t total = 0;
        for (;;) {
            ssize_t n = ::read(fd, chunk.data(), chunk.size());
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                fail(WRP_ERR_INVALID_FILE, "cannot read module file %s: %s", display.c_str(), std::strerror(errno));
            if (n == 0)
                break;
            EVP_DigestUpdate(ctx.get(), chunk.data(), static_cast<size_t>(n));
            total += static_cast<uint64_t>(n);
            if (keep && total > kMaxKeptModuleBytes) {  // it grew: hashed, not kept (the loader refuses it)
                keep = false;
                std::vector<uint8_t>().swap(*bytes);
            }
            if (keep)
                bytes->insert(bytes->end(), chunk.data(), chunk.data() + n);
        }
    } catch (...) {
        close(fd);
        throw;
    }
    close(fd);
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1 || len != 32) {
        ERR_clear_error();
        fail(WRP_ERR_INTERNAL, "SHA-256 failed in OpenSSL");
    }
    *digest_hex = hex(digest, len);
    *kept = keep;
    return true;
}

// The names of a modules folder's entries that are not folders (a symbolic link is an entry, never
// followed), in byte order; none when the folder does not exist.
std::vector<std::string> module_entries(int* dirfd_out, const std::string& dir)
{
    std::vector<std::string> names;
    *dirfd_out = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*dirfd_out < 0) {
        if (errno == ENOENT)
            return names;
        fail(WRP_ERR_INVALID_FILE, "cannot list modules folder %s: %s", one_line(dir).c_str(), std::strerror(errno));
    }
    int listing = fcntl(*dirfd_out, F_DUPFD_CLOEXEC, 0);
    DIR* d = listing >= 0 ? fdopendir(listing) : nullptr;
    if (!d) {
        int err = errno;
        if (listing >= 0)
            close(listing);
        fail(WRP_ERR_INVALID_FILE, "cannot list modules folder %s: %s", one_line(dir).c_str(), std::strerror(err));
    }
    try {
        while (dirent* e = readdir(d)) {
            std::string name = e->d_name;
            if (name == "." || name == "..")
                continue;
            bool is_dir = e->d_type == DT_DIR;
            if (e->d_type == DT_UNKNOWN) {
                struct stat st;
                is_dir = fstatat(*dirfd_out, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
            }
            if (!is_dir)  // subfolders are never read by Warp, nor signed
                names.push_back(name);
        }
    } catch (...) {
        closedir(d);
        throw;
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// Step 6 for a .wrp: `prefix` is "STEM_modules/", `dir` the modules folder the loader reads.
void check_module_files(const std::map<std::string, std::string>& resources, const std::string& prefix,
                        const std::string& dir, SignedModules* modules)
{
    struct DirFd {
        int fd = -1;
        ~DirFd()
        {
            if (fd >= 0)
                close(fd);
        }
    } dirfd;
    const std::vector<std::string> on_disk = module_entries(&dirfd.fd, dir);
    // The union, in byte order of name: resources under the prefix and the folder's entries.
    auto r = resources.lower_bound(prefix);
    auto in_signature = [&]() { return r != resources.end() && r->first.compare(0, prefix.size(), prefix) == 0; };
    size_t k = 0;
    while (in_signature() || k < on_disk.size()) {
        std::string disk_name = k < on_disk.size() ? prefix + on_disk[k] : std::string();
        if (in_signature() && (k >= on_disk.size() || r->first < disk_name))
            untrusted("removed after signing: %s", one_line(r->first).c_str());
        if (!in_signature() || disk_name < r->first)
            untrusted("added after signing: %s", one_line(disk_name).c_str());
        bool kept = false;
        std::vector<uint8_t> bytes;
        std::string digest;
        if (!hash_module_entry(dirfd.fd, on_disk[k], one_line(dir + "/" + on_disk[k]), &digest, &kept, &bytes))
            untrusted("changed after signing: %s (not a regular file)", one_line(disk_name).c_str());
        if (digest != r->second)
            untrusted("changed after signing: %s", one_line(disk_name).c_str());
        if (modules && kept)
            modules->files[on_disk[k]] = std::move(bytes);
        ++r;
        ++k;
    }
}

// Python's Path(name).stem: the name without its last suffix (".wrp", ".bin", ...).
std::string path_stem(const std::string& name)
{
    size_t dot = name.rfind('.');
    return dot != std::string::npos && dot > 0 && dot + 1 < name.size() ? name.substr(0, dot) : name;
}

}  // namespace

void verify_signature_bytes(const CaptureToVerify& capture, const TrustedKeys& keys, const std::string& signature_path,
                            const uint8_t* bundle, size_t bundle_size, SignedModules* modules)
{
    const std::string shown = one_line(signature_path);
    const Malformed malformed(shown);
    if (bundle_size > kMaxBundleBytes)
        malformed("the file is %zu bytes, over the limit of %llu MiB", bundle_size,
                  static_cast<unsigned long long>(kMaxBundleBytes >> 20));
    Bundle b = parse_bundle(bundle, bundle_size, malformed);                             // 2
    check_signer(b, keys, shown);                                                       // 3
    std::map<std::string, std::string> resources = parse_statement(b.payload, malformed);  // 4
    // 5: the capture's own file, by the name it was given.
    const std::string own = basename_of(capture.path);
    auto it = resources.find(own);
    if (it == resources.end())
        untrusted("not covered by the signature: %s is not among the %zu file(s) %s signs", one_line(own).c_str(),
                  resources.size(), shown.c_str());
    if (sha256_hex(capture.data, capture.size) != it->second)
        untrusted("changed after signing: %s", one_line(own).c_str());
    // 6: the module files of a .wrp: WRP1 bytes, whatever the name (they are what loads module files
    // from disk); a .wrpk or the .json form is the one file.
    if (capture.size < 4 || std::memcmp(capture.data, "WRP1", 4) != 0)
        return;
    std::string prefix = path_stem(own) + "_modules/";
    std::string dir = capture.modules_dir.empty() ? find_modules_dir(capture.path) : capture.modules_dir;
    if (modules)
        modules->resource_prefix = prefix;
    check_module_files(resources, prefix, dir, modules);
}

void verify_signature(const CaptureToVerify& capture, const TrustedKeys& keys, const std::string& signature_path,
                      SignedModules* modules)
{
    const std::string path = signature_path.empty() ? default_signature_path(capture.path) : signature_path;
    const std::string shown = one_line(path);
    const Malformed malformed(shown);
    // 1.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT)
            untrusted("not signed: no signature file %s", shown.c_str());
        // Unreadable (permission, I/O): an I/O error, exit 1, as in Python; not a verdict on the capture.
        fail(WRP_ERR_RUNTIME, "cannot read signature %s: %s", shown.c_str(), std::strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        malformed("not a regular file");
    }
    // 2 starts here: a file over 64 MiB is refused before it is read.
    if (static_cast<uint64_t>(st.st_size) > kMaxBundleBytes) {
        close(fd);
        malformed("the file is %llu bytes, over the limit of %llu MiB", static_cast<unsigned long long>(st.st_size),
                  static_cast<unsigned long long>(kMaxBundleBytes >> 20));
    }
    std::string bytes;  // over the cap (the file grew): step 2 refuses it below
    int err = 0;
    if (!read_fd(fd, kMaxBundleBytes, bytes, err)) {
        close(fd);
        fail(WRP_ERR_RUNTIME, "cannot read signature %s: %s", shown.c_str(), std::strerror(err));
    }
    close(fd);
    verify_signature_bytes(capture, keys, path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), modules);
}

}  // namespace wrp
