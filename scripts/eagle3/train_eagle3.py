#!/usr/bin/python3
"""Trains an EAGLE-3 head for a target model and writes it as llama.cpp's eagle3 GGUF (which tandem and llama.cpp load).

The data is the target's own (self-distillation): `tandem distill` lets the target continue a set of prompts and
records, per position, the token, the inputs of three target layers and the target's top-k next-token log-probs
(include/tandem/distill.h has the format). The head (Li et al. 2025, "EAGLE-3"): g = fc [h_a, h_b, h_c]; one llama
decoder layer whose attention reads [rmsnorm(embd(t)) * attn_norm, rmsnorm(g) * hidden_norm] with g as its residual;
its output state h (before the output norm) is the g of its next draft; logits over a reduced vocabulary (the
n_draft most frequent tokens of the data, d2t) come from its own output matrix; the token embeddings are the
target's (so the head's width is the target's).

Training-time test (EAGLE-3's recipe): each batch runs K steps. Step 1 at position P takes (t[P+1], g[P]); step k
takes (t[P+k], h of step k-1 at P) at position P+k-1 and attends to the step-1 rows 0..P and to its own chain's rows
of steps 2..k (what the head sees when it drafts k tokens after P). Step k's loss is the cross-entropy of the
target's distribution at P+k (restricted to the draft vocabulary) under the head's, weighted 0.8^(k-1).

Runs on a CPU with Debian's python3-torch (`apt-get install python3-torch`; /usr/bin/python3). Usage:

  /usr/bin/python3 scripts/eagle3/train_eagle3.py --target T.gguf --data D.bin --out HEAD.gguf \
      [--draft-vocab 256] [--steps 1500] [--batch 8] [--window 64] [--ttt 4] [--ff 2E] [--seed 1] [--threads 2]
"""
import argparse
import math
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------------- GGUF I/O
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_metadata(path):
    """The key/value metadata of a GGUF file as {key: (type, value)} (arrays: (9, (elem_type, [values])))."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata sits at the start (tokenizer tables included)
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, data, off)[0]
        off += struct.calcsize(fmt)
        return v

    def string():
        nonlocal off
        n = take("<Q")
        s = data[off:off + n].decode("utf-8", "surrogateescape")
        off += n
        return s

    def value(t):
        if t in GGUF_SCALARS:
            return take(GGUF_SCALARS[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        raise ValueError(f"{path}: metadata type {t}")

    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    off = 4
    take("<I")
    take("<Q")
    n_kv = take("<Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        t = take("<I")
        kv[k] = (t, value(t))
    return kv


def write_gguf(path, kv, tensors, alignment=32):
    """kv: [(key, type, value)]; tensors: [(name, numpy array in row-major order, ggml type, ne)]."""
    out = bytearray()

    def put(fmt, v):
        out.extend(struct.pack(fmt, v))

    def string(s):
        b = s.encode("utf-8", "surrogateescape")
        put("<Q", len(b))
        out.extend(b)

    def value(t, v):
        if t in GGUF_SCALARS:
            put(GGUF_SCALARS[t], v)
        elif t == 8:
            string(v)
        elif t == 9:
            et, vals = v
            put("<I", et)
            put("<Q", len(vals))
            for e in vals:
                value(et, e)
        else:
            raise ValueError(t)

    out.extend(b"GGUF")
    put("<I", 3)
    put("<Q", len(tensors))
    put("<Q", len(kv))
    for k, t, v in kv:
        string(k)
        put("<I", t)
        value(t, v)
    offset = 0
    blobs = []
    for name, arr, gtype, ne in tensors:
        string(name)
        put("<I", len(ne))
        for d in ne:
            put("<Q", d)
        put("<I", gtype)
        put("<Q", offset)
        blob = arr.tobytes()
        blobs.append(blob)
        offset += (len(blob) + alignment - 1) // alignment * alignment
    out.extend(b"\0" * ((-len(out)) % alignment))
    for blob in blobs:
        out.extend(blob)
        out.extend(b"\0" * ((-len(blob)) % alignment))
    with open(path, "wb") as f:
        f.write(out)


# ---------------------------------------------------------------------------------------------------- data
def read_data(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:4] != b"TDE3":
        raise ValueError(f"{path}: not a tandem distill file")
    ver, E, V, n_layer, la, lb, lc, K, n_seq = struct.unpack_from("<9i", raw, 4)
    off = 4 + 36
    embd = np.frombuffer(raw, np.float32, V * E, off).reshape(V, E)
    off += V * E * 4
    seqs = []
    for _ in range(n_seq):
        (T,) = struct.unpack_from("<i", raw, off)
        off += 4
        toks = np.frombuffer(raw, np.int32, T, off)
        off += 4 * T
        feats = np.frombuffer(raw, np.float32, T * 3 * E, off).reshape(T, 3 * E)
        off += 4 * T * 3 * E
        top = np.frombuffer(raw, np.dtype([("id", "<i4"), ("lp", "<f4")]), T * K, off).reshape(T, K)
        off += 8 * T * K
        seqs.append((toks, feats, top["id"].copy(), top["lp"].copy()))
    return dict(E=E, V=V, layers=[la, lb, lc], K=K, embd=embd, seqs=seqs)


# ---------------------------------------------------------------------------------------------------- the head
def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    """Adjacent pairs (x[2i], x[2i+1]) rotated by pos * theta^(-2i/d): llama.cpp's NORM RoPE, as GGUF stores q/k."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[..., None].float() * inv  # [..., d/2]
    c, s = torch.cos(ang), torch.sin(ang)
    while c.dim() < x.dim():  # broadcast over heads: x [B, T, H, d], ang [B?, T, d/2]
        c, s = c.unsqueeze(-2), s.unsqueeze(-2)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2)


