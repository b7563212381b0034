// Read-only memory mapping of a whole file. Weights are used in place from the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tandem/files.h"

namespace tandem {

// open_regular_file, read_regular_file: tandem/files.h.

class MappedFile {
public:
    // Throws tandem::Error naming the path if the file cannot be opened or mapped.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Zero-filled anonymous memory for large long-lived buffers (repacked weights), 2 MiB aligned and advised to use
// transparent huge pages where the kernel allows it: streaming a matrix through 4 KiB pages costs a TLB miss
// every 4 KiB, which measurably slows single-token decoding. Throws tandem::Error when the memory is not there.
std::shared_ptr<uint8_t> allocate_large(size_t bytes);

}  // namespace tandem
