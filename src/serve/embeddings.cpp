// The embeddings APIs' inputs and answers (embeddings.h).
#include "serve/embeddings.h"

#include "tandem/tokenizer.h"

namespace tandem::server {

using json = nlohmann::ordered_json;

std::vector<std::vector<int32_t>> embedding_inputs(const FrontEnd& fe, const EmbeddingRequest& er) {
    const Tokenizer& tok = fe.tokenizer();
    std::vector<std::vector<int32_t>> inputs;
    for (const auto& in : er.inputs) {
        std::vector<int32_t> ids = fe.tokenize_prompt(in, false);
        if (tok.add_bos() && tok.bos() >= 0 && (ids.empty() || ids[0] != tok.bos())) ids.insert(ids.begin(), tok.bos());
        if (tok.add_eos() && tok.eos() >= 0 && (ids.empty() || ids.back() != tok.eos())) ids.push_back(tok.eos());
        inputs.push_back(std::move(ids));
    }
    return inputs;
}

json embeddings_answer(bool openai, const EmbeddingRequest& er, const std::vector<std::shared_ptr<Job>>& jobs,
                       const std::string& model_id) {
    json data = json::array();
    int n_tokens = 0;
    for (size_t i = 0; i < jobs.size(); i++) {
        n_tokens += jobs[i]->n_prompt;
        const auto& e = jobs[i]->embedding;
        if (openai)
            data.push_back({{"object", "embedding"},
                            {"index", i},
                            {"embedding", er.base64 ? json(base64_floats(e[0])) : json(e[0])}});
        else data.push_back({{"index", i}, {"embedding", e}});
    }
    if (!openai) return data;
    return {{"object", "list"},
            {"model", model_id},
            {"data", data},
            {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
}

}  // namespace tandem::server
