#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/thread_pool.h"

namespace tandem {

namespace {

// Adjacent rows of one segment that share each tile: rows [r0, r1), positions [lo, hi) seen by any of them.
struct Block {
    int r0, r1, lo, hi;
    int first_chunk() const { return lo / kAttnChunk; }
    int n_chunks() const { return (hi - 1) / kAttnChunk - first_chunk() + 1; }
};

// The softmax state of m queries: mx (m), l (m), o (m, hd), in one buffer.
struct State {
    float* mx;
    float* l;
    float* o;
    static size_t floats(int m, int hd) { return size_t(m) * size_t(hd + 2); }
    State(float* p, int m, int hd) : mx(p), l(p + m), o(p + 2 * m) { (void)hd; }
    void clear(int m, int hd) {
        std::fill(mx, mx + m, -INFINITY);
        std::fill(l, l + m, 0.0f);
        std::fill(o, o + size_t(m) * size_t(hd), 0.0f);
    }
};

// acc = merge(acc, part), query by query; an empty part (no position seen) changes nothing, an empty acc
// becomes a copy of part.
void merge(State& acc, const State& part, int m, int hd) {
    for (int i = 0; i < m; i++) {
        if (part.l[i] == 0.0f && part.mx[i] == -INFINITY) continue;
        float* oa = acc.o + size_t(i) * size_t(hd);
        const float* ob = part.o + size_t(i) * size_t(hd);
        if (acc.mx[i] == -INFINITY) {
            acc.mx[i] = part.mx[i];
            acc.l[i] = part.l[i];
            std::copy_n(ob, hd, oa);
            continue;
        }
        const float M = std::max(acc.mx[i], part.mx[i]);
        const float ca = std::exp(acc.mx[i] - M), cb = std::exp(part.mx[i] - M);
        acc.l[i] = acc.l[i] * ca + part.l[i] * cb;
        for (int d = 0; d < hd; d++) oa[d] = oa[d] * ca + ob[d] * cb;
        acc.mx[i] = M;
    }
}

constexpr int kMaxHeadDim = 576;  // MLA's cache row (DeepSeek V3: latent 512 + rope 64)

constexpr int kMaxHeadDimI8 = 256;  // attn_tile_i8's limit

struct alignas(64) Tiles {
    float k[kAttnTile * kMaxHeadDim];
    float v[kAttnTile * kMaxHeadDim];
    alignas(64) uint8_t ki[kAttnTile * kMaxHeadDimI8];  // integer keys, offset to unsigned (attn_tile_i8)
    alignas(64) float kd[kMaxHeadDimI8 / 32 * kAttnTile];
    const uint8_t* kp[kAttnTile];
    const uint8_t* vp[kAttnTile];
};

// The queries of a pass in 8-bit form (quantize_query_i8), laid out as q: row r, head h at (r * n_head + h) * hd.
struct QueryI8 {
    std::vector<int8_t> qs;
    std::vector<float> qd;
    std::vector<int32_t> qc;
};

class Runner {
public:
    // qi8: the queries in 8-bit form when some row's cache scores its keys in integers (scores_in_integers).
    Runner(const AttnShape& sh, const std::vector<AttnRow>& rows, const float* q, const QueryI8* qi8)
        : sh_(sh), rows_(rows), q_(q), qi8_(qi8), group_(sh.n_head / sh.n_head_kv), qd_(sh.n_head * sh.head_dim) {}

