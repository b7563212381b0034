#include "tandem/strings.h"

namespace tandem {

std::vector<std::string> split_list(const std::string& v) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= v.size()) {
        size_t j = v.find(',', i);
        if (j == std::string::npos) j = v.size();
        std::string item = v.substr(i, j - i);
        while (!item.empty() && item.back() == ' ') item.pop_back();
        while (!item.empty() && item.front() == ' ') item.erase(0, 1);
        if (!item.empty()) out.push_back(item);
        i = j + 1;
    }
    return out;
}

}  // namespace tandem
