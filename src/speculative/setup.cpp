#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/speculative.h"

namespace tandem {

Speculation build_speculation(const std::shared_ptr<const Model>& target, SpecParams& spec,
                              const std::string& draft_path, bool type_chosen, int self_layers) {
    Speculation out;
    if (uses_draft_model(spec.type)) {
        out.draft_model = Model::load(draft_path);
        if (const char* line = pick_draft_head(spec, out.draft_model.get())) out.notes.push_back(line);
    }
    if (spec.type == SpecType::DRAFT) {
        spec.vocab_bridge = draft_vocab_bridge(*target, *out.draft_model);
        if (spec.vocab_bridge)
            out.notes.push_back("draft: another vocabulary (" + spec.vocab_bridge->difference +
                                "): it drafts through text, re-tokenized");
    }
    if (spec.type == SpecType::SELF || self_layers > 0) self_draft_layers(*target, self_layers);  // K < L
    if (pick_mtp_by_default(spec, *target, type_chosen))
        out.notes.push_back("speculative: the model's multi-token-prediction block drafts (--spec-type none: off)");
    if (spec.type == SpecType::MTP && !target->mtp() && !(out.draft_model && out.draft_model->assistant()))
        throw Error(target->path() +
                    ": --spec-type mtp needs a model with a multi-token-prediction block (nextn layers)");
    return out;
}

bool pick_mtp_by_default(SpecParams& spec, const Model& target, bool chosen_elsewhere) {
    if (chosen_elsewhere || spec.type != SpecType::NONE || !target.mtp()) return false;
    spec.type = SpecType::MTP;
    return true;
}

const char* pick_draft_head(SpecParams& spec, const Model* draft) {
    if (!draft) return nullptr;
    if (spec.type == SpecType::EAGLE3 && !draft->eagle3())
        throw Error(draft->path() +
                    ": --spec-type eagle3 needs an EAGLE-3 head as -md (general.architecture eagle3), "
                    "this is " +
                    arch_name(draft->hparams().arch));
    if (draft->eagle3() && (spec.type == SpecType::DRAFT || spec.type == SpecType::EAGLE3)) {
        spec.type = SpecType::EAGLE3;
        return "speculative: -md is an EAGLE-3 head: it drafts from three of the target's layers";
    }
    if (spec.type != SpecType::DRAFT || !draft->assistant()) return nullptr;
    spec.type = SpecType::MTP;
    return "speculative: -md is a Gemma 4 assistant: it drafts from the target's states and cache";
}

size_t draft_bytes_per_position(const Model& draft, TensorType tk, TensorType tv) {
    const size_t kept = draft.eagle3() ? 3 * size_t(draft.eagle3()->n_embd_target) * sizeof(float) : 0;
    return kv_bytes_per_position(draft, tk, tv) + kept;
}

int self_draft_layers(const Model& target, int requested) {
    const int L = target.hparams().n_layer;
    const int k = requested > 0 ? requested : std::max(1, L / 2);
    if (L < 2 || k >= L)
        throw Error(
            strprintf("--draft-layers %d must be below the target's %d layers (self-speculation drafts with the "
                      "first K layers)",
                      k, L));
    return k;
}

double draft_cost_prior(SpecType type, const Model& target, const Model* draft_model, int requested_layers) {
    if (type == SpecType::DRAFT && draft_model)
        return double(draft_model->weights_bytes()) / double(target.weights_bytes());
    if (type == SpecType::SELF)
        return double(self_draft_layers(target, requested_layers)) / double(target.hparams().n_layer);
    if (type == SpecType::EAGLE3 && draft_model) {  // the head's weights (and the target's output if it has none)
        const double out = draft_model->output().data ? 0.0 : double(target.output().nbytes());
        return std::min(1.0, (double(draft_model->weights_bytes()) + out) / target.bytes_per_pass(1));
    }
    if (type == SpecType::MTP && draft_model && draft_model->assistant())  // a Gemma 4 assistant: its weights
        return std::min(1.0, double(draft_model->weights_bytes()) / target.bytes_per_pass(1));
    if (type == SpecType::MTP) {  // one more layer (its expected share of a pass) and the output matrix again
        const double pass = target.bytes_per_pass(1), out = double(target.output().nbytes());
        return std::min(1.0, ((pass - out) / std::max(1, target.hparams().n_layer) + out) / pass);
    }
    return 0.0;
}

DraftSetup make_draft(SpecType type, const std::shared_ptr<const Model>& target,
                      const std::shared_ptr<const Model>& draft_model, SessionParams params, int requested_layers,
                      ThreadPool& pool, Session* target_session) {
    DraftSetup d;
    if (type == SpecType::DRAFT) {
        if (!draft_model) throw Error("speculative type 'draft' needs a draft model (-md)");
        params.n_layers = 0;
        d.session = std::make_unique<Session>(draft_model, params, pool);
    } else if (type == SpecType::SELF) {
        d.self_layers = self_draft_layers(*target, requested_layers);
        params.n_layers = d.self_layers;
        if (target_session) params.gpu = target_session->gpu();  // the target's own layers, where they are
        d.session = std::make_unique<Session>(target, params, pool);
    } else if (type == SpecType::MTP) {
        const bool assistant = draft_model && draft_model->assistant();
        if (!assistant && !target->mtp())
            throw Error(target->path() +
                        ": speculative type 'mtp' needs a model with a multi-token-prediction block (nextn layers), "
                        "and this one has none");
        if (!target_session) throw Error("speculative type 'mtp' needs the target's session");
        params.n_layers = 0;
        params.drafter_of = target_session;
        if (!assistant) params.gpu = target_session->gpu();  // the target's own MTP block, where its layers are
        d.session = std::make_unique<Session>(assistant ? draft_model : target, params, pool);
    } else if (type == SpecType::EAGLE3) {
        if (!draft_model || !draft_model->eagle3())
            throw Error("speculative type 'eagle3' needs an EAGLE-3 head (-md HEAD.gguf)");
        if (!target_session) throw Error("speculative type 'eagle3' needs the target's session");
        params.n_layers = 0;
        params.drafter_of = target_session;
        d.session = std::make_unique<Session>(draft_model, params, pool);
    }
    d.cost_prior = draft_cost_prior(type, *target, draft_model.get(), requested_layers);
    return d;
}

DrafterSet::Drafter DrafterSet::get(SpecType type) {
    const Kind k = type == SpecType::SELF ? SELF : reads_target_states(type) ? TARGET_STATES : MODEL;
    if (!s_[k]) {
        // the target model's own layers (an MTP block), or a Gemma 4 assistant as -md, run at the target's context
        const bool own =
            type == SpecType::SELF || (type == SpecType::MTP && !(c_.draft_model && c_.draft_model->assistant()));
        SessionParams sp = c_.params;
        sp.n_ctx = own || sp.n_ctx <= 0 ? target_.n_ctx() : sp.n_ctx;
        DraftSetup d = make_draft(type, c_.target, own ? nullptr : c_.draft_model, sp,
                                  type == SpecType::SELF ? c_.self_layers : 0, pool_, &target_);
        s_[k] = std::move(d.session);
        prior_[k] = d.cost_prior;
    }
    return {s_[k].get(), prior_[k]};
}

void DrafterSet::truncate(int n) {
    for (auto& s : s_)
        if (s) s->truncate(n);
}

size_t DrafterSet::kv_bytes() const {
    size_t b = 0;
    for (const auto& s : s_)
        if (s) b += s->kv_bytes();
    return b;
}

}  // namespace tandem
