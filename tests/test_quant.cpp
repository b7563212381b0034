#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/fp16.h"
#include "backend/cpu/isa.h"
#include "quant/blocks.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

using test::all_levels;
using test::gaussian;

// Relative RMS error of quantize -> dequantize for each type (Gaussian data, 4096 values). The bounds are the
// precision each format can reach with a plain max/min fit, with some room.
struct TypeTol {
    TensorType type;
    double max_rel_rmse;
};
const TypeTol kTolerances[] = {
    {TensorType::F16, 1e-3},  {TensorType::BF16, 5e-3}, {TensorType::Q8_0, 0.01}, {TensorType::Q6_K, 0.03},
    {TensorType::Q5_0, 0.06}, {TensorType::Q5_1, 0.06}, {TensorType::Q5_K, 0.06}, {TensorType::Q4_0, 0.12},
    {TensorType::Q4_1, 0.12}, {TensorType::Q4_K, 0.12}, {TensorType::Q3_K, 0.25}, {TensorType::Q2_K, 0.5},
    {TensorType::MXFP4, 0.2},
};

}  // namespace

TEST(Quant, BlockSizesArePinned) {
    EXPECT_EQ(type_traits(TensorType::Q4_0).block_bytes, 18);
    EXPECT_EQ(type_traits(TensorType::Q4_K).block_bytes, 144);
    EXPECT_EQ(type_traits(TensorType::Q6_K).block_bytes, 210);
    EXPECT_EQ(row_bytes(TensorType::Q8_0, 64), 68u);
}

TEST(Quant, HandMadeBlocksDequantizeAsSpecified) {
    block_q4_0 b4{};
    b4.d = f32_to_fp16(0.5f);
    for (int j = 0; j < 16; j++) b4.qs[j] = uint8_t((j & 0xF) | (((15 - j) & 0xF) << 4));
    float y[32];
    dequantize_row_ref(TensorType::Q4_0, &b4, y, 32);
    for (int j = 0; j < 16; j++) {
        EXPECT_EQ(y[j], (j - 8) * 0.5f);
        EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
    }
    block_q8_0 b8{};
    b8.d = f32_to_fp16(0.25f);
    for (int j = 0; j < 32; j++) b8.qs[j] = int8_t(j - 16);
    dequantize_row_ref(TensorType::Q8_0, &b8, y, 32);
    for (int j = 0; j < 32; j++) EXPECT_EQ(y[j], (j - 16) * 0.25f);
    block_q5_0 b5{};
    b5.d = f32_to_fp16(1.0f);
    uint32_t qh = 0x80000001u;  // fifth bit of element 0 and element 31
    std::memcpy(b5.qh, &qh, 4);
    dequantize_row_ref(TensorType::Q5_0, &b5, y, 32);
    EXPECT_EQ(y[0], 0.0f);  // 16 - 16
    EXPECT_EQ(y[1], -16.0f);  // 0 - 16
    EXPECT_EQ(y[31], 0.0f);
    // MXFP4: element j (low nibble) and j + 16 (high nibble) of the E2M1 table (doubled), times 2^(e - 128).
    block_mxfp4 bf{};
    bf.e = 127;  // 2^-1: the table's doubled values become the E2M1 values
    for (int j = 0; j < 16; j++) bf.qs[j] = uint8_t(j | ((15 - j) << 4));
    dequantize_row_ref(TensorType::MXFP4, &bf, y, 32);
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int j = 0; j < 16; j++) {
        EXPECT_EQ(y[j], e2m1[j]);
        EXPECT_EQ(y[j + 16], e2m1[15 - j]);
    }
    bf.e = 0;  // the smallest scale, 2^-128, is a denormal float
    dequantize_row_ref(TensorType::MXFP4, &bf, y, 32);
    EXPECT_EQ(y[7], 12 * std::ldexp(1.0f, -128));
}

TEST(Quant, RoundTripErrorWithinTypePrecision) {
    const int64_t n = 4096;
    auto x = gaussian(size_t(n), 7);
    for (const auto& tt : kTolerances) {
        std::vector<uint8_t> q(row_bytes(tt.type, n));
        std::vector<float> y(static_cast<size_t>(n));
        quantize_row_ref(tt.type, x.data(), q.data(), n);
        dequantize_row_ref(tt.type, q.data(), y.data(), n);
        double se = 0, sx = 0;
        for (int64_t i = 0; i < n; i++) {
            se += double(y[size_t(i)] - x[size_t(i)]) * double(y[size_t(i)] - x[size_t(i)]);
            sx += double(x[size_t(i)]) * double(x[size_t(i)]);
        }
        double rel = std::sqrt(se / sx);
        std::printf("[ %-5s ] quantize round-trip relative RMSE %.4f\n", type_name(tt.type), rel);
        EXPECT_LT(rel, tt.max_rel_rmse) << type_name(tt.type);
    }
}