class Head(torch.nn.Module):
    def __init__(self, E, n_head, n_kv, ff, n_draft, eps, theta):
        super().__init__()
        self.E, self.nh, self.nkv, self.hd, self.eps, self.theta = E, n_head, n_kv, E // n_head, eps, theta
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.fc = lin(3 * E, E)
        self.wq, self.wk, self.wv = lin(2 * E, n_head * self.hd), lin(2 * E, n_kv * self.hd), lin(2 * E, n_kv * self.hd)
        self.wo = lin(n_head * self.hd, E)
        self.gate, self.up, self.down = lin(E, ff), lin(E, ff), lin(ff, E)
        self.out = lin(E, n_draft)
        one = lambda: torch.nn.Parameter(torch.ones(E))
        self.attn_norm, self.hidden_norm, self.ffn_norm, self.out_norm = one(), one(), one(), one()
        for m in self.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, std=0.02)

    def qkv(self, emb, g, pos):
        x = torch.cat([rmsnorm(emb, self.attn_norm, self.eps), rmsnorm(g, self.hidden_norm, self.eps)], -1)
        B, T = x.shape[:2]
        q = rope(self.wq(x).view(B, T, self.nh, self.hd), pos, self.theta)
        k = rope(self.wk(x).view(B, T, self.nkv, self.hd), pos, self.theta)
        v = self.wv(x).view(B, T, self.nkv, self.hd)
        return q, k, v

    def finish(self, att, g):
        h = self.wo(att) + g
        n = rmsnorm(h, self.ffn_norm, self.eps)
        h = h + self.down(F.silu(self.gate(n)) * self.up(n))
        return h, self.out(rmsnorm(h, self.out_norm, self.eps))

    def steps(self, embd, toks, g, n_steps):
        """Logits of each training-time-test step for every position P (step k predicts t[P+k+1])."""
        B, T = toks.shape
        P = torch.arange(T)
        rep = self.nh // self.nkv
        scale = 1.0 / math.sqrt(self.hd)
        causal = (P[None, :] <= P[:, None])  # [T(query), T(key)]
        chain_k, chain_v, outs = [], [], []
        for k in range(1, n_steps + 1):
            idx = (P + k).clamp(max=T - 1)
            emb = embd[toks[:, idx]]
            q, kk, vv = self.qkv(emb, g, (P + k - 1).expand(B, T))
            if k == 1:
                K1, V1 = kk.repeat_interleave(rep, 2), vv.repeat_interleave(rep, 2)
            else:
                chain_k.append(kk.repeat_interleave(rep, 2))
                chain_v.append(vv.repeat_interleave(rep, 2))
            s_main = torch.einsum("bthd,bshd->bhts", q, K1) * scale
            s_main = s_main.masked_fill(~causal, float("-inf"))
            if chain_k:
                ck, cv = torch.stack(chain_k, -2), torch.stack(chain_v, -2)  # [B, T, H, k-1, hd]
                s_extra = torch.einsum("bthd,bthjd->bhtj", q, ck) * scale
                a = torch.softmax(torch.cat([s_main, s_extra], -1), -1)
                att = torch.einsum("bhts,bshd->bthd", a[..., :T], V1) + torch.einsum("bhtj,bthjd->bthd", a[..., T:], cv)
            else:
                att = torch.einsum("bhts,bshd->bthd", torch.softmax(s_main, -1), V1)
            g, logits = self.finish(att.reshape(B, T, -1), g)
            outs.append(logits)
        return outs


