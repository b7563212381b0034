// Small text helpers shared by the library and the tools.
#pragma once
#include <string>
#include <vector>

namespace tandem {

// A comma-separated list ("a, b,,c"): its items with surrounding spaces trimmed, empty items dropped.
std::vector<std::string> split_list(const std::string& v);

}  // namespace tandem
