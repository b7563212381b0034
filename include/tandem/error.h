// Error channels (see README "Errors"):
//  - tandem::Error: a recoverable failure caused by input (bad file, bad flag, unsupported model, prompt too
//    long). Thrown with a message that names what and where; callers at the program/API boundary catch it
//    and turn it into an exit code or an HTTP 4xx.
//  - TD_ASSERT: a broken internal invariant. Always on (also in release builds); prints and aborts.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line);

// printf-style formatting into std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tandem

#define TD_ASSERT(x)                                             \
    do {                                                         \
        if (!(x)) ::tandem::assert_fail(#x, __FILE__, __LINE__); \
    } while (0)
