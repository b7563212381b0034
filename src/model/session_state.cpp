// Session state files. Layout (little-endian):
//   "TDKV" | u32 version = 3 | u64 model fingerprint | u32 n_layers | u32 kv_dim | u32 n_tokens
//   | u32 K type | u32 V type (GGUF type numbers) | i32 tokens[n_tokens]
//   | per layer: u32 first | K rows [first, n_tokens) of the K type, then V rows [first, n_tokens) of the V type
//   | recurrent models: u64 count | the recurrent state after n_tokens (count f32: model/recurrent_state.h)
// `first` is 0 but for a sliding-window layer whose window-only cache no longer held the earlier rows, and n_tokens
// for a Gated DeltaNet layer (no rows). Version 2
// is the same without the `first` words (every row), version 1 also without the two type words (F16 rows). A file
// of other cache types than the session's is converted row by row (dequantized and stored again); a window-only
// layer keeps the rows its ring holds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/mmap.h"
#include "model/session_impl.h"
#include "quant/quant.h"
#include "tandem/error.h"

namespace tandem {

namespace {

constexpr char kMagic[4] = {'T', 'D', 'K', 'V'};
constexpr uint32_t kVersion = 3;

// FNV-1a over the shapes and the first bytes of the embedding and output matrices: a file of another model
// (even of the same shape) is refused instead of giving garbage.
uint64_t fingerprint(const Model& m) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](const void* p, size_t n) {
        for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
    };
    const HParams& hp = m.hparams();
    const int32_t shape[] = {int32_t(hp.arch), hp.n_vocab,   hp.n_embd,   hp.n_layer,
                             hp.n_head,        hp.n_head_kv, hp.head_dim, hp.n_ff};
    mix(shape, sizeof shape);
    for (const Weight* w : {&m.tok_embd(), &m.output()}) mix(w->data, std::min<size_t>(w->nbytes(), 4096));
    return h;
}

struct File {
    std::FILE* f = nullptr;
    ~File() {
        if (f) std::fclose(f);
    }
};

}  // namespace

size_t Session::save_state(const std::string& path) const {
    if (split_) throw Error("state files of a model split across ranks are not supported (each rank holds a part)");
    // kv_dim: the first layer's row width (the others follow from the model, which the fingerprint names)
    const uint32_t n = uint32_t(n_past()), kv_dim = uint32_t(impl_->kv.kv_dim(0)), layers = uint32_t(n_layers_);
    const uint64_t fp = fingerprint(*model_);
    File out;
    // Without blocking, and only onto a regular file: a FIFO at that name would block this thread (the server's
    // inference thread) until a reader came, a device or a symbolic link is not where a state file goes.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        const int err = errno;
        if (err == ENXIO || err == ELOOP)
            throw Error(path + ": cannot save the state there: it is a FIFO or a symbolic link, not a regular file");
        throw Error(strprintf("%s: cannot create the state file: %s", path.c_str(), std::strerror(err)));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": cannot save the state there: it is not a regular file");
    }
    if (::ftruncate(fd, 0) != 0 || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
        !(out.f = ::fdopen(fd, "wb"))) {
        const int err = errno;
        ::close(fd);
        throw Error(strprintf("%s: cannot write the state file: %s", path.c_str(), std::strerror(err)));
    }
    size_t written = 0;
    auto put = [&](const void* p, size_t bytes) {
        if (std::fwrite(p, 1, bytes, out.f) != bytes)
            throw Error(strprintf("%s: write failed: %s", path.c_str(), std::strerror(errno)));
        written += bytes;
    };
    put(kMagic, 4);
    put(&kVersion, 4);
    put(&fp, 8);
    put(&layers, 4);
    put(&kv_dim, 4);
    put(&n, 4);
    const uint32_t types[2] = {uint32_t(impl_->kv.type_k()), uint32_t(impl_->kv.type_v())};
    put(types, 8);
    put(tokens_.data(), size_t(n) * 4);
    std::vector<uint8_t> row;
    for (int l = 0; l < n_layers_; l++) {
        // a layer without rows (recurrent, gemma4's shared-KV layers) writes none
        const uint32_t first = impl_->kv.capacity(l) == 0 ? n
                               : model_->layer(l).swa     ? uint32_t(std::min(swa_from_, int(n)))
                                                          : 0;
        put(&first, 4);
        for (int which = 0; which < 2; which++) {
            const size_t rb = which ? impl_->kv.row_bytes_v(l) : impl_->kv.row_bytes_k(l);
            row.resize(rb);
            for (uint32_t t = first; t < n; t++) {
                impl_->kv.get_raw(l, int(t), which == 1, row.data());
                put(row.data(), rb);
            }
        }
    }
    if (impl_->rec) {
        if (impl_->rec->pos() != int(n)) impl_->rec->rewind(int(n));  // a token tree's accepted chain
        const uint64_t count = impl_->rec->floats();
        put(&count, 8);
        std::vector<float> st(count);
        impl_->rec->read(st.data());
        put(st.data(), size_t(count) * 4);
    }
    if (std::fflush(out.f) != 0) throw Error(strprintf("%s: write failed: %s", path.c_str(), std::strerror(errno)));
    return written;
}

