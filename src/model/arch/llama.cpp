// The llama-shaped families: smollm3 (NoPE layers), granite (four multipliers), mistral3 (YaRN and an attention
// temperature), olmo2 (post-norms only, QK-norm over whole vectors), and the EAGLE-3 head (one llama layer over a
// fused input). llama, phi3 and qwen2 have no hooks: their features are the table's and the files' own.
#include <cmath>

#include "model/arch/loader.h"

namespace tandem {

void smollm3_features(ArchLoad& a) { a.nope_step = 4; }  // every 4th layer, counted from 1, has no RoPE

void granite_features(ArchLoad& a) {  // Granite 3.x: four multipliers on an otherwise llama-shaped model
    HParams& hp = a.hp;
    const Loader& L = a.L;
    hp.logit_scale = L.opt_float("logit_scale", 1.0f);
    const float res = L.opt_float("residual_scale", 0.0f), emb = L.opt_float("embedding_scale", 0.0f);
    const float att = L.opt_float("attention.scale", 0.0f);
    if (!(hp.logit_scale > 0) || res < 0 || emb < 0 || att < 0)
        L.fail("granite's logit_scale must be positive and its residual, embedding and attention scales >= 0");
    if (res > 0) hp.residual_scale = res;  // 0 (or absent): no scaling, as llama.cpp
    if (emb > 0) hp.embd_scale = emb;
    if (att > 0) hp.q_scale = att;
    // rope.scaling.finetuned is a switch for RoPE (absent: on), as llama.cpp reads it
    if (const GgufValue* v = a.f.find(a.arch + ".rope.scaling.finetuned"); v && v->type == GgufType::BOOL)
        a.rope_on = v->u != 0;
    a.optional_out_bias = true;
}

void mistral3_features(ArchLoad& a) {  // Mistral 3: llama-shaped, YaRN, and Llama 4's attention temperature
    HParams& hp = a.hp;
    const Loader& L = a.L;
    hp.attn_temp_scale = L.opt_float("attention.temperature_scale", 0.0f);
    hp.attn_temp_span = hp.n_ctx_orig;
    if (!std::isfinite(hp.attn_temp_scale) || hp.attn_temp_scale < 0)
        L.fail("attention.temperature_scale must be a non-negative number");
    if (a.f.find(a.arch + ".expert_count")) L.fail("mistral3 with experts (Mistral Large 3) is not supported yet");
    a.optional_out_bias = true;
}

void olmo2_features(ArchLoad& a) {  // OLMo 2: post-norms only, QK-norm over the whole q and k
    HParams& hp = a.hp;
    hp.has_qk_norm = true;
    hp.has_post_norms = true;
    hp.has_pre_norms = false;
    hp.qk_norm_whole = true;
    if (a.f.get_int(a.arch + ".attention.sliding_window"))
        a.L.fail("olmo2 with a sliding window (OLMo 3) is not supported yet");
}

// An EAGLE-3 head's weights (Eagle3Weights; llama.cpp's eagle3 files): one layer whose attention reads 2 n_embd, the
// fusion of three target states, its own norm and output over a reduced vocabulary mapped by d2t. Its vocabulary
// is its target's tokenizer; token embeddings and output are optional (then its target's are used).
void bind_eagle3(const Loader& L, HParams& hp, Weight& tok_embd, Weight& output, std::vector<float>& output_norm,
                 std::vector<LayerWeights>& layers, Eagle3Weights& w) {
    const GgufFile& f = L.f;
    const GgufValue* toks = f.get_array("tokenizer.ggml.tokens", GgufType::STRING);
    if (!toks || toks->arr.empty()) L.fail("an eagle3 head needs its target's tokenizer (tokenizer.ggml.tokens)");
    hp.n_vocab = int(toks->arr.size());
    if (hp.n_layer != 1) L.fail(strprintf("an eagle3 head has one decoder layer, this file says %d", hp.n_layer));
    const GgufValue* tl = f.find(L.arch + ".target_layers");
    if (!tl || tl->type != GgufType::ARRAY || tl->arr.size() != 3)
        L.fail("an eagle3 head needs " + L.arch + ".target_layers: the three target layers it reads");
    for (int i = 0; i < 3; i++) {
        const GgufValue& e = tl->arr[size_t(i)];
        if (!e.is_integer() || e.as_int() < 0 || e.as_int() > 4096)
            L.fail(L.arch + ".target_layers has an invalid entry");
        w.target_layers[i] = int(e.as_int());
    }
    w.n_embd_target = L.req_int("target_hidden_size");
    w.norm_before_residual = f.get_bool(L.arch + ".norm_before_residual").value_or(false);
    w.norm_before_fc = f.get_bool(L.arch + ".norm_before_fc").value_or(false);
    const int64_t E = hp.n_embd, Ein = 3 * int64_t(w.n_embd_target), q_dim = int64_t(hp.n_head) * hp.head_dim,
                  kv_dim = int64_t(hp.n_head_kv) * hp.head_dim;
    w.fc = L.matrix("fc.weight", E, Ein);
    if (w.norm_before_fc) w.fc_norm = L.vec("enc.output_norm.weight", Ein);
    if (L.has("token_embd.weight")) tok_embd = L.matrix("token_embd.weight", hp.n_vocab, E);
    int64_t n_out = hp.n_vocab;
    if (L.has("d2t")) {
        const GgufTensor* t = f.tensor("d2t");
        n_out = t->ne[0];
        if (t->n_dims != 1 || n_out < 1 || n_out > hp.n_vocab)
            L.fail(
                strprintf("tensor 'd2t' maps %lld draft tokens into a vocabulary of %d", (long long)n_out, hp.n_vocab));
        std::vector<uint8_t> seen(size_t(hp.n_vocab), 0);
        for (int64_t id : L.ids("d2t", n_out)) {
            if (id < 0 || id >= hp.n_vocab || seen[size_t(id)])
                L.fail(strprintf("tensor 'd2t' holds %s target id %lld (vocabulary of %d)",
                                 id >= 0 && id < hp.n_vocab ? "a repeated" : "an invalid", (long long)id, hp.n_vocab));
            seen[size_t(id)] = 1;
            w.d2t.push_back(int32_t(id));
        }
        if (!L.has("output.weight")) L.fail("an eagle3 head with d2t needs its own output.weight (its vocabulary)");
    }
    if (L.has("output.weight")) output = L.matrix("output.weight", n_out, E);
    output_norm = L.vec("output_norm.weight", E);
    layers.resize(1);
    LayerWeights& l = layers[0];
    l.n_head = hp.n_head;
    l.n_head_kv = hp.n_head_kv;
    l.head_dim = hp.head_dim;
    l.n_rot = hp.n_rot;
    l.attn_norm = L.vec("blk.0.attn_norm.weight", E);
    w.hidden_norm = L.vec("blk.0.attn_norm_2.weight", E);
    l.wq = L.matrix("blk.0.attn_q.weight", q_dim, 2 * E);
    l.wk = L.matrix("blk.0.attn_k.weight", kv_dim, 2 * E);
    l.wv = L.matrix("blk.0.attn_v.weight", kv_dim, 2 * E);
    l.wo = L.matrix("blk.0.attn_output.weight", E, q_dim);
    l.ffn_norm = L.vec("blk.0.ffn_norm.weight", E);
    l.w_gate = L.matrix("blk.0.ffn_gate.weight", hp.n_ff, E);
    l.w_up = L.matrix("blk.0.ffn_up.weight", hp.n_ff, E);
    l.w_down = L.matrix("blk.0.ffn_down.weight", E, hp.n_ff);
}

}  // namespace tandem
