// Small string searches shared by the streaming text stages (stop strings, reasoning tags, tool-call markers):
// what to send now and what to hold back because it may still grow into a marker.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace tandem::server {

// s without leading and trailing whitespace (space, tab, CR, LF).
inline std::string trim_ws(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r\n");
    return a == std::string::npos ? std::string() : s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// The first index at or after `at` that is not whitespace (s.size() when none; at must be <= s.size()).
inline size_t skip_ws(const std::string& s, size_t at) {
    const size_t a = s.find_first_not_of(" \t\r\n", at);
    return a == std::string::npos ? s.size() : a;
}

// Length of the longest suffix of s that is a proper prefix of marker (it may still become the marker).
inline size_t partial_suffix(const std::string& s, const std::string& marker) {
    for (size_t k = std::min(s.size(), marker.empty() ? 0 : marker.size() - 1); k > 0; k--)
        if (s.compare(s.size() - k, k, marker, 0, k) == 0) return k;
    return 0;
}

// The longest such suffix over several markers.
inline size_t partial_suffix(const std::string& s, const std::vector<std::string>& markers) {
    size_t keep = 0;
    for (const auto& m : markers) keep = std::max(keep, partial_suffix(s, m));
    return keep;
}

// Where the earliest of the markers starts in s (npos: none); `which` gets its index.
inline size_t find_first_marker(const std::string& s, const std::vector<std::string>& markers,
                                size_t* which = nullptr) {
    size_t first = std::string::npos;
    for (size_t i = 0; i < markers.size(); i++) {
        const size_t at = s.find(markers[i]);
        if (at < first) {
            first = at;
            if (which) *which = i;
        }
    }
    return first;
}

}  // namespace tandem::server
