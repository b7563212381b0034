// GPUs this build can use: the Vulkan backend's devices (src/backend/vulkan/; CMake option TANDEM_VULKAN).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct GpuDevice {
    int index = 0;  // as --device / -mg name it
    std::string name, driver, type;  // type: "discrete GPU", "integrated GPU", "virtual GPU", "CPU (software)"
    uint64_t memory_bytes = 0;  // its largest device-local heap
};

// Best first (discrete, integrated, virtual, then a CPU driver such as Mesa's lavapipe); empty in a build without
// the Vulkan backend or on a machine without a Vulkan driver.
std::vector<GpuDevice> gpu_devices();
bool built_with_vulkan();

}  // namespace tandem
