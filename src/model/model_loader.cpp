// Reads hyperparameters from GGUF metadata and binds weight tensors by name, checking every shape.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "core/mmap.h"
#include "cpu/isa.h"
#include "quant/kernels.h"
#include "quant/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"

namespace tandem {

const char* arch_name(Arch a) { return a == Arch::QWEN2 ? "qwen2" : "llama"; }

namespace {

struct Loader {
    const GgufFile& f;
    std::string arch;

    [[noreturn]] void fail(const std::string& what) const { throw Error(f.path() + ": " + what); }

    int req_int(const std::string& key) const {
        auto v = f.get_int(arch + "." + key);
        if (!v) fail("missing required metadata '" + arch + "." + key + "'");
        if (*v <= 0 || *v > (int64_t(1) << 30)) fail(strprintf("metadata '%s.%s' has invalid value %lld", arch.c_str(), key.c_str(), (long long)*v));
        return int(*v);
    }
    int opt_int(const std::string& key, int def) const {
        auto v = f.get_int(arch + "." + key);
        if (!v) return def;
        if (*v <= 0 || *v > (int64_t(1) << 30)) fail(strprintf("metadata '%s.%s' has invalid value %lld", arch.c_str(), key.c_str(), (long long)*v));
        return int(*v);
    }
    float opt_float(const std::string& key, float def) const {
        auto v = f.get_float(arch + "." + key);
        return v ? float(*v) : def;
    }

    const GgufTensor& tensor(const std::string& name, std::vector<int64_t> shape) const {
        const GgufTensor* t = f.tensor(name);
        if (!t) fail("missing tensor '" + name + "'");
        bool ok = t->n_dims <= int(shape.size());
        for (size_t d = 0; ok && d < 4; d++) ok = t->ne[d] == (d < shape.size() ? shape[d] : 1);
        if (!ok) {
            std::string want, got;
            for (size_t d = 0; d < shape.size(); d++) want += (d ? ", " : "") + std::to_string(shape[d]);
            for (int d = 0; d < t->n_dims; d++) got += (d ? ", " : "") + std::to_string(t->ne[d]);
            fail("tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
        }
        return *t;
    }
    Weight matrix(const std::string& name, int64_t rows, int64_t cols) const {
        const GgufTensor& t = tensor(name, {cols, rows});
        Weight w;
        w.data = t.data;
        w.type = t.type;
        w.rows = rows;
        w.cols = cols;
        w.row_stride = row_bytes(t.type, cols);
        return w;
    }
    std::vector<float> vec(const std::string& name, int64_t n) const {
        const GgufTensor& t = tensor(name, {n});
        std::vector<float> out(static_cast<size_t>(n));
        dequantize_row_ref(t.type, t.data, out.data(), n);
        return out;
    }
};

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path, const LoadOptions& opt) {
    return from_gguf(GgufFile::open(path), opt);
}

std::shared_ptr<const Model> Model::from_gguf(std::shared_ptr<const GgufFile> file, const LoadOptions& opt) {
    const GgufFile& f = *file;
    auto arch = f.get_str("general.architecture");
    if (!arch) throw Error(f.path() + ": missing required metadata 'general.architecture'");
    std::shared_ptr<Model> m(new Model());
    m->file_ = file;
    HParams& hp = m->hp_;
    if (*arch == "llama") hp.arch = Arch::LLAMA;
    else if (*arch == "qwen2") hp.arch = Arch::QWEN2;
    else throw Error(f.path() + ": unsupported architecture '" + *arch + "' (supported: llama, qwen2)");

    Loader L{f, *arch};
    hp.n_embd = L.req_int("embedding_length");
    hp.n_layer = L.req_int("block_count");
    hp.n_ff = L.req_int("feed_forward_length");
    hp.n_head = L.req_int("attention.head_count");
    hp.n_head_kv = L.opt_int("attention.head_count_kv", hp.n_head);
    hp.n_ctx_train = L.opt_int("context_length", 2048);
    if (hp.n_head_kv > hp.n_head || hp.n_head % hp.n_head_kv != 0)
        L.fail(strprintf("head_count %d is not a multiple of head_count_kv %d", hp.n_head, hp.n_head_kv));
    if (hp.n_embd % hp.n_head != 0 && !f.find(*arch + ".attention.key_length"))
        L.fail(strprintf("embedding_length %d is not a multiple of head_count %d", hp.n_embd, hp.n_head));
    hp.head_dim = L.opt_int("attention.key_length", hp.n_embd / hp.n_head);
    if (L.opt_int("attention.value_length", hp.head_dim) != hp.head_dim)
        L.fail("attention.value_length differs from key_length (not supported)");
    hp.n_rot = L.opt_int("rope.dimension_count", hp.head_dim);
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2) L.fail(strprintf("rope.dimension_count %d is invalid for head size %d", hp.n_rot, hp.head_dim));
    hp.rms_eps = L.opt_float("attention.layer_norm_rms_epsilon", 1e-5f);
    hp.rope_theta = L.opt_float("rope.freq_base", 10000.0f);
    if (!(hp.rms_eps > 0) || !(hp.rope_theta > 0)) L.fail("rms epsilon and rope.freq_base must be positive");
    if (auto st = f.get_str(*arch + ".rope.scaling.type"); st && *st == "linear") {
        float factor = L.opt_float("rope.scaling.factor", 1.0f);
        if (!(factor > 0)) L.fail("rope.scaling.factor must be positive");
        hp.rope_freq_scale = 1.0f / factor;
    } else if (st && *st != "none" && *st != "yarn") {
        L.fail("unsupported rope.scaling.type '" + *st + "'");
    }
    hp.rope_style = hp.arch == Arch::QWEN2 ? RopeStyle::NEOX : RopeStyle::NORM;

