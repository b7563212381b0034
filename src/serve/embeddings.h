// The embeddings APIs: OpenAI's /v1/embeddings (pooled vectors, floats or base64) and llama-server's
// /embedding(s) (a list of {index, embedding}, embedding a list of one vector, or of one per token with pooling
// none). The inputs' tokens and the answers; the jobs are the engine's (JobRequest::embed). No HTTP.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/engine.h"
#include "serve/front_end.h"
#include "serve/openai.h"

namespace tandem::server {

// The token ids of each input: BOS before and EOS after, when the vocabulary asks for them (and they are not
// there already).
std::vector<std::vector<int32_t>> embedding_inputs(const FrontEnd& fe, const EmbeddingRequest& er);

// The answer of finished embedding jobs (one per input, in order). openai: /v1/embeddings' list object (the first
// vector of each job); otherwise llama-server's list.
nlohmann::ordered_json embeddings_answer(bool openai, const EmbeddingRequest& er,
                                         const std::vector<std::shared_ptr<Job>>& jobs, const std::string& model_id);

}  // namespace tandem::server
