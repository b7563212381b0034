// The architectures tandem reads, by their GGUF name (general.architecture): each one's fixed traits and its
// family's hooks (model/arch/loader.h ArchInfo; the hooks in model/arch/<family>.cpp).
#include "model/arch/loader.h"

namespace tandem {

namespace {
constexpr RopeStyle NORM = RopeStyle::NORM, NEOX = RopeStyle::NEOX;
// name, RoPE pairs, feed_forward_length optional, hooks: attention, features, routing
const ArchInfo kArchs[] = {
    {Arch::LLAMA, "llama", NORM, false, nullptr, nullptr, nullptr},
    {Arch::QWEN2, "qwen2", NEOX, false, nullptr, nullptr, nullptr},
    {Arch::QWEN3, "qwen3", NEOX, false, nullptr, qwen3_features, nullptr},
    {Arch::QWEN3MOE, "qwen3moe", NEOX, true, nullptr, qwen3_features, qwen3moe_routing},
    {Arch::GEMMA3, "gemma3", NEOX, false, nullptr, gemma3_features, nullptr},
    {Arch::PHI3, "phi3", NEOX, false, nullptr, nullptr, nullptr},
    {Arch::GPT_OSS, "gpt-oss", NEOX, true, nullptr, gpt_oss_features, gpt_oss_routing},
    {Arch::SMOLLM3, "smollm3", NORM, false, nullptr, smollm3_features, nullptr},
    {Arch::GRANITE, "granite", NORM, false, nullptr, granite_features, nullptr},
    {Arch::OLMO2, "olmo2", NEOX, false, nullptr, olmo2_features, nullptr},
    {Arch::MISTRAL3, "mistral3", NORM, false, nullptr, mistral3_features, nullptr},
    {Arch::GLM4MOE, "glm4moe", NEOX, false, nullptr, glm4moe_features, sigmoid_routing},
    {Arch::DEEPSEEK2, "deepseek2", NORM, false, deepseek2_attention, deepseek2_features, sigmoid_routing},
    {Arch::QWEN35, "qwen35", NEOX, false, nullptr, qwen35_features, nullptr},
    {Arch::QWEN35MOE, "qwen35moe", NEOX, true, nullptr, qwen35_features, qwen35moe_routing},
    {Arch::QWEN3NEXT, "qwen3next", NEOX, true, nullptr, qwen35_features, qwen35moe_routing},
    {Arch::LLAMA4, "llama4", NORM, false, nullptr, llama4_features, llama4_routing},
    {Arch::GEMMA4, "gemma4", NEOX, false, gemma4_attention, gemma4_features, gemma4_routing},
    {Arch::GEMMA4_ASSISTANT, "gemma4-assistant", NEOX, false, gemma4_attention, gemma4_features, gemma4_routing},
    {Arch::EAGLE3, "eagle3", NORM, false, nullptr, nullptr, nullptr},
};
}  // namespace

const ArchInfo* find_arch(const std::string& name) {
    for (const ArchInfo& e : kArchs)
        if (name == e.name) return &e;
    return nullptr;
}

std::string arch_names() {
    std::string list;
    for (const ArchInfo& e : kArchs) list += std::string(list.empty() ? "" : ", ") + e.name;
    return list;
}

const char* arch_name(Arch a) {
    for (const ArchInfo& e : kArchs)
        if (e.arch == a) return e.name;
    return "?";
}

}  // namespace tandem