    const GgufTensor* te = f.tensor("token_embd.weight");
    if (!te) L.fail("missing tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[0] != hp.n_embd) L.fail("tensor 'token_embd.weight' does not have n_embd columns");
    hp.n_vocab = int(te->ne[1]);
    m->tok_embd_ = L.matrix("token_embd.weight", hp.n_vocab, hp.n_embd);
    m->output_norm_ = L.vec("output_norm.weight", hp.n_embd);
    hp.tied_output = f.tensor("output.weight") == nullptr;
    m->output_ = hp.tied_output ? m->tok_embd_ : L.matrix("output.weight", hp.n_vocab, hp.n_embd);
    if (f.tensor("rope_freqs.weight")) {
        hp.has_rope_freqs = true;
        m->rope_freqs_ = L.vec("rope_freqs.weight", hp.n_rot / 2);
    }

    const int64_t q_dim = int64_t(hp.n_head) * hp.head_dim, kv_dim = int64_t(hp.n_head_kv) * hp.head_dim;
    hp.has_qkv_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
    m->layers_.resize(size_t(hp.n_layer));
    for (int i = 0; i < hp.n_layer; i++) {
        std::string p = "blk." + std::to_string(i) + ".";
        LayerWeights& l = m->layers_[size_t(i)];
        l.attn_norm = L.vec(p + "attn_norm.weight", hp.n_embd);
        l.wq = L.matrix(p + "attn_q.weight", q_dim, hp.n_embd);
        l.wk = L.matrix(p + "attn_k.weight", kv_dim, hp.n_embd);
        l.wv = L.matrix(p + "attn_v.weight", kv_dim, hp.n_embd);
        l.wo = L.matrix(p + "attn_output.weight", hp.n_embd, q_dim);
        if (hp.has_qkv_bias) {
            l.bq = L.vec(p + "attn_q.bias", q_dim);
            l.bk = L.vec(p + "attn_k.bias", kv_dim);
            l.bv = L.vec(p + "attn_v.bias", kv_dim);
        }
        l.ffn_norm = L.vec(p + "ffn_norm.weight", hp.n_embd);
        l.w_gate = L.matrix(p + "ffn_gate.weight", hp.n_ff, hp.n_embd);
        l.w_up = L.matrix(p + "ffn_up.weight", hp.n_ff, hp.n_embd);
        l.w_down = L.matrix(p + "ffn_down.weight", hp.n_embd, hp.n_ff);
    }
    if (opt.repack) m->repack_for_cpu();
    return m;
}

// At levels with a packed kernel (cpu/isa.h: every SIMD level), Q8_0/Q4_0/Q4_K/Q5_K/Q6_K matrices are copied once into the 16-row interleaved layouts of the
// fast kernels (matmul_packed.cpp, matmul_packed_k.cpp, matmul_packed_q6k.cpp); the file's pages of those tensors are then released
// (MADV_DONTNEED on the read-only mapping: they are re-read from the file if ever touched again), so memory stays
// about the file size (the copies are 0-3% larger than the blocks they replace).
void Model::repack_for_cpu() {
    if (!isa().matmul_packed) return;
    const long page = sysconf(_SC_PAGESIZE);
    std::vector<Weight*> todo;
    for (auto& l : layers_)
        for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            if (packable(w->type, w->rows, w->cols)) todo.push_back(w);
    // A tied output matrix is the embedding table: packed once, and embedding rows are then read from the copy.
    if (packable(output_.type, output_.rows, output_.cols)) todo.push_back(&output_);
    // One huge-page buffer for all copies, each matrix at a 64-byte boundary.
    auto aligned = [](size_t n) { return (n + 63) / 64 * 64; };
    size_t total = 0;
    for (Weight* w : todo) total += aligned(tandem::packed_bytes(w->type, w->rows, w->cols));
    packed_ = allocate_large(total);
    std::vector<size_t> offset(todo.size());
    for (size_t i = 1; i < todo.size(); i++)
        offset[i] = offset[i - 1] + aligned(tandem::packed_bytes(todo[i - 1]->type, todo[i - 1]->rows, todo[i - 1]->cols));
    // Matrices are taken in turn by a few threads (loading is mostly page faults on the file and on the new
    // buffer, which the kernel serves in parallel), each in slices of 256 rows whose file pages are released as
    // soon as they are copied, so the file and its copy are never resident twice for more than a slice per thread.
    auto release = [&](const uint8_t* from, size_t bytes) {  // whole pages inside [from, from + bytes)
        if (!file_->owns_mapping()) return;
        uintptr_t b = (reinterpret_cast<uintptr_t>(from) + uintptr_t(page) - 1) / uintptr_t(page) * uintptr_t(page);
        uintptr_t e = (reinterpret_cast<uintptr_t>(from) + bytes) / uintptr_t(page) * uintptr_t(page);
        if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
    };
    std::atomic<size_t> next{0};
    auto work = [&] {
        constexpr int64_t kSlice = 256;  // rows, a multiple of the packed group
        for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
            Weight* w = todo[i];
            uint8_t* dst = packed_.get() + offset[i];
            for (int64_t r0 = 0; r0 < w->rows; r0 += kSlice) {
                const int64_t n = std::min(kSlice, w->rows - r0);
                const uint8_t* src = w->data + size_t(r0) * w->row_stride;
                repack_rows(w->type, src, w->row_stride, n, w->cols, dst + tandem::packed_bytes(w->type, r0, w->cols));
                release(src, size_t(n) * w->row_stride);
            }
            w->packed = dst;
            release(w->data, w->nbytes());  // the pages that straddled two slices
        }
    };
    const unsigned n_threads = std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n_threads; i++) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    packed_bytes_ = total;
    if (hp_.tied_output) tok_embd_.packed = output_.packed;
}

const std::string& Model::path() const { return file_->path(); }

int64_t Model::n_params() const {
    int64_t n = 0;
    for (const auto& t : file_->tensors()) n += t.n_elements();
    return n;
}

size_t Model::weights_bytes() const {
    size_t n = 0;
    for (const auto& t : file_->tensors()) n += t.nbytes;
    return n;
}

std::string Model::describe_type() const {
    std::map<std::string, int64_t> by_type;
    for (const auto& t : file_->tensors())
        if (t.n_dims >= 2) by_type[type_name(t.type)] += t.n_elements();
    std::string best;
    int64_t most = -1;
    for (auto& [k, v] : by_type)
        if (v > most) { most = v; best = k; }
    return best.empty() ? "F32" : best;
}

}  // namespace tandem
