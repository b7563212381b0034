// A model's Weight as the kernels' WeightView (quant/kernels.h): the same matrix, its repacked copy when it has one.
#pragma once
#include "quant/kernels.h"
#include "tandem/model.h"

namespace tandem {

inline WeightView view(const Weight& w) { return WeightView{w.data, w.type, w.cols, w.rows, w.row_stride, w.packed}; }

}  // namespace tandem
