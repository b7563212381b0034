// The SIMD level dispatch (src/backend/cpu/): detection, forcing, and that the level dispatched is the one expected.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cpu/isa.h"
#include "tandem/cpu.h"
#include "tandem/error.h"

using namespace tandem;

TEST(Cpu, LevelNamesRoundTripAndUnknownNamesAreRefused) {
    for (CpuLevel l : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512, CpuLevel::AvxVnni, CpuLevel::Avx512Vnni,
                       CpuLevel::Neon, CpuLevel::Dotprod, CpuLevel::I8mm})
        EXPECT_EQ(parse_cpu_level(cpu_level_name(l)), l);
    try {
        parse_cpu_level("avx3");
        FAIL() << "accepted an unknown level";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("avx512vnni"), std::string::npos) << e.what();  // names the valid ones
    }
}

TEST(Cpu, EverySupportedLevelHasAKernelTable) {
    const auto& levels = cpu_levels_supported();
    ASSERT_FALSE(levels.empty());
    EXPECT_EQ(levels.front(), CpuLevel::Scalar);
    for (CpuLevel l : levels) {
        const IsaKernels* k = isa_for(l);
        ASSERT_NE(k, nullptr) << cpu_level_name(l);
        EXPECT_EQ(k->level, l);
        // the helpers every caller uses directly are never null
        EXPECT_TRUE(k->dot_f32 && k->dot_f32_f16 && k->axpy_f16 && k->silu_mul && k->attn_tile &&
                    k->quantize_act_rows && k->stream_sum);
        // every SIMD level has the packed kernels (the loader repacks only when the level has them)
        if (l != CpuLevel::Scalar) {
            EXPECT_NE(k->matmul_packed, nullptr) << cpu_level_name(l);
        }
    }
    std::printf("[ cpu ] %s\n", cpu_info_line().c_str());
}

// scripts/test-cpus.sh runs the suite under emulated CPUs with TANDEM_EXPECT_CPU set to the level that CPU must
// get (detected, or forced with TANDEM_CPU): a wrong detection fails here instead of silently testing another path.
TEST(Cpu, DispatchedLevelIsTheExpectedOne) {
    const char* want = std::getenv("TANDEM_EXPECT_CPU");
    if (!want || !*want) {
        std::printf("[ cpu ] TANDEM_EXPECT_CPU not set: dispatched %s (detected %s)\n", cpu_level_name(isa().level),
                    cpu_level_name(cpu_level_detected()));
        return;  // optional check: only the emulation matrix sets it
    }
    EXPECT_STREQ(cpu_level_name(isa().level), want);
    EXPECT_EQ(cpu_info().level, want);
}
