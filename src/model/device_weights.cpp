#include "model/device_weights.h"

#include <algorithm>
#include <string>

#include "tandem/error.h"
#include "tandem/tensor_type.h"

namespace tandem {

namespace {
// the last row ends at its own bytes (a column slice's stride reaches past its tensor)
size_t bytes_of(const Weight& w) {
    return (w.rows > 0 ? size_t(w.rows - 1) * w.row_stride : 0) + row_bytes(w.type, w.cols);
}
// The registry visits a matrix once, by its first name (tandem/model.h), so a part takes the token embedding table
// by hand where it reads it under a name its span does not hold: the first part of a split over several GPUs, of a
// model whose output is that table (visited as the output, the last part's); the last part of a split model
// whose MTP block embeds with the model's table (visited as token_embd, the first part's).
bool ties_embedding(const Model& m, const backend::LayerSpan& span) {
    const void* e = m.tok_embd().data;
    return (span.first == 0 && !span.last && e == m.output().data) ||
           (span.first > 0 && span.last && m.mtp() && m.mtp()->embd.data == e);
}
}  // namespace

size_t DeviceWeights::bytes_for(const Model& m, const backend::LayerSpan& span) {
    std::unordered_map<const void*, size_t> seen;
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (w.data && span.holds(v)) seen[w.data] = std::max(seen[w.data], bytes_of(w));
    });
    m.for_each_vector([&](const Model::WeightVisit& at, const std::vector<float>& v) {
        if (!v.empty() && span.holds(at)) seen[v.data()] = v.size() * sizeof(float);
    });
    if (const Weight& e = m.tok_embd(); e.data && ties_embedding(m, span)) seen[e.data] = bytes_of(e);
    size_t total = 0;
    for (const auto& [p, b] : seen) total += b;
    return total;
}

DeviceWeights::DeviceWeights(backend::Backend& be, const Model& m, const backend::LayerSpan& span) {
    auto other = [&span](const Model::WeightVisit& v) { return !span.holds(v); };  // another part's
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (w.data && !other(v) && !be.supports(backend::Op::MATMUL, w.type))
            throw Error(strprintf("%s cannot run %s (layer %d): %s weights", be.name().c_str(), v.name, v.layer,
                                  type_name(w.type)));
    });
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (w.data && !other(v) && bytes_of(w) > kMaxTensorBytes)
            throw Error(strprintf("%s (layer %d) is %.2f GiB: a GPU binding holds at most 4 GiB", v.name, v.layer,
                                  bytes_of(w) / 1073741824.0));
    });
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (!w.data || other(v) || placed_.count(w.data)) return;
        const size_t bytes = bytes_of(w);
        buffers_.push_back(be.map_host(w.data, bytes));
        placed_[w.data] = {buffers_.back().get(), 0, w.type, w.rows, w.cols, w.row_stride};
        bytes_ += bytes;
        n_matrices_++;
    });
    if (const Weight& e = m.tok_embd(); e.data && ties_embedding(m, span) && !placed_.count(e.data)) {
        if (!be.supports(backend::Op::GET_ROWS, e.type))
            throw Error(
                strprintf("%s cannot read token_embd's rows: %s weights", be.name().c_str(), type_name(e.type)));
        if (bytes_of(e) > kMaxTensorBytes)
            throw Error(
                strprintf("token_embd is %.2f GiB: a GPU binding holds at most 4 GiB", bytes_of(e) / 1073741824.0));
        buffers_.push_back(be.map_host(e.data, bytes_of(e)));
        placed_[e.data] = {buffers_.back().get(), 0, e.type, e.rows, e.cols, e.row_stride};
        bytes_ += bytes_of(e);
        n_matrices_++;
    }
    m.for_each_vector([&](const Model::WeightVisit& at, const std::vector<float>& v) {
        if (v.empty() || other(at) || placed_.count(v.data())) return;
        buffers_.push_back(be.map_host(v.data(), v.size() * sizeof(float)));
        placed_[v.data()] = {buffers_.back().get(), 0, TensorType::F32, 1, int64_t(v.size()), v.size() * sizeof(float)};
        bytes_ += v.size() * sizeof(float);
    });
}

backend::Tensor DeviceWeights::matrix(const Weight& w) const {
    if (!w.data) return {};
    auto it = placed_.find(w.data);
    if (it == placed_.end()) throw Error("a weight matrix that is not the placed model's");
    backend::Tensor t = it->second;  // a view of the same data with its own shape (a tied output, a slice)
    t.type = w.type;
    t.rows = w.rows;
    t.cols = w.cols;
    t.row_stride = w.row_stride;
    return t;
}

backend::Tensor DeviceWeights::vec(const std::vector<float>& v) const {
    if (v.empty()) return {};
    auto it = placed_.find(v.data());
    if (it == placed_.end()) throw Error("a weight vector that is not the placed model's");
    return it->second;
}

}  // namespace tandem
