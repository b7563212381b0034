// Records llama.cpp's teacher-forcing references for tandem's tests (tests/data/reference-arch/): for each prompt,
// a fresh context, the prompt in one llama_decode, then greedy decoding one token per call; at every step the
// five largest raw logits (ties by the lower id) and the argmax. The settings of ../shared/reference-modern:
// 1 thread, n_ctx 2048, n_batch 2048, n_ubatch 512, flash attention off, F16 KV cache.
// Built against llama.cpp's library by make.sh (outside the repository's build); not part of tandem.
//
//   reference_logits MODEL.gguf STEPS "prompt" ["prompt" ...] > OUT.json
//   reference_logits MODEL.gguf --depth D --cache f16|q8_0 STEPS > OUT.json
//   reference_logits MODEL.gguf --kv-f32 STEPS "prompt" ["prompt" ...] > OUT.json   (an F32 KV cache)
//   reference_logits MODEL.gguf --mtp STEPS "prompt" ["prompt" ...] > OUT.json
//   reference_logits MODEL.gguf --assistant ASSISTANT.gguf STEPS "prompt" ["prompt" ...] > OUT.json
//   reference_logits MODEL.gguf --eagle3 HEAD.gguf STEPS "prompt" ["prompt" ...] > OUT.json
// The second form: one prompt of D tokens, BOS then 3 + (i * 7919) % (n_vocab - 3) for i = 1 .. D - 1, fed in
// pieces of n_batch, then STEPS greedy steps; n_ctx D + STEPS rounded up to 256. q8_0 caches K and V as Q8_0,
// which llama.cpp allows only with flash attention (on there; off for f16, as in the other references).
// The third form (a model with a multi-token-prediction block): the prompt through the target, whose final normed
// hidden states (llama.cpp's embeddings_nextn) feed an MTP context (LLAMA_CONTEXT_TYPE_MTP) as llama.cpp's
// draft-mtp pairs them: row q takes the token at q and the target's state at q - 1 (zeros at 0); the top 5 MTP
// logits of every prompt row ("rows"), then a chain as draft-mtp drafts it: the target's greedy next token at
// the prompt's end with the target's last state, then STEPS - 1 tokens each taking the MTP's greedy token and its
// own output state ("chain": {id fed, top5}).
// The fourth form (a gemma4 target and its gemma4-assistant): the prompt through the target, then a chain as
// draft-mtp drafts with an assistant (its context's ctx_other is the target's, whose cache it reads): the target's
// greedy next token with the target's last state at the prompt's length, then STEPS - 1 tokens each taking the
// assistant's greedy token and its own output state, all at that same position ("chain": {id fed, top5}).
// The fifth form (a target and an EAGLE-3 head, whose context's ctx_other is the target's): the prompt through the
// target with the inputs of the head's three target layers extracted, fused by the head's encoder (fc), then its
// decoder as llama.cpp's draft-eagle3 runs it: at position P the token at P + 1 and the fused state at P, for
// P = 0 .. n - 2 (the top 5 logits of each: "rows"), then a chain: at n - 1 the target's greedy next token with
// the fused state at n - 1, then STEPS - 1 steps each taking the head's greedy token and its own output state
// (before its norm) at the next position ("chain": {id fed, top5}).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../src/llama-ext.h"  // llama.cpp's staging API: embeddings_nextn (its draft-mtp uses them)
#include "llama.h"

namespace {

std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') o += '\\', o += char(c);
        else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else o += char(c);
    }
    return o + "\"";
}

// STEPS greedy steps after `feed` (fed first, in pieces of n_batch): the JSON array of {id, top5}.
bool greedy_steps(llama_context* ctx, int n_vocab, std::vector<llama_token> feed, int steps, int n_batch) {
    std::printf("[");
    for (int s = 0; s < steps; s++) {
        for (size_t at = 0; at < feed.size(); at += size_t(n_batch)) {
            const int n = int(std::min(feed.size() - at, size_t(n_batch)));
            if (const int rc = llama_decode(ctx, llama_batch_get_one(feed.data() + at, n)); rc != 0) {
                std::fprintf(stderr, "llama_decode failed (%d) at step %d\n", rc, s);
                return false;
            }
        }
        const float* lg = llama_get_logits_ith(ctx, -1);
        std::vector<int> order(static_cast<size_t>(n_vocab));
        for (int i = 0; i < n_vocab; i++) order[size_t(i)] = i;
        std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                          [&](int x, int y) { return lg[x] > lg[y] || (lg[x] == lg[y] && x < y); });
        std::printf("%s{\"id\": %d, \"top5\": [", s ? ", " : "", order[0]);
        for (int k = 0; k < 5; k++) std::printf("%s[%d, %.6f]", k ? ", " : "", order[size_t(k)], lg[order[size_t(k)]]);
        std::printf("]}");
        feed.assign(1, order[0]);
    }
    std::printf("]");
    return true;
}