size_t Session::load_state(const std::string& path) {
    if (split_) throw Error("state files of a model split across ranks are not supported (each rank holds a part)");
    tokens_.clear();  // whatever happens below, the cache holds nothing half-read
    swa_from_ = swa_lost_ = 0;
    if (impl_->rec) impl_->rec->reset();
    const std::string data = read_regular_file(path);
    size_t at = 0;
    auto get = [&](void* p, size_t bytes, const char* what) {
        if (data.size() - at < bytes)
            throw Error(strprintf("%s: the state file is truncated (in %s at byte %zu)", path.c_str(), what, at));
        std::memcpy(p, data.data() + at, bytes);
        at += bytes;
    };
    char magic[4];
    uint32_t version = 0, layers = 0, kv_dim = 0, n = 0;
    uint64_t fp = 0;
    get(magic, 4, "the header");
    if (std::memcmp(magic, kMagic, 4) != 0)
        throw Error(path + ": not a tandem state file (it was not written by tandem's slot save)");
    get(&version, 4, "the header");
    if (version < 1 || version > kVersion)
        throw Error(strprintf("%s: state file version %u is not supported (this build reads %u)", path.c_str(), version,
                              kVersion));
    get(&fp, 8, "the header");
    get(&layers, 4, "the header");
    get(&kv_dim, 4, "the header");
    get(&n, 4, "the header");
    if (fp != fingerprint(*model_)) throw Error(path + ": the state file was saved with another model");
    if (layers != uint32_t(n_layers_) || kv_dim != uint32_t(impl_->kv.kv_dim(0)))
        throw Error(strprintf("%s: the state file holds %u layers of %u values, this session %d of %d", path.c_str(),
                              layers, kv_dim, n_layers_, impl_->kv.kv_dim(0)));
    if (n > uint32_t(n_ctx_))
        throw Error(
            strprintf("%s: the state file holds %u tokens, more than the context (%d)", path.c_str(), n, n_ctx_));
    TensorType ft[2] = {TensorType::F16, TensorType::F16};
    if (version >= 2) {
        uint32_t raw[2];
        get(raw, 8, "the header");
        for (int i = 0; i < 2; i++) {
            const auto t = tensor_type_from_u32(raw[i]);
            bool fits = t && kv_cache_type_supported(*t);
            for (int l = 0; fits && l < n_layers_; l++) fits = impl_->kv.head_dim(l) % type_traits(*t).block_elems == 0;
            if (!fits)
                throw Error(strprintf("%s: the state file's %s cache type %u is not one this session can read",
                                      path.c_str(), i ? "V" : "K", raw[i]));
            ft[i] = *t;
        }
    }
    std::vector<int32_t> toks(n);
    get(toks.data(), size_t(n) * 4, "the tokens");
    for (int32_t id : toks)
        if (id < 0 || id >= n_vocab())
            throw Error(strprintf("%s: token id %d is outside the vocabulary", path.c_str(), id));
    // Each layer's first row and where its rows start in the file, and the size the file must have.
    std::vector<uint32_t> first(layers, 0);
    std::vector<size_t> start(layers);
    size_t expect = at;
    for (uint32_t l = 0; l < layers; l++) {
        if (version >= 3) {
            if (data.size() - expect < 4)
                throw Error(
                    strprintf("%s: the state file is truncated (in layer %u at byte %zu)", path.c_str(), l, expect));
            std::memcpy(&first[l], data.data() + expect, 4);
            expect += 4;
            const bool no_rows = impl_->kv.capacity(int(l)) == 0;
            if (first[l] > n || (first[l] > 0 && !model_->layer(int(l)).swa && !no_rows) || (no_rows && first[l] != n))
                throw Error(
                    strprintf("%s: layer %u starts at row %u of %u (only sliding-window layers may start "
                              "after 0, recurrent and shared-KV layers have no rows)",
                              path.c_str(), l, first[l], n));
        }
        const size_t rk = row_bytes(ft[0], impl_->kv.kv_dim(int(l))), rv = row_bytes(ft[1], impl_->kv.kv_dim(int(l)));
        start[l] = expect;
        const size_t rows = n - first[l];
        if ((data.size() - expect) / (rk + rv) < rows)
            throw Error(
                strprintf("%s: the state file is truncated (in layer %u at byte %zu)", path.c_str(), l, expect));
        expect += rows * (rk + rv);
    }
    size_t rec_at = 0;
    if (impl_->rec) {
        uint64_t count = 0;
        if (data.size() - expect < 8)
            throw Error(strprintf("%s: the state file is truncated (no recurrent state)", path.c_str()));
        std::memcpy(&count, data.data() + expect, 8);
        if (count != impl_->rec->floats())
            throw Error(strprintf("%s: the state file's recurrent state has %llu values, this model's %zu",
                                  path.c_str(), (unsigned long long)count, impl_->rec->floats()));
        rec_at = expect + 8;
        if ((data.size() - rec_at) / 4 < count)
            throw Error(strprintf("%s: the state file is truncated (in the recurrent state)", path.c_str()));
        expect = rec_at + size_t(count) * 4;
    }
    if (data.size() != expect)
        throw Error(strprintf("%s: the state file is %zu bytes, %zu expected", path.c_str(), data.size(), expect));
    KvCache& kv = impl_->kv;
    // The sliding-window layers hold positions from `from` on: what the file has and the ring keeps.
    int from = 0;
    for (int l = 0; l < n_layers_; l++)
        if (model_->layer(l).swa && kv.capacity(l) > 0)
            from = std::max({from, int(first[size_t(l)]), int(n) - kv.capacity(l)});
    const bool same = ft[0] == kv.type_k() && ft[1] == kv.type_v();
    std::vector<float> f;
    std::vector<uint8_t> conv;
    for (int l = 0; l < n_layers_; l++) {
        const uint32_t keep = model_->layer(l).swa ? uint32_t(from) : 0;
        const int dim = kv.kv_dim(l);
        const size_t rk = row_bytes(ft[0], dim), rv = row_bytes(ft[1], dim);
        f.resize(size_t(dim));
        size_t at_row = start[size_t(l)];
        for (int which = 0; which < 2; which++) {
            const size_t rb = which ? rv : rk;
            for (uint32_t t = first[size_t(l)]; t < n; t++, at_row += rb) {
                if (t < keep) continue;  // before what the ring holds
                if (same) {
                    kv.put_raw(l, int(t), which == 1, reinterpret_cast<const uint8_t*>(data.data()) + at_row);
                    continue;
                }
                dequantize_row_ref(ft[which], data.data() + at_row, f.data(), dim);  // another type: through floats
                conv.resize(which ? kv.row_bytes_v(l) : kv.row_bytes_k(l));
                quantize_row_ref(which ? kv.type_v() : kv.type_k(), f.data(), conv.data(), dim);
                kv.put_raw(l, int(t), which == 1, conv.data());
            }
        }
    }
    if (impl_->rec) {
        std::vector<float> st(impl_->rec->floats());
        std::memcpy(st.data(), data.data() + rec_at, st.size() * 4);
        impl_->rec->assign(int(n), st.data());
    }
    swa_from_ = swa_cap_ > 0 ? from : 0;
    swa_lost_ = 0;
    tokens_ = std::move(toks);
    if (keep_hidden_) keep_hidden(true, hidden_layers_);
    target_rows_ = 0;
    own_pos_ = -1;  // no hidden states in a state file: kept again from here
    return expect;
}

}  // namespace tandem
