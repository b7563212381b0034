#pragma once
#include <string>

namespace tandem::cli {

// The file's bytes exactly (no newline stripped or added). Throws tandem::Error naming the file.
std::string read_file_bytes(const std::string& path);

}  // namespace tandem::cli