int depth_mode(llama_model* model, int depth, const std::string& cache, int steps) {
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = uint32_t((depth + steps + 255) / 256 * 256);
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    const bool q8 = cache == "q8_0";
    cp.flash_attn_type = q8 ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = q8 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot make a context\n");
        return 1;
    }
    std::vector<llama_token> ids = {llama_vocab_bos(vocab)};
    for (int i = 1; i < depth; i++) ids.push_back(3 + int((int64_t(i) * 7919) % (n_vocab - 3)));
    std::printf("{\"depth\": %d, \"cache\": \"%s\", \"flash_attn\": %s, \"n_ctx\": %u, ", depth, cache.c_str(),
                q8 ? "true" : "false", cp.n_ctx);
    std::printf("\"ids\": \"BOS, then 3 + (i * 7919) %% (n_vocab - 3) for i = 1 .. depth - 1\", \"steps\": ");
    if (!greedy_steps(ctx, n_vocab, ids, steps, int(cp.n_batch))) return 1;
    std::printf("}\n");
    llama_free(ctx);
    return 0;
}

// The prompt's ids with BOS (empty when it cannot be tokenized).
std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& prompt) {
    std::vector<llama_token> ids(prompt.size() + 8);
    int n = llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), ids.data(), int(ids.size()), true, false);
    if (n < 0) {  // byte-fallback pieces: more tokens than characters
        ids.resize(size_t(-n));
        n = llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), ids.data(), int(ids.size()), true, false);
    }
    ids.resize(size_t(std::max(n, 0)));
    return ids;
}

void print_top5(const float* lg, int n_vocab) {
    std::vector<int> order(static_cast<size_t>(n_vocab));
    for (int i = 0; i < n_vocab; i++) order[size_t(i)] = i;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](int x, int y) { return lg[x] > lg[y] || (lg[x] == lg[y] && x < y); });
    std::printf("[");
    for (int k = 0; k < 5; k++) std::printf("%s[%d, %.6f]", k ? ", " : "", order[size_t(k)], lg[order[size_t(k)]]);
    std::printf("]");
}

int argmax_of(const float* lg, int n_vocab) { return int(std::max_element(lg, lg + n_vocab) - lg); }

// A target context and a drafter's context reading it (an MTP block of the same model, or a Gemma 4 assistant):
// the references' settings, the final normed states of every target row and of the drafter's last row exposed.
struct DraftContexts {
    llama_context* tgt = nullptr;
    llama_context* dft = nullptr;
    ~DraftContexts() {
        if (dft) llama_free(dft);
        if (tgt) llama_free(tgt);
    }
};
bool make_contexts(llama_model* target, llama_model* drafter, DraftContexts& c) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    c.tgt = llama_init_from_model(target, cp);
    llama_context_params cm = cp;
    cm.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cm.ctx_other = c.tgt;
    c.dft = c.tgt ? llama_init_from_model(drafter, cm) : nullptr;
    if (!c.dft) {
        std::fprintf(stderr, "cannot make the contexts\n");
        return false;
    }
    llama_set_embeddings_nextn(c.tgt, true, false);
    llama_set_embeddings_nextn(c.dft, true, true);
    return true;
}

// The prompt through the target in one batch, logits and states for every row.
bool decode_prompt(llama_context* tgt, const std::vector<llama_token>& ids) {
    const int n = int(ids.size());
    llama_batch tb = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        tb.token[i] = ids[size_t(i)];
        tb.pos[i] = i;
        tb.n_seq_id[i] = 1;
        tb.seq_id[i][0] = 0;
        tb.logits[i] = 1;
    }
    tb.n_tokens = n;
    const bool ok = llama_decode(tgt, tb) == 0;
    if (!ok) std::fprintf(stderr, "the target's decode failed\n");
    llama_batch_free(tb);
    return ok;
}

