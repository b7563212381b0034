#include <vector>
#include <algorithm>
#include <cmath>
#include "test_util.h"

#include "tandem/gpu.h"

#include <random>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "backend/cpu/isa.h"
#include "tandem/synth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tandem::test {

std::string shared_dir() {
    const char* env = std::getenv("TANDEM_SHARED_DIR");
    return env && *env ? env : TANDEM_DEFAULT_SHARED_DIR;
}

std::string shared_file(const std::string& rel) {
    std::string p = shared_dir() + "/" + rel;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
        ADD_FAILURE() << "required shared file is missing: " << p << " (set TANDEM_SHARED_DIR to the shared folder)";
        throw std::runtime_error("missing shared file " + p);
    }
    return p;
}

// The process's own folder, removed when it exits (CTest runs each test in a process of its own: kept, they filled
// the disk by the thousand)
std::string temp_dir() {
    static std::string dir = [] {
        char tmpl[] = "/tmp/tandem-test-XXXXXX";
        char* d = ::mkdtemp(tmpl);
        if (!d) throw std::runtime_error("mkdtemp failed");
        return std::string(d);
    }();
    // (registered once `dir` is made, so that it runs before `dir` is destroyed)
    static const bool removed_at_exit = std::atexit([] {
                                            std::error_code ec;
                                            std::filesystem::remove_all(dir, ec);
                                        }) == 0;
    (void)removed_at_exit;
    return dir;
}

std::string synth_file(const std::string& shape, const std::string& type) {
    const char* env = std::getenv("TANDEM_TEST_SYNTH_CACHE");
    const std::string dir = env && *env ? std::string(env) : temp_dir();
    if (env && *env) ::mkdir(dir.c_str(), 0755);  // may exist already
    const std::string path = dir + "/" + shape + "-" + type + ".gguf";
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return path;
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    SynthParams p;
    p.shape = shape;
    p.type = type;
    synth_model(tmp, p);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
    return path;
}

std::string tandem_bin() { return TANDEM_BIN; }

int run_command(const std::string& cmd, std::string* output, bool merge_stderr) {
    std::string full = cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null");
    FILE* p = ::popen(full.c_str(), "r");
    if (!p) return -1;
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = ::pclose(p);
    if (output) *output = out;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path);
}

double chi_square_p(const std::map<int, int>& a, const std::map<int, int>& b, int* df_out) {
    std::map<int, std::pair<double, double>> cells;
    for (auto [k, v] : a) cells[k].first += v;
    for (auto [k, v] : b) cells[k].second += v;
    double na = 0, nb = 0;
    for (auto& [k, c] : cells) {
        na += c.first;
        nb += c.second;
    }
    std::vector<std::pair<double, double>> merged;
    std::pair<double, double> rare{0, 0};
    for (auto& [k, c] : cells) {
        double expected_small = std::min(na, nb) * (c.first + c.second) / (na + nb);
        if (expected_small < 5) {
            rare.first += c.first;
            rare.second += c.second;
        } else merged.push_back(c);
    }
    if (rare.first + rare.second > 0) merged.push_back(rare);
    double chi = 0;
    for (auto [x, y] : merged) {
        double tot = x + y;
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        if (ea > 0) chi += (x - ea) * (x - ea) / ea;
        if (eb > 0) chi += (y - eb) * (y - eb) / eb;
    }
    int df = std::max(1, int(merged.size()) - 1);
    *df_out = df;
    double z = (std::cbrt(chi / df) - (1 - 2.0 / (9 * df))) / std::sqrt(2.0 / (9 * df));
    return 0.5 * std::erfc(z / std::sqrt(2.0));
}

std::vector<const IsaKernels*> all_levels() {
    std::vector<const IsaKernels*> v;
    for (CpuLevel l : cpu_levels_supported())
        if (const IsaKernels* k = isa_for(l)) v.push_back(k);
    return v;
}

std::vector<float> gaussian(size_t n, uint32_t seed, float sd) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

bool quick_mode() {
    const char* q = std::getenv("TANDEM_TEST_QUICK");
    return q && *q == '1';
}

StatRuns statistical_runs(int full) {
    if (!quick_mode()) return {full, true};
    const int runs = std::min(full, 200);
    std::printf("[ quick ] TANDEM_TEST_QUICK=1: %d of %d samples, p values printed, not asserted\n", runs, full);
    return {runs, false};
}

bool vulkan_required() {
    const char* e = std::getenv("TANDEM_REQUIRE_VULKAN");
    return e && *e && std::string(e) != "0";
}

std::string vulkan_unavailable() {
    if (!built_with_vulkan())
        return "this build has no Vulkan backend (TANDEM_VULKAN off, or no Vulkan loader / glslc)";
    if (vulkan_required() && !std::getenv("TANDEM_VK_VALIDATION")) setenv("TANDEM_VK_VALIDATION", "1", 1);
    if (gpu_devices().empty()) return "no Vulkan device (Debian: mesa-vulkan-drivers gives lavapipe)";
    return "";
}

}  // namespace tandem::test
