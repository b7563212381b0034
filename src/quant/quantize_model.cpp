#include <algorithm>
#include <cctype>
#include <vector>

#include "quant/quant.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quantize.h"

namespace tandem {

namespace {

std::string upper(std::string s) {
    for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::atoi(name.c_str() + 4);
}

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

TensorType mix_type_for(const std::string& mix_in, const std::string& name, int n_layer) {
    const std::string mix = upper(mix_in);
    const bool is_output = name == "output.weight";
    const int il = layer_of(name);
    if (mix == "Q4_K_M" || mix == "Q5_K_M" || mix == "Q4_K_S" || mix == "Q5_K_S") {
        const TensorType base = mix[1] == '4' ? TensorType::Q4_K : TensorType::Q5_K;
        const bool medium = mix.back() == 'M';
        if (is_output) return TensorType::Q6_K;
        if (medium && il >= 0 && (ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight")) &&
            use_more_bits(il, n_layer))
            return TensorType::Q6_K;
        return base;
    }
    if (mix == "MXFP4_MOE")  // as llama-quantize's MXFP4_MOE: expert matrices MXFP4, the other matrices Q8_0
        return name.find("_exps.") != std::string::npos ? TensorType::MXFP4 : TensorType::Q8_0;
    auto t = tensor_type_from_name(mix);
    if (!t || is_integer_type(*t))
        throw Error("unknown quantization type '" + mix_in +
                    "' (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M, Q4_K_S, Q5_K_S, "
                    "MXFP4, MXFP4_MOE, F16, BF16, F32)");
    // As llama.cpp: the output matrix of low-bit files is kept at Q6_K.
    if (is_output &&
        (*t == TensorType::Q4_0 || *t == TensorType::Q4_1 || *t == TensorType::Q5_0 || *t == TensorType::Q5_1 ||
         *t == TensorType::Q2_K || *t == TensorType::Q3_K || *t == TensorType::Q4_K || *t == TensorType::Q5_K))
        return TensorType::Q6_K;
    return *t;
}

TensorType fallback_type(TensorType t, int64_t row_len) {
    if (row_len % type_traits(t).block_elems == 0) return t;
    TensorType next;
    switch (t) {
        case TensorType::Q2_K:
        case TensorType::Q3_K: next = TensorType::Q4_0; break;
        case TensorType::Q4_K: next = TensorType::Q5_0; break;
        case TensorType::Q5_K: next = TensorType::Q5_1; break;
        case TensorType::Q6_K: next = TensorType::Q8_0; break;
        default: next = TensorType::F16; break;
    }
    return fallback_type(next, row_len);
}

void quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeParams& p) {
    auto in = GgufFile::open(in_path);
    auto arch = in->get_str("general.architecture");
    if (!arch) throw Error(in_path + ": missing 'general.architecture'");
    auto n_layer_v = in->get_int(*arch + ".block_count");
    if (!n_layer_v) throw Error(in_path + ": missing '" + *arch + ".block_count'");
    int n_layer = int(*n_layer_v);
    if (p.keep_layers < 0 || p.keep_layers > n_layer)
        throw Error(strprintf("--keep-layers %d: the model has %d layers", p.keep_layers, n_layer));
    const int keep = p.keep_layers > 0 ? p.keep_layers : n_layer;
    (void)mix_type_for(p.type, "probe", n_layer);  // validates the type name

    GgufWriter w;
    for (const auto& [k, v] : in->metadata()) w.set(k, v);
    w.set(*arch + ".block_count", GgufValue::of_u32(uint32_t(keep)));
    w.set("general.quantized_by", GgufValue::of_str("tandem quantize " + p.type));

    struct Job {
        const GgufTensor* t;
        TensorType out;
    };
    std::vector<Job> jobs;
    for (const auto& t : in->tensors()) {
        int il = layer_of(t.name);
        if (il >= keep) continue;
        TensorType want =
            t.n_dims >= 2 && ends_with(t.name, ".weight") ? mix_type_for(p.type, t.name, n_layer) : TensorType::F32;
        if (t.n_dims < 2) want = TensorType::F32;  // norms, biases, rope factors
        // MoE routers stay as they are (as llama-quantize does): a small matrix whose rounding moves expert choices.
        if (ends_with(t.name, "ffn_gate_inp.weight")) want = t.type;
        if (is_integer_type(t.type)) want = t.type;  // tables of ids (an EAGLE-3 head's d2t) are copied
        TensorType got = fallback_type(want, t.ne[0]);
        if (got != want && p.on_note)
            p.on_note(strprintf("%s: row length %lld does not fit %s blocks of %d; using %s", t.name.c_str(),
                                (long long)t.ne[0], type_name(want), type_traits(want).block_elems, type_name(got)));
        w.add_tensor(t.name, got, std::vector<int64_t>(t.ne, t.ne + t.n_dims));
        jobs.push_back({&t, got});
    }
    w.begin(out_path);
    std::vector<float> row;
    std::vector<uint8_t> qrow;
    for (const auto& j : jobs) {
        const GgufTensor& t = *j.t;
        if (t.type == j.out) {
            w.write_tensor_data(t.data, t.nbytes);
            continue;
        }
        const int64_t n = t.ne[0];
        row.resize(size_t(n));
        qrow.resize(row_bytes(j.out, n));
        const size_t in_rb = row_bytes(t.type, n);
        for (int64_t r = 0; r < t.n_rows(); r++) {
            dequantize_row_ref(t.type, t.data + size_t(r) * in_rb, row.data(), n);
            quantize_row_ref(j.out, row.data(), qrow.data(), n);
            w.write_tensor_data(qrow.data(), qrow.size());
        }
    }
    w.finish();
}

}  // namespace tandem
