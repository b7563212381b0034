#include "backend/cpu/isa.h"

#include <array>
#include <cstdlib>

#include "backend/cpu/kernels.h"
#include "tandem/cpu.h"
#include "tandem/error.h"

namespace tandem {

namespace {

// The scalar compute probe: plain integer and float multiply-adds over 8 independent accumulators.
uint64_t probe_mac_i8_ref(int64_t iters, uint64_t* sink) {
    int32_t acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    volatile int8_t va = 3, vb = -2;
    const int8_t a = va, b = vb;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++) acc[j] += int32_t(a) * int32_t(b);
    int64_t s = 0;
    for (int32_t x : acc) s += x;
    *sink = uint64_t(s);
    return uint64_t(iters) * 8;
}

uint64_t probe_mac_f32_ref(int64_t iters, uint64_t* sink) {
    float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    volatile float va = 0.999f, vb = 1e-3f;
    const float a = va, b = vb;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++) acc[j] = acc[j] * a + b;
    float s = 0;
    for (float x : acc) s += x;
    *sink = uint64_t(s);
    return uint64_t(iters) * 8;
}

uint64_t stream_sum_ref(const uint64_t* p, size_t n) {
    uint64_t s0 = 0, s1 = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        s0 += p[i];
        s1 += p[i + 1];
    }
    return s0 + s1;
}

constexpr int kLevels = int(CpuLevel::I8mm) + 1;

// The levels this build carries (their units were compiled in) and whose fill function to call.
using FillFn = void (*)(IsaKernels&);
FillFn level_fill(CpuLevel l) {
    switch (l) {
        case CpuLevel::Scalar: return fill_scalar_table;
#if defined(__x86_64__)
        case CpuLevel::Avx2: return isa_avx2::fill_table;
        case CpuLevel::Avx512: return isa_avx512::fill_table;
        case CpuLevel::AvxVnni: return isa_avxvnni::fill_table;
        case CpuLevel::Avx512Vnni: return isa_avx512vnni::fill_table;
#elif defined(__aarch64__)
        case CpuLevel::Neon: return isa_neon::fill_table;
        case CpuLevel::Dotprod: return isa_dotprod::fill_table;
        case CpuLevel::I8mm: return isa_i8mm::fill_table;
#endif
        default: return nullptr;
    }
}

struct Tables {
    std::array<IsaKernels, kLevels> table{};
    std::array<bool, kLevels> present{};
    Tables() {
        for (int i = 0; i < kLevels; i++) {
            const CpuLevel l = CpuLevel(i);
            FillFn fill = level_fill(l);
            if (!fill || !cpu_supports(l)) continue;
            IsaKernels k;
            fill(k);
            TD_ASSERT(k.level == l);  // a unit built with the wrong level's flags
            // the helpers callers use directly: every level fills them (the scalar table with the references)
            TD_ASSERT(k.dot_f32 && k.dot_f32_f16 && k.axpy_f16 && k.silu_mul && k.attn_tile && k.probe_mac_i8 &&
                      k.probe_mac_f32 && k.quantize_act_rows && k.stream_sum);
            table[size_t(i)] = k;
            present[size_t(i)] = true;
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

void fill_scalar_table(IsaKernels& k) {
    k.level = CpuLevel::Scalar;
    k.dot_f32 = dot_f32_ref;
    k.dot_f32_f16 = dot_f32_f16_ref;
    k.axpy_f16 = axpy_f16_ref;
    k.silu_mul = silu_mul_ref;
    k.delta_rule = delta_rule_ref;
    k.attn_tile = attn_tile_ref;
    k.quantize_act_rows = quantize_act_rows_ref;
    k.stream_sum = stream_sum_ref;
    k.probe_mac_i8 = probe_mac_i8_ref;
    k.probe_mac_f32 = probe_mac_f32_ref;
    // matmuls: none; kernels.cpp takes the generic reference path (dequantize a row, float dot products)
}

const IsaKernels* isa_for(CpuLevel l) {
    const Tables& t = tables();
    const size_t i = size_t(l);
    return i < t.present.size() && t.present[i] ? &t.table[i] : nullptr;
}

const IsaKernels& isa() {
    static const IsaKernels* active = [] {
        const IsaKernels* k = isa_for(cpu_level_active());
        if (!k)
            throw Error(strprintf("TANDEM_CPU=%s: this build has no kernels for that level",
                                  cpu_level_name(cpu_level_active())));
        return k;
    }();
    return *active;
}

// ---- public summary (include/tandem/cpu.h) ----

CpuInfo cpu_info() {
    CpuInfo info;
    const IsaKernels& k = isa();
    info.level = cpu_level_name(k.level);
    info.detected = cpu_level_name(cpu_level_detected());
    const char* env = std::getenv("TANDEM_CPU");
    info.forced = env && *env;
    for (CpuLevel l : cpu_levels_supported()) info.supported.push_back(cpu_level_name(l));
    info.packed_kernel = k.packed_kernel;
    return info;
}

std::string cpu_info_line() {
    const CpuInfo c = cpu_info();
    std::string s = "cpu: " + c.level;
    if (c.forced) s += " (forced by TANDEM_CPU; detected " + c.detected + ")";
    s += ", quantized matmul: " + c.packed_kernel + "; supported:";
    for (const auto& l : c.supported) s += " " + l;
    return s;
}

uint64_t memory_stream_sum(const uint64_t* p, size_t n) { return isa().stream_sum(p, n); }

uint64_t compute_probe(bool int8, int64_t iters, uint64_t* sink) {
    return int8 ? isa().probe_mac_i8(iters, sink) : isa().probe_mac_f32(iters, sink);
}

}  // namespace tandem