TEST(Quant, ZeroRowsStayZero) {
    std::vector<float> x(512, 0.0f), y(512, 1.0f);
    for (const auto& tt : kTolerances) {
        std::vector<uint8_t> q(row_bytes(tt.type, 512));
        quantize_row_ref(tt.type, x.data(), q.data(), 512);
        dequantize_row_ref(tt.type, q.data(), y.data(), 512);
        for (float v : y) ASSERT_EQ(v, 0.0f) << type_name(tt.type);
    }
}

TEST(Quant, HalfConversionsRoundTrip) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_f32(uint16_t(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_fp16(f), uint16_t(h)) << h;
        ASSERT_EQ(fp16_table()[h], f);
    }
    EXPECT_EQ(f32_to_fp16(1.0f + 1.0f / 4096), f32_to_fp16(1.0f));  // ties to even
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
}

TEST(Quant, MatmulMatchesDequantizedDotAndIsThreadCountInvariant) {
    const int64_t rows = 37, cols = 512;
    const int n_tok = 3;
    auto w = gaussian(size_t(rows * cols), 1);
    auto x = gaussian(size_t(n_tok * cols), 2);
    ThreadPool p1(1), p2(2);
    for (const auto& tt : kTolerances) {
        const size_t rb = row_bytes(tt.type, cols);
        std::vector<uint8_t> q(rb * size_t(rows));
        for (int64_t r = 0; r < rows; r++) quantize_row_ref(tt.type, &w[size_t(r * cols)], &q[size_t(r) * rb], cols);
        WeightView v{q.data(), tt.type, cols, rows, rb};
        std::vector<float> y1(static_cast<size_t>(n_tok * rows)), y2(y1.size());
        matmul(p1, v, x.data(), n_tok, y1.data());
        matmul(p2, v, x.data(), n_tok, y2.data());
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; r++) {
            dequantize_row_ref(tt.type, &q[size_t(r) * rb], row.data(), cols);
            for (int t = 0; t < n_tok; t++) {
                double ref = 0;
                for (int64_t i = 0; i < cols; i++) ref += double(row[size_t(i)]) * x[size_t(t * cols + i)];
                // 8-bit activations (the integer fast paths) add up to ~0.5% of the row's magnitude.
                const double tol =
                    (matmul_q8_supported(tt.type) || matmul_kq_supported(tt.type)) && isa().level != CpuLevel::Scalar
                        ? 0.03 * std::sqrt(double(cols))
                        : 1e-3;
                ASSERT_NEAR(y1[size_t(t * rows + r)], ref, tol) << type_name(tt.type);
                ASSERT_EQ(y1[size_t(t * rows + r)], y2[size_t(t * rows + r)]) << type_name(tt.type);
            }
        }
    }
}