    // The state of block b's queries of key/value head g over chunk c (positions [c, c+1) * kAttnChunk).
    void chunk(const Block& b, int g, int c, State& st) const {
        const int hd = sh_.head_dim, nr = b.r1 - b.r0, m = nr * group_;
        st.clear(m, hd);
        const AttnRow& first = rows_[size_t(b.r0)];
        const KvRows& kv = first.kv;
        const size_t hk = kv.hk * size_t(g), hv = kv.hv * size_t(g);
        const int start = std::max(b.lo, c * kAttnChunk) / kAttnTile * kAttnTile;
        const int end = std::min(b.hi, (c + 1) * kAttnChunk);
        thread_local Tiles t;
        uint32_t masks[64];
        const size_t q_at = size_t(b.r0) * size_t(qd_) + size_t(g) * size_t(group_) * size_t(hd);
        const float* qb = q_ + q_at;
        const bool i8 = scores_in_integers(kv.tk, hd);
        // The tile's keys and values, and the tile step of `n` rows from row r (their masks at m).
        auto step = [&](int np, int r, int n, const uint32_t* m) {
            const size_t qi = size_t(r) * size_t(group_);
            kv_tile_f32(kv.tv, t.vp, np, hd, t.v);
            if (i8) {
                kv_tile_i8(kv.tk, t.kp, np, hd, t.ki, t.kd);
                const size_t at = q_at + size_t(r) * size_t(qd_);
                isa().attn_tile_i8(qi8_->qs.data() + at, qi8_->qd.data() + at / 32, qi8_->qc.data() + at / 32,
                                   size_t(qd_), n, group_, m, t.ki, t.kd, t.v, hd, sh_.scale, st.mx + qi, st.l + qi,
                                   st.o + qi * size_t(hd));
                return;
            }
            kv_tile_f32(kv.tk, t.kp, np, hd, t.k);
            attn_tile(qb + size_t(r) * size_t(qd_), size_t(qd_), n, group_, m, t.k, t.v, hd, sh_.scale, st.mx + qi,
                      st.l + qi, st.o + qi * size_t(hd));
        };
        for (int t0 = start; t0 < end; t0 += kAttnTile) {
            bool any = false;
            for (int r = 0; r < nr; r++) {
                const AttnRow& row = rows_[size_t(b.r0 + r)];
                const int a = std::max(row.lo, t0), z = std::min(row.pos + 1, t0 + kAttnTile);
                masks[r] = a < z ? uint32_t((uint64_t(1) << (z - t0)) - (uint64_t(1) << (a - t0))) : 0u;
                any |= masks[r] != 0;
            }
            if (!any) continue;
            if (!first.tail || t0 + kAttnTile <= first.pos0) {  // slots are positions: one tile for all rows
                const int np = std::min(kAttnTile, b.hi - t0);
                for (int j = 0; j < np; j++) {
                    t.kp[j] = kv.krow(t0 + j) + hk;
                    t.vp[j] = kv.vrow(t0 + j) + hv;
                }
                step(np, 0, nr, masks);
                continue;
            }
            for (int r = 0; r < nr; r++) {  // a tree's own tile: each node with its ancestors' slots
                if (!masks[r]) continue;
                const AttnRow& row = rows_[size_t(b.r0 + r)];
                const int np = std::min(kAttnTile, row.pos + 1 - t0);
                for (int j = 0; j < np; j++) {
                    const int p = t0 + j;
                    const int slot = p < row.pos0 ? p : row.tail[p - row.pos0];
                    t.kp[j] = kv.krow(slot) + hk;
                    t.vp[j] = kv.vrow(slot) + hv;
                }
                step(np, r, 1, &masks[r]);
            }
        }
    }

    // out rows of block b, head group g, from the merged state.
    void finish(const Block& b, int g, const State& st, float* out) const {
        const int hd = sh_.head_dim;
        for (int r = b.r0; r < b.r1; r++)
            for (int i = 0; i < group_; i++) {
                const int qi = (r - b.r0) * group_ + i, h = g * group_ + i;
                float denom = st.l[qi];
                if (sh_.sinks) denom += std::exp(sh_.sinks[h] - st.mx[qi]);
                const float inv = denom > 0 ? 1.0f / denom : 0.0f;
                const float* o = st.o + size_t(qi) * size_t(hd);
                float* y = out + size_t(r) * size_t(qd_) + size_t(h) * size_t(hd);
                for (int d = 0; d < hd; d++) y[d] = o[d] * inv;
            }
    }

