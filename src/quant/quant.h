// Internal quantization interface: scalar reference conversion between float rows and every block type.
#pragma once
#include <cstdint>

#include "tandem/tensor_type.h"

namespace tandem {

// dst[0..n) = values of the n elements stored at src. n must be a multiple of the type's block size.
void dequantize_row_ref(TensorType t, const void* src, float* dst, int64_t n);

// Quantize n floats into row_bytes(t, n) bytes at dst. n must be a multiple of the type's block size.
// Layouts match GGUF; the choice of scales is a plain max/min (or max-abs) fit, not llama.cpp's search.
void quantize_row_ref(TensorType t, const float* src, void* dst, int64_t n);

}  // namespace tandem