TEST(Quant, SimdFloatKernelsMatchScalarReference) {
    // Every level this CPU has. Tolerance: relative 1e-5 of the sum of |a*b| (different summation order only).
    for (const IsaKernels* k : all_levels()) {
        SCOPED_TRACE(cpu_level_name(k->level));
        for (int64_t n : {1, 7, 8, 15, 16, 33, 64, 257}) {
            auto a = gaussian(size_t(n), 11), b = gaussian(size_t(n), 12);
            std::vector<uint16_t> h(static_cast<size_t>(n));
            double mag = 0;
            for (int64_t i = 0; i < n; i++) {
                h[size_t(i)] = f32_to_fp16(b[size_t(i)]);
                mag += std::fabs(a[size_t(i)] * b[size_t(i)]);
            }
            EXPECT_NEAR(k->dot_f32(a.data(), b.data(), n), dot_f32_ref(a.data(), b.data(), n), 1e-5 * mag + 1e-6);
            EXPECT_NEAR(k->dot_f32_f16(a.data(), h.data(), n), dot_f32_f16_ref(a.data(), h.data(), n),
                        1e-5 * mag + 1e-6);
            std::vector<float> y1 = a, y2 = a;
            k->axpy_f16(0.37f, h.data(), y1.data(), n);
            axpy_f16_ref(0.37f, h.data(), y2.data(), n);
            for (int64_t i = 0; i < n; i++) EXPECT_NEAR(y1[size_t(i)], y2[size_t(i)], 1e-6);
        }
        // F32 / F16 / BF16 matrices: every row count around the 4-row step, columns with and without a tail.
        for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
            auto fn16 = type == TensorType::F16 ? k->matmul_f16_rows : k->matmul_bf16_rows;
            if (type == TensorType::F32 ? !k->matmul_f32_rows : !fn16) continue;  // the scalar level: generic path
            for (int64_t cols : {8, 13, 64, 100}) {
                const int64_t rows = 7;
                const int n_tok = 3;
                auto w = gaussian(size_t(rows * cols), 13), x = gaussian(size_t(n_tok * cols), 14);
                const size_t rb = row_bytes(type, cols);
                std::vector<uint8_t> q(rb * size_t(rows));
                for (int64_t r = 0; r < rows; r++)
                    quantize_row_ref(type, &w[size_t(r * cols)], &q[size_t(r) * rb], cols);
                WeightView v{q.data(), type, cols, rows, rb};
                std::vector<float> ref(size_t(n_tok * rows)), got(ref.size()), scratch(static_cast<size_t>(cols));
                matmul_rows_ref(v, x.data(), n_tok, ref.data(), rows, 0, rows, scratch.data());
                if (type == TensorType::F32)
                    k->matmul_f32_rows(reinterpret_cast<const float*>(q.data()), cols, x.data(), n_tok, got.data(),
                                       rows, 0, rows);
                else
                    fn16(reinterpret_cast<const uint16_t*>(q.data()), cols, x.data(), n_tok, got.data(), rows, 0, rows);
                for (size_t i = 0; i < ref.size(); i++)
                    ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << type_name(type) << " cols " << cols;
            }
        }
        // The bandwidth probe's sum.
        std::vector<uint64_t> words(4096 + 8);
        uint64_t* aligned = words.data() + (8 - (reinterpret_cast<uintptr_t>(words.data()) / 8) % 8) % 8;
        uint64_t want = 0;
        for (size_t i = 0; i < 4096; i++) want += (aligned[i] = i * 2654435761u);
        EXPECT_EQ(k->stream_sum(aligned, 4096), want);
    }
}

TEST(Quant, IntegerMatmulKernelsMatchScalarIntegerReference) {
    // The SIMD kernels compute exactly the integer sums of the scalar reference; only the float summation
    // order differs: tolerance 1e-4 relative to the row's magnitude.
    ThreadPool pool(1);
    for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::MXFP4}) {
        for (int64_t cols : {64, 256, 288, 512}) {  // 288: 9 blocks, exercises the tail of the 8-block loop
            const int64_t rows = 5;
            auto w = gaussian(size_t(rows * cols), 3);
            const size_t rb = row_bytes(type, cols);
            std::vector<uint8_t> q(rb * size_t(rows));
            for (int64_t r = 0; r < rows; r++) quantize_row_ref(type, &w[size_t(r * cols)], &q[size_t(r) * rb], cols);
            WeightView v{q.data(), type, cols, rows, rb};
            for (int n_tok : {1, 2, 3, 4, 5, 8, 9}) {
                auto x = gaussian(size_t(n_tok * cols), uint32_t(40 + n_tok));
                ActQ8 act;
                quantize_act_q8(x.data(), n_tok, cols, act);
                std::vector<float> ref(size_t(n_tok * rows)), fast(ref.size());
                matmul_q8_rows_ref(v, act, ref.data(), rows, 0, rows);
                for (const IsaKernels* k : all_levels()) {
                    if (!k->matmul_q8_rows) continue;
                    k->matmul_q8_rows(type, q.data(), rb, cols, act, fast.data(), rows, 0, rows);
                    for (size_t i = 0; i < ref.size(); i++)
                        ASSERT_NEAR(fast[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])))
                            << cpu_level_name(k->level) << " " << type_name(type) << " cols " << cols << " n_tok "
                            << n_tok << " i " << i;
                }
                // The quantized-activation result stays close to the exact float product (8-bit activations: error
                // ~ sqrt(cols) * amax / 127 / sqrt(12) for unit weights; 5 sigma).
                std::vector<float> exact(ref.size()), scratch(static_cast<size_t>(cols));
                matmul_rows_ref(v, x.data(), n_tok, exact.data(), rows, 0, rows, scratch.data());
                for (size_t i = 0; i < ref.size(); i++) EXPECT_NEAR(ref[i], exact[i], 0.03 * std::sqrt(double(cols)));
            }
        }
    }
}

