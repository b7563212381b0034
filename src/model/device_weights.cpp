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
}  // namespace

size_t DeviceWeights::bytes_for(const Model& m, int first_layer) {
    std::unordered_map<const void*, size_t> seen;
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (w.data && !backend::on_cpu_of_split(v, first_layer)) seen[w.data] = std::max(seen[w.data], bytes_of(w));
    });
    m.for_each_vector([&](const Model::WeightVisit& at, const std::vector<float>& v) {
        if (!v.empty() && !backend::on_cpu_of_split(at, first_layer)) seen[v.data()] = v.size() * sizeof(float);
    });
    size_t total = 0;
    for (const auto& [p, b] : seen) total += b;
    return total;
}

DeviceWeights::DeviceWeights(backend::Backend& be, const Model& m, int first_layer) {
    auto on_cpu = [first_layer](const Model::WeightVisit& v) { return backend::on_cpu_of_split(v, first_layer); };
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (w.data && !on_cpu(v) && !be.supports(backend::Op::MATMUL, w.type))
            throw Error(strprintf("%s cannot run %s (layer %d): %s weights", be.name().c_str(), v.name, v.layer,
                                  type_name(w.type)));
    });
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (w.data && !on_cpu(v) && bytes_of(w) > kMaxTensorBytes)
            throw Error(strprintf("%s (layer %d) is %.2f GiB: a GPU binding holds at most 4 GiB", v.name, v.layer,
                                  bytes_of(w) / 1073741824.0));
    });
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (!w.data || on_cpu(v) || placed_.count(w.data)) return;
        const size_t bytes = bytes_of(w);
        buffers_.push_back(be.map_host(w.data, bytes));
        placed_[w.data] = {buffers_.back().get(), 0, w.type, w.rows, w.cols, w.row_stride};
        bytes_ += bytes;
        n_matrices_++;
    });
    m.for_each_vector([&](const Model::WeightVisit& at, const std::vector<float>& v) {
        if (v.empty() || on_cpu(at) || placed_.count(v.data())) return;
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
