// Flash-style attention (backend/cpu/attention.h): the tile kernel of every level against the scalar reference, the
// cache-to-float conversion of every KV type, the tiled driver against a double-precision two-pass reference for
// every cache type (chains across chunk boundaries, sliding windows, sinks, trees), and the exactness contract:
// one token at a time, a batch, a tree and any thread count give bit-identical results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "backend/cpu/isa.h"
#include "backend/cpu/attention.h"
#include "model/kv_cache.h"
#include "backend/cpu/kernels.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

using test::all_levels;
using test::gaussian;

const TensorType kKvTypes[] = {TensorType::F32,    TensorType::F16,  TensorType::BF16,
                               TensorType::Q8_0,   TensorType::Q4_0, TensorType::Q4_1,
                               TensorType::IQ4_NL, TensorType::Q5_0, TensorType::Q5_1};

// The caches' backend: the CPU's
backend::Backend& cpu() {
    static ThreadPool pool(1);
    static const std::unique_ptr<backend::Backend> be = backend::make_cpu_backend(pool);
    return *be;
}
// Layer 0 of a cache as attention reads it
KvRows rows_of(const KvCache& kv) { return kv_rows(kv.k_rows(0), kv.v_rows(0), kv.kv_dim(0) / kv.head_dim(0)); }

// A one-layer cache of n_ctx random rows (keys and values of sd 1).
KvCache random_cache(int n_ctx, int nkv, int hd, TensorType t, uint32_t seed) {
    KvCache kv(cpu(), n_ctx, {KvLayer{n_ctx, nkv * hd, hd}}, t, t);
    const auto k = gaussian(size_t(n_ctx) * size_t(nkv * hd), seed), v = gaussian(k.size(), seed + 1);
    for (int p = 0; p < n_ctx; p++)
        kv.store(0, p, k.data() + size_t(p) * size_t(nkv * hd), v.data() + size_t(p) * size_t(nkv * hd));
    return kv;
}

std::vector<AttnRow> chain(const KvCache& kv, int pos0, int n, int window) {
    std::vector<AttnRow> rows;
    for (int t = 0; t < n; t++) {
        const int pos = pos0 + t;
        rows.push_back({rows_of(kv), pos, window > 0 ? std::max(0, pos - window + 1) : 0, pos0, nullptr});
    }
    return rows;
}

// The online-softmax states (mx, l, o) of m queries of a level's tile step against its reference's.
void expect_states_near(const std::vector<float>& mx1, const std::vector<float>& l1, const std::vector<float>& o1,
                        const std::vector<float>& mx2, const std::vector<float>& l2, const std::vector<float>& o2,
                        int m, int hd, const std::string& what) {
    for (int i = 0; i < m; i++) {
        ASSERT_EQ(mx1[size_t(i)] == -INFINITY, mx2[size_t(i)] == -INFINITY) << what;
        if (mx2[size_t(i)] == -INFINITY) continue;
        ASSERT_NEAR(mx1[size_t(i)], mx2[size_t(i)], 1e-5 * (1 + std::fabs(mx2[size_t(i)]))) << what;
        ASSERT_NEAR(l1[size_t(i)], l2[size_t(i)], 1e-5 * l2[size_t(i)]) << what;
        for (int d = 0; d < hd; d++)
            ASSERT_NEAR(o1[size_t(i * hd + d)], o2[size_t(i * hd + d)],
                        2e-5 * (l2[size_t(i)] + std::fabs(o2[size_t(i * hd + d)])))
                << what << " q " << i;
    }
}

}  // namespace

