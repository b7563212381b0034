// llama-server's --path DIR: the files of a directory served at / instead of the built-in chat page (another web UI,
// e.g. llama.cpp's own, built with npm). GET and HEAD only; a request for a file that is not there goes on to the
// routes (so /health, /v1/... stay the API's unless a file of that name exists, as in llama-server, whose static
// mount is looked up first); "/" and a directory answer its index.html. Never a file outside DIR: the path is
// percent-decoded, "." / ".." segments and NUL are refused, and the file's real path (symbolic links followed)
// must lie inside DIR's.
// The files are open without --api-key, as the built-in page's are (a browser loads scripts without the key);
// llama-server opens only the names of its embedded assets, which makes another UI under --path unusable with a
// key. Decision written here and in the README.
#pragma once
#include <optional>
#include <string>

namespace tandem::server {

struct StaticFile {
    std::string body;
    const char* type;  // its Content-Type, from the extension
};

class StaticFiles {
public:
    // Throws tandem::Error naming DIR when it is not a readable directory (llama-server: "static assets path not
    // found", exit 1).
    explicit StaticFiles(const std::string& dir);
    // The file a request path names, if there is one (path without the query, as received).
    std::optional<StaticFile> find(const std::string& path) const;
    const std::string& root() const { return root_; }

private:
    std::string root_;  // DIR's real path
};

// The Content-Type of a file name, from its extension ("application/octet-stream" when unknown).
const char* content_type_of(const std::string& name);

}  // namespace tandem::server
