#include "tandem/files.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "tandem/error.h"

namespace tandem {

namespace fs = std::filesystem;

std::string hf_cache_dir() {
    struct Entry {
        const char* var;
        const char* sub;
    };
    const Entry entries[] = {{"LLAMA_CACHE", ""},
                             {"HF_HUB_CACHE", ""},
                             {"HUGGINGFACE_HUB_CACHE", ""},
                             {"HF_HOME", "hub"},
                             {"XDG_CACHE_HOME", "huggingface/hub"},
                             {"HOME", ".cache/huggingface/hub"}};
    for (const auto& e : entries)
        if (const char* v = std::getenv(e.var); v && *v)
            return *e.sub ? (fs::path(v) / e.sub).string() : std::string(v);
    return ".cache/huggingface/hub";
}

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

std::string hf_cached_model(const std::string& repo_spec, const std::string& file, const std::string& cache_dir) {
    std::string repo = repo_spec, quant;
    if (size_t c = repo.find(':'); c != std::string::npos) {
        quant = repo.substr(c + 1);
        repo = repo.substr(0, c);
    }
    std::string folder = "models--" + repo;
    for (size_t p; (p = folder.find('/')) != std::string::npos;) folder.replace(p, 1, "--");
    const fs::path snapshots = fs::path(cache_dir) / folder / "snapshots";
    const std::string what = file.empty() ? repo_spec : repo + "/" + file;
    auto missing = [&]() -> std::string {
        throw Error("tandem does not download models (" + what + "): it is not in the Hugging Face cache at " +
                    snapshots.string() +
                    "; download it there (e.g. with llama.cpp's -hf, or huggingface-cli download " + repo +
                    (file.empty() ? "" : " " + file) + ") or pass the local file with -m PATH");
    };
    std::error_code ec;
    if (!fs::is_directory(snapshots, ec)) return missing();
    std::vector<fs::path> revs;
    for (const auto& d : fs::directory_iterator(snapshots, ec)) revs.push_back(d.path());
    // The revision refs/main names first, then the others in name order (deterministic).
    std::string main_rev;
    if (FILE* f = std::fopen((fs::path(cache_dir) / folder / "refs" / "main").c_str(), "r")) {
        char buf[128] = {};
        if (std::fgets(buf, sizeof buf, f)) main_rev = buf;
        std::fclose(f);
        while (!main_rev.empty() && std::isspace(static_cast<unsigned char>(main_rev.back()))) main_rev.pop_back();
    }
    std::sort(revs.begin(), revs.end(), [&](const fs::path& a, const fs::path& b) {
        const bool am = a.filename() == main_rev, bm = b.filename() == main_rev;
        return am != bm ? am : a < b;
    });
    for (const auto& rev : revs) {
        if (!file.empty()) {
            const fs::path p = rev / file;
            if (fs::is_regular_file(p, ec)) return p.string();
            continue;
        }
        std::vector<fs::path> ggufs;
        for (auto it = fs::recursive_directory_iterator(rev, ec); it != fs::recursive_directory_iterator();
             it.increment(ec)) {
            if (ec) break;
            if (it->path().extension() == ".gguf" &&
                lower(it->path().filename().string()).find("mmproj") == std::string::npos &&
                fs::is_regular_file(it->path(), ec))
                ggufs.push_back(it->path());
        }
        std::sort(ggufs.begin(), ggufs.end());
        const std::string want = lower(quant.empty() ? "Q4_K_M" : quant);
        for (const auto& g : ggufs)
            if (lower(g.filename().string()).find(want) != std::string::npos) return g.string();
        if (quant.empty() && !ggufs.empty()) return ggufs.front().string();
    }
    return missing();
}

}  // namespace tandem
