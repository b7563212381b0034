#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tandem/error.h"

namespace tandem {

int open_regular_file(const std::string& path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any non-regular file.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw Error(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        const char* what = S_ISDIR(st.st_mode)                          ? "a directory"
                           : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                           : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                           : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                        : "not a file";
        throw Error(path + ": is " + what + ", not a regular file");
    }
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

std::string read_regular_file(const std::string& path) {
    int fd = open_regular_file(path);
    std::string out;
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            ::close(fd);
            throw Error(path + ": read failed: " + std::strerror(e));
        }
        if (n == 0) break;
        out.append(buf, size_t(n));
    }
    ::close(fd);
    return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
    int fd = open_regular_file(path);
    struct stat st {};
    ::fstat(fd, &st);
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
