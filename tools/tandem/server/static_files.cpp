#include "server/static_files.h"

#include <sys/stat.h>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tandem/error.h"

namespace tandem::server {

namespace {

std::optional<std::string> real_path(const std::string& p) {
    char buf[PATH_MAX];
    if (!::realpath(p.c_str(), buf)) return std::nullopt;
    return std::string(buf);
}

bool is_dir(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A regular file of at most kMaxFileBytes (a web UI's files are small; a larger one is not read into memory per
// request: not served)
constexpr off_t kMaxFileBytes = off_t(256) << 20;
bool is_file(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxFileBytes;
}

int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The path percent-decoded, or nothing when it is malformed or names what it must not (NUL, backslash, "." or ".."
// segments).
std::optional<std::string> decoded_path(const std::string& path) {
    std::string out;
    for (size_t i = 0; i < path.size(); i++) {
        char c = path[i];
        if (c == '%') {
            if (i + 2 >= path.size() || hex(path[i + 1]) < 0 || hex(path[i + 2]) < 0) return std::nullopt;
            c = char(hex(path[i + 1]) * 16 + hex(path[i + 2]));
            i += 2;
        }
        if (c == '\0' || c == '\\') return std::nullopt;
        out += c;
    }
    if (out.empty() || out[0] != '/') return std::nullopt;
    std::istringstream segs(out);
    for (std::string s; std::getline(segs, s, '/');)
        if (s == "." || s == "..") return std::nullopt;
    return out;
}

}  // namespace

const char* content_type_of(const std::string& name) {
    static const struct {
        const char* ext;
        const char* type;
    } kTypes[] = {
        {".html", "text/html; charset=utf-8"},
        {".htm", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".webmanifest", "application/manifest+json"},
        {".map", "application/json"},
        {".txt", "text/plain; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".jpg", "image/jpeg"},
        {".jpeg", "image/jpeg"},
        {".gif", "image/gif"},
        {".webp", "image/webp"},
        {".ico", "image/x-icon"},
        {".woff", "font/woff"},
        {".woff2", "font/woff2"},
        {".ttf", "font/ttf"},
        {".wasm", "application/wasm"},
        {".xml", "application/xml"},
    };
    const size_t dot = name.find_last_of('.');
    const size_t slash = name.find_last_of('/');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
        std::string ext = name.substr(dot);
        for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        for (const auto& t : kTypes)
            if (ext == t.ext) return t.type;
    }
    return "application/octet-stream";
}

StaticFiles::StaticFiles(const std::string& dir) {
    auto r = real_path(dir);
    if (!r || !is_dir(*r)) throw Error("--path " + dir + ": static assets path not found (not a directory)");
    root_ = *r;
}

std::optional<StaticFile> StaticFiles::find(const std::string& path) const {
    auto rel = decoded_path(path);
    if (!rel) return std::nullopt;
    std::string p = root_ + *rel;
    if (is_dir(p)) p += (p.back() == '/' ? "" : "/") + std::string("index.html");
    auto real = real_path(p);
    if (!real || !is_file(*real)) return std::nullopt;
    const std::string inside = root_.back() == '/' ? root_ : root_ + "/";
    if (real->compare(0, inside.size(), inside) != 0) return std::nullopt;  // (a link out of DIR)
    std::ifstream in(*real, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return StaticFile{ss.str(), content_type_of(*real)};
}

}  // namespace tandem::server
