// Activations quantized to 8 bits in blocks of 32 (as llama.cpp's Q8_0/Q8_1 activation blocks), the input of the
// integer dot-product kernels. For a row x of n values (n % 32 == 0), block b holds
//   d[b] = max|x| / 127, q[32b + i] = round(x[32b + i] / d[b]), qsum[b] = sum_i q[32b + i], s[b] = d[b] * qsum[b].
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

// A view of quantized activation rows as plain pointers: what the per-ISA kernels receive (backend/cpu/isa.h). The
// accessors are integer arithmetic only.
//   q: (n_rows, n)   d, s, qsum: (n_rows, nb)   qsum16: (n_rows, 2 * nb)
struct ActRows {
    int8_t* q = nullptr;
    float* d = nullptr;
    float* s = nullptr;
    int32_t* qsum = nullptr;
    int16_t* qsum16 = nullptr;
    int n_rows = 0;
    int64_t n = 0, nb = 0;

    const int8_t* qrow(int r) const { return q + size_t(r) * size_t(n); }
    const float* drow(int r) const { return d + size_t(r) * size_t(nb); }
    const float* srow(int r) const { return s + size_t(r) * size_t(nb); }
    const int32_t* sumrow(int r) const { return qsum + size_t(r) * size_t(nb); }
    const int16_t* sum16row(int r) const { return qsum16 + size_t(r) * size_t(2 * nb); }
};

// The owner of the activation buffers.
struct ActQ8 {
    int n_rows = 0;
    int64_t n = 0;  // values per row
    int64_t nb = 0;  // blocks per row
    std::vector<int8_t> q;  // (n_rows, n)
    std::vector<float> d;  // (n_rows, nb)
    std::vector<float> s;  // (n_rows, nb)
    std::vector<int32_t> qsum;  // (n_rows, nb) sum_i q[32b + i]
    std::vector<int16_t> qsum16;  // (n_rows, n / 16) sums of 16 (Q6_K's sub-blocks); |sum| <= 2032

    const int8_t* qrow(int r) const { return q.data() + size_t(r) * size_t(n); }
    const float* drow(int r) const { return d.data() + size_t(r) * size_t(nb); }
    const float* srow(int r) const { return s.data() + size_t(r) * size_t(nb); }
    const int32_t* sumrow(int r) const { return qsum.data() + size_t(r) * size_t(nb); }
    const int16_t* sum16row(int r) const { return qsum16.data() + size_t(r) * size_t(2 * nb); }
    // The kernels write and read through this view.
    operator ActRows() const;
};

// Quantizes n_rows rows of n floats (x is (n_rows, n), row-major). `group` values share one scale: 32 as
// llama.cpp's Q8_0/Q8_1 activations, 256 as its Q8_K (used with the K-quants); blocks keep their own copy.
void quantize_act_q8(const float* x, int n_rows, int64_t n, ActQ8& out, int group = 32);
void quantize_act_q8_ref(const float* x, int n_rows, int64_t n, ActQ8& out, int group = 32);  // scalar reference
// In two steps, so threads can share the work: prepare sizes `out` for n_rows rows, then each thread quantizes
// rows [r0, r1) of x. The result is bit-identical to quantize_act_q8 (and to the reference) at every level.
void quantize_act_q8_prepare(int n_rows, int64_t n, ActQ8& out);
void quantize_act_q8_rows(const float* x, int64_t n, int group, ActQ8& out, int r0, int r1);
// The scalar reference of one step (what every level's quantize_act_rows is tested against).
void quantize_act_rows_ref(const float* x, int64_t n, int group, const ActRows& out, int r0, int r1);

}  // namespace tandem
