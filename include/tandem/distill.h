// Self-distillation data for training an EAGLE-3 head (scripts/eagle3/train_eagle3.py): the target continues each
// prompt on its own (sampled with `sampling`), then the whole text goes through it once more with the inputs of
// the head's three target layers kept (Session::keep_hidden with layers), and each position's record is written:
// its token, those three inputs, and the target's distribution over the next token (its top_k log-probabilities at
// temperature 1).
//
// File (little-endian): "TDE3", u32 version 1, i32 n_embd, i32 n_vocab, i32 target layers, i32 layers[3],
// i32 top_k, i32 n_seq; the token embedding table f32 [n_vocab, n_embd] (a head without its own reads it);
// then per sequence: i32 T, i32 tokens[T], f32 features[T, 3 n_embd] (layer inputs in the order given), and per
// position (i32 id, f32 log-prob) x top_k, most probable first — the distribution of the token after it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tandem/sampling.h"

namespace tandem {

class Model;
class ThreadPool;

struct DistillParams {
    std::vector<int> layers;  // the three target layers whose inputs are kept
    int n_predict = 128;  // tokens the target adds to each prompt
    int top_k = 32;  // log-probabilities kept per position
    SamplerParams sampling;  // how the target continues (seed + i for the i-th prompt)
};

// Writes the records of `prompts` (token ids each) to `path`; returns the positions written. Throws tandem::Error
// for a layer the target does not have, a prompt that does not fit its context, or a file that cannot be written.
size_t write_distill_data(const std::shared_ptr<const Model>& target, const std::vector<std::vector<int32_t>>& prompts,
                          const DistillParams& p, ThreadPool& pool, const std::string& path);

}  // namespace tandem
