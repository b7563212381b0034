#include "backend/vulkan/vk_device.h"

// Vulkan's structures are initialized as Info x{VK_STRUCTURE_TYPE_...}: sType first, every other member zero, the
// idiom of the API; the warning about the members not named is off for this file.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "tandem/error.h"

namespace tandem::backend {

namespace {
std::atomic<uint64_t> g_validation_messages{0};

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                             VkDebugUtilsMessageTypeFlagsEXT,
                                             const VkDebugUtilsMessengerCallbackDataEXT* d, void*) {
    if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        g_validation_messages++;
        std::fprintf(stderr, "vulkan validation: %s\n", d && d->pMessage ? d->pMessage : "(no message)");
    }
    return VK_FALSE;
}

bool validation_wanted() {
    const char* e = std::getenv("TANDEM_VK_VALIDATION");
    return e && *e && std::strcmp(e, "0") != 0;
}

void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) throw Error(strprintf("vulkan: %s failed (VkResult %d)", what, int(r)));
}

const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU (software)";
        default: return "other";
    }
}
int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
        default: return 4;
    }
}

bool has_layer(const char* name) {
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> layers(n);
    vkEnumerateInstanceLayerProperties(&n, layers.data());
    for (auto& l : layers)
        if (std::strcmp(l.layerName, name) == 0) return true;
    return false;
}

// An instance (with the validation layer and a messenger when TANDEM_VK_VALIDATION is set and the layer exists).
VkInstance make_instance(VkDebugUtilsMessengerEXT* messenger) {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "tandem";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    const bool validate = messenger && validation_wanted();
    if (validate) {
        if (!has_layer(layer))
            throw Error(
                "TANDEM_VK_VALIDATION is set but the Vulkan validation layer is not installed "
                "(Debian: vulkan-validationlayers)");
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = &ext;
    }
    VkInstance inst = VK_NULL_HANDLE;
    const VkResult r = vkCreateInstance(&ci, nullptr, &inst);
    if (r != VK_SUCCESS)
        throw Error(strprintf("vulkan: no instance (VkResult %d): is a Vulkan driver installed?", int(r)));
    if (validate) {
        VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity =
            VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        mi.pfnUserCallback = on_validation;
        auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT"));
        if (create) check(create(inst, &mi, nullptr, messenger), "vkCreateDebugUtilsMessengerEXT");
    }
    return inst;
}

// Devices with a compute queue, best first (discrete, integrated, virtual, CPU; then enumeration order).
std::vector<VkPhysicalDevice> compute_devices(VkInstance inst) {
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(inst, &n, nullptr);
    std::vector<VkPhysicalDevice> all(n), out;
    vkEnumeratePhysicalDevices(inst, &n, all.data());
    for (int rank = 0; rank <= 4; rank++)
        for (VkPhysicalDevice d : all) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(d, &p);
            if (type_rank(p.deviceType) == rank) out.push_back(d);
        }
    return out;
}

std::string driver_of(VkPhysicalDevice d) {
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &drv;
    vkGetPhysicalDeviceProperties2(d, &p2);
    return std::string(drv.driverName) + (drv.driverInfo[0] ? std::string(" ") + drv.driverInfo : "");
}

uint64_t device_local_bytes(VkPhysicalDevice d) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(d, &mp);
    uint64_t b = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            b = std::max<uint64_t>(b, mp.memoryHeaps[i].size);
    return b;
}

}  // namespace

uint64_t vulkan_validation_messages() { return g_validation_messages; }

}  // namespace tandem::backend

namespace tandem {

bool built_with_vulkan() { return true; }

std::vector<GpuDevice> gpu_devices() {
    using namespace backend;
    std::vector<GpuDevice> out;
    VkInstance inst = VK_NULL_HANDLE;
    try {
        inst = make_instance(nullptr);
    } catch (const Error&) {
        return out;
    }
    int i = 0;
    for (VkPhysicalDevice d : compute_devices(inst)) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(d, &p);
        out.push_back({i++, p.deviceName, driver_of(d), type_name(p.deviceType), device_local_bytes(d)});
    }
    vkDestroyInstance(inst, nullptr);
    return out;
}

}  // namespace tandem

