// The SIMD level the kernels run at: detected once from the CPU (CPUID/XGETBV on x86-64, getauxval(AT_HWCAP) on
// AArch64), or forced with TANDEM_CPU=<name> (a level this CPU lacks is refused with a message naming the levels it has).
//
// Levels, each a superset of the ones before it on its architecture (except avxvnni / avx512, below):
//   x86-64:  scalar < avx2 (AVX2+FMA+F16C: Haswell/Zen 1 and later) < avx512 (F+BW+VL: Skylake-X) <
//            avx512vnni (+VNNI: Cascade Lake, Ice Lake, Zen 4 and later); avxvnni (AVX2 + the VEX vpdpbusd: Alder
//            Lake and later, Zen 5) sits beside avx512: a CPU may have either, and one with avx512vnni prefers that.
//   AArch64: scalar < neon (every ARMv8-A CPU) < dotprod (+SDOT: Cortex-A55/A76, Apple M1, Graviton 2) <
//            i8mm (+SMMLA: Apple M2, Graviton 3, Cortex-A510/A710 and later)
#pragma once
#include <string>
#include <vector>

namespace tandem {

enum class CpuLevel { Scalar, Avx2, Avx512, AvxVnni, Avx512Vnni, Neon, Dotprod, I8mm };

const char* cpu_level_name(CpuLevel l);
// Parses a TANDEM_CPU value; throws tandem::Error naming the accepted values.
CpuLevel parse_cpu_level(const std::string& name);

// Every level this CPU can run (scalar first), as detected; independent of TANDEM_CPU.
const std::vector<CpuLevel>& cpu_levels_supported();
bool cpu_supports(CpuLevel l);
// The best level this CPU supports.
CpuLevel cpu_level_detected();
// The level the kernels use: TANDEM_CPU if set (and supported), otherwise the detected one. Decided once, at
// the first call; an unsupported or unknown TANDEM_CPU throws tandem::Error at that call (the CLI prints it).
CpuLevel cpu_level_active();

}  // namespace tandem
