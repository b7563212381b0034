// The Vulkan device under the Vulkan backend (vulkan_backend.cpp): instance and device, memory, the compute
// pipelines of the embedded SPIR-V (shaders/, compiled by glslc at build time), and one command stream per pass.
// Nothing Vulkan outside src/backend/vulkan/.
//
// A pass is recorded into one command buffer: every dispatch and copy is followed by a memory barrier (compute and
// transfer, writes before reads), and nothing runs until sync() submits it and waits for its fence. Host data an op
// takes at recording (positions, row ids) and the bytes of write() are copied at once into host-visible staging
// memory that lives until that sync. Buffers are bound whole and ops get their offsets as push constants, so a
// tensor may start at any byte offset of its buffer.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem::backend::vk {

struct DeviceMemory {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    void* mapped = nullptr;  // host-visible memory: its mapping (of the view's first byte)
    size_t size = 0;
    size_t offset = 0;  // a view into a larger buffer (the staging ring's, a block's): its first byte there
    int block = -1;  // a range of the device's block `block` (Device::alloc's suballocation), returned by free()
    bool counted = false;  // made by Device::alloc: its size counts in the device's allocated bytes
};

struct Pipeline {
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    uint32_t bindings = 0, push_bytes = 0;
    std::string name;
};

// One binding of a dispatch: a whole buffer
struct Bind {
    const DeviceMemory* mem;
};

class Device {
public:
    // index < 0: the first discrete GPU, else integrated, virtual, then a CPU device (lavapipe). Throws
    // tandem::Error naming what is missing (no loader, no device, the index out of range).
    explicit Device(int index);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    std::string name() const { return name_; }
    std::string driver() const { return driver_; }

    // Device-local memory where there is some (else any), for storage and copies. Up to kSubMax bytes: a range of
    // a block of kBlock bytes (one allocation and one buffer for many small tensors: a model's norms and biases, a
    // pass's scratch; first fit, freed ranges merged, an empty block released), aligned for a storage binding;
    // larger: an allocation of its own.
    DeviceMemory alloc(size_t bytes);
    static constexpr size_t kBlock = size_t(64) << 20, kSubMax = size_t(16) << 20;
    size_t allocations() const { return n_allocations_; }  // live vkAllocateMemory allocations
    // Host-visible, coherent, mapped: staging and small host arrays.
    DeviceMemory alloc_host(size_t bytes);
    void free(DeviceMemory& m);  // runs the recorded pass first (never throws: a failed run marks the device lost)

    // A pipeline of the embedded shader `name` (bindings storage buffers, push_bytes of push constants).
    const Pipeline& pipeline(const std::string& name, uint32_t bindings, uint32_t push_bytes);

    // --- recording ---
    void dispatch(const Pipeline& p, const std::vector<Bind>& binds, const void* push, uint32_t gx, uint32_t gy,
                  uint32_t gz = 1);
    void fill_zero(const DeviceMemory& dst);  // every byte of dst 0
    void copy(const DeviceMemory& src, size_t src_off, const DeviceMemory& dst, size_t dst_off, size_t bytes);
    // Staging memory of n bytes holding `data`, valid until the next sync (for write() and host arrays): a view of
    // the staging ring (host-visible blocks of kRingBlock bytes, kept between passes and reused after each sync;
    // a larger array gets a block of its own size), aligned for a storage-buffer binding.
    const DeviceMemory& stage(const void* data, size_t bytes);
    static constexpr size_t kRingBlock = size_t(4) << 20;
    static constexpr size_t kRingKeep = 4;  // blocks kept between passes (a larger pass's extra ones are freed)
    // Runs what was recorded and waits; then the staging memory is released.
    void sync();
    // Runs what was recorded and waits, keeping the staging memory (a flush inside a pass: an op that staged its
    // host arrays may still bind them).
    void run();
    bool recording() const { return recording_; }
    static constexpr uint32_t kSetsPerPass = 1024;  // descriptor sets of one recorded stream (then it is run)
    static constexpr uint32_t kBindingsPerSet = 8;  // the most storage buffers a pipeline binds (delta_rule)
    // The matmul shaders' tree ends in the subgroup (shaders/matmul_unit.glsl: the same bits either way): where the
    // device shuffles within subgroups of 4..64 lanes in compute shaders, unless TANDEM_VK_SUBGROUP=0.
    bool subgroup_tree() const { return subgroup_tree_; }
    uint32_t subgroup_size() const { return subgroup_size_; }

private:
    void begin();
    void barrier();
    uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback) const;
    DeviceMemory make(size_t bytes, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback);
    bool is_ring(const DeviceMemory& m) const;  // a view of one of the ring's blocks
    struct Block {
        DeviceMemory mem;  // the whole block
        std::map<size_t, size_t> free;  // offset -> bytes of its free ranges
        size_t used = 0;
    };
    std::vector<Block> blocks_;  // (a released block's slot stays, empty, for the indices of the others)
    size_t n_allocations_ = 0;
    size_t allocated_ = 0;  // bytes of the live buffers alloc() made (their sizes)
    DeviceMemory alloc_device(size_t bytes);  // alloc's buffer: a range of a block, or an allocation of its own
    bool inject_loss();  // TANDEM_VK_LOSE_AFTER
    bool over_limit(size_t bytes) const;  // TANDEM_VK_MEMORY_LIMIT

    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    VkPhysicalDevice phys_ = VK_NULL_HANDLE;
    VkDevice dev_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t queue_family_ = 0;
    VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkPipelineCache cache_ = VK_NULL_HANDLE;
    VkPhysicalDeviceMemoryProperties mem_props_{};
    std::map<std::string, Pipeline> pipelines_;
    std::deque<DeviceMemory> staged_;  // (a deque: stage() hands out references that later stages keep valid)
    std::vector<DeviceMemory> ring_;  // the staging ring's blocks
    size_t ring_block_ = 0, ring_used_ = 0;  // the block in use and its bytes handed out since the last sync
    size_t stage_align_ = 256;  // minStorageBufferOffsetAlignment
    uint32_t sets_used_ = 0;
    uint32_t max_groups_[3] = {65535, 65535, 65535};
    bool recording_ = false;
    std::string name_, driver_;
    // TANDEM_VK_PROFILE=1: every dispatch run and timed alone, the totals per shader printed at the end (a
    // profile of where a pass's time goes; it serializes the pass, so it is no measure of speed)
    bool profile_ = false;
    long submits_ = 0;  // passes submitted (TANDEM_VK_LOSE_AFTER)
    bool dispatched_ = false;  // the recorded stream runs a shader
    bool lost_ = false;  // the device was lost: every later run fails at once
    bool subgroup_tree_ = false;
    uint32_t subgroup_size_ = 1;
    std::map<std::string, std::pair<double, uint64_t>> profile_ms_;
};

// The embedded SPIR-V of a shader (generated/vk_shaders.cpp), or null.
const std::vector<uint32_t>* find_shader(const std::string& name);

}  // namespace tandem::backend::vk