namespace tandem::backend::vk {

Device::Device(int index) {
    const char* prof = std::getenv("TANDEM_VK_PROFILE");
    profile_ = prof && *prof && *prof != '0';
    instance_ = make_instance(&messenger_);
    const auto devs = compute_devices(instance_);
    if (devs.empty()) throw Error("vulkan: no Vulkan device (vulkaninfo lists none)");
    if (index >= int(devs.size()))
        throw Error(
            strprintf("vulkan: device %d asked for, but there are %zu (tandem --list-devices)", index, devs.size()));
    phys_ = devs[size_t(index < 0 ? 0 : index)];
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(phys_, &props);
    name_ = props.deviceName;
    driver_ = driver_of(phys_);
    vkGetPhysicalDeviceMemoryProperties(phys_, &mem_props_);
    for (int i = 0; i < 3; i++) max_groups_[i] = props.limits.maxComputeWorkGroupCount[i];
    stage_align_ = std::max<size_t>(16, size_t(props.limits.minStorageBufferOffsetAlignment));
    VkPhysicalDeviceSubgroupProperties sgp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sgp;
    vkGetPhysicalDeviceProperties2(phys_, &p2);
    subgroup_size_ = sgp.subgroupSize;
    const char* sg_env = std::getenv("TANDEM_VK_SUBGROUP");
    subgroup_tree_ = !(sg_env && std::string(sg_env) == "0") && (sgp.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                     (sgp.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT) && sgp.subgroupSize >= 4 &&
                     sgp.subgroupSize <= 64 && (sgp.subgroupSize & (sgp.subgroupSize - 1)) == 0;

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
    bool found = false;
    for (uint32_t i = 0; i < nq && !found; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            queue_family_ = i;
            found = true;
        }
    if (!found) throw Error("vulkan: " + name_ + " has no compute queue");
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = queue_family_;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    check(vkCreateDevice(phys_, &dci, nullptr, &dev_), "vkCreateDevice");
    vkGetDeviceQueue(dev_, queue_family_, 0, &queue_);

    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = queue_family_;
    check(vkCreateCommandPool(dev_, &pci, nullptr, &cmd_pool_), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cai.commandPool = cmd_pool_;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(dev_, &cai, &cmd_), "vkAllocateCommandBuffers");
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindingsPerSet * kSetsPerPass};
    VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = kSetsPerPass;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    check(vkCreateDescriptorPool(dev_, &dpi, nullptr, &desc_pool_), "vkCreateDescriptorPool");
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(vkCreateFence(dev_, &fci, nullptr, &fence_), "vkCreateFence");
    VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    check(vkCreatePipelineCache(dev_, &cci, nullptr, &cache_), "vkCreatePipelineCache");
}

Device::~Device() {
    if (profile_ && !profile_ms_.empty()) {
        std::vector<std::pair<double, std::string>> rows;
        double total = 0;
        for (const auto& [name, t] : profile_ms_) {
            rows.push_back({t.first, name});
            total += t.first;
        }
        std::sort(rows.rbegin(), rows.rend());
        std::fprintf(stderr, "vulkan profile (%s): %.1f ms in dispatches, each run alone\n", name_.c_str(), total);
        for (const auto& [ms, name] : rows)
            std::fprintf(stderr, "  %-28s %10.1f ms %8llu dispatches  %5.1f%%\n", name.c_str(), ms,
                         (unsigned long long)profile_ms_[name].second, 100.0 * ms / total);
    }
    if (dev_) {
        if (recording_) {
            try {
                sync();
            } catch (...) {}
        }
        vkDeviceWaitIdle(dev_);
        for (auto& [name, p] : pipelines_) {
            vkDestroyPipeline(dev_, p.pipeline, nullptr);
            vkDestroyPipelineLayout(dev_, p.layout, nullptr);
            vkDestroyDescriptorSetLayout(dev_, p.set_layout, nullptr);
        }
        for (auto& m : staged_)
            if (!m.offset && m.memory && !is_ring(m)) free(m);
        for (auto& m : ring_) free(m);
        for (Block& b : blocks_)  // (every range should be back by now: a backend's buffers go before its device)
            if (b.mem.buffer) {
                DeviceMemory whole = b.mem;
                b.mem = DeviceMemory{};
                free(whole);
            }
        vkDestroyPipelineCache(dev_, cache_, nullptr);
        vkDestroyFence(dev_, fence_, nullptr);
        vkDestroyDescriptorPool(dev_, desc_pool_, nullptr);
        vkDestroyCommandPool(dev_, cmd_pool_, nullptr);
        vkDestroyDevice(dev_, nullptr);
    }
    if (messenger_) {
        auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
            vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
        if (destroy) destroy(instance_, messenger_, nullptr);
    }
    if (instance_) vkDestroyInstance(instance_, nullptr);
}

uint32_t Device::memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback) const {
    for (VkMemoryPropertyFlags f : {want, fallback})
        for (uint32_t i = 0; i < mem_props_.memoryTypeCount; i++)
            if ((bits & (1u << i)) && (mem_props_.memoryTypes[i].propertyFlags & f) == f) return i;
    throw Error("vulkan: no memory type for a buffer on " + name_);
}