TEST(Attention, TileKernelMatchesReferenceAtEveryLevel) {
    std::mt19937 rng(3);
    for (int hd : {8, 16, 24, 32, 64, 128, 256, 12}) {
        for (int group : {1, 3, 8}) {
            for (int n_rows : {1, 3}) {
                const int m = n_rows * group;
                const size_t q_stride = size_t(group * hd) + 8;  // rows apart, as in the pass's q matrix
                const auto q = gaussian(q_stride * size_t(n_rows), 5);
                for (const IsaKernels* lv : all_levels()) {
                    std::vector<float> mx1(static_cast<size_t>(m), -INFINITY), l1(static_cast<size_t>(m)),
                        o1(static_cast<size_t>(m * hd));
                    std::vector<float> mx2 = mx1, l2 = l1, o2 = o1;
                    for (int tile = 0; tile < 3; tile++) {
                        alignas(64) static float kt[kAttnTile * 256], vt[kAttnTile * 256];
                        const auto kf = gaussian(size_t(kAttnTile * hd), 10 + tile, 2.0f);
                        const auto vf = gaussian(size_t(kAttnTile * hd), 20 + tile);
                        std::copy(kf.begin(), kf.end(), kt);
                        std::copy(vf.begin(), vf.end(), vt);
                        std::vector<uint32_t> masks(static_cast<size_t>(n_rows));
                        for (auto& mk : masks) mk = tile == 1 ? 0xFFFFFFFFu : uint32_t(rng());
                        if (n_rows > 1) masks[1] = 0;  // a row that sees nothing of this tile stays as it was
                        if (hd % 8 == 0 && hd <= 256)
                            lv->attn_tile(q.data(), q_stride, n_rows, group, masks.data(), kt, vt, hd, 0.125f,
                                          mx1.data(), l1.data(), o1.data());
                        else
                            attn_tile(q.data(), q_stride, n_rows, group, masks.data(), kt, vt, hd, 0.125f, mx1.data(),
                                      l1.data(), o1.data());
                        attn_tile_ref(q.data(), q_stride, n_rows, group, masks.data(), kt, vt, hd, 0.125f, mx2.data(),
                                      l2.data(), o2.data());
                    }
                    expect_states_near(mx1, l1, o1, mx2, l2, o2, m, hd,
                                       std::string(cpu_level_name(lv->level)) + " hd " + std::to_string(hd) +
                                           " group " + std::to_string(group));
                }
            }
        }
    }
}

TEST(Attention, CacheTilesConvertExactlyAtEveryLevel) {
    for (TensorType t : kKvTypes) {
        for (int hd : {32, 64, 128}) {
            KvCache kv = random_cache(40, 2, hd, t, 7);
            for (int np : {1, 17, kAttnTile}) {
                const uint8_t* rows[kAttnTile];
                for (int j = 0; j < np; j++) rows[j] = rows_of(kv).krow(3 + j) + rows_of(kv).hk;  // head 1
                alignas(64) static float a[kAttnTile * 128], b[kAttnTile * 128];
                std::fill(a, a + kAttnTile * hd, 7.0f);
                kv_tile_f32_ref(t, rows, np, hd, b);
                for (int j = np; j < (np + 7) / 8 * 8; j++)
                    for (int d = 0; d < hd; d++) ASSERT_EQ(b[j * hd + d], 0.0f);
                for (const IsaKernels* lv : all_levels()) {
                    if (!lv->kv_tile_f32 || !lv->kv_tile_f32(t, rows, np, hd, a)) continue;  // the reference's
                    for (int i = 0; i < (np + 7) / 8 * 8 * hd; i++)
                        ASSERT_EQ(a[i], b[i])
                            << type_name(t) << " " << cpu_level_name(lv->level) << " hd " << hd << " at " << i;
                }
            }
        }
    }
}

// Integer keys (Q8_0, Q4_0): the tile holds each position's integers, block scales and offset sums, exactly what
// the float tile holds as their products; the level's integer tile step against its scalar reference.
TEST(Attention, IntegerKeyTilesConvertExactly) {
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0}) {
        for (int hd : {32, 64, 128}) {
            KvCache kv = random_cache(40, 2, hd, t, 7);
            for (int np : {1, 17, kAttnTile}) {
                const uint8_t* rows[kAttnTile];
                for (int j = 0; j < np; j++) rows[j] = rows_of(kv).krow(3 + j) + rows_of(kv).hk;
                alignas(64) static float f[kAttnTile * 128], kd[4 * kAttnTile];
                alignas(64) static uint8_t ki[kAttnTile * 128];
                kv_tile_f32_ref(t, rows, np, hd, f);
                ASSERT_TRUE(kv_tile_i8(t, rows, np, hd, ki, kd));
                for (int j = 0; j < (np + 7) / 8 * 8; j++)
                    for (int b = 0; b < hd / 32; b++)
                        for (int e = 0; e < 32; e++) {
                            const int i = j * hd + 32 * b + e;
                            ASSERT_EQ(float(int(ki[i]) - 128) * kd[b * kAttnTile + j], j < np ? f[i] : 0.0f)
                                << type_name(t) << " at " << i;
                        }
            }
        }
        EXPECT_FALSE(kv_tile_i8(TensorType::F16, nullptr, 0, 64, nullptr, nullptr));
    }
}

