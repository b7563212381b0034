#include "backend/cpu/cpu_level.h"

#include <cstdlib>

#include "tandem/error.h"
#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace tandem {

namespace {

struct LevelName {
    CpuLevel level;
    const char* name;
};
constexpr LevelName kNames[] = {
    {CpuLevel::Scalar, "scalar"},         {CpuLevel::Avx2, "avx2"},
    {CpuLevel::Avx512, "avx512"},         {CpuLevel::AvxVnni, "avxvnni"},
    {CpuLevel::Avx512Vnni, "avx512vnni"}, {CpuLevel::Neon, "neon"},
    {CpuLevel::Dotprod, "dotprod"},       {CpuLevel::I8mm, "i8mm"},
};

#if defined(__aarch64__) && defined(__APPLE__)
bool sysctl_flag(const char* name) {
    int v = 0;
    size_t size = sizeof(v);
    return sysctlbyname(name, &v, &size, nullptr, 0) == 0 && v != 0;
}
#endif

std::vector<CpuLevel> detect() {
    std::vector<CpuLevel> levels{CpuLevel::Scalar};
#if defined(__x86_64__)
    // CPUID leaf 1: ECX.FMA[12], ECX.OSXSAVE[27], ECX.F16C[29]; leaf 7: EBX.AVX2[5], AVX512F[16], AVX512BW[30],
    // AVX512VL[31], ECX.AVX512_VNNI[11]. XGETBV(0) tells whether the OS saves the YMM (bits 1,2) and the ZMM and
    // mask registers (bits 5,6,7): without it the instructions fault even on a CPU that has them.
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return levels;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
    if (!osxsave) return levels;
    unsigned xlo, xhi;
    __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    const bool ymm = (xlo & 0x6) == 0x6, zmm = (xlo & 0xE6) == 0xE6;
    // Leaf 7 subleaf 1: EAX.AVX-VNNI[4].
    unsigned a1 = 0, b1, c1, d1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return levels;
    if (!(ymm && fma && f16c && (b & (1u << 5)))) return levels;
    levels.push_back(CpuLevel::Avx2);
    const bool avxvnni = a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 4));
    const bool avx512 = zmm && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));
    if (avx512) levels.push_back(CpuLevel::Avx512);
    if (avxvnni) levels.push_back(CpuLevel::AvxVnni);
    if (avx512 && (c & (1u << 11))) levels.push_back(CpuLevel::Avx512Vnni);
#elif defined(__aarch64__)
    levels.push_back(CpuLevel::Neon);  // Advanced SIMD is part of every ARMv8-A profile CPU
#if defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    const bool dotprod = hw & HWCAP_ASIMDDP, i8mm = hw2 & HWCAP2_I8MM;
#elif defined(__APPLE__)
    const bool dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd"), i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
#else
    const bool dotprod = false, i8mm = false;  // other systems: plain NEON until someone adds their query
#endif
    if (dotprod) levels.push_back(CpuLevel::Dotprod);
    if (dotprod && i8mm) levels.push_back(CpuLevel::I8mm);
#endif
    return levels;
}

}  // namespace

const char* cpu_level_name(CpuLevel l) {
    for (const auto& n : kNames)
        if (n.level == l) return n.name;
    return "?";
}

CpuLevel parse_cpu_level(const std::string& name) {
    std::string all;
    for (const auto& n : kNames) {
        if (name == n.name) return n.level;
        all += all.empty() ? n.name : std::string("|") + n.name;
    }
    throw Error(strprintf("TANDEM_CPU: unknown level '%s' (expected %s)", name.c_str(), all.c_str()));
}

const std::vector<CpuLevel>& cpu_levels_supported() {
    static const std::vector<CpuLevel> levels = detect();
    return levels;
}

bool cpu_supports(CpuLevel l) {
    for (CpuLevel s : cpu_levels_supported())
        if (s == l) return true;
    return false;
}

CpuLevel cpu_level_detected() { return cpu_levels_supported().back(); }

CpuLevel cpu_level_active() {
    static const CpuLevel active = [] {
        const char* env = std::getenv("TANDEM_CPU");
        if (!env || !*env) return cpu_level_detected();
        const CpuLevel want = parse_cpu_level(env);
        if (!cpu_supports(want)) {
            std::string have;
            for (CpuLevel s : cpu_levels_supported())
                have += have.empty() ? cpu_level_name(s) : std::string(", ") + cpu_level_name(s);
            throw Error(strprintf("TANDEM_CPU=%s: this CPU does not support it (it supports: %s)", env, have.c_str()));
        }
        return want;
    }();
    return active;
}

}  // namespace tandem
