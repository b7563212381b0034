#include "backend/backend.h"

#include <cstring>

#include "tandem/error.h"

namespace tandem::backend {

const char* op_name(Op op) {
    static const char* names[] = {"get_rows", "matmul",    "matmul_id",  "rms_norm", "rope",       "add",
                                  "mul",      "scale",     "glu",        "softcap",  "topk_route", "kv_store",
                                  "row_copy", "attention", "delta_rule", "copy",     "moe_sum"};
    static_assert(sizeof(names) / sizeof(names[0]) == size_t(Op::COUNT));
    return names[int(op)];
}

std::string unsupported(const Backend& b, const Model& m, TensorType type_k, TensorType type_v, const LayerSpan& span) {
    std::string why;
    m.for_each_matrix([&](const Model::WeightVisit& v, const Weight& w) {
        if (!why.empty()) return;
        if (!span.holds(v)) return;  // another part's (a split model)
        const Op op = std::strcmp(v.name, "token_embd") == 0 || std::strcmp(v.name, "per_layer_token_embd") == 0
                          ? Op::GET_ROWS
                      : v.index >= 0 && std::strstr(v.name, "_exps") ? Op::MATMUL_ID
                                                                     : Op::MATMUL;
        if (!b.supports(op, w.type))
            why = strprintf("the %s backend has no %s of %s weights (%s%s%s)", b.name().c_str(), op_name(op),
                            type_name(w.type), v.layer >= 0 ? strprintf("blk.%d.", v.layer).c_str() : "", v.name,
                            v.index >= 0 ? strprintf(" [%d]", v.index).c_str() : "");
    });
    for (TensorType t : {type_k, type_v})
        if (why.empty() && (!b.supports(Op::KV_STORE, t) || !b.supports(Op::ATTENTION, t)))
            why = strprintf("the %s backend has no KV cache of type %s", b.name().c_str(), type_name(t));
    return why;
}

}  // namespace tandem::backend