DeviceMemory Device::make(size_t bytes, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback) {
    DeviceMemory m;
    m.size = bytes ? bytes : 4;
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bci.size = (m.size + 3) & ~size_t(3);
    bci.usage =
        VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    const VkResult r = vkCreateBuffer(dev_, &bci, nullptr, &m.buffer);
    if (r != VK_SUCCESS)
        throw Error(
            strprintf("vulkan: a buffer of %zu bytes on %s failed (VkResult %d)", bytes, name_.c_str(), int(r)));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev_, m.buffer, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = memory_type(req.memoryTypeBits, want, fallback);
    const VkResult ar = vkAllocateMemory(dev_, &ai, nullptr, &m.memory);
    if (ar != VK_SUCCESS) {
        vkDestroyBuffer(dev_, m.buffer, nullptr);
        throw GpuFailure(
            strprintf("vulkan: out of device memory: %zu bytes on %s (VkResult %d)", bytes, name_.c_str(), int(ar)),
            false);
    }
    check(vkBindBufferMemory(dev_, m.buffer, m.memory, 0), "vkBindBufferMemory");
    n_allocations_++;
    if (mem_props_.memoryTypes[ai.memoryTypeIndex].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
        check(vkMapMemory(dev_, m.memory, 0, VK_WHOLE_SIZE, 0, &m.mapped), "vkMapMemory");
    return m;
}

DeviceMemory Device::alloc(size_t bytes) {
    if (over_limit(bytes))
        throw GpuFailure(
            strprintf("vulkan: out of device memory: %zu bytes on %s (TANDEM_VK_MEMORY_LIMIT)", bytes, name_.c_str()),
            false);
    DeviceMemory m = alloc_device(bytes);
    m.counted = true;
    allocated_ += m.size;
    return m;
}

DeviceMemory Device::alloc_device(size_t bytes) {
    if (bytes > kSubMax) return make(bytes, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    const size_t need = std::max(stage_align_, (bytes + stage_align_ - 1) / stage_align_ * stage_align_);
    auto take = [&](int bi) -> DeviceMemory {
        Block& b = blocks_[size_t(bi)];
        for (auto it = b.free.begin(); it != b.free.end(); ++it)
            if (it->second >= need) {  // first fit
                const size_t off = it->first, len = it->second;
                b.free.erase(it);
                if (len > need) b.free[off + need] = len - need;
                b.used += need;
                DeviceMemory m = b.mem;
                m.offset = off;
                m.size = bytes ? bytes : 4;
                m.mapped = b.mem.mapped ? static_cast<uint8_t*>(b.mem.mapped) + off : nullptr;
                m.block = bi;
                return m;
            }
        return {};
    };
    for (int bi = 0; bi < int(blocks_.size()); bi++)
        if (blocks_[size_t(bi)].mem.buffer)
            if (DeviceMemory m = take(bi); m.buffer) return m;
    int slot = -1;  // a released block's slot, else a new one
    for (int bi = 0; bi < int(blocks_.size()) && slot < 0; bi++)
        if (!blocks_[size_t(bi)].mem.buffer) slot = bi;
    if (slot < 0) {
        slot = int(blocks_.size());
        blocks_.emplace_back();
    }
    Block& b = blocks_[size_t(slot)];
    b.mem = make(kBlock, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    b.free = {{0, kBlock}};
    b.used = 0;
    return take(slot);
}

DeviceMemory Device::alloc_host(size_t bytes) {
    return make(bytes, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
}

void Device::free(DeviceMemory& m) {
    if (!m.buffer) return;
    if (m.counted) allocated_ -= m.size;
    if (recording_) try {
            run();  // (recorded commands may use it; staged memory stays until sync)
        } catch (const std::exception&) {  // a lost device (called from destructors: never throws)
            lost_ = true;
        }
    if (m.block >= 0) {  // the range back to its block, merged with its free neighbours
        Block& b = blocks_[size_t(m.block)];
        size_t off = m.offset;
        size_t len = std::max(stage_align_, (m.size + stage_align_ - 1) / stage_align_ * stage_align_);
        b.used -= len;
        auto next = b.free.lower_bound(off);
        if (next != b.free.end() && off + len == next->first) {
            len += next->second;
            next = b.free.erase(next);
        }
        if (next != b.free.begin()) {
            auto prev = std::prev(next);
            if (prev->first + prev->second == off) {
                off = prev->first;
                len += prev->second;
                b.free.erase(prev);
            }
        }
        b.free[off] = len;
        if (b.used == 0) {  // empty: released
            b.free.clear();
            DeviceMemory whole = b.mem;
            b.mem = DeviceMemory{};
            free(whole);
        }
        m = DeviceMemory{};
        return;
    }
    if (m.mapped) vkUnmapMemory(dev_, m.memory);
    vkDestroyBuffer(dev_, m.buffer, nullptr);
    vkFreeMemory(dev_, m.memory, nullptr);
    n_allocations_--;
    m = DeviceMemory{};
}

const Pipeline& Device::pipeline(const std::string& name, uint32_t bindings, uint32_t push_bytes) {
    auto it = pipelines_.find(name);
    if (it != pipelines_.end()) return it->second;
    const std::vector<uint32_t>* code = find_shader(name);
    if (!code) throw Error("vulkan: no shader named " + name + " in this build");
    Pipeline p;
    p.name = name;
    p.bindings = bindings;
    p.push_bytes = push_bytes;
    std::vector<VkDescriptorSetLayoutBinding> b(bindings);
    for (uint32_t i = 0; i < bindings; i++)
        b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = bindings;
    dl.pBindings = b.data();
    check(vkCreateDescriptorSetLayout(dev_, &dl, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &p.set_layout;
    pl.pushConstantRangeCount = push_bytes ? 1 : 0;
    pl.pPushConstantRanges = &pr;
    check(vkCreatePipelineLayout(dev_, &pl, nullptr, &p.layout), "vkCreatePipelineLayout");
    VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sm.codeSize = code->size() * sizeof(uint32_t);
    sm.pCode = code->data();
    VkShaderModule mod;
    check(vkCreateShaderModule(dev_, &sm, nullptr, &mod), "vkCreateShaderModule");
    VkComputePipelineCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = mod;
    ci.stage.pName = "main";
    ci.layout = p.layout;
    const VkResult r = vkCreateComputePipelines(dev_, cache_, 1, &ci, nullptr, &p.pipeline);
    vkDestroyShaderModule(dev_, mod, nullptr);
    check(r, ("vkCreateComputePipelines (" + name + ")").c_str());
    return pipelines_.emplace(name, p).first->second;
}

void Device::begin() {
    if (recording_) return;
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
    recording_ = true;
}

void Device::barrier() {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT;
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(cmd_, st, st, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Device::dispatch(const Pipeline& p, const std::vector<Bind>& binds, const void* push, uint32_t gx, uint32_t gy,
                      uint32_t gz) {
    if (gx == 0 || gy == 0 || gz == 0) return;
    if (gx > max_groups_[0] || gy > max_groups_[1] || gz > max_groups_[2])  // (past them: undefined behaviour)
        throw Error(strprintf("vulkan: a dispatch of %u x %u x %u workgroups is past %s's limits (%u x %u x %u)", gx,
                              gy, gz, name_.c_str(), max_groups_[0], max_groups_[1], max_groups_[2]));
    TD_ASSERT(p.bindings <= kBindingsPerSet && binds.size() == p.bindings);
    // a long pass: run what is recorded and go on with a fresh pool (the staged memory stays: the op recording
    // this dispatch may bind it again)
    if (sets_used_ == kSetsPerPass || profile_) run();
    const auto t0 = std::chrono::steady_clock::now();
    begin();
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = desc_pool_;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &p.set_layout;
    VkDescriptorSet set;
    check(vkAllocateDescriptorSets(dev_, &ai, &set), "vkAllocateDescriptorSets");
    sets_used_++;
    std::vector<VkDescriptorBufferInfo> infos(binds.size());
    std::vector<VkWriteDescriptorSet> writes(binds.size());
    for (size_t i = 0; i < binds.size(); i++) {
        infos[i] = {binds[i].mem->buffer, binds[i].mem->offset, (binds[i].mem->size + 3) & ~size_t(3)};
        writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        writes[i].dstSet = set;
        writes[i].dstBinding = uint32_t(i);
        writes[i].descriptorCount = 1;
        writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo = &infos[i];
    }
    vkUpdateDescriptorSets(dev_, uint32_t(writes.size()), writes.data(), 0, nullptr);
    vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
    vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
    if (p.push_bytes) vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p.push_bytes, push);
    vkCmdDispatch(cmd_, gx, gy, gz);
    dispatched_ = true;
    barrier();
    if (profile_) {
        run();
        auto& [ms, n] = profile_ms_[p.name];
        ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        n++;
    }
}

void Device::fill_zero(const DeviceMemory& dst) {
    begin();
    vkCmdFillBuffer(cmd_, dst.buffer, dst.offset, (dst.size + 3) & ~size_t(3), 0);
    barrier();
}

void Device::copy(const DeviceMemory& src, size_t src_off, const DeviceMemory& dst, size_t dst_off, size_t bytes) {
    if (!bytes) return;
    begin();
    VkBufferCopy c{src.offset + src_off, dst.offset + dst_off, bytes};
    vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, 1, &c);
    barrier();
}

bool Device::is_ring(const DeviceMemory& m) const {
    for (const auto& b : ring_)
        if (b.buffer == m.buffer) return true;
    return false;
}

const DeviceMemory& Device::stage(const void* data, size_t bytes) {
    const size_t need = std::max<size_t>(4, (bytes + stage_align_ - 1) / stage_align_ * stage_align_);
    if (need > kRingBlock) {  // a block of its own, freed at sync
        staged_.push_back(alloc_host(bytes));
    } else {
        if (ring_block_ < ring_.size() && ring_used_ + need > ring_[ring_block_].size) {
            ring_block_++;
            ring_used_ = 0;
        }
        if (ring_block_ == ring_.size()) ring_.push_back(alloc_host(kRingBlock));
        const DeviceMemory& b = ring_[ring_block_];
        DeviceMemory v = b;
        v.offset = ring_used_;
        v.size = std::max<size_t>(bytes, 4);
        v.mapped = static_cast<uint8_t*>(b.mapped) + ring_used_;
        ring_used_ += need;
        staged_.push_back(v);
    }
    if (bytes) std::memcpy(staged_.back().mapped, data, bytes);
    return staged_.back();
}

bool Device::over_limit(size_t bytes) const {
    // TANDEM_VK_MEMORY_LIMIT=BYTES (fault injection for the tests of a fit that the device then refuses, as when
    // another process takes the memory the driver reported free): an alloc() that would take this device's buffers
    // past BYTES fails as out of device memory
    const char* e = std::getenv("TANDEM_VK_MEMORY_LIMIT");  // (read at each allocation: the tests set it)
    const unsigned long long limit = e && *e ? std::strtoull(e, nullptr, 10) : 0ull;
    return limit > 0 && allocated_ + bytes > limit;
}

bool Device::inject_loss() {
    // TANDEM_VK_LOSE_AFTER=N (fault injection for the tests of what the server does then): the submit of a pass
    // (one that ran a shader: uploads alone do not count) after the first N reports the device lost, and so does
    // every later one
    static const long after = [] {
        const char* e = std::getenv("TANDEM_VK_LOSE_AFTER");
        return e && *e ? std::strtol(e, nullptr, 10) : -1;
    }();
    if (after < 0 || !dispatched_) return false;
    return submits_++ >= after;
}

void Device::run() {
    if (recording_) {
        recording_ = false;
        // the device's writes made visible to the host's reads after the fence (the fence alone covers the device)
        VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
        check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
        VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cmd_;
        if (inject_loss()) lost_ = true;
        dispatched_ = false;
        if (lost_) throw GpuFailure("vulkan: the device " + name_ + " was lost", true);
        const VkResult r = vkQueueSubmit(queue_, 1, &si, fence_);
        lost_ = r == VK_ERROR_DEVICE_LOST;
        if (lost_) throw GpuFailure("vulkan: the device " + name_ + " was lost", true);
        check(r, "vkQueueSubmit");
        const VkResult w = vkWaitForFences(dev_, 1, &fence_, VK_TRUE, UINT64_MAX);
        lost_ = w == VK_ERROR_DEVICE_LOST;
        if (lost_) throw GpuFailure("vulkan: the device " + name_ + " was lost", true);
        check(w, "vkWaitForFences");
        check(vkResetFences(dev_, 1, &fence_), "vkResetFences");
        check(vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
        check(vkResetDescriptorPool(dev_, desc_pool_, 0), "vkResetDescriptorPool");
        sets_used_ = 0;
    }
}

void Device::sync() {
    run();
    std::deque<DeviceMemory> staged;
    staged.swap(staged_);
    ring_block_ = ring_used_ = 0;  // the ring's blocks are reused from the start; beyond kRingKeep, freed
    while (ring_.size() > kRingKeep) {
        free(ring_.back());
        ring_.pop_back();
    }
    for (auto& m : staged)
        if (!m.offset && !is_ring(m)) free(m);
}

}  // namespace tandem::backend::vk