int mtp_mode(const char* path, int steps, int n_prompts, char** prompts) {
    llama_model_params mp = llama_model_default_params();
    mp.load_mtp = true;
    llama_model* model = llama_model_load_from_file(path, mp);
    if (!model) return 1;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab), n_embd = llama_model_n_embd(model);
    std::printf("[");
    for (int a = 0; a < n_prompts; a++) {
        DraftContexts c;
        if (!make_contexts(model, model, c)) return 1;
        llama_context *tgt = c.tgt, *mtp = c.dft;
        const std::string prompt = prompts[a];
        const std::vector<llama_token> ids = tokenize(vocab, prompt);
        const int n = int(ids.size());
        if (n <= 0 || !decode_prompt(tgt, ids)) return 1;
        std::vector<float> h(size_t(n) * size_t(n_embd));
        for (int i = 0; i < n; i++)
            std::copy_n(llama_get_embeddings_nextn_ith(tgt, i), n_embd, h.begin() + std::ptrdiff_t(i) * n_embd);
        const int next = argmax_of(llama_get_logits_ith(tgt, n - 1), n_vocab);
        // the MTP batch: tokens and states both (llama_batch_init allocates one of them)
        llama_batch mb = llama_batch_init(n, n_embd, 1);
        mb.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * size_t(n)));
        auto run = [&](const std::vector<llama_token>& toks, int pos0, const std::vector<const float*>& hs) {
            mb.n_tokens = int(toks.size());
            for (int i = 0; i < mb.n_tokens; i++) {
                mb.token[i] = toks[size_t(i)];
                mb.pos[i] = pos0 + i;
                mb.n_seq_id[i] = 1;
                mb.seq_id[i][0] = 0;
                mb.logits[i] = 1;
                float* e = mb.embd + size_t(i) * size_t(n_embd);
                if (hs[size_t(i)]) std::copy_n(hs[size_t(i)], n_embd, e);
                else std::fill(e, e + n_embd, 0.0f);
            }
            const int rc = llama_decode(mtp, mb);
            if (rc != 0) std::fprintf(stderr, "the MTP decode at %d failed (%d)\n", pos0, rc);
            return rc == 0;
        };
        std::vector<const float*> hs(static_cast<size_t>(n));
        for (int i = 1; i < n; i++) hs[size_t(i)] = h.data() + size_t(i - 1) * size_t(n_embd);
        if (!run(ids, 0, hs)) return 1;
        std::printf("%s{\"prompt\": %s, \"prompt_ids\": [", a ? ", " : "", json_string(prompt).c_str());
        for (int i = 0; i < n; i++) std::printf("%s%d", i ? ", " : "", ids[size_t(i)]);
        std::printf("], \"rows\": [");
        for (int i = 0; i < n; i++) {
            std::printf("%s", i ? ", " : "");
            print_top5(llama_get_logits_ith(mtp, i), n_vocab);
        }
        std::printf("], \"chain\": [");
        llama_token tok = next;
        std::vector<float> own(h.end() - n_embd, h.end());  // the first chain step takes the target's last state
        for (int s = 0; s < steps; s++) {
            if (!run({tok}, n + s, {own.data()})) return 1;
            const float* lg = llama_get_logits_ith(mtp, 0);
            std::printf("%s{\"id\": %d, \"top5\": ", s ? ", " : "", tok);
            print_top5(lg, n_vocab);
            std::printf("}");
            std::copy_n(llama_get_embeddings_nextn_ith(mtp, 0), n_embd, own.begin());
            tok = argmax_of(lg, n_vocab);
        }
        std::printf("]}");
        std::free(mb.token);
        mb.token = nullptr;
        llama_batch_free(mb);
    }
    std::printf("]\n");
    llama_model_free(model);
    return 0;
}

