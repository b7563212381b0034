#include "io.h"

#include "tandem/files.h"

namespace tandem::cli {

std::string read_file_bytes(const std::string& path) { return read_regular_file(path); }

}  // namespace tandem::cli
