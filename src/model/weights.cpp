// The model's tensors, visited one way (tandem/model.h for_each_matrix / for_each_vector), and their placement for
// the CPU (place_on_cpu: the interleaved copies of the packed kernels, backend/cpu/matmul_q8.h).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul_q8.h"
#include "core/mmap.h"
#include "tandem/model.h"

namespace tandem {

template <class Self, class MatrixFn, class VectorFn>
void Model::visit(Self& self, MatrixFn&& matrix, VectorFn&& vector) {
    std::unordered_set<const uint8_t*> seen;  // the matrices visited: a view of one of them is not visited again
    auto mat = [&](const char* name, int layer, int index, auto& w) {
        if (w.data && seen.insert(w.data).second) matrix(WeightVisit{name, layer, index}, w);
    };
    auto vec = [&](const char* name, int layer, auto& v) {
        if (!v.empty()) vector(WeightVisit{name, layer, -1}, v);
    };
    auto mats = [&](const char* name, int layer, auto& ws) {
        for (size_t e = 0; e < ws.size(); e++) mat(name, layer, int(e), ws[e]);
    };
    mat("output", -1, -1, self.output_);  // first: a tied output is the embedding table, visited as the output
    mat("token_embd", -1, -1, self.tok_embd_);
    vec("output_norm", -1, self.output_norm_);
    vec("rope_freqs", -1, self.rope_freqs_);
    vec("rope_factors_long", -1, self.rope_long_);
    for (size_t i = 0; i < self.layers_.size(); i++) {
        auto& l = self.layers_[i];
        const int li = int(i);
        for (auto [name, w] : {std::pair{"attn_q", &l.wq},
                               {"attn_k", &l.wk},
                               {"attn_v", &l.wv},
                               {"attn_output", &l.wo},
                               {"attn_q_a", &l.wq_a},
                               {"attn_q_b", &l.wq_b},
                               {"attn_kv_a_mqa", &l.wkv_a},
                               {"ffn_gate", &l.w_gate},
                               {"ffn_up", &l.w_up},
                               {"ffn_down", &l.w_down},
                               {"ffn_gate_inp", &l.router},
                               {"ffn_gate_shexp", &l.shexp_gate},
                               {"ffn_up_shexp", &l.shexp_up},
                               {"ffn_down_shexp", &l.shexp_down},
                               {"inp_gate", &l.pl_gate},
                               {"proj", &l.pl_proj},
                               {"ssm_in", &l.ssm_in},
                               {"ssm_z", &l.ssm_z},
                               {"ssm_beta", &l.ssm_beta},
                               {"ssm_alpha", &l.ssm_alpha},
                               {"ssm_ba", &l.ssm_ba},
                               {"ssm_out", &l.ssm_out}})
            mat(name, li, -1, *w);
        mats("attn_k_b", li, l.wk_b);
        mats("attn_v_b", li, l.wv_b);
        mats("ffn_gate_exps", li, l.exp_gate);
        mats("ffn_up_exps", li, l.exp_up);
        mats("ffn_down_exps", li, l.exp_down);
        for (auto [name, v] : {std::pair{"attn_norm", &l.attn_norm},
                               {"attn_q.bias", &l.bq},
                               {"attn_k.bias", &l.bk},
                               {"attn_v.bias", &l.bv},
                               {"attn_output.bias", &l.bo},
                               {"attn_q_norm", &l.q_norm},
                               {"attn_k_norm", &l.k_norm},
                               {"attn_q_a_norm", &l.q_a_norm},
                               {"attn_kv_a_norm", &l.kv_a_norm},
                               {"attn_sinks", &l.sinks},
                               {"post_attention_norm", &l.post_attn_norm},
                               {"ffn_norm", &l.ffn_norm},
                               {"post_ffw_norm", &l.post_ffn_norm},
                               {"post_norm", &l.pl_post_norm},
                               {"ssm_conv1d", &l.ssm_conv1d},
                               {"ssm_dt", &l.ssm_dt},
                               {"ssm_a", &l.ssm_a},
                               {"ssm_norm", &l.ssm_norm},
                               {"ffn_gate_inp.bias", &l.router_b},
                               {"ffn_gate_exps.bias", &l.exp_gate_b},
                               {"ffn_up_exps.bias", &l.exp_up_b},
                               {"ffn_down_exps.bias", &l.exp_down_b},
                               {"exp_probs_b", &l.exp_probs_b},
                               {"ffn_gate_inp_shexp", &l.shexp_gate_inp},
                               {"ffn_gate_inp.scale", &l.router_in_scale},
                               {"pre_ffw_norm_2", &l.ffn_pre_norm_2},
                               {"post_ffw_norm_1", &l.ffn_post_norm_1},
                               {"post_ffw_norm_2", &l.ffn_post_norm_2},
                               {"ffn_down_exps.scale", &l.exp_down_scale}})
            vec(name, li, *v);
    }
    mat("nextn.eh_proj", -1, -1, self.mtp_.eh_proj);
    mat("nextn.shared_head_head", -1, -1, self.mtp_.head);
    mat("nextn.embed_tokens", -1, -1, self.mtp_.embd);
    vec("nextn.enorm", -1, self.mtp_.enorm);
    vec("nextn.hnorm", -1, self.mtp_.hnorm);
    vec("nextn.shared_head_norm", -1, self.mtp_.head_norm);
    mat("per_layer_token_embd", -1, -1, self.ple_.table);
    mat("per_layer_model_proj", -1, -1, self.ple_.proj);
    vec("per_layer_proj_norm", -1, self.ple_.norm);
    mat("pre_projection", -1, -1, self.asst_.pre_proj);
    mat("post_projection", -1, -1, self.asst_.post_proj);
    mat("fc", -1, -1, self.eagle3_.fc);
    vec("fc_norm", -1, self.eagle3_.fc_norm);
    vec("hidden_norm", -1, self.eagle3_.hidden_norm);
}

void Model::for_each_matrix(const std::function<void(const WeightVisit&, const Weight&)>& fn) const {
    visit(*this, fn, [](const WeightVisit&, const std::vector<float>&) {});
}

void Model::for_each_vector(const std::function<void(const WeightVisit&, const std::vector<float>&)>& fn) const {
    visit(
        *this, [](const WeightVisit&, const Weight&) {}, fn);
}

namespace {
// Embedding tables are read a row at a time, in place (a tied one is the output matrix, visited as it, and embedding
// rows are then read from its copy). The routers and gemma4's per-layer projection stay in place too, as they always
// have: their packed products round differently, and a router's near-tie would then flip (tests:
// bench/compare_outputs.sh, a Gemma 4 self-draft).
bool stays_in_place(const char* name) {
    static const char* const kInPlace[] = {"token_embd", "per_layer_token_embd", "nextn.embed_tokens",
                                           "per_layer_model_proj", "ffn_gate_inp"};
    for (const char* n : kInPlace)
        if (std::strcmp(name, n) == 0) return true;
    return false;
}
// Whether place_on_cpu(first, last, head) covers a matrix of `layer` (-1: the model's own)
bool in_part(int layer, int first, int last, bool head) { return layer < 0 ? head : layer >= first && layer < last; }
// Whether a matrix still wants its CPU copy (none made yet, not read in place, a type with a packed layout)
bool wants_copy(const char* name, const Weight& w) {
    return !w.placement && !stays_in_place(name) && packable(w.type, w.rows, w.cols);
}
}  // namespace

void Model::place_on_cpu(int first, int last, bool head) const {
    if (!place_ || !isa().matmul_packed) return;
    std::lock_guard<std::mutex> lock(*place_mu_);
    // (a model is built mutable by its loader and only then shared as const: the copies are what the CPU's kernels
    // read of weights no pass has read yet)
    Model& self = const_cast<Model&>(*this);
    std::vector<Weight*> todo;
    visit(
        self,
        [&](const WeightVisit& v, Weight& w) {
            if (in_part(v.layer, first, last, head) && wants_copy(v.name, w)) todo.push_back(&w);
        },
        [](const WeightVisit&, std::vector<float>&) {});
    if (todo.empty()) return;
    const bool mtp_own_head = mtp_.head.data && mtp_.head.data != output_.data;
    // One huge-page buffer for the copies of this call, each matrix at a 64-byte boundary.
    auto aligned = [](size_t n) { return (n + 63) / 64 * 64; };
    size_t total = 0;
    for (Weight* w : todo) total += aligned(tandem::packed_bytes(w->type, w->rows, w->cols));
    std::shared_ptr<uint8_t> buffer = allocate_large(total);
    std::vector<size_t> offset(todo.size());
    for (size_t i = 1; i < todo.size(); i++)
        offset[i] =
            offset[i - 1] + aligned(tandem::packed_bytes(todo[i - 1]->type, todo[i - 1]->rows, todo[i - 1]->cols));
    // Matrices are taken in turn by a few threads (loading is mostly page faults on the file and on the new
    // buffer, which the kernel serves in parallel), each in slices of 256 rows whose file pages are released as
    // soon as they are copied, so the file and its copy are never resident twice for more than a slice per thread.
    auto release = [&](const uint8_t* from, size_t bytes) { release_file_pages(from, bytes); };
    std::atomic<size_t> next{0};
    auto work = [&] {
        constexpr int64_t kSlice = 256;  // rows, a multiple of the packed group
        for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
            Weight* w = todo[i];
            uint8_t* dst = buffer.get() + offset[i];
            for (int64_t r0 = 0; r0 < w->rows; r0 += kSlice) {
                const int64_t n = std::min(kSlice, w->rows - r0);
                const uint8_t* src = w->data + size_t(r0) * w->row_stride;
                repack_rows(w->type, src, w->row_stride, n, w->cols, dst + tandem::packed_bytes(w->type, r0, w->cols));
                release(src, size_t(n) * w->row_stride);
            }
            w->placement = dst;
            release(w->data, w->nbytes());  // the pages that straddled two slices
        }
    };
    const unsigned n_threads = std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n_threads; i++) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    self.packed_.push_back(std::move(buffer));
    self.packed_bytes_ += total;
    // the views of a placed matrix read its copy too
    if (hp_.tied_output) self.tok_embd_.placement = output_.placement;
    for (auto& l : self.layers_)
        if (l.wv.data && l.wv.data == l.wk.data) l.wv.placement = l.wk.placement;
    if (mtp_.eh_proj.data) {  // the MTP block's defaults are the model's own matrices: their packed copies too
        if (!mtp_own_head) self.mtp_.head = output_;
        if (mtp_.embd.data == tok_embd_.data) self.mtp_.embd = tok_embd_;
    }
}

size_t Model::unplaced_cpu_bytes() const {
    if (!place_ || !isa().matmul_packed) return 0;
    std::lock_guard<std::mutex> lock(*place_mu_);
    size_t total = 0;
    visit(
        *this,
        [&](const WeightVisit& v, const Weight& w) {
            if (wants_copy(v.name, w)) total += tandem::packed_bytes(w.type, w.rows, w.cols);
        },
        [](const WeightVisit&, const std::vector<float>&) {});
    return total;
}

size_t Model::packed_bytes() const {
    std::lock_guard<std::mutex> lock(*place_mu_);
    return packed_bytes_;
}

}  // namespace tandem
