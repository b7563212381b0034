#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tandem/error.h"

namespace tandem {

MappedFile::MappedFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file");
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            throw Error(path + ": cannot mmap: " + std::strerror(e));
        }
        data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::shared_ptr<uint8_t> allocate_large(size_t bytes) {
    constexpr size_t huge = size_t(2) << 20;
    if (bytes == 0) return {};
    const size_t len = (bytes + huge - 1) / huge * huge;
    // Over-map by one huge page and trim both ends so the buffer starts on a 2 MiB boundary.
    void* p = ::mmap(nullptr, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error(strprintf("cannot allocate %zu bytes: %s", bytes, std::strerror(errno)));
    const uintptr_t base = reinterpret_cast<uintptr_t>(p), start = (base + huge - 1) / huge * huge;
    if (start > base) ::munmap(p, start - base);
    if (base + huge > start) ::munmap(reinterpret_cast<void*>(start + len), base + huge - start);
#ifdef MADV_HUGEPAGE
    ::madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);  // advice only: fine if refused
#endif
    return std::shared_ptr<uint8_t>(reinterpret_cast<uint8_t*>(start), [len](uint8_t* q) { ::munmap(q, len); });
}

}  // namespace tandem
