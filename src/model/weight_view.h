// A model's Weight as the kernels see it: the WeightView of backend/cpu/kernels.h (the same matrix, its repacked copy when
// it has one), and one row of it as floats (an embedding lookup).
#pragma once
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_q8.h"
#include "quant/quant.h"
#include "tandem/model.h"

namespace tandem {

inline WeightView view(const Weight& w) {
    return WeightView{w.data, w.type, w.cols, w.rows, w.row_stride, static_cast<const uint8_t*>(w.placement)};
}

// Rows [first, first + n) of w, in place.
inline Weight weight_rows(const Weight& w, int64_t first, int64_t n) {
    Weight v = w;
    v.data = w.data + size_t(first) * w.row_stride;
    v.rows = n;
    return v;
}

// Row `token` of an embedding table (the repacked copy when there is one) as floats.
inline void embedding_row(const Weight& emb, int32_t token, float* out) {
    if (emb.placement)
        dequantize_packed_row(emb.type, static_cast<const uint8_t*>(emb.placement), emb.cols, token, out);
    else dequantize_row_ref(emb.type, emb.data + size_t(token) * emb.row_stride, out, emb.cols);
}

}  // namespace tandem