    int group() const { return group_; }

private:
    const AttnShape& sh_;
    const std::vector<AttnRow>& rows_;
    const float* q_;
    const QueryI8* qi8_;
    int group_, qd_;
};

std::vector<Block> make_blocks(const std::vector<AttnRow>& rows, int group) {
    const int max_rows = std::max(1, 64 / group);  // at most 64 queries share a tile
    std::vector<Block> blocks;
    for (int r = 0; r < int(rows.size()); r++) {
        const AttnRow& row = rows[size_t(r)];
        if (blocks.empty() || blocks.back().r1 - blocks.back().r0 == max_rows ||
            rows[size_t(blocks.back().r0)].kv.k != row.kv.k || rows[size_t(blocks.back().r0)].pos0 != row.pos0)
            blocks.push_back({r, r, row.lo, row.pos + 1});
        Block& b = blocks.back();
        b.r1 = r + 1;
        b.lo = std::min(b.lo, row.lo);
        b.hi = std::max(b.hi, row.pos + 1);
    }
    return blocks;
}

}  // namespace

void attention(ThreadPool& pool, const AttnShape& sh, const std::vector<AttnRow>& rows, const float* q, float* out,
               std::vector<float>& scratch) {
    TD_ASSERT(sh.n_head % sh.n_head_kv == 0 && sh.n_head / sh.n_head_kv <= 64 && sh.head_dim <= kMaxHeadDim);
    if (rows.empty()) return;
    const int nkv = sh.n_head_kv, hd = sh.head_dim;
    thread_local QueryI8 qi8_buf;
    QueryI8& qi8 = qi8_buf;  // the caller's, named so that the pool's threads fill this one
    bool any_i8 = false;
    for (const AttnRow& r : rows) any_i8 |= scores_in_integers(r.kv.tk, hd);
    if (any_i8) {
        const size_t nq = rows.size() * size_t(sh.n_head);
        qi8.qs.resize(nq * size_t(hd));
        qi8.qd.resize(nq * size_t(hd / 32));
        qi8.qc.resize(nq * size_t(hd / 32));
        pool.parallel_for(nq, [&](size_t i0, size_t i1, int) {
            for (size_t i = i0; i < i1; i++)
                quantize_query_i8(q + i * size_t(hd), hd, qi8.qs.data() + i * size_t(hd),
                                  qi8.qd.data() + i * size_t(hd / 32), qi8.qc.data() + i * size_t(hd / 32));
        });
    }
    const Runner run(sh, rows, q, any_i8 ? &qi8 : nullptr);
    const int group = run.group();
    const std::vector<Block> blocks = make_blocks(rows, group);
    const size_t n_pairs = blocks.size() * size_t(nkv);
    size_t n_tasks = 0;
    for (const Block& b : blocks) n_tasks += size_t(b.n_chunks()) * size_t(nkv);

    if (n_pairs >= size_t(4 * pool.size()) || n_tasks == n_pairs) {
        // Enough (block, head) pairs to keep the threads busy: each pair runs its chunks in order.
        pool.parallel_for(n_pairs, [&](size_t b0, size_t b1, int) {
            thread_local std::vector<float> acc_buf, part_buf;
            for (size_t i = b0; i < b1; i++) {
                const Block& b = blocks[i / size_t(nkv)];
                const int g = int(i % size_t(nkv)), m = (b.r1 - b.r0) * group;
                acc_buf.resize(State::floats(m, hd));
                part_buf.resize(State::floats(m, hd));
                State acc(acc_buf.data(), m, hd), part(part_buf.data(), m, hd);
                acc.clear(m, hd);
                for (int c = b.first_chunk(); c < b.first_chunk() + b.n_chunks(); c++) {
                    run.chunk(b, g, c, part);
                    merge(acc, part, m, hd);
                }
                run.finish(b, g, acc, out);
            }
        });
        return;
    }
    // Split-K: every (block, head, chunk) is a task with its own state; then each pair merges its chunks in order.
    struct Task {
        int block, g, c;
        size_t at;  // its state's offset in scratch
    };
    std::vector<Task> tasks;
    std::vector<size_t> pair_first(n_pairs);  // index of the pair's first task
    size_t at = 0;
    for (size_t bi = 0; bi < blocks.size(); bi++)
        for (int g = 0; g < nkv; g++) {
            const Block& b = blocks[bi];
            pair_first[bi * size_t(nkv) + size_t(g)] = tasks.size();
            for (int c = b.first_chunk(); c < b.first_chunk() + b.n_chunks(); c++) {
                tasks.push_back({int(bi), g, c, at});
                at += State::floats((b.r1 - b.r0) * group, hd);
            }
        }
    scratch.resize(at);
    pool.parallel_for(tasks.size(), [&](size_t t0, size_t t1, int) {
        for (size_t i = t0; i < t1; i++) {
            const Task& t = tasks[i];
            const Block& b = blocks[size_t(t.block)];
            const int m = (b.r1 - b.r0) * group;
            State st(scratch.data() + t.at, m, hd);
            run.chunk(b, t.g, t.c, st);
        }
    });
    pool.parallel_for(n_pairs, [&](size_t p0, size_t p1, int) {
        thread_local std::vector<float> acc_buf;
        for (size_t p = p0; p < p1; p++) {
            const Block& b = blocks[p / size_t(nkv)];
            const int g = int(p % size_t(nkv)), m = (b.r1 - b.r0) * group;
            acc_buf.resize(State::floats(m, hd));
            State acc(acc_buf.data(), m, hd);
            acc.clear(m, hd);
            for (int c = 0; c < b.n_chunks(); c++) {
                const State part(scratch.data() + tasks[pair_first[p] + size_t(c)].at, m, hd);
                merge(acc, part, m, hd);
            }
            run.finish(b, g, acc, out);
        }
    });
}

bool scores_in_integers(TensorType type_k, int head_dim) {
    return isa().attn_tile_i8 && (type_k == TensorType::Q8_0 || type_k == TensorType::Q4_0) && head_dim % 32 == 0 &&
           head_dim <= kMaxHeadDimI8;
}

void attention_ref(const AttnShape& sh, const std::vector<AttnRow>& rows, const float* q, float* out) {
    const int hd = sh.head_dim, group = sh.n_head / sh.n_head_kv, qd = sh.n_head * hd;
    std::vector<float> kf(static_cast<size_t>(hd)), vf(static_cast<size_t>(hd)), qf(static_cast<size_t>(hd));
    std::vector<int8_t> qi(static_cast<size_t>(hd));
    std::vector<float> qscale(static_cast<size_t>(hd / 32 + 1));
    std::vector<int32_t> qcorr(static_cast<size_t>(hd / 32 + 1));
    std::vector<double> s, acc(static_cast<size_t>(hd));
    for (size_t r = 0; r < rows.size(); r++) {
        const AttnRow& row = rows[r];
        const KvRows& kv = row.kv;
        for (int h = 0; h < sh.n_head; h++) {
            const int g = h / group;
            const float* qh = q + r * size_t(qd) + size_t(h) * size_t(hd);
            if (scores_in_integers(kv.tk, hd)) {  // the query the integer scores see
                quantize_query_i8(qh, hd, qi.data(), qscale.data(), qcorr.data());
                for (int i = 0; i < hd; i++) qf[size_t(i)] = float(qi[size_t(i)]) * qscale[size_t(i / 32)];
                qh = qf.data();
            }
            auto slot = [&](int p) { return p < row.pos0 || !row.tail ? p : row.tail[p - row.pos0]; };
            s.assign(size_t(row.pos + 1 - row.lo), 0.0);
            double mx = -INFINITY;
            for (int p = row.lo; p <= row.pos; p++) {
                dequantize_row_ref(kv.tk, kv.krow(slot(p)) + kv.hk * size_t(g), kf.data(), hd);
                double d = 0;
                for (int i = 0; i < hd; i++) d += double(qh[i]) * double(kf[size_t(i)]);
                s[size_t(p - row.lo)] = d * double(sh.scale);
                mx = std::max(mx, s[size_t(p - row.lo)]);
            }
            double sum = sh.sinks ? std::exp(double(sh.sinks[h]) - mx) : 0.0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int p = row.lo; p <= row.pos; p++) {
                const double w = std::exp(s[size_t(p - row.lo)] - mx);
                sum += w;
                dequantize_row_ref(kv.tv, kv.vrow(slot(p)) + kv.hv * size_t(g), vf.data(), hd);
                for (int i = 0; i < hd; i++) acc[size_t(i)] += w * double(vf[size_t(i)]);
            }
            float* y = out + r * size_t(qd) + size_t(h) * size_t(hd);
            for (int i = 0; i < hd; i++) y[i] = float(acc[size_t(i)] / sum);
        }
    }
}

}  // namespace tandem
