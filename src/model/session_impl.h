// A Session's private state, shared by the forward pass (forward.cpp) and state files (session_state.cpp).
#pragma once
#include <vector>

#include "model/kv_cache.h"
#include "tandem/session.h"

namespace tandem {

struct Session::Impl {
    KvCache kv;
    // scratch, sized for n_batch tokens
    std::vector<float> x, xn, q, k, v, att, gate, up, rows_out, logits_tmp;
    std::vector<float> rope_cos, rope_sin;  // (n_ctx, n_rot/2)
    Impl(int n_layer, int n_ctx, int kv_dim) : kv(n_layer, n_ctx, kv_dim) {}
};

}  // namespace tandem
