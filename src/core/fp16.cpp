#include "core/fp16.h"

#include <vector>

namespace tandem {

const float* fp16_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; h++) t[h] = fp16_to_f32(uint16_t(h));
        return t;
    }();
    return table.data();
}

}  // namespace tandem
