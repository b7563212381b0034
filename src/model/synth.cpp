#include "tandem/synth.h"

#include <algorithm>
#include <cmath>

#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quantize.h"

namespace tandem {

const std::vector<SynthShape>& synth_shapes() {
    // qwen35 (Qwen3.5's hybrid layout): Gated DeltaNet and gated attention, RoPE on a quarter of each head
    auto qwen35 = [](const char* name, int E, int layers, int heads, int kv, int ff, int vocab, int ctx, int hd,
                     int state, int hk, int hv, int interval, float wstd, float nstd, int experts = 0, int used = 0,
                     int ff_exp = 0) {
        SynthShape s{name, "qwen35", E, layers, heads, kv, ff, vocab, ctx, 10000000.0f, false, false, hd};
        if (experts > 0) {
            s.arch = "qwen35moe";
            s.n_expert = experts;
            s.n_expert_used = used;
            s.n_ff_exp = ff_exp;
        }
        s.ssm_state = state;
        s.ssm_k_heads = hk;
        s.ssm_v_heads = hv;
        s.full_attn_interval = interval;
        s.weight_std = wstd;
        s.norm_std = nstd;
        return s;
    };
    // llama4: Llama 4's layout (chunked attention with RoPE in 3 of 4 layers, NoPE in the 4th; one of `experts`
    // routed by a sigmoid, on its input, beside a shared expert, in every `step`-th layer, dense FFNs between)
    auto llama4 = [](const char* name, int E, int layers, int heads, int kv, int ff, int vocab, int ctx, int experts,
                     int ff_exp, int step, float wstd, float nstd) {
        SynthShape s{name, "llama4", E, layers, heads, kv, ff, vocab, ctx, 500000.0f, false, false};
        s.n_expert = experts;
        s.n_expert_used = 1;
        s.n_ff_exp = ff_exp;
        s.moe_layer_step = step;
        s.weight_std = wstd;
        s.norm_std = nstd;
        return s;
    };
    // gemma4: Gemma 4's layout (see SynthShape), final logits soft-capped at 30
    auto gemma4 = [](const char* name, int E, int layers, int heads, int kv_swa, int kv_global, int ff, int vocab,
                     int ctx, int hd_swa, int hd, int swa, int pattern, int shared, int per_layer, float wstd,
                     float nstd) {
        SynthShape s{name, "gemma4", E, layers, heads, kv_swa, ff, vocab, ctx, 1000000.0f, true, true, hd};
        s.n_swa = swa;
        s.swa_pattern = pattern;
        s.head_dim_swa = hd_swa;
        s.n_head_kv_global = kv_global;
        s.n_kv_shared = shared;
        s.n_embd_per_layer = per_layer;
        s.weight_std = wstd;
        s.norm_std = nstd;
        return s;
    };
    // eagle3: an EAGLE-3 head for a target of hidden size Et, reading the inputs of its layers a, b, c
    auto eagle3 = [](const char* name, int E, int heads, int kv, int ff, int vocab, int ctx, float theta, int Et, int a,
                     int b, int c, int draft_vocab, bool own_embd, bool own_output, float wstd, float nstd) {
        SynthShape s{name, "eagle3", E, 1, heads, kv, ff, vocab, ctx, theta, false, false};
        s.n_embd_target = Et;
        s.eagle_layers[0] = a;
        s.eagle_layers[1] = b;
        s.eagle_layers[2] = c;
        s.n_draft_vocab = draft_vocab;
        s.own_embd = own_embd;
        s.own_output = own_output;
        s.weight_std = wstd;
        s.norm_std = nstd;
        return s;
    };
    static const std::vector<SynthShape> shapes = {
        {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false, false},
        {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, true, true},
        {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0f, true, false},
        {"llama-2-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false, false},
        {"llama-3.1-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0f, false, true},
        {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 1000000.0f, true, false, 128},
        {"qwen3-8b", "qwen3", 4096, 36, 32, 8, 12288, 151936, 40960, 1000000.0f, false, false, 128},
        {"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 6144, 151936, 40960, 1000000.0f, false, false, 128, 128, 8, 768},
        {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, 1000000.0f, true, false, 256, 0, 0, 0, 512},
        {"phi-4-mini", "phi3", 3072, 32, 24, 8, 8192, 200064, 131072, 10000.0f, true, false},
        {"gpt-oss-20b", "gpt-oss", 2880, 24, 64, 8, 2880, 201088, 131072, 150000.0f, false, false, 64, 32, 4, 2880,
         128},
        {"smollm3-3b", "smollm3", 2048, 36, 16, 4, 11008, 128256, 65536, 5000000.0f, true, false},
        {"granite-3.3-2b", "granite", 2048, 40, 32, 8, 8192, 49159, 131072, 10000000.0f, true, false},
        {"olmo2-1b", "olmo2", 2048, 16, 16, 16, 8192, 100352, 4096, 500000.0f, false, false},
        // GLM-4.5-Air's layer shapes with 6 of its 46 layers and its MTP block (about 17B parameters: ~9.5 GB at Q4_0)
        {"glm-4.5-air-6l", "glm4moe", 4096, 6, 96, 8, 10944, 151552, 131072, 1000000.0f, false, false, 128, 128, 8,
         1408},
        // DeepSeek V3's layer shapes (MLA 1536 / 512 + 64, 128 heads, 256 experts of 2048 in 8 groups, 8 used) with 2 of
        // its 61 layers (the first dense), about 13B parameters: ~7.5 GB at Q4_0
        {"deepseek-v3-2l",
         "deepseek2",
         7168,
         2,
         128,
         1,
         18432,
         129280,
         163840,
         10000.0f,
         false,
         false,
         576,
         256,
         8,
         2048,
         0,
         0.02f,
         0.0f,
         1536,
         512,
         64,
         128,
         128,
         0},
        {"tiny-test", "llama", 256, 2, 4, 2, 512, 1000, 512, 10000.0f, false, false},
        // an EAGLE-3 head for tiny-test: its own embeddings, the target's output, norm_before_residual
        [&] {
            SynthShape s = eagle3("tiny-test-eagle3", 256, 4, 2, 512, 1000, 512, 10000.0f, 256, 0, 1, 1, 0, true, false,
                                  0.02f, 0.0f);
            s.norm_before_residual = true;
            return s;
        }(),
        // llama at the references' size, and an EAGLE-3 head for it as llama.cpp's converter writes one for a
        // Llama 3.1 8B target: the target's embeddings, its own output over 600 of the 1000 tokens (d2t)
        {"tiny-ref-llama", "llama", 256, 4, 4, 2, 512, 1000, 512, 10000.0f, false, false, 0, 0, 0, 0, 0, 0.05f, 0.1f},
        eagle3("tiny-ref-eagle3", 256, 4, 2, 512, 1000, 512, 10000.0f, 256, 1, 2, 3, 600, false, true, 0.05f, 0.1f),
        // qwen3 at that size: the same head drafts for it too (the same width, vocabulary and layer count)
        {"tiny-ref-qwen3", "qwen3", 256, 4, 4, 2, 512, 1000, 512, 1000000.0f, false, false, 64, 0, 0, 0, 0, 0.05f,
         0.1f},
        // Llama 3.1 8B's EAGLE-3 head (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's shapes: layers 2, 16, 29, 32000 tokens)
        eagle3("llama-3.1-8b-eagle3", 4096, 32, 8, 14336, 128256, 131072, 500000.0f, 4096, 2, 16, 29, 32000, false,
               true, 0.02f, 0.0f),
        {"tiny-test-tied", "qwen2", 256, 2, 4, 2, 512, 1008, 512, 10000.0f, true, false},
        {"tiny-test-qwen3moe", "qwen3moe", 256, 2, 4, 2, 512, 1000, 512, 1000000.0f, true, false, 64, 8, 2, 128},
        {"tiny-test-gemma3", "gemma3", 256, 7, 4, 2, 512, 1000, 512, 1000000.0f, true, false, 64, 0, 0, 0, 8},
        {"tiny-test-phi3", "phi3", 256, 2, 4, 2, 512, 1000, 512, 10000.0f, true, false},
        {"tiny-test-gptoss", "gpt-oss", 256, 2, 4, 2, 256, 1000, 512, 150000.0f, false, false, 64, 8, 2, 128, 8},
        // the llama.cpp references' shapes (tests/data/reference-arch): 4 layers, so smollm3's layer 3 has no RoPE
        {"tiny-ref-smollm3", "smollm3", 256, 4, 4, 2, 512, 1000, 512, 10000.0f, true, false, 0, 0, 0, 0, 0, 0.05f,
         0.1f},
        {"tiny-ref-granite", "granite", 256, 4, 4, 2, 512, 1000, 512, 10000.0f, true, false, 0, 0, 0, 0, 0, 0.05f,
         0.1f},
        {"tiny-ref-olmo2", "olmo2", 256, 4, 4, 2, 512, 1000, 512, 500000.0f, false, false, 0, 0, 0, 0, 0, 0.05f, 0.1f},
        {"tiny-ref-mistral3", "mistral3", 256, 4, 4, 2, 512, 1000, 512, 1000000.0f, false, false, 0, 0, 0, 0, 0, 0.05f,
         0.1f},
        {"tiny-ref-glm4moe", "glm4moe", 256, 4, 4, 2, 512, 1000, 512, 1000000.0f, false, false, 64, 8, 2, 128, 0, 0.05f,
         0.1f},
        // DeepSeek V3's layout at a small size: MLA (q rank 96, latent 64, rope 32 + 32 per head, values 32), 8
        // experts in 4 groups (2 used), a shared expert, layer 0 dense, YaRN x4 over 16 positions, an MTP block
        {"tiny-ref-deepseek2",
         "deepseek2",
         256,
         4,
         4,
         1,
         512,
         1000,
         512,
         10000.0f,
         false,
         false,
         96,
         8,
         2,
         128,
         0,
         0.05f,
         0.1f,
         96,
         64,
         32,
         32,
         32},
        // Llama 4 Scout's shapes with 4 of its 48 layers (16 experts of 8192, 1 used, a shared expert, MoE in every
        // layer; layer 3 NoPE)
        llama4("llama4-scout-4l", 5120, 4, 40, 8, 16384, 202048, 10485760, 16, 8192, 1, 0.02f, 0.0f),
        // a small dense draft for it (Llama 3.2 1B's layer shapes, 4 layers, Llama 4's vocabulary size)
        {"llama4-draft", "llama", 2048, 4, 32, 8, 8192, 202048, 131072, 500000.0f, true, false},
        // Llama 4's layout at the references' size: MoE in layers 1 and 3, NoPE in layer 3
        llama4("tiny-ref-llama4", 256, 4, 4, 2, 512, 1000, 16384, 8, 128, 2, 0.05f, 0.1f),
        // Gemma 4 E2B's shapes: 35 layers (every 5th global), 20 of them sharing the cache, per-layer embeddings
        gemma4("gemma4-e2b", 1536, 35, 8, 1, 1, 6144, 262144, 131072, 256, 512, 512, 5, 20, 256, 0.02f, 0.0f),
        // Gemma 4's layout at the references' size: layers 2 and 5 global, 3-5 sharing the caches of 1 and 2
        gemma4("tiny-ref-gemma4", 256, 6, 4, 2, 1, 512, 1000, 512, 32, 64, 8, 3, 3, 32, 0.05f, 0.1f),
        // Gemma 4 26B-A4B's layout at that size: 8 experts (2 used) beside the dense MLP in every layer
        [&] {
            SynthShape s =
                gemma4("tiny-ref-gemma4moe", 256, 4, 4, 2, 1, 256, 1000, 512, 32, 64, 8, 2, 0, 0, 0.05f, 0.1f);
            s.n_expert = 8;
            s.n_expert_used = 2;
            s.n_ff_exp = 128;
            return s;
        }(),
        // a Gemma 4 assistant for gemma4-e2b (the size is ours: 4 layers of 512, the last global)
        [&] {
            SynthShape s = gemma4("gemma4-e2b-assistant", 512, 4, 8, 1, 1, 2048, 262144, 131072, 256, 512, 512, 4, 0, 0,
                                  0.02f, 0.0f);
            s.arch = "gemma4-assistant";
            s.n_embd_target = 1536;
            return s;
        }(),
        // an assistant for tiny-ref-gemma4: a sliding-window layer and a global one
        [&] {
            SynthShape s =
                gemma4("tiny-ref-gemma4-assistant", 128, 2, 4, 2, 1, 256, 1000, 512, 32, 64, 8, 2, 0, 0, 0.03f, 0.1f);
            s.arch = "gemma4-assistant";
            s.n_embd_target = 256;
            return s;
        }(),
        // Qwen3.5-9B's shapes and its MTP block
        qwen35("qwen3.5-9b", 4096, 32, 16, 4, 12288, 248320, 262144, 256, 128, 16, 32, 4, 0.02f, 0.0f),
        // the llama.cpp reference's: DeltaNet in layers 0 and 2, gated attention in 1 and 3
        qwen35("tiny-ref-qwen35", 256, 4, 4, 2, 512, 1000, 512, 64, 32, 2, 4, 2, 0.05f, 0.1f),
        // Qwen3.5-35B-A3B's shapes with 8 of its 40 layers (256 experts, 8 used, a gated shared expert of 512)
        qwen35("qwen3.5-35b-a3b-8l", 2048, 8, 16, 2, 512, 248320, 262144, 256, 128, 16, 32, 4, 0.02f, 0.0f, 256, 8,
               512),
        // qwen35moe at a small size: 8 experts, 2 used, the shared expert n_ff wide
        qwen35("tiny-ref-qwen35moe", 256, 4, 4, 2, 256, 1000, 512, 64, 32, 2, 4, 2, 0.05f, 0.1f, 8, 2, 128),
        // Qwen3-Next's layout at that size: beta|alpha fused per key head, value heads grouped by key head
        [&] {
            SynthShape s =
                qwen35("tiny-ref-qwen3next", 256, 4, 4, 2, 256, 1000, 512, 64, 32, 2, 4, 2, 0.05f, 0.1f, 8, 2, 128);
            s.arch = "qwen3next";
            return s;
        }(),
    };
    return shapes;
}

const SynthShape& synth_shape(const std::string& name) {
    std::string known;
    for (const auto& s : synth_shapes()) {
        if (s.name == name) return s;
        known += (known.empty() ? "" : ", ") + s.name;
    }
    throw Error("unknown shape '" + name + "' (known: " + known + ")");
}

namespace {

// xoshiro256** with Box-Muller: fast, reproducible Gaussian noise.
struct Rng {
    uint64_t s[4];
    explicit Rng(uint64_t seed) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ull;
        for (auto& v : s) {
            z += 0x9E3779B97F4A7C15ull;
            uint64_t x = z;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            v = x ^ (x >> 31);
        }
    }
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t next() {
        uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return r;
    }
    float uniform() { return float((next() >> 40) + 0.5) * (1.0f / 16777216.0f); }
    void gaussian(float* out, int64_t n, float std) {
        for (int64_t i = 0; i < n; i += 2) {
            float u1 = uniform(), u2 = uniform();
            float r = std::sqrt(-2.0f * std::log(u1)) * std;
            out[i] = r * std::cos(6.2831853f * u2);
            if (i + 1 < n) out[i + 1] = r * std::sin(6.2831853f * u2);
        }
    }
};

void generated_vocab(GgufWriter& w, int n_vocab) {
    // A SentencePiece-style vocabulary: <unk>, <s>, </s>, 256 byte tokens, then placeholder pieces.
    std::vector<GgufValue> toks, scores, types;
    for (int i = 0; i < n_vocab; i++) {
        std::string t;
        int type = 1;
        if (i == 0) {
            t = "<unk>";
            type = 2;
        } else if (i == 1) {
            t = "<s>";
            type = 3;
        } else if (i == 2) {
            t = "</s>";
            type = 3;
        } else if (i < 259) {
            t = strprintf("<0x%02X>", i - 3);
            type = 6;
        } else t = strprintf("\xE2\x96\x81t%d", i);
        toks.push_back(GgufValue::of_str(t));
        scores.push_back(GgufValue::of_f32(-float(i)));
        types.push_back(GgufValue::of_i32(type));
    }
    w.set("tokenizer.ggml.model", GgufValue::of_str("llama"));
    w.set("tokenizer.ggml.tokens", GgufValue::of_array(GgufType::STRING, std::move(toks)));
    w.set("tokenizer.ggml.scores", GgufValue::of_array(GgufType::FLOAT32, std::move(scores)));
    w.set("tokenizer.ggml.token_type", GgufValue::of_array(GgufType::INT32, std::move(types)));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::of_u32(1));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::of_u32(2));
}

}  // namespace

void synth_model(const std::string& out_path, const SynthParams& p) {
    const SynthShape& s = synth_shape(p.shape);
    (void)mix_type_for(p.type, "probe", s.n_layer);  // validates the type
    GgufWriter w;
    const std::string a = s.arch;
    int n_vocab = s.n_vocab;
    w.set("general.architecture", GgufValue::of_str(a));
    w.set("general.name", GgufValue::of_str("tandem synth " + s.name + " " + p.type));
    if (!p.vocab_path.empty()) {
        auto v = GgufFile::open(p.vocab_path);
        for (const auto& [k, val] : v->metadata())
            if (k.rfind("tokenizer.", 0) == 0) w.set(k, val);
        const GgufValue* toks = v->get_array("tokenizer.ggml.tokens", GgufType::STRING);
        if (!toks) throw Error(p.vocab_path + ": no tokenizer.ggml.tokens");
        n_vocab = int(toks->arr.size());
    } else {
        generated_vocab(w, n_vocab);
    }
    const int hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
    const bool moe = s.n_expert > 0, gemma = a == "gemma3", phi = a == "phi3", oss = a == "gpt-oss";
    const bool asst = a == "gemma4-assistant", g4 = a == "gemma4" || asst;
    // gemma4: which layers are global, which read another's cache, and each layer's head size / KV heads / FFN width
    auto g4_global = [&](int l) { return g4 && (l + 1) % s.swa_pattern == 0; };
    auto g4_shared = [&](int l) { return g4 && l >= s.n_layer - s.n_kv_shared; };
    auto head_dim_of = [&](int l) { return g4 && !g4_global(l) ? s.head_dim_swa : hd; };
    auto kv_heads_of = [&](int l) { return g4_global(l) ? s.n_head_kv_global : s.n_head_kv; };
    auto ff_of = [&](int l) { return g4_shared(l) ? 2 * s.n_ff : s.n_ff; };
    const bool olmo2 = a == "olmo2", glm = a == "glm4moe", ds = a == "deepseek2",
               q35 = a == "qwen35" || a == "qwen35moe" || a == "qwen3next", next = a == "qwen3next", l4 = a == "llama4";
    // per head (olmo2's: whole q and k, below); glm4moe: GLM-4.5's layout (-Air has none)
    const bool qk_norm = a == "qwen3" || a == "qwen3moe" || gemma || glm || q35;
    // phi-4-mini rotates 3/4 of each head, GLM half, DeepSeek its qk_rope dims, Qwen3.5 a quarter
    const int n_rot = phi ? hd * 3 / 4 : glm ? hd / 2 : ds ? s.qk_rope : q35 ? hd / 4 : hd;
    // qwen35: which layers are Gated DeltaNet (the others gated attention), and their shapes
    auto recurrent = [&](int l) { return q35 && l < s.n_layer && (l + 1) % s.full_attn_interval != 0; };
    const int64_t ssm_vd = int64_t(s.ssm_v_heads) * s.ssm_state,
                  ssm_conv = int64_t(2 * s.ssm_k_heads + s.ssm_v_heads) * s.ssm_state;
    // GLM-4.5, DeepSeek V3: one multi-token-prediction block after the decoder's (a layer plus its nextn.* tensors)
    const int n_nextn = s.mtp_blocks >= 0 ? s.mtp_blocks : glm || ds || q35 ? 1 : 0, n_dense_lead = glm || ds ? 1 : 0;
    w.set(a + ".context_length", GgufValue::of_u32(uint32_t(s.n_ctx)));
    w.set(a + ".embedding_length", GgufValue::of_u32(uint32_t(s.n_embd)));
    w.set(a + ".block_count", GgufValue::of_u32(uint32_t(s.n_layer + n_nextn)));
    w.set(a + ".feed_forward_length", GgufValue::of_u32(uint32_t(s.n_ff)));
    w.set(a + ".attention.head_count", GgufValue::of_u32(uint32_t(s.n_head)));
    w.set(a + ".attention.head_count_kv", GgufValue::of_u32(uint32_t(s.n_head_kv)));
    w.set(a + ".attention.key_length", GgufValue::of_u32(uint32_t(hd)));
    w.set(a + ".attention.value_length", GgufValue::of_u32(uint32_t(hd)));
    w.set(a + ".rope.dimension_count", GgufValue::of_u32(uint32_t(n_rot)));
    w.set(a + ".rope.freq_base", GgufValue::of_f32(s.rope_theta));
    w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
    if (moe) {
        w.set(a + ".expert_count", GgufValue::of_u32(uint32_t(s.n_expert)));
        w.set(a + ".expert_used_count", GgufValue::of_u32(uint32_t(s.n_expert_used)));
        w.set(a + ".expert_feed_forward_length", GgufValue::of_u32(uint32_t(s.n_ff_exp)));
    }
    if (l4) w.set(a + ".interleave_moe_layer_step", GgufValue::of_u32(uint32_t(s.moe_layer_step)));
    if (ds) {  // MLA as llama.cpp's converter writes it: one cached "head" of latent + rope
        if (s.q_lora > 0) w.set(a + ".attention.q_lora_rank", GgufValue::of_u32(uint32_t(s.q_lora)));
        w.set(a + ".attention.kv_lora_rank", GgufValue::of_u32(uint32_t(s.kv_lora)));
        w.set(a + ".attention.key_length", GgufValue::of_u32(uint32_t(s.kv_lora + s.qk_rope)));
        w.set(a + ".attention.value_length", GgufValue::of_u32(uint32_t(s.kv_lora)));
        w.set(a + ".attention.key_length_mla", GgufValue::of_u32(uint32_t(s.qk_nope + s.qk_rope)));
        w.set(a + ".attention.value_length_mla", GgufValue::of_u32(uint32_t(s.v_head)));
        const bool real = s.n_expert >= 64;  // DeepSeek V3's own: 8 groups, 4 used, YaRN x40 over 4096
        w.set(a + ".expert_group_count", GgufValue::of_u32(real ? 8 : 4));
        w.set(a + ".expert_group_used_count", GgufValue::of_u32(real ? 4 : 2));
        w.set(a + ".rope.scaling.type", GgufValue::of_str("yarn"));
        w.set(a + ".rope.scaling.factor", GgufValue::of_f32(real ? 40.0f : 4.0f));
        w.set(a + ".rope.scaling.original_context_length", GgufValue::of_u32(real ? 4096 : 16));
        w.set(a + ".rope.scaling.yarn_log_multiplier", GgufValue::of_f32(0.1f));  // 0.1 * mscale_all_dim 1
    }
    if (glm || ds) {  // GLM-4.5's / DeepSeek V3's router: sigmoid, choice bias, 1 shared expert, renormalised, x2.5
        w.set(a + ".expert_gating_func", GgufValue::of_u32(2));
        w.set(a + ".expert_shared_count", GgufValue::of_u32(1));
        w.set(a + ".expert_weights_norm", GgufValue::of_bool(true));
        w.set(a + ".expert_weights_scale", GgufValue::of_f32(2.5f));
        w.set(a + ".leading_dense_block_count", GgufValue::of_u32(uint32_t(n_dense_lead)));
        w.set(a + ".nextn_predict_layers", GgufValue::of_u32(uint32_t(n_nextn)));
    }
    if (q35) {  // as llama.cpp's converter writes Qwen3.5: the ssm.* shapes and the (text: NEOX) RoPE sections
        w.set(a + ".ssm.conv_kernel", GgufValue::of_u32(4));
        w.set(a + ".ssm.state_size", GgufValue::of_u32(uint32_t(s.ssm_state)));
        w.set(a + ".ssm.group_count", GgufValue::of_u32(uint32_t(s.ssm_k_heads)));
        w.set(a + ".ssm.time_step_rank", GgufValue::of_u32(uint32_t(s.ssm_v_heads)));
        w.set(a + ".ssm.inner_size", GgufValue::of_u32(uint32_t(ssm_vd)));
        w.set(a + ".full_attention_interval", GgufValue::of_u32(uint32_t(s.full_attn_interval)));
        if (moe) w.set(a + ".expert_shared_feed_forward_length", GgufValue::of_u32(uint32_t(s.n_ff)));
        w.set(a + ".nextn_predict_layers", GgufValue::of_u32(uint32_t(n_nextn)));
        const int pairs = n_rot / 2;  // Qwen3.5's [11, 11, 10, 0] for 32 pairs (Qwen3-Next: plain NEOX RoPE)
        std::vector<GgufValue> sec = {GgufValue::of_i32((pairs + 2) / 3), GgufValue::of_i32((pairs + 1) / 3),
                                      GgufValue::of_i32(pairs / 3), GgufValue::of_i32(0)};
        if (!next) w.set(a + ".rope.dimension_sections", GgufValue::of_array(GgufType::INT32, std::move(sec)));
    }
    const bool eagle = a == "eagle3";
    if (eagle) {  // as llama.cpp's converter writes an EAGLE-3 head
        std::vector<GgufValue> layers;
        for (int l : s.eagle_layers) layers.push_back(GgufValue::of_i32(l));
        w.set(a + ".target_layers", GgufValue::of_array(GgufType::INT32, std::move(layers)));
        w.set(a + ".target_hidden_size", GgufValue::of_u32(uint32_t(s.n_embd_target)));
        w.set(a + ".norm_before_residual", GgufValue::of_bool(s.norm_before_residual));
    }
    if (s.n_swa > 0) w.set(a + ".attention.sliding_window", GgufValue::of_u32(uint32_t(s.n_swa)));
    if (g4) {  // as llama.cpp's converter writes Gemma 4
        std::vector<GgufValue> pattern, kv_heads, ff;
        for (int l = 0; l < s.n_layer; l++) {
            pattern.push_back(GgufValue::of_bool(!g4_global(l)));
            kv_heads.push_back(GgufValue::of_u32(uint32_t(kv_heads_of(l))));
            ff.push_back(GgufValue::of_u32(uint32_t(ff_of(l))));
        }
        w.set(a + ".attention.sliding_window_pattern", GgufValue::of_array(GgufType::BOOL, std::move(pattern)));
        w.set(a + ".attention.head_count_kv", GgufValue::of_array(GgufType::UINT32, std::move(kv_heads)));
        w.set(a + ".feed_forward_length", GgufValue::of_array(GgufType::UINT32, std::move(ff)));
        w.set(a + ".attention.key_length_swa", GgufValue::of_u32(uint32_t(s.head_dim_swa)));
        w.set(a + ".attention.value_length_swa", GgufValue::of_u32(uint32_t(s.head_dim_swa)));
        w.set(a + ".rope.dimension_count_swa", GgufValue::of_u32(uint32_t(s.head_dim_swa)));
        w.set(a + ".rope.freq_base_swa", GgufValue::of_f32(10000.0f));
        w.set(a + ".attention.shared_kv_layers", GgufValue::of_u32(uint32_t(s.n_kv_shared)));
        w.set(a + ".embedding_length_per_layer_input", GgufValue::of_u32(uint32_t(s.n_embd_per_layer)));
        if (!asst) w.set(a + ".final_logit_softcapping", GgufValue::of_f32(30.0f));
        if (asst) {
            w.set(a + ".embedding_length_out", GgufValue::of_u32(uint32_t(s.n_embd_target)));
            w.set(a + ".nextn_predict_layers", GgufValue::of_u32(uint32_t(s.n_layer)));
        }
        w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-6f));
    }
    if (gemma) {
        w.set(a + ".rope.freq_base_swa", GgufValue::of_f32(10000.0f));
        w.set(a + ".rope.scaling.type", GgufValue::of_str("linear"));
        w.set(a + ".rope.scaling.factor", GgufValue::of_f32(8.0f));
    }
    if (phi) {
        w.set(a + ".rope.scaling.original_context_length", GgufValue::of_u32(4096));
        w.set(a + ".rope.scaling.attn_factor", GgufValue::of_f32(1.19024f));
    }
    if (a == "granite") {  // Granite 3.x's multipliers (embedding 12, residual 0.22, attention 1/128), logits / 2
        w.set(a + ".logit_scale", GgufValue::of_f32(2.0f));
        w.set(a + ".residual_scale", GgufValue::of_f32(0.22f));
        w.set(a + ".embedding_scale", GgufValue::of_f32(12.0f));
        w.set(a + ".attention.scale", GgufValue::of_f32(0.0078125f));
    }
    if (a == "mistral3") {  // YaRN x4 over an original context of 16 and the attention temperature beyond it
        // (Mistral's files: 16384 and 0.1; small here so that a short test crosses it, and 0.5 so that it shows)
        w.set(a + ".rope.scaling.type", GgufValue::of_str("yarn"));
        w.set(a + ".rope.scaling.factor", GgufValue::of_f32(4.0f));
        w.set(a + ".rope.scaling.original_context_length", GgufValue::of_u32(16));
        w.set(a + ".attention.temperature_scale", GgufValue::of_f32(0.5f));
    }
    if (oss) {
        w.set(a + ".rope.scaling.type", GgufValue::of_str("yarn"));
        w.set(a + ".rope.scaling.factor", GgufValue::of_f32(32.0f));
        w.set(a + ".rope.scaling.original_context_length", GgufValue::of_u32(4096));
    }

    // Tensors as llama.cpp's converters write them. `is_norm`: filled with 1 (norms, rope factors); other
    // 1-D tensors (biases, sinks) get noise. Expert tensors are 3-D [in, out, n_expert].
    struct T {
        std::string name;
        std::vector<int64_t> ne;
        bool is_norm;
    };
    std::vector<T> ts;
    const int64_t q = int64_t(s.n_head) * hd, kv = int64_t(s.n_head_kv) * hd, E = s.n_embd;
    const int64_t n_draft = s.n_draft_vocab > 0 ? s.n_draft_vocab : n_vocab;
    if (eagle && n_draft > n_vocab)
        throw Error(strprintf("shape %s maps %lld draft tokens, more than the vocabulary's %d", s.name.c_str(),
                              (long long)n_draft, n_vocab));
    if (eagle) {  // one layer whose attention reads [embedding, fused target states]; no other block below
        ts.push_back({"fc.weight", {3 * int64_t(s.n_embd_target), E}, false});
        if (s.own_embd) ts.push_back({"token_embd.weight", {E, n_vocab}, false});
        ts.push_back({"blk.0.attn_norm.weight", {E}, true});
        ts.push_back({"blk.0.attn_norm_2.weight", {E}, true});
        ts.push_back({"blk.0.attn_q.weight", {2 * E, q}, false});
        ts.push_back({"blk.0.attn_k.weight", {2 * E, kv}, false});
        ts.push_back({"blk.0.attn_v.weight", {2 * E, kv}, false});
        ts.push_back({"blk.0.attn_output.weight", {q, E}, false});
        ts.push_back({"blk.0.ffn_norm.weight", {E}, true});
        ts.push_back({"blk.0.ffn_gate.weight", {E, s.n_ff}, false});
        ts.push_back({"blk.0.ffn_up.weight", {E, s.n_ff}, false});
        ts.push_back({"blk.0.ffn_down.weight", {s.n_ff, E}, false});
        ts.push_back({"output_norm.weight", {E}, true});
        if (s.own_output) ts.push_back({"output.weight", {E, n_draft}, false});
        if (s.n_draft_vocab > 0) ts.push_back({"d2t", {n_draft}, false});
    } else ts.push_back({"token_embd.weight", {E, n_vocab}, false});
    const int64_t P = s.n_embd_per_layer, PL = P * s.n_layer;
    if (g4 && P > 0) {
        ts.push_back({"per_layer_token_embd.weight", {PL, n_vocab}, false});
        ts.push_back({"per_layer_model_proj.weight", {E, PL}, false});
        ts.push_back({"per_layer_proj_norm.weight", {P}, true});
    }
    if (s.rope_freqs) ts.push_back({"rope_freqs.weight", {n_rot / 2}, true});
    if (phi) {
        ts.push_back({"rope_factors_long.weight", {n_rot / 2}, true});
        ts.push_back({"rope_factors_short.weight", {n_rot / 2}, true});
    }
    for (int l = 0; l < (eagle ? 0 : s.n_layer + n_nextn); l++) {
        std::string b = "blk." + std::to_string(l) + ".";
        const bool moe_layer = moe && l >= n_dense_lead && (!l4 || (l + 1) % s.moe_layer_step == 0);
        if (!olmo2) ts.push_back({b + "attn_norm.weight", {E}, true});
        if (recurrent(l)) {
            ts.push_back({b + "attn_qkv.weight", {E, ssm_conv}, false});
            ts.push_back({b + "attn_gate.weight", {E, ssm_vd}, false});
            ts.push_back({b + "ssm_conv1d.weight", {4, ssm_conv}, false});
            ts.push_back({b + "ssm_dt.bias", {s.ssm_v_heads}, false});
            ts.push_back({b + "ssm_a", {s.ssm_v_heads}, false});
            if (next) {  // Qwen3-Next: per key head, its value heads' beta rows, then their alpha rows
                ts.push_back({b + "ssm_ba.weight", {E, 2 * s.ssm_v_heads}, false});
            } else {
                ts.push_back({b + "ssm_beta.weight", {E, s.ssm_v_heads}, false});
                ts.push_back({b + "ssm_alpha.weight", {E, s.ssm_v_heads}, false});
            }
            ts.push_back({b + "ssm_norm.weight", {s.ssm_state}, true});
            ts.push_back({b + "ssm_out.weight", {ssm_vd, E}, false});
        } else if (q35) {  // gated attention: each head's query and then its gate
            ts.push_back({b + "attn_q.weight", {E, 2 * q}, false});
            ts.push_back({b + "attn_k.weight", {E, kv}, false});
            ts.push_back({b + "attn_v.weight", {E, kv}, false});
        } else if (ds) {
            const int64_t mk = s.qk_nope + s.qk_rope;
            if (s.q_lora > 0) {
                ts.push_back({b + "attn_q_a_norm.weight", {s.q_lora}, true});
                ts.push_back({b + "attn_q_a.weight", {E, s.q_lora}, false});
                ts.push_back({b + "attn_q_b.weight", {s.q_lora, s.n_head * mk}, false});
            } else {
                ts.push_back({b + "attn_q.weight", {E, s.n_head * mk}, false});
            }
            ts.push_back({b + "attn_kv_a_norm.weight", {s.kv_lora}, true});
            ts.push_back({b + "attn_kv_a_mqa.weight", {E, s.kv_lora + s.qk_rope}, false});
            ts.push_back({b + "attn_k_b.weight", {s.qk_nope, s.kv_lora, s.n_head}, false});
            ts.push_back({b + "attn_v_b.weight", {s.kv_lora, s.v_head, s.n_head}, false});
        } else if (phi) {
            ts.push_back({b + "attn_qkv.weight", {E, q + 2 * kv}, false});
        } else if (g4) {  // a shared-KV layer has no k/v; a global layer no v (its v is k's rows)
            const int64_t hl = head_dim_of(l), kvl = kv_heads_of(l) * hl;
            ts.push_back({b + "attn_q.weight", {E, s.n_head * hl}, false});
            const bool own_kv = !g4_shared(l) && !asst;  // (an assistant reads its target's cache)
            if (own_kv) ts.push_back({b + "attn_k.weight", {E, kvl}, false});
            if (own_kv && !g4_global(l)) ts.push_back({b + "attn_v.weight", {E, kvl}, false});
            ts.push_back({b + "attn_q_norm.weight", {hl}, true});
            if (own_kv) ts.push_back({b + "attn_k_norm.weight", {hl}, true});
            ts.push_back({b + "layer_output_scale.weight", {1}, true});
            if (P > 0) {
                ts.push_back({b + "inp_gate.weight", {E, P}, false});
                ts.push_back({b + "proj.weight", {P, E}, false});
                ts.push_back({b + "post_norm.weight", {E}, true});
            }
        } else {
            ts.push_back({b + "attn_q.weight", {E, q}, false});
            ts.push_back({b + "attn_k.weight", {E, kv}, false});
            ts.push_back({b + "attn_v.weight", {E, kv}, false});
        }
        if (a == "qwen2" || oss || glm) {
            ts.push_back({b + "attn_q.bias", {q}, false});
            ts.push_back({b + "attn_k.bias", {kv}, false});
            ts.push_back({b + "attn_v.bias", {kv}, false});
        }
        if (qk_norm && !recurrent(l)) {
            ts.push_back({b + "attn_q_norm.weight", {hd}, true});
            ts.push_back({b + "attn_k_norm.weight", {hd}, true});
        }
        if (olmo2) {
            ts.push_back({b + "attn_q_norm.weight", {q}, true});
            ts.push_back({b + "attn_k_norm.weight", {kv}, true});
        }
        if (!recurrent(l))
            ts.push_back(
                {b + "attn_output.weight", {ds ? int64_t(s.n_head) * s.v_head : s.n_head * head_dim_of(l), E}, false});
        if (oss) {
            ts.push_back({b + "attn_output.bias", {E}, false});
            ts.push_back({b + "attn_sinks.weight", {s.n_head}, false});
        }
        if (oss || glm || q35) {  // their pre-FFN norm
            ts.push_back({b + "post_attention_norm.weight", {E}, true});
        } else if (!olmo2) {
            ts.push_back({b + "ffn_norm.weight", {E}, true});
        }
        if (gemma || olmo2 || g4) {
            ts.push_back({b + "post_attention_norm.weight", {E}, true});
            ts.push_back({b + "post_ffw_norm.weight", {E}, true});
        }
        if (moe_layer && g4) {  // Gemma 4 26B-A4B: experts (gate|up in one tensor) beside the dense MLP below
            const int64_t ne = s.n_expert, fe = s.n_ff_exp;
            ts.push_back({b + "ffn_gate_inp.weight", {E, ne}, false});
            ts.push_back({b + "ffn_gate_inp.scale", {E}, true});
            ts.push_back({b + "pre_ffw_norm_2.weight", {E}, true});
            ts.push_back({b + "post_ffw_norm_1.weight", {E}, true});
            ts.push_back({b + "post_ffw_norm_2.weight", {E}, true});
            ts.push_back({b + "ffn_gate_up_exps.weight", {E, 2 * fe, ne}, false});
            ts.push_back({b + "ffn_down_exps.weight", {fe, E, ne}, false});
            ts.push_back({b + "ffn_down_exps.scale", {ne}, true});
        }
        if (moe_layer && !g4) {
            const int64_t ne = s.n_expert, fe = s.n_ff_exp;
            ts.push_back({b + "ffn_gate_inp.weight", {E, ne}, false});
            if (q35) {  // Qwen3.5-MoE's shared expert (n_ff wide) and its per-token gate
                ts.push_back({b + "ffn_gate_inp_shexp.weight", {E}, false});
                ts.push_back({b + "ffn_gate_shexp.weight", {E, s.n_ff}, false});
                ts.push_back({b + "ffn_up_shexp.weight", {E, s.n_ff}, false});
                ts.push_back({b + "ffn_down_shexp.weight", {s.n_ff, E}, false});
            }
            if (glm || ds) ts.push_back({b + "exp_probs_b.bias", {ne}, false});
            if (glm || ds || l4) {
                ts.push_back({b + "ffn_gate_shexp.weight", {E, fe}, false});
                ts.push_back({b + "ffn_up_shexp.weight", {E, fe}, false});
                ts.push_back({b + "ffn_down_shexp.weight", {fe, E}, false});
            }
            ts.push_back({b + "ffn_gate_exps.weight", {E, fe, ne}, false});
            ts.push_back({b + "ffn_up_exps.weight", {E, fe, ne}, false});
            ts.push_back({b + "ffn_down_exps.weight", {fe, E, ne}, false});
            if (oss) {
                ts.push_back({b + "ffn_gate_inp.bias", {ne}, false});
                ts.push_back({b + "ffn_gate_exps.bias", {fe, ne}, false});
                ts.push_back({b + "ffn_up_exps.bias", {fe, ne}, false});
                ts.push_back({b + "ffn_down_exps.bias", {E, ne}, false});
            }
        } else if (phi) {
            ts.push_back({b + "ffn_up.weight", {E, 2 * int64_t(s.n_ff)}, false});
            ts.push_back({b + "ffn_down.weight", {s.n_ff, E}, false});
        } else {
            const int64_t ff = ff_of(l);
            ts.push_back({b + "ffn_gate.weight", {E, ff}, false});
            ts.push_back({b + "ffn_up.weight", {E, ff}, false});
            ts.push_back({b + "ffn_down.weight", {ff, E}, false});
        }
        if (l >= s.n_layer) {  // the MTP block's own tensors
            ts.push_back({b + "nextn.eh_proj.weight", {2 * E, E}, false});
            ts.push_back({b + "nextn.enorm.weight", {E}, true});
            ts.push_back({b + "nextn.hnorm.weight", {E}, true});
            ts.push_back({b + "nextn.shared_head_norm.weight", {E}, true});
        }
    }
    if (asst) {
        ts.push_back({"nextn.pre_projection.weight", {2 * int64_t(s.n_embd_target), E}, false});
        ts.push_back({"nextn.post_projection.weight", {E, s.n_embd_target}, false});
    }
    if (!eagle) ts.push_back({"output_norm.weight", {E}, true});
    if (!eagle && !s.tied_output) ts.push_back({"output.weight", {E, n_vocab}, false});

    // A plain type (Q8_0, Q4_0, ...) is used for every 2-D weight, output and embeddings included, as in the
    // reference models of ../shared/bench/BASELINE.md; a mix (Q4_K_M, ...) follows llama.cpp's per-tensor rules
    // (Q6_K output and so on), as `tandem quantize` does.
    const std::optional<TensorType> plain = tensor_type_from_name(p.type);
    std::vector<TensorType> types;
    for (const auto& t : ts) {
        const TensorType want = plain ? *plain : mix_type_for(p.type, t.name, s.n_layer);
        // 1-D tensors, bias tables and MoE routers stay F32 (as converted files have them). gpt-oss as released:
        // --type MXFP4_MOE (MXFP4 experts, Q8_0 elsewhere).
        const bool keep_f32 = t.ne.size() == 1 || t.name.find(".bias") != std::string::npos ||
                              t.name.find("ffn_gate_inp") != std::string::npos ||
                              t.name.find("ssm_conv1d") != std::string::npos;
        TensorType ty = t.name == "d2t" ? TensorType::I64 : keep_f32 ? TensorType::F32 : fallback_type(want, t.ne[0]);
        types.push_back(ty);
        w.add_tensor(t.name, ty, t.ne);
    }
    w.begin(out_path);
    Rng rng(p.seed);
    std::vector<float> row;
    std::vector<uint8_t> qrow;
    for (size_t i = 0; i < ts.size(); i++) {
        const T& t = ts[i];
        int64_t rows = 1;
        for (size_t d = 1; d < t.ne.size(); d++) rows *= t.ne[d];
        const int64_t n = t.ne[0];
        row.resize(size_t(n));
        qrow.resize(row_bytes(types[i], n));
        if (p.on_progress) p.on_progress(strprintf("%s %s", t.name.c_str(), type_name(types[i])));
        if (t.name == "d2t") {  // an EAGLE-3 head's vocabulary: n distinct target ids, ascending
            std::vector<int64_t> ids(static_cast<size_t>(n_vocab));
            for (int64_t j = 0; j < n_vocab; j++) ids[size_t(j)] = j;
            Rng pick(p.seed + 7);
            for (int64_t j = 0; j < n; j++)
                std::swap(ids[size_t(j)], ids[size_t(j + int64_t(pick.next() % uint64_t(n_vocab - j)))]);
            ids.resize(size_t(n));
            std::sort(ids.begin(), ids.end());
            w.write_tensor_data(ids.data(), ids.size() * sizeof(int64_t));
            continue;
        }
        for (int64_t r = 0; r < rows; r++) {
            if (g4 && t.name == "rope_freqs.weight") {  // "proportional" RoPE: a quarter of the pairs rotate
                for (int64_t j = 0; j < n; j++) row[size_t(j)] = j < n / 4 ? 1.0f : 1e30f;
            } else if (t.is_norm && s.norm_std > 0) {
                rng.gaussian(row.data(), n, s.norm_std);
                for (float& v : row) v += 1.0f;
            } else if (t.is_norm) {
                std::fill(row.begin(), row.end(), 1.0f);
            } else {
                // a router's choice bias as large as the spread of its sigmoid scores, so that it decides
                const bool choice_bias = t.name.find("exp_probs_b") != std::string::npos;
                const bool decay = t.name.size() > 6 && t.name.compare(t.name.size() - 6, 6, ".ssm_a") == 0;
                // qwen35moe's router: decisive scores (a near-tie flips with the engines' rounding, and a DeltaNet
                // state carries the flip to every later step); DeltaNet's convolution taps
                const bool router = q35 && t.name.find("ffn_gate_inp.weight") != std::string::npos;
                const bool conv = t.name.find("ssm_conv1d") != std::string::npos;
                // gemma4's router reads rmsnorm(x) / sqrt(n_embd): decisive at 2 (a near-tie flips between engines)
                const bool g4_router = g4 && t.name.find("ffn_gate_inp.weight") != std::string::npos;
                rng.gaussian(row.data(), n,
                             g4_router              ? 2.0f
                             : choice_bias || decay ? 0.25f
                             : router || conv       ? 0.3f
                                                    : s.weight_std);
                if (decay)  // A = -exp(A_log): a DeltaNet head's decay rate, negative
                    for (float& v : row) v = -std::exp(v);
            }
            quantize_row_ref(types[i], row.data(), qrow.data(), n);
            w.write_tensor_data(qrow.data(), qrow.size());
        }
    }
    w.finish();
}

}  // namespace tandem