TEST(Quant, SiluMulMatchesScalarReference) {
    // Relative 1e-6 (the vector exponential's error is below 2e-7), over both signs, large magnitudes (where
    // exp(-g) would overflow) and a tail that is not a multiple of 8.
    std::vector<float> g = gaussian(1003, 11), up = gaussian(1003, 12);
    for (size_t i = 0; i < g.size(); i += 50) g[i] *= 100.0f;
    g[1] = 0.0f;
    g[2] = -200.0f;
    g[3] = 200.0f;
    for (const IsaKernels* k : all_levels()) {
        std::vector<float> a = g, b = g;
        k->silu_mul(a.data(), up.data(), int64_t(a.size()));
        silu_mul_ref(b.data(), up.data(), int64_t(b.size()));
        for (size_t i = 0; i < a.size(); i++)
            ASSERT_NEAR(a[i], b[i], 1e-6 * (1 + std::fabs(b[i]))) << cpu_level_name(k->level) << " g " << g[i];
    }
}

TEST(Quant, KQuantUnpackedDotMatchesDequantizedReference) {
    // unpack_kq_row must reproduce the dequantized weights exactly (w = lane_scale * q + offset), and the SIMD
    // dot must equal the scalar integer reference.
    for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
        const int64_t n = 512;
        auto w = gaussian(size_t(n), 21);
        std::vector<uint8_t> q(row_bytes(type, n));
        quantize_row_ref(type, w.data(), q.data(), n);
        std::vector<float> deq(static_cast<size_t>(n));
        dequantize_row_ref(type, q.data(), deq.data(), n);
        UnpackedRow row, row_fast;
        unpack_kq_row(type, q.data(), n, row);
        row_fast.resize(n);
        for (const IsaKernels* k : all_levels()) {
            if (!k->unpack_kq_row) continue;
            k->unpack_kq_row(type, q.data(), n, row_fast.q.data(), row_fast.lane_scale.data(), row_fast.offset.data());
            EXPECT_EQ(row_fast.q, row.q) << cpu_level_name(k->level) << " " << type_name(type);
            EXPECT_EQ(row_fast.lane_scale, row.lane_scale) << cpu_level_name(k->level) << " " << type_name(type);
            EXPECT_EQ(row_fast.offset, row.offset) << cpu_level_name(k->level) << " " << type_name(type);
        }
        for (int64_t i = 0; i < n; i++)
            ASSERT_NEAR(row.lane_scale[size_t(i / 4)] * row.q[size_t(i)] + row.offset[size_t(i / 32)], deq[size_t(i)],
                        1e-5)
                << type_name(type) << " " << i;
        auto x = gaussian(size_t(3 * n), 22);
        ActQ8 act;
        quantize_act_q8(x.data(), 3, n, act, 256);
        for (int t = 0; t < 3; t++) {
            float ref = dot_unpacked_ref(row, act, t);
            for (const IsaKernels* k : all_levels()) {
                if (!k->dot_unpacked) continue;
                EXPECT_NEAR(k->dot_unpacked(row.q.data(), row.lane_scale.data(), row.offset.data(), act, t), ref,
                            1e-4 * (1 + std::fabs(ref)))
                    << cpu_level_name(k->level);
            }
            double exact = 0;
            for (int64_t i = 0; i < n; i++) exact += double(deq[size_t(i)]) * x[size_t(t * n + i)];
            EXPECT_NEAR(ref, exact, 0.03 * std::sqrt(double(n)));
        }
    }
}