TEST(Attention, IntegerTileKernelMatchesReferenceAtEveryLevel) {
    std::mt19937 rng(5);
    int levels = 0;
    for (const IsaKernels* lv : all_levels()) {
        if (!lv->attn_tile_i8) continue;
        levels++;
        for (int hd : {32, 64, 128, 256}) {
            for (int group : {1, 8}) {
                const int n_rows = 3, m = n_rows * group, nkv = 1;
                const size_t q_stride = size_t(group * hd) + 32;
                const auto qf = gaussian(q_stride * size_t(n_rows), 9);
                std::vector<int8_t> qs(qf.size());
                std::vector<float> qd(qf.size() / 32);
                std::vector<int32_t> qc(qf.size() / 32);
                // block by block, as each query
                quantize_query_i8(qf.data(), int(qf.size()), qs.data(), qd.data(), qc.data());
                KvCache kv = random_cache(3 * kAttnTile, nkv, hd, TensorType::Q8_0, 12);
                std::vector<float> mx1(static_cast<size_t>(m), -INFINITY), l1(static_cast<size_t>(m)),
                    o1(static_cast<size_t>(m * hd));
                std::vector<float> mx2 = mx1, l2 = l1, o2 = o1;
                for (int tile = 0; tile < 3; tile++) {
                    const uint8_t* rows[kAttnTile];
                    for (int j = 0; j < kAttnTile; j++) rows[j] = rows_of(kv).krow(tile * kAttnTile + j);
                    alignas(64) static uint8_t ki[kAttnTile * 256];
                    alignas(64) static float kd[8 * kAttnTile], vt[kAttnTile * 256];
                    ASSERT_TRUE(kv_tile_i8(TensorType::Q8_0, rows, kAttnTile, hd, ki, kd));
                    const auto vf = gaussian(size_t(kAttnTile * hd), 30 + tile);
                    std::copy(vf.begin(), vf.end(), vt);
                    std::vector<uint32_t> masks(static_cast<size_t>(n_rows));
                    for (auto& mk : masks) mk = tile == 1 ? 0xFFFFFFFFu : uint32_t(rng());
                    masks[1] = 0;
                    lv->attn_tile_i8(qs.data(), qd.data(), qc.data(), q_stride, n_rows, group, masks.data(), ki, kd, vt,
                                     hd, 0.125f, mx1.data(), l1.data(), o1.data());
                    attn_tile_i8_ref(qs.data(), qd.data(), qc.data(), q_stride, n_rows, group, masks.data(), ki, kd, vt,
                                     hd, 0.125f, mx2.data(), l2.data(), o2.data());
                }
                expect_states_near(mx1, l1, o1, mx2, l2, o2, m, hd,
                                   std::string(cpu_level_name(lv->level)) + " integer hd " + std::to_string(hd) +
                                       " group " + std::to_string(group));
            }
        }
    }
    std::printf("integer-scored attention tiles at %d level(s) of this CPU\n", levels);
}