int assistant_mode(const char* path, const char* assistant_path, int steps, int n_prompts, char** prompts) {
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(path, mp);
    llama_model* amodel = model ? llama_model_load_from_file(assistant_path, mp) : nullptr;
    if (!amodel) return 1;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab), n_embd = llama_model_n_embd(model);
    std::printf("[");
    for (int a = 0; a < n_prompts; a++) {
        DraftContexts c;
        if (!make_contexts(model, amodel, c)) return 1;
        llama_context *tgt = c.tgt, *asst = c.dft;
        const std::string prompt = prompts[a];
        const std::vector<llama_token> ids = tokenize(vocab, prompt);
        const int n = int(ids.size());
        if (n <= 0 || !decode_prompt(tgt, ids)) return 1;
        std::vector<float> own(llama_get_embeddings_nextn_ith(tgt, n - 1),
                               llama_get_embeddings_nextn_ith(tgt, n - 1) + n_embd);
        llama_token tok = argmax_of(llama_get_logits_ith(tgt, n - 1), n_vocab);
        llama_batch ab = llama_batch_init(1, n_embd, 1);
        ab.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token)));
        std::printf("%s{\"prompt\": %s, \"prompt_ids\": [", a ? ", " : "", json_string(prompt).c_str());
        for (int i = 0; i < n; i++) std::printf("%s%d", i ? ", " : "", ids[size_t(i)]);
        std::printf("], \"chain\": [");
        for (int s = 0; s < steps; s++) {
            ab.n_tokens = 1;
            ab.token[0] = tok;
            ab.pos[0] = n;  // every draft at the target's length, as draft-mtp with shared memory
            ab.n_seq_id[0] = 1;
            ab.seq_id[0][0] = 0;
            ab.logits[0] = 1;
            std::copy_n(own.data(), n_embd, ab.embd);
            if (const int rc = llama_decode(asst, ab); rc != 0) {
                std::fprintf(stderr, "the assistant's decode failed (%d)\n", rc);
                return 1;
            }
            const float* lg = llama_get_logits_ith(asst, 0);
            std::printf("%s{\"id\": %d, \"top5\": ", s ? ", " : "", tok);
            print_top5(lg, n_vocab);
            std::printf("}");
            std::copy_n(llama_get_embeddings_nextn_ith(asst, 0), n_embd, own.begin());
            tok = argmax_of(lg, n_vocab);
        }
        std::printf("]}");
        std::free(ab.token);
        ab.token = nullptr;
        llama_batch_free(ab);
    }
    std::printf("]\n");
    llama_model_free(amodel);
    llama_model_free(model);
    return 0;
}

