// A request's speculative decoding (serve/request_parts.h): the server's defaults, llama-server's flat
// "speculative.*" keys and n_keep, and our nested `speculative` object; and id_slot.
#include <algorithm>

#include "serve/request_parts.h"
#include "tandem/error.h"

namespace tandem::server::request {

namespace {

// speculative.type: a name, a comma-separated list, or an array of names: the proposers chosen from per round.
void parse_spec_type(const json& t, const ServerLimits& lim, SpecParams& spec) {
    std::string list;
    if (t.is_string()) {
        list = t.get<std::string>();
    } else if (t.is_array() && !t.empty()) {
        for (const auto& e : t) {
            if (!e.is_string()) throw BadRequest("speculative.type: every entry must be a string");
            list += (list.empty() ? "" : ",") + e.get<std::string>();
        }
    } else {
        throw BadRequest("speculative.type must be a string or an array of strings");
    }
    try {
        set_spec_types(spec, list);
        pick_draft_head(spec, lim.draft_model.get());  // one rule with generate's --spec-type draft -md HEAD
    } catch (const Error& e) {
        throw BadRequest(std::string("speculative.type: ") + e.what());
    }
    if (spec.type == SpecType::DRAFT && !lim.has_draft)
        throw BadRequest("speculative.type 'draft': the server has no draft model (-md)");
    if (spec.type == SpecType::MTP && !lim.has_mtp && !(lim.draft_model && lim.draft_model->assistant()))
        throw BadRequest("speculative.type 'mtp': the model has no multi-token-prediction block");
    if (spec.type == SpecType::EAGLE3 && !lim.has_eagle3)
        throw BadRequest("speculative.type 'eagle3': the server has no EAGLE-3 head (-md)");
}

// Our nested object: {"n_max", "n_min", "p_min", "adaptive", "tree", "tree_width", "latency", "tree_nodes",
// "type"}, then the command line's checks.
void parse_spec_object(const json& o, const ServerLimits& lim, SpecParams& spec) {
    if (!o.is_object()) throw BadRequest("'speculative' must be an object");
    spec.n_max = int(integer(o, "n_max", spec.n_max, 0, 256));
    spec.n_min = int(integer(o, "n_min", spec.n_min, 0, 256));
    spec.p_min = float(number(o, "p_min", spec.p_min, 0.0, 1.0));
    if (o.contains("adaptive")) spec.adaptive = boolean(o, "adaptive", true);
    if (auto t = o.find("tree"); t != o.end() && !t->is_null()) {  // "auto" | "off" | true | false
        if (t->is_boolean()) spec.tree = t->get<bool>();
        else if (t->is_string() && (*t == "auto" || *t == "off")) spec.tree = *t == "auto";
        else throw BadRequest("speculative.tree must be \"auto\", \"off\" or a boolean");
    }
    spec.tree_width = int(integer(o, "tree_width", spec.tree_width, 1, 64));
    if (auto l = o.find("latency"); l != o.end() && !l->is_null()) {  // "throughput" | "steady"
        if (*l == "steady") spec.max_round_cost = SpecParams::kSteadyRoundCost;
        else if (*l == "throughput") spec.max_round_cost = 0.0;
        else throw BadRequest("speculative.latency must be \"throughput\" or \"steady\"");
    }
    spec.tree_nodes = int(integer(o, "tree_nodes", spec.tree_nodes, 1, 1024));
    if (auto t = o.find("type"); t != o.end() && !t->is_null()) parse_spec_type(*t, lim, spec);
    try {  // the same checks as the command line's
        validate_spec_params(spec);
    } catch (const Error& e) {
        throw BadRequest(std::string("speculative: ") + e.what());
    }
}

}  // namespace

void parse_spec_overrides(const json& body, const ServerLimits& lim, JobRequest& j) {
    j.spec = lim.spec_defaults;
    j.spec.n_max = int(integer(body, "speculative.n_max", j.spec.n_max, 0, 256));
    j.spec.n_min = int(integer(body, "speculative.n_min", j.spec.n_min, 0, 256));
    j.spec.p_min = float(number(body, "speculative.p_min", j.spec.p_min, 0.0, 1.0));
    j.id_slot = int(integer(body, "id_slot", -1, -1, 1 << 20));  // read here: its errors come in this order
    j.spec.n_keep = int(integer(body, "n_keep", j.spec.n_keep, -1, INT32_MAX));  // context shift (llama-server)
    if (auto it = body.find("speculative"); it != body.end() && !it->is_null()) parse_spec_object(*it, lim, j.spec);
    // The operator's flags bound what a request may ask: a request may draft less than --draft-max and make a
    // narrower, smaller token tree than the server's, never more (a client's n_max 256 with the adaptive
    // controller off would make every round of every slot draft 256 tokens). Clamped, not refused, as
    // llama.cpp's UI sends its own speculative settings with every request.
    const SpecParams& d = lim.spec_defaults;
    j.spec.n_max = std::min(j.spec.n_max, d.n_max);
    j.spec.n_min = std::min(j.spec.n_min, j.spec.n_max);
    j.spec.tree_width = std::min(j.spec.tree_width, d.tree_width);
    j.spec.tree_nodes = std::min(j.spec.tree_nodes, d.tree_nodes);
}

}  // namespace tandem::server::request
