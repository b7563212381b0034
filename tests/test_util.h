// Helpers shared by the tests: where the shared data lives, temporary files, reference JSON.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <cctype>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tandem {
struct IsaKernels;
}

namespace tandem::test {

// The kernel tables of every level this CPU supports (scalar included): kernel tests run them all, so every
// level's kernels are checked natively on a machine that has it (and under emulation by scripts/test-cpus.sh).
std::vector<const IsaKernels*> all_levels();
// n samples of Normal(0, sd), the same for the same seed.
std::vector<float> gaussian(size_t n, uint32_t seed, float sd = 1.0f);

// $TANDEM_SHARED_DIR, or ../shared beside the project root.
std::string shared_dir();
// Absolute path of a file under the shared folder; fails the test loudly (FAIL()) if it does not exist.
std::string shared_file(const std::string& rel);
// A fresh temporary directory for this test process.
std::string temp_dir();
// A random-weight model of `shape` (SynthParams: seed 1, generated vocabulary) quantized as `type`, written once
// and reused: in this process's temp_dir(), or, when $TANDEM_TEST_SYNTH_CACHE names a directory, there, so that
// several runs of the suite share the files (scripts/test-cpus.sh: written by the native runs, read by the emulated
// CPUs, where generating them took most of the time). Files are written under a temporary name and renamed.
std::string synth_file(const std::string& shape, const std::string& type);
// Path of the built `tandem` program.
std::string tandem_bin();
// Runs a shell command, returns its exit status and captures stdout (+ stderr when merge_stderr).
int run_command(const std::string& cmd, std::string* output, bool merge_stderr = true);

std::string read_file(const std::string& path);

// GoogleTest parameter names must be alphanumeric: "synth-llama-spm-q8_0" -> "synth_llama_spm_q8_0".
struct ParamName {
    template <typename Info>
    std::string operator()(const Info& info) const {
        std::string s = info.param;
        for (char& c : s)
            if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
        return s;
    }
};
void write_file(const std::string& path, const std::string& bytes);

// The GPU tests' rule (Vulkan, src/backend/vulkan/): optional where there is no device (the test says why and
// skips), required where TANDEM_REQUIRE_VULKAN=1 (the README's test command sets it when lavapipe is installed),
// and then run with the validation layer (TANDEM_VK_VALIDATION=1), every message of which fails the test.
bool vulkan_required();
// "" when a Vulkan device can be used (turning the validation layer on when required), else why not.
std::string vulkan_unavailable();

// Chi-square test of homogeneity between two count tables (category -> count); categories with a pooled expected
// count below 5 are merged into one. Returns the p-value (Wilson-Hilferty approximation); *df_out the degrees of
// freedom. Used by the distribution-identity tests of speculative sampling.
double chi_square_p(const std::map<int, int>& a, const std::map<int, int>& b, int* df_out);

// TANDEM_TEST_QUICK=1: the sanitizer and emulated-CPU runs (scripts/test.sh --step asan-test, scripts/test-cpus.sh),
// which repeat the release suite's code paths, not its statistics.
bool quick_mode();
// How many samples a distribution test draws, and whether it holds their p values to its bounds: `full` and true,
// or in quick mode a smoke run of at most 200 whose p values are printed but not asserted (the release suite
// asserts them); says so on stdout.
struct StatRuns {
    int runs;
    bool assert_stats;
};
StatRuns statistical_runs(int full);

}  // namespace tandem::test

// In a GPU test: skips (saying why) where no Vulkan device can be used, fails where one is required; remembers the
// validation layer's message count, which GPU_NO_MESSAGES() then holds unchanged.
#define GPU_OR_SKIP()                                                                                        \
    if (const std::string why_ = ::tandem::test::vulkan_unavailable(); !why_.empty()) {                      \
        if (::tandem::test::vulkan_required()) FAIL() << why_ << " (TANDEM_REQUIRE_VULKAN is set)";          \
        GTEST_SKIP() << why_ << ": the GPU tests are optional here (TANDEM_REQUIRE_VULKAN=1 requires them)"; \
    }                                                                                                        \
    const uint64_t vk_messages0 = ::tandem::backend::vulkan_validation_messages()
#define GPU_NO_MESSAGES() \
    EXPECT_EQ(::tandem::backend::vulkan_validation_messages(), vk_messages0) << "Vulkan validation messages"