int eagle3_mode(const char* path, const char* head_path, int steps, int n_prompts, char** prompts) {
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(path, mp);
    llama_model* head = model ? llama_model_load_from_file(head_path, mp) : nullptr;
    if (!head) return 1;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab), Et = llama_model_n_embd(model), E = llama_model_n_embd(head);
    const int32_t* layers = llama_model_target_layer_ids(head);
    const int n_layers = int(llama_model_target_layer_ids_n(head)), Ein = n_layers * Et;
    std::printf("[");
    for (int a = 0; a < n_prompts; a++) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 512;
        cp.n_batch = cp.n_ubatch = 512;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        DraftContexts c;
        c.tgt = llama_init_from_model(model, cp);
        llama_context_params ch = cp;
        ch.ctx_other = c.tgt;
        c.dft = c.tgt ? llama_init_from_model(head, ch) : nullptr;
        if (!c.dft) return 1;
        for (int k = 0; k < n_layers; k++) llama_set_embeddings_layer_inp(c.tgt, uint32_t(layers[k]), true);
        llama_set_embeddings_nextn(c.dft, true, true);
        const std::string prompt = prompts[a];
        const std::vector<llama_token> ids = tokenize(vocab, prompt);
        const int n = int(ids.size());
        if (n < 2 || !decode_prompt(c.tgt, ids)) return 1;
        std::vector<float> feats(size_t(n) * size_t(Ein)), g(size_t(n) * size_t(E));
        for (int k = 0; k < n_layers; k++) {
            const float* src = llama_get_embeddings_layer_inp(c.tgt, uint32_t(layers[k]));
            for (int i = 0; i < n; i++)
                std::copy_n(src + size_t(i) * size_t(Et), Et, feats.begin() + std::ptrdiff_t(i * Ein + k * Et));
        }
        llama_batch eb = {n, nullptr, feats.data(), nullptr, nullptr, nullptr, nullptr};
        if (const int rc = llama_encode(c.dft, eb); rc != 0) {
            std::fprintf(stderr, "the head's encoder failed (%d)\n", rc);
            return 1;
        }
        std::copy_n(llama_get_embeddings_nextn(c.dft), size_t(n) * size_t(E), g.begin());
        const int next = argmax_of(llama_get_logits_ith(c.tgt, n - 1), n_vocab);
        llama_batch db = llama_batch_init(n, E, 1);
        db.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * size_t(n)));
        auto run = [&](const std::vector<llama_token>& toks, int pos0, const std::vector<const float*>& gs) {
            db.n_tokens = int(toks.size());
            for (int i = 0; i < db.n_tokens; i++) {
                db.token[i] = toks[size_t(i)];
                db.pos[i] = pos0 + i;
                db.n_seq_id[i] = 1;
                db.seq_id[i][0] = 0;
                db.logits[i] = 1;
                std::copy_n(gs[size_t(i)], E, db.embd + size_t(i) * size_t(E));
            }
            const int rc = llama_decode(c.dft, db);
            if (rc != 0) std::fprintf(stderr, "the head's decode at %d failed (%d)\n", pos0, rc);
            return rc == 0;
        };
        std::vector<llama_token> toks(ids.begin() + 1, ids.end());
        std::vector<const float*> gs;
        for (int i = 0; i + 1 < n; i++) gs.push_back(g.data() + size_t(i) * size_t(E));
        if (!run(toks, 0, gs)) return 1;
        std::printf("%s{\"prompt\": %s, \"prompt_ids\": [", a ? ", " : "", json_string(prompt).c_str());
        for (int i = 0; i < n; i++) std::printf("%s%d", i ? ", " : "", ids[size_t(i)]);
        std::printf("], \"rows\": [");
        for (int i = 0; i + 1 < n; i++) {
            std::printf("%s", i ? ", " : "");
            print_top5(llama_get_logits_ith(c.dft, i), n_vocab);
        }
        std::printf("], \"chain\": [");
        llama_token tok = next;
        std::vector<float> own(g.end() - E, g.end());
        for (int s = 0; s < steps; s++) {
            if (!run({tok}, n - 1 + s, {own.data()})) return 1;
            const float* lg = llama_get_logits_ith(c.dft, 0);
            std::printf("%s{\"id\": %d, \"top5\": ", s ? ", " : "", tok);
            print_top5(lg, n_vocab);
            std::printf("}");
            std::copy_n(llama_get_embeddings_nextn_ith(c.dft, 0), E, own.begin());
            tok = argmax_of(lg, n_vocab);
        }
        std::printf("]}");
        std::free(db.token);
        db.token = nullptr;
        llama_batch_free(db);
    }
    std::printf("]\n");
    llama_model_free(head);
    llama_model_free(model);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 6 && std::string(argv[2]) == "--eagle3") {
        llama_backend_init();
        if (!std::getenv("REFERENCE_LOG")) llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
        const int rc = eagle3_mode(argv[1], argv[3], std::atoi(argv[4]), argc - 5, argv + 5);
        llama_backend_free();
        return rc;
    }
    if (argc >= 6 && std::string(argv[2]) == "--assistant") {
        llama_backend_init();
        if (!std::getenv("REFERENCE_LOG")) llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
        const int rc = assistant_mode(argv[1], argv[3], std::atoi(argv[4]), argc - 5, argv + 5);
        llama_backend_free();
        return rc;
    }
    if (argc >= 5 && std::string(argv[2]) == "--mtp") {
        llama_backend_init();
        if (!std::getenv("REFERENCE_LOG")) llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
        const int rc = mtp_mode(argv[1], std::atoi(argv[3]), argc - 4, argv + 4);
        llama_backend_free();
        return rc;
    }
    if (argc == 7 && std::string(argv[2]) == "--depth" && std::string(argv[4]) == "--cache") {
        llama_backend_init();
        if (!std::getenv("REFERENCE_LOG")) llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
        llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
        if (!model) return 1;
        const int rc = depth_mode(model, std::atoi(argv[3]), argv[5], std::atoi(argv[6]));
        llama_model_free(model);
        llama_backend_free();
        return rc;
    }
    // --kv-f32: an F32 KV cache (the F32 references: an F32 file through an F32 cache, nothing rounded to F16)
    const bool kv_f32 = argc >= 3 && std::string(argv[2]) == "--kv-f32";
    if (kv_f32) {
        argv[2] = argv[1];
        argv++;
        argc--;
    }
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [--kv-f32] STEPS PROMPT...\n", argv[0]);
        return 2;
    }
    const int steps = std::atoi(argv[2]);
    llama_backend_init();
    if (!std::getenv("REFERENCE_LOG")) llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::printf("[");
    for (int a = 3; a < argc; a++) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 2048;
        cp.n_batch = 2048;
        cp.n_ubatch = 512;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        if (kv_f32) cp.type_k = cp.type_v = GGML_TYPE_F32;
        llama_context* ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            std::fprintf(stderr, "cannot make a context\n");
            return 1;
        }
        const std::string prompt = argv[a];
        const std::vector<llama_token> ids = tokenize(vocab, prompt);
        const int n = int(ids.size());
        if (n <= 0) {
            std::fprintf(stderr, "cannot tokenize '%s'\n", prompt.c_str());
            return 1;
        }
        std::printf("%s{\"prompt\": %s, \"prompt_ids\": [", a > 3 ? ", " : "", json_string(prompt).c_str());
        for (int i = 0; i < n; i++) std::printf("%s%d", i ? ", " : "", ids[size_t(i)]);
        std::printf("], \"steps\": ");
        if (!greedy_steps(ctx, n_vocab, ids, steps, int(cp.n_batch))) return 1;
        std::printf("}");
        llama_free(ctx);
    }
    std::printf("]\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
