#include "model/kv_cache.h"

#include "core/fp16.h"

namespace tandem {

void KvCache::store(int layer, int pos, const float* k, const float* v) {
    uint16_t* kd = &k_[index(layer, pos)];
    uint16_t* vd = &v_[index(layer, pos)];
    for (int i = 0; i < kv_dim_; i++) {
        kd[i] = f32_to_fp16(k[i]);
        vd[i] = f32_to_fp16(v[i]);
    }
}

}  // namespace tandem