TEST(Quant, ActivationQuantizerMatchesScalarReferenceExactly) {
    // Same rounding (nearest-even) and the same scale arithmetic: every byte, scale and sum identical.
    for (int group : {32, 256}) {
        const int n_rows = 5;
        const int64_t n = 512;
        auto x = gaussian(size_t(n_rows * n), 77);
        for (int64_t i = 0; i < n; i++) x[size_t(2 * n + i)] = 0.0f;  // an all-zero row
        for (int64_t i = 0; i < n; i++) x[size_t(3 * n + i)] = float(i % 64) * 0.5f - 16;  // ties at .5 after scaling
        x[size_t(4 * n)] = 1e30f;  // one huge value
        ActQ8 ref, fast;
        quantize_act_q8_ref(x.data(), n_rows, n, ref, group);
        for (const IsaKernels* k : all_levels()) {
            quantize_act_q8_prepare(n_rows, n, fast);
            k->quantize_act_rows(x.data(), n, group, fast, 0, n_rows);
            ASSERT_EQ(ref.q, fast.q) << cpu_level_name(k->level) << " group " << group;
            ASSERT_EQ(ref.d, fast.d) << cpu_level_name(k->level) << " group " << group;
            ASSERT_EQ(ref.s, fast.s) << cpu_level_name(k->level) << " group " << group;
            ASSERT_EQ(ref.qsum, fast.qsum) << cpu_level_name(k->level) << " group " << group;
            ASSERT_EQ(ref.qsum16, fast.qsum16) << cpu_level_name(k->level) << " group " << group;
        }
        for (size_t i = 0; i < ref.qsum.size(); i++) ASSERT_EQ(ref.qsum[i], ref.qsum16[2 * i] + ref.qsum16[2 * i + 1]);
        // In two steps over row ranges, as the thread pool runs it.
        ActQ8 split;
        quantize_act_q8_prepare(n_rows, n, split);
        quantize_act_q8_rows(x.data(), n, group, split, 3, n_rows);
        quantize_act_q8_rows(x.data(), n, group, split, 0, 3);
        ASSERT_EQ(ref.q, split.q);
        ASSERT_EQ(ref.qsum, split.qsum);
    }
}

TEST(Quant, PackedKernelMatchesIntegerReference) {
    // The 16-row interleaved layouts compute the same integer sums as the plain-layout references (for Q4_K the
    // K-quant path's unpacked rows, with activations in groups of 256 as the packed kernel expects).
    for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
        const bool kq = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
        const int64_t rows = 48, cols = kq ? 512 : 288;
        auto w = gaussian(size_t(rows * cols), 31);
        const size_t rb = row_bytes(type, cols);
        std::vector<uint8_t> q(rb * size_t(rows));
        for (int64_t r = 0; r < rows; r++) quantize_row_ref(type, &w[size_t(r * cols)], &q[size_t(r) * rb], cols);
        ASSERT_TRUE(packable(type, rows, cols));
        std::vector<uint8_t> packed(packed_bytes(type, rows, cols));
        repack_rows(type, q.data(), rb, rows, cols, packed.data());
        WeightView v{q.data(), type, cols, rows, rb};
        // Rows read back from the packed copy (embedding lookups of a tied output matrix) are the original rows.
        std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
        for (int64_t r = 0; r < rows; r++) {
            dequantize_row_ref(type, &q[size_t(r) * rb], want.data(), cols);
            dequantize_packed_row(type, packed.data(), cols, r, got.data());
            ASSERT_EQ(want, got) << type_name(type) << " row " << r;
        }
        for (int n_tok : {1, 2, 3, 4, 7, 8, 9, 16, 19}) {  // every tile size (8, 4, 2, 1) and repeated tiles
            auto x = gaussian(size_t(n_tok * cols), uint32_t(50 + n_tok));
            ActQ8 act;
            quantize_act_q8(x.data(), n_tok, cols, act, packed_act_group(type));
            std::vector<float> ref(size_t(n_tok * rows)), pref(ref.size()), fast(ref.size());
            if (kq) {
                UnpackedRow row;
                for (int64_t r = 0; r < rows; r++) {
                    unpack_kq_row(type, &q[size_t(r) * rb], cols, row);
                    for (int t = 0; t < n_tok; t++) ref[size_t(t * rows + r)] = dot_unpacked_ref(row, act, t);
                }
            } else {
                matmul_q8_rows_ref(v, act, ref.data(), rows, 0, rows);
            }
            matmul_packed_ref(type, packed.data(), cols, act, pref.data(), rows, 0, rows);
            for (size_t i = 0; i < ref.size(); i++)
                ASSERT_NEAR(pref[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])))
                    << type_name(type) << " n_tok " << n_tok << " i " << i;
            for (const IsaKernels* k : all_levels()) {
                if (!k->matmul_packed) continue;
                k->matmul_packed(type, packed.data(), cols, act, fast.data(), rows, 16, rows);  // rows 16..47
                for (size_t t = 0; t < size_t(n_tok); t++)
                    for (int64_t r = 16; r < rows; r++)
                        ASSERT_NEAR(fast[t * rows + size_t(r)], ref[t * rows + size_t(r)],
                                    1e-4 * (1 + std::fabs(ref[t * rows + size_t(r)])))
                            << cpu_level_name(k->level) << " " << type_name(type) << " n_tok " << n_tok << " row " << r;
            }
        }
    }
}
