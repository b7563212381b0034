// A Gemma 4 assistant's forward pass (Model::assistant(), AssistantWeights in tandem/model.h): a draft session of it
// (SessionParams::drafter_of = its target's session) keeps no cache; its layers' queries read the target's.
#pragma once
#include <vector>

#include "tandem/model.h"
#include "tandem/session.h"

namespace tandem {

// The target cache layer each of the assistant's layers attends to, as llama.cpp shares them: a sliding-window layer
// the target's second-to-last layer's, a global one the last's (through a shared-KV layer to the layer that holds
// the rows). Throws tandem::Error when the pair does not fit: a target that is not gemma4, another hidden size or
// vocabulary, layers of another kind or head size.
std::vector<int> assistant_cache_layers(const Model& assistant, const Session& target);

}  // namespace tandem