# ---------------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--draft-vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window", type=int, default=64, help="positions per training sequence (a random crop)")
    ap.add_argument("--ttt", type=int, default=4, help="training-time-test steps")
    ap.add_argument("--ff", type=int, default=0, help="FFN width (0: 2 x n_embd)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    torch.set_num_threads(a.threads)
    meta = read_gguf_metadata(a.target)
    arch = meta["general.architecture"][1]
    hp = lambda key, d=None: meta.get(f"{arch}.{key}", (None, d))[1]
    d = read_data(a.data)
    E, V = d["E"], d["V"]
    n_head, n_kv = hp("attention.head_count"), hp("attention.head_count_kv", hp("attention.head_count"))
    eps, theta = hp("attention.layer_norm_rms_epsilon", 1e-5), hp("rope.freq_base", 10000.0)
    ff = a.ff or 2 * E

    # the draft vocabulary: the most frequent tokens of the data (its text and the target's top choices)
    counts = np.zeros(V, np.int64)
    for toks, _, ids, _ in d["seqs"]:
        np.add.at(counts, toks, 1)
        np.add.at(counts, ids[:, 0], 1)
    n_draft = min(a.draft_vocab, V)
    d2t = np.sort(np.argsort(-counts, kind="stable")[:n_draft]).astype(np.int64)
    t2d = np.full(V, -1, np.int64)
    t2d[d2t] = np.arange(n_draft)
    covered = counts[d2t].sum() / counts.sum()
    print(f"data: {len(d['seqs'])} sequences, {sum(len(s[0]) for s in d['seqs'])} positions; draft vocabulary "
          f"{n_draft} of {V} tokens covers {100 * covered:.1f}% of the data's tokens", flush=True)

    # batches of random crops of `window` positions (shorter sequences padded; padding is masked out of the loss)
    T = min(a.window, max(len(s[0]) for s in d["seqs"]))
    def batch(ix):
        toks = np.zeros((len(ix), T), np.int64)
        feats = np.zeros((len(ix), T, 3 * E), np.float32)
        tgt = np.zeros((len(ix), T, n_draft), np.float32)
        valid = np.zeros((len(ix), T), bool)
        for b, i in enumerate(ix):
            t, f, ids, lp = d["seqs"][i]
            s0 = int(rng.integers(0, len(t) - T + 1)) if len(t) > T else 0
            t, f, ids, lp = t[s0:s0 + T], f[s0:s0 + T], ids[s0:s0 + T], lp[s0:s0 + T]
            n = len(t)
            toks[b, :n], feats[b, :n], valid[b, :n] = t, f, True
            p = np.exp(lp)
            m = t2d[ids] >= 0
            rows = np.repeat(np.arange(n)[:, None], ids.shape[1], 1)
            np.add.at(tgt[b], (rows[m], t2d[ids][m]), p[m])
        tgt /= np.maximum(tgt.sum(-1, keepdims=True), 1e-9)
        return torch.from_numpy(toks), torch.from_numpy(feats), torch.from_numpy(tgt), torch.from_numpy(valid)

    head = Head(E, n_head, n_kv, ff, n_draft, eps, theta)
    embd = torch.from_numpy(d["embd"].copy())
    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * s / a.steps)))
    t0 = time.time()
    for step in range(a.steps):
        ix = rng.choice(len(d["seqs"]), size=min(a.batch, len(d["seqs"])), replace=False)
        toks, feats, tgt, valid = batch(ix)
        outs = head.steps(embd, toks, head.fc(feats), a.ttt)
        P = torch.arange(T)
        loss, accs = 0.0, []
        for k, logits in enumerate(outs, start=1):
            label = tgt[:, (P + k).clamp(max=T - 1)]
            m = valid & (P + k <= T - 1)[None, :] & valid[:, (P + k).clamp(max=T - 1)]
            ce = -(label * F.log_softmax(logits, -1)).sum(-1)
            loss = loss + 0.8 ** (k - 1) * (ce * m).sum() / m.sum()
            accs.append(((logits.argmax(-1) == label.argmax(-1)) & m).sum().item() / max(1, m.sum().item()))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == a.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  top-1 agreement by step " +
                  " ".join(f"{x:.2f}" for x in accs) + f"  ({time.time() - t0:.0f} s)", flush=True)

    # llama.cpp's eagle3 file: the target's tokenizer, the head's shapes, F32 tensors (ne = [in, out])
    kv = [("general.architecture", 8, "eagle3"), ("general.name", 8, "tandem eagle3 head (train_eagle3.py)"),
          ("eagle3.context_length", 4, hp("context_length", 2048)), ("eagle3.embedding_length", 4, E),
          ("eagle3.block_count", 4, 1), ("eagle3.feed_forward_length", 4, ff),
          ("eagle3.attention.head_count", 4, n_head), ("eagle3.attention.head_count_kv", 4, n_kv),
          ("eagle3.attention.layer_norm_rms_epsilon", 6, eps), ("eagle3.rope.freq_base", 6, theta),
          ("eagle3.target_layers", 9, (5, list(d["layers"]))), ("eagle3.target_hidden_size", 4, E),
          ("eagle3.norm_before_residual", 7, False)]
    kv += [(k, t, v) for k, (t, v) in meta.items() if k.startswith("tokenizer.")]
    W = lambda m: m.weight.detach().numpy().astype(np.float32)
    N = lambda p: p.detach().numpy().astype(np.float32)
    mats = [("fc.weight", W(head.fc)), ("blk.0.attn_q.weight", W(head.wq)), ("blk.0.attn_k.weight", W(head.wk)),
            ("blk.0.attn_v.weight", W(head.wv)), ("blk.0.attn_output.weight", W(head.wo)),
            ("blk.0.ffn_gate.weight", W(head.gate)), ("blk.0.ffn_up.weight", W(head.up)),
            ("blk.0.ffn_down.weight", W(head.down)), ("output.weight", W(head.out))]
    tensors = [(n, m, 0, [m.shape[1], m.shape[0]]) for n, m in mats]
    tensors += [(n, v, 0, [v.shape[0]]) for n, v in [
        ("blk.0.attn_norm.weight", N(head.attn_norm)), ("blk.0.attn_norm_2.weight", N(head.hidden_norm)),
        ("blk.0.ffn_norm.weight", N(head.ffn_norm)), ("output_norm.weight", N(head.out_norm))]]
    tensors.append(("d2t", d2t, 27, [n_draft]))
    write_gguf(a.out, kv, tensors)
    print(f"wrote {a.out}: E {E}, {n_head} heads ({n_kv} KV), FFN {ff}, {n_draft} draft tokens, target layers "
          f"{d['layers']}, {time.time() - t0:.0f} s of training")


if __name__ == "__main__":
    main()
