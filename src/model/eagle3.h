// An EAGLE-3 head's draft session (Model::eagle3(), Eagle3Weights in tandem/model.h): a Session of the head with
// SessionParams::drafter_of = its target's session. The target keeps the inputs of the head's three target layers for
// every row it decodes (Session::keep_hidden with layers); the head's forward pass (Session::eagle3_forward) fuses
// them through fc.
//
// Rows: the head's row q holds the token at q and the fused target state at q - 1, at RoPE position q - 1 — llama.cpp's
// input pair (t_{P+1}, g_P) at its position P = q - 1 — so the head's positions are its target's, as an MTP block's,
// and its drafts, rollbacks and catch-up are the MTP path's. Row 0 has no llama.cpp counterpart: no other row sees
// it. A row beyond the target's length takes the head's own output state of the row before (a chain of drafts).
#pragma once
#include "tandem/model.h"
#include "tandem/session.h"

namespace tandem {

// Throws tandem::Error naming what differs when the head cannot draft for this target: another vocabulary or hidden
// size, a target layer it does not have, the target's embeddings or output needed at another width.
void check_eagle3_target(const Model& head, const Session& target);

// The target layers whose inputs the head reads (Eagle3Weights::target_layers), in its fc's order.
std::vector<int> eagle3_target_layers(const Model& head);

}  // namespace tandem
