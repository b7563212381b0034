// Embeddings from a generative model: the final hidden states (after the output norm, what the logits are
// computed from; Session::embed), pooled into one vector per input and normalized as llama.cpp does.
#pragma once
#include <string>
#include <vector>

namespace tandem {

class GgufFile;

// none: one vector per token; mean: their average; cls: the first token's; last: the last token's.
enum class Pooling { NONE, MEAN, CLS, LAST };

Pooling pooling_from_name(const std::string& name);  // "none", "mean", "cls", "last"; throws Error otherwise
const char* pooling_name(Pooling p);
// The file's <arch>.pooling_type (llama.cpp: 0 none, 1 mean, 2 cls, 3 last); when absent, LAST: a decoder's
// last position is the only one that has seen the whole input (as Qwen3-Embedding and e5-mistral are trained).
// Throws Error for a type we do not implement (rank).
Pooling default_pooling(const GgufFile& f);

// hidden: (n, n_embd) row-major, n >= 1. Returns (n_embd) for a pooled type; the rows unchanged for NONE.
std::vector<float> pool_embeddings(const float* hidden, int n, int n_embd, Pooling p);

// llama.cpp's embd_normalize: -1 none; 0 scaled so the largest magnitude is 32760 (int16 range); 1 taxicab;
// 2 Euclidean (the default); p > 2 the p-norm. A zero vector stays zero.
void normalize_embedding(float* v, int n, int norm);

}  // namespace tandem
