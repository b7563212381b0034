#include "tandem/error.h"

#include <cstdarg>
#include <vector>

namespace tandem {

void assert_fail(const char* expr, const char* file, int line) {
    std::fprintf(stderr, "tandem: internal invariant broken: %s (%s:%d)\n", expr, file, line);
    std::fflush(stderr);
    std::abort();
}

std::string strprintf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string out;
    if (n > 0) {
        out.resize(size_t(n) + 1);
        std::vsnprintf(out.data(), out.size(), fmt, ap2);
        out.resize(size_t(n));
    }
    va_end(ap2);
    return out;
}

}  // namespace tandem
