// A build without the Vulkan backend (CMake option TANDEM_VULKAN off, or no Vulkan loader / glslc found).
#include "backend/backend.h"
#include "tandem/error.h"

namespace tandem {
bool built_with_vulkan() { return false; }
std::vector<GpuDevice> gpu_devices() { return {}; }
}  // namespace tandem

namespace tandem::backend {

uint64_t vulkan_validation_messages() { return 0; }
std::unique_ptr<Backend> make_vulkan_backend(int) {
    throw Error(
        "this tandem was built without the Vulkan backend (configure with -DTANDEM_VULKAN=ON: the Vulkan "
        "loader and glslc, Debian libvulkan-dev glslc)");
}

}  // namespace tandem::backend
