#include "backend/backend.h"

namespace tandem::backend {

const char* op_name(Op op) {
    static const char* names[] = {"get_rows", "matmul",    "matmul_id",  "rms_norm", "rope",       "add",
                                  "mul",      "scale",     "glu",        "softcap",  "topk_route", "kv_store",
                                  "row_copy", "attention", "delta_rule", "copy"};
    static_assert(sizeof(names) / sizeof(names[0]) == size_t(Op::COUNT));
    return names[int(op)];
}

}  // namespace tandem::backend