// The integer reference is the float step on the dequantized query and keys (on every CPU, with or without an
// integer kernel).
TEST(Attention, IntegerReferenceIsTheFloatStepOnDequantizedValues) {
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0}) {
        const int hd = 64, group = 4, n_rows = 2, m = n_rows * group;
        const size_t q_stride = size_t(group * hd);
        const auto qf = gaussian(q_stride * size_t(n_rows), 21);
        std::vector<int8_t> qs(qf.size());
        std::vector<float> qd(qf.size() / 32), qdq(qf.size());
        std::vector<int32_t> qc(qf.size() / 32);
        quantize_query_i8(qf.data(), int(qf.size()), qs.data(), qd.data(), qc.data());
        for (size_t i = 0; i < qf.size(); i++) qdq[i] = float(qs[i]) * qd[i / 32];
        KvCache kv = random_cache(kAttnTile, 1, hd, t, 23);
        const uint8_t* rows[kAttnTile];
        for (int j = 0; j < kAttnTile; j++) rows[j] = rows_of(kv).krow(j);
        alignas(64) static uint8_t ki[kAttnTile * 64];
        alignas(64) static float kd[2 * kAttnTile], kt[kAttnTile * 64], vt[kAttnTile * 64];
        ASSERT_TRUE(kv_tile_i8(t, rows, kAttnTile, hd, ki, kd));
        kv_tile_f32_ref(t, rows, kAttnTile, hd, kt);
        const auto vf = gaussian(size_t(kAttnTile * hd), 25);
        std::copy(vf.begin(), vf.end(), vt);
        const uint32_t masks[2] = {0xFFFFFFFFu, 0x00FF00F0u};
        std::vector<float> mx1(static_cast<size_t>(m), -INFINITY), l1(static_cast<size_t>(m)),
            o1(static_cast<size_t>(m * hd));
        std::vector<float> mx2 = mx1, l2 = l1, o2 = o1;
        attn_tile_i8_ref(qs.data(), qd.data(), qc.data(), q_stride, n_rows, group, masks, ki, kd, vt, hd, 0.125f,
                         mx1.data(), l1.data(), o1.data());
        attn_tile_ref(qdq.data(), q_stride, n_rows, group, masks, kt, vt, hd, 0.125f, mx2.data(), l2.data(), o2.data());
        for (int i = 0; i < m; i++) {
            ASSERT_NEAR(mx1[size_t(i)], mx2[size_t(i)], 1e-5 * (1 + std::fabs(mx2[size_t(i)]))) << type_name(t);
            ASSERT_NEAR(l1[size_t(i)], l2[size_t(i)], 1e-5 * l2[size_t(i)]) << type_name(t);
            for (int d = 0; d < hd; d++)
                ASSERT_NEAR(o1[size_t(i * hd + d)], o2[size_t(i * hd + d)], 2e-5 * (l2[size_t(i)] + 1)) << type_name(t);
        }
    }
}

TEST(Attention, TiledEqualsExactReferenceForEveryCacheType) {
    // Rows past two chunk boundaries, a sliding window that starts inside a tile, sinks, grouped and plain
    // multi-head attention, a head size without a SIMD path (12, f32/f16/bf16 only: block types need 32).
    // Under CPU emulation (scripts/test-cpus.sh, TANDEM_TEST_QUICK=1): one shape, two types, past one chunk
    // boundary, a window with sinks and none without.
    const bool quick = std::getenv("TANDEM_TEST_QUICK") && *std::getenv("TANDEM_TEST_QUICK") == '1';
    ThreadPool pool(2);
    struct Shape {
        int nh, nkv, hd;
    };
    std::vector<Shape> shapes = {Shape{8, 2, 64}, Shape{2, 2, 32}, Shape{4, 1, 12}};
    if (quick) shapes.resize(1);
    for (const Shape s : shapes) {
        for (TensorType t : kKvTypes) {
            if (s.hd % type_traits(t).block_elems != 0) continue;
            if (quick && t != TensorType::F16 && t != TensorType::Q8_0) continue;
            const int n_ctx = quick ? kAttnChunk + 100 : 2 * kAttnChunk + 300;
            KvCache kv = random_cache(n_ctx, s.nkv, s.hd, t, 11);
            const auto sinks = gaussian(size_t(s.nh), 13);
            for (int window : {0, 700}) {
                for (bool with_sinks : {false, true}) {
                    if (quick && with_sinks != (window > 0)) continue;
                    const auto rows = chain(kv, n_ctx - 9, 9, window);
                    const auto q = gaussian(rows.size() * size_t(s.nh * s.hd), 17, 0.5f);
                    const AttnShape sh{s.nh, s.nkv, s.hd, 1.0f / std::sqrt(float(s.hd)),
                                       with_sinks ? sinks.data() : nullptr};
                    std::vector<float> out(q.size()), ref(q.size()), scratch;
                    attention(pool, sh, rows, q.data(), out.data(), scratch);
                    attention_ref(sh, rows, q.data(), ref.data());
                    for (size_t i = 0; i < out.size(); i++)
                        ASSERT_NEAR(out[i], ref[i], 2e-5 * (1 + std::fabs(ref[i])))
                            << type_name(t) << " heads " << s.nh << "/" << s.nkv << " hd " << s.hd << " window "
                            << window << " sinks " << with_sinks << " at " << i;
                }
            }
        }
    }
}

