#include "io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tandem/error.h"

namespace tandem::cli {

std::string read_file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error(path + ": read failed");
    return ss.str();
}

}  // namespace tandem::cli
