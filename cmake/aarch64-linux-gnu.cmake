# Cross-compiling for AArch64 Linux with Debian's g++-aarch64-linux-gnu (scripts/test-cpus.sh runs the result
# under qemu-aarch64). Libraries come from Debian's arm64 multiarch packages (libpcre2-dev:arm64, libgtest-dev:arm64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# Run with the arm64 multiarch libraries (/lib/aarch64-linux-gnu, installed with the -dev:arm64 packages), not with
# -L /usr/aarch64-linux-gnu: mixing that glibc with the multiarch one hangs at the first thread.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
