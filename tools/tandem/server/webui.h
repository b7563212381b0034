// The chat page's files (tools/tandem/server/webui/: index.html, style.css and the ES modules), built into the
// binary by cmake/embed_webui.cmake, so the page needs no network and no files beside the binary. Served at
// /webui/<name> and, for index.html, at / (http_server.cpp).
#pragma once
#include <cstddef>
#include <string>

namespace tandem::server {

struct WebAsset {
    const char* path;  // "/webui/app.js"
    const char* type;  // its Content-Type
    const char* body;
};

extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

// The asset served at `path`, or null.
inline const WebAsset* find_web_asset(const std::string& path) {
    for (size_t i = 0; i < kWebAssetCount; i++)
        if (path == kWebAssets[i].path) return &kWebAssets[i];
    return nullptr;
}

// The page's Content-Security-Policy: its own files only, no inline script, no other origin (the page renders
// model text, which is escaped before any markup; this is the second wall).
inline const char* kWebUiCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace tandem::server