TEST(Attention, OneTokenBatchTreeAndThreadCountAreBitIdentical) {
    ThreadPool one(1), two(2);
    const int nh = 8, nkv = 2, hd = 64, n_ctx = kAttnChunk + 200;
    const bool quick = std::getenv("TANDEM_TEST_QUICK") && *std::getenv("TANDEM_TEST_QUICK") == '1';
    for (TensorType t : {TensorType::Q8_0, TensorType::F16, TensorType::Q4_1}) {
        if (quick && t != TensorType::Q8_0) continue;  // under CPU emulation
        KvCache kv = random_cache(n_ctx, nkv, hd, t, 21);
        const AttnShape sh{nh, nkv, hd, 0.125f, nullptr};
        const int pos0 = kAttnChunk - 5, n = 9;  // the batch straddles a chunk and several tiles
        const auto rows = chain(kv, pos0, n, 0);
        const auto q = gaussian(size_t(n * nh * hd), 23);
        std::vector<float> batch(q.size()), batch1(q.size()), scratch;
        attention(two, sh, rows, q.data(), batch.data(), scratch);
        attention(one, sh, rows, q.data(), batch1.data(), scratch);
        ASSERT_EQ(batch, batch1) << "thread count changed the result (" << type_name(t) << ")";
        for (int r = 0; r < n; r++) {  // the same token decoded alone: its segment starts at its own position
            const std::vector<AttnRow> alone{{rows_of(kv), pos0 + r, 0, pos0 + r, nullptr}};
            std::vector<float> o(static_cast<size_t>(nh * hd));
            attention(two, sh, alone, q.data() + size_t(r * nh * hd), o.data(), scratch);
            for (int i = 0; i < nh * hd; i++)
                ASSERT_EQ(o[size_t(i)], batch[size_t(r * nh * hd + i)]) << type_name(t) << " row " << r << " at " << i;
        }
        // A token tree at pos0: 0 root; 1, 2 children of 0; 3 child of 2; 4 child of 3. Node 4's path sits in slots
        // pos0, pos0+2, pos0+3, pos0+4; the same rows moved to pos0..pos0+3 (as keep_path does) and decoded as a
        // chain must give node 4's result bit for bit.
        const int32_t tail4[] = {pos0, pos0 + 2, pos0 + 3, pos0 + 4};
        const int32_t tail1[] = {pos0, pos0 + 1};
        const std::vector<AttnRow> tree{{rows_of(kv), pos0 + 1, 0, pos0, tail1},
                                        {rows_of(kv), pos0 + 3, 0, pos0, tail4}};
        std::vector<float> qt(static_cast<size_t>(2 * nh * hd));
        std::copy_n(q.data() + size_t(nh * hd), nh * hd, qt.data());  // both nodes take the query of row 1
        std::copy_n(q.data() + size_t(nh * hd), nh * hd, qt.data() + size_t(nh * hd));
        std::vector<float> tout(qt.size());
        attention(two, sh, tree, qt.data(), tout.data(), scratch);
        KvCache moved = random_cache(n_ctx, nkv, hd, t, 21);
        for (int j = 1; j < 4; j++) moved.copy_row(tail4[j], pos0 + j);
        const std::vector<AttnRow> as_chain{{rows_of(moved), pos0 + 3, 0, pos0 + 3, nullptr}};
        std::vector<float> cout(static_cast<size_t>(nh * hd));
        attention(one, sh, as_chain, qt.data() + size_t(nh * hd), cout.data(), scratch);
        for (int i = 0; i < nh * hd; i++)
            ASSERT_EQ(cout[size_t(i)], tout[size_t(nh * hd + i)]) << type_name(t) << " tree node at " << i;
        // and node 1 (slots pos0, pos0+1 contiguous) equals the chain row at pos0 + 1 of the batch
        for (int i = 0; i < nh * hd; i++) ASSERT_EQ(tout[size_t(i)], batch[size_t(nh * hd + i)]) << "tree node 1";
    }
}
