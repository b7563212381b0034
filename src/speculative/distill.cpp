// write_distill_data (tandem/distill.h): the target's own continuations and, per position, what an EAGLE-3 head
// learns from: the inputs of three target layers and the target's next-token distribution.
#include "tandem/distill.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/softmax.h"
#include "model/weight_view.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/session.h"

namespace tandem {

namespace {

struct File {
    std::FILE* f;
    std::string path;
    void put(const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f) != n) throw Error(path + ": write failed (disk full?)");
    }
    void i32(int32_t v) { put(&v, 4); }
};

}  // namespace

size_t write_distill_data(const std::shared_ptr<const Model>& target, const std::vector<std::vector<int32_t>>& prompts,
                          const DistillParams& p, ThreadPool& pool, const std::string& path) {
    const HParams& hp = target->hparams();
    const int E = hp.n_embd, V = hp.n_vocab, K = std::min(p.top_k, V);
    if (p.layers.size() != 3) throw Error("an EAGLE-3 head reads three target layers (--layers A,B,C)");
    for (int l : p.layers)
        if (l < 0 || l >= hp.n_layer)
            throw Error(strprintf("--layers: the target has layers 0..%d, not %d", hp.n_layer - 1, l));
    if (K < 1) throw Error("--logprobs must be >= 1");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "wb"), std::fclose);
    if (!fp) throw Error(path + ": cannot create the file");
    File out{fp.get(), path};
    out.put("TDE3", 4);
    for (int32_t v : {1, E, V, hp.n_layer, p.layers[0], p.layers[1], p.layers[2], K, int32_t(prompts.size())})
        out.i32(v);
    std::vector<float> row(static_cast<size_t>(E));
    for (int t = 0; t < V; t++) {
        embedding_row(target->tok_embd(), t, row.data());
        out.put(row.data(), row.size() * sizeof(float));
    }
    size_t written = 0;
    for (size_t i = 0; i < prompts.size(); i++) {
        const std::vector<int32_t>& prompt = prompts[i];
        const int n_ctx = int(prompt.size()) + p.n_predict;
        if (prompt.empty() || n_ctx > hp.n_ctx_train)
            throw Error(strprintf("prompt %zu: %zu tokens + %d do not fit the target's context of %d", i + 1,
                                  prompt.size(), p.n_predict, hp.n_ctx_train));
        // the target's own continuation
        std::vector<int32_t> text = prompt;
        {
            Session s(target, SessionParams{n_ctx, 0, 256}, pool);
            SamplerParams sp = p.sampling;
            sp.seed = p.sampling.seed + i;
            Sampler sampler(sp, V);
            s.decode(prompt, false);
            for (int k = 0; k < p.n_predict; k++) {
                const int32_t x = sampler.sample(s.last_logits(), text);
                text.push_back(x);
                if (k + 1 < p.n_predict) s.decode(&x, 1, false);
            }
        }
        // the whole text once more: the kept layer inputs and every position's logits
        Session s(target, SessionParams{n_ctx, 0, 256}, pool);
        s.keep_hidden(true, p.layers);
        s.decode(text, true);
        const int T = int(text.size());
        out.i32(T);
        out.put(text.data(), text.size() * sizeof(int32_t));
        for (int t = 0; t < T; t++) out.put(s.hidden_row(t), size_t(3 * E) * sizeof(float));
        std::vector<int> order(static_cast<size_t>(V));
        for (int t = 0; t < T; t++) {
            const float* lg = s.logits(t);
            const float lse = softmax_norm(lg, V).log_sum_exp();
            for (int j = 0; j < V; j++) order[size_t(j)] = j;
            std::partial_sort(order.begin(), order.begin() + K, order.end(),
                              [&](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
            for (int k = 0; k < K; k++) {
                out.i32(order[size_t(k)]);
                const float lp = lg[order[size_t(k)]] - lse;
                out.put(&lp, 4);
            }
        }
        written += size_t(T);
    }
    if (std::fflush(fp.get()) != 0) throw Error(path + ": write failed");
    return written;
}

}  // namespace tandem
