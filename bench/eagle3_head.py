#!/usr/bin/env python3
"""A trained EAGLE-3 head against the other drafts of stories260K (a real model), and llama.cpp's draft-eagle3 on it.

1. Trains the head inside the benchmark (seeded): `tandem distill` lets stories260K continue the 240 prompts of
   scripts/eagle3/stories-prompts.txt (128 tokens each, temperature 1, seed 1) and records the inputs of its
   layers 1, 3 and 4; scripts/eagle3/train_eagle3.py trains the head on them (Debian's python3-torch, 2 threads).
   --head HEAD.gguf skips this.
2. tandem: for each draft (the head; the whole model at Q4_0; its first 3, 2 and 1 layers at Q8_0), temperature 0
   and 1, chain (--spec-tree off) and tree (--spec-tree auto), `tandem generate --json` on 8 prompts unlike the
   training ones (128 tokens, --draft-max 4 every round: --draft-adaptive off, --draft-p-min 0) and prints tokens
   per target pass (all tokens / all passes) and the acceptance of each draft position.
3. llama.cpp (--llama-bin DIR with llama-speculative-simple, built outside the repository from node-llama-cpp@3.22.1):
   the same head (--spec-type draft-eagle3) and the Q4_0 draft (draft-simple), same prompts, seeds and draft length,
   temperature 0 and 1: accepted drafts / drafted and tokens per target pass (n_predict / (n_predict - n_accept):
   each pass emits its accepted drafts and one token of its own).

  python3 bench/eagle3_head.py [--model ../shared/models/stories260K.gguf] [--bin build/bin/tandem]
                               [--llama-bin DIR] [--head HEAD.gguf] [--steps 800]
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

PROMPTS = ["Once upon a time", "Lily and Ben went to the", "The little dog was sad because", "One day, a big bear",
           "Tom had a red ball", "Sara wanted to bake a cake", "The cat climbed the tree", "Max found a shiny stone"]
FIXED = ["--draft-max", "4", "--draft-adaptive", "off", "--draft-p-min", "0"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="../shared/models/stories260K.gguf")
    ap.add_argument("--bin", default="build/bin/tandem")
    ap.add_argument("--llama-bin", default="")
    ap.add_argument("--head", default="")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("-n", type=int, default=128)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tmp = tempfile.mkdtemp()
    head = args.head
    if not head:
        data, head = os.path.join(tmp, "stories.bin"), os.path.join(tmp, "stories260K-eagle3.gguf")
        t0 = time.time()
        subprocess.run([args.bin, "distill", "-m", args.model, "--layers", "1,3,4", "-f",
                        os.path.join(root, "scripts/eagle3/stories-prompts.txt"), "-o", data, "-n", "128",
                        "--temp", "1", "--seed", "1"], check=True, capture_output=True)
        t1 = time.time()
        r = subprocess.run(["/usr/bin/python3", os.path.join(root, "scripts/eagle3/train_eagle3.py"), "--target",
                            args.model, "--data", data, "--out", head, "--steps", str(args.steps), "--seed", "1"],
                           check=True, capture_output=True, text=True)
        last = [l for l in r.stdout.splitlines() if l.startswith("step")][-1]
        print(f"head: distill {t1 - t0:.0f} s, training {time.time() - t1:.0f} s; last: {last}\n", flush=True)
    drafts = {"eagle3 head": head}
    for name, extra in [("Q4_0", ["Q4_0"]), ("3 layers", ["Q8_0", "--keep-layers", "3"]),
                        ("2 layers", ["Q8_0", "--keep-layers", "2"]), ("1 layer", ["Q8_0", "--keep-layers", "1"])]:
        out = os.path.join(tmp, name.replace(" ", "_") + ".gguf")
        subprocess.run([args.bin, "quantize", args.model, out] + extra, check=True, capture_output=True)
        drafts[name] = out
    print("| draft | temp | mode | tokens per target pass | accepted by position 1 / 2 / 3 / 4 | t/s |")
    print("|---|---|---|---|---|---|")
    for dname, dpath in drafts.items():
        for temp in (0, 1):
            for mode in ("chain", "tree"):
                gen = passes = 0
                ms = 0.0
                drafted_at, accepted_at = [0] * 4, [0.0] * 4
                for i, p in enumerate(PROMPTS):
                    cmd = [args.bin, "generate", "-m", args.model, "-md", dpath, "-p", p, "-n", str(args.n), "--temp",
                           str(temp), "-s", str(1000 + i), "--ignore-eos", "-t", "1", "--json", "--spec-tree",
                           "off" if mode == "chain" else "auto"] + FIXED
                    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                    s = j["spec"]
                    gen += j["timings"]["predicted_n"]
                    ms += j["timings"]["predicted_ms"]
                    passes += s["n_rounds"]
                    for k, a in enumerate(s["accept_by_position"][:4]):
                        drafted_at[k] += s["n_rounds_drafted"]
                        accepted_at[k] += a * s["n_rounds_drafted"]
                by_pos = " / ".join(f"{accepted_at[k] / max(1, drafted_at[k]):.2f}" for k in range(4))
                print(f"| {dname} | {temp} | {mode} | {gen / passes:.2f} | {by_pos} | {gen / (ms / 1e3):.0f} |",
                      flush=True)
    if not args.llama_bin:
        return
    print("\nllama.cpp llama-speculative-simple, same prompts and seeds, --spec-draft-n-max 4 --spec-draft-n-min 0 "
          "--spec-draft-p-min 0:")
    print("| draft | temp | accepted / drafted | tokens per target pass |")
    print("|---|---|---|---|")
    for dname, stype in (("eagle3 head", "draft-eagle3"), ("Q4_0", "draft-simple")):
        for temp in (0, 1):
            n_pred = n_drafted = n_accept = 0
            for i, p in enumerate(PROMPTS):
                cmd = [os.path.join(args.llama_bin, "llama-speculative-simple"), "-m", args.model, "-md", drafts[dname],
                       "--spec-type", stype, "-p", p, "-n", str(args.n), "--temp", str(temp), "-s", str(1000 + i),
                       "--ignore-eos", "--spec-draft-n-max", "4", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
                       "-t", "1", "-c", "512"]
                r = subprocess.run(cmd, capture_output=True, text=True)
                log = r.stdout + r.stderr
                if r.returncode != 0 or "n_accept" not in log:
                    raise SystemExit(f"llama-speculative-simple failed ({' '.join(cmd)}):\n{log[-2000:]}")
                get = lambda key: int(re.search(rf"{key}\s*=\s*(\d+)", log).group(1))
                n_pred += get("n_predict")
                n_drafted += get("n_drafted")
                n_accept += get("n_accept")
            print(f"| {dname} | {temp} | {n_accept} / {n_drafted} = {n_accept / max(1, n_drafted):.2f} | "
                  f"{n_pred / max(1, n_pred - n_accept):.2f} |", flush=True)


if __name__ == "__main__":
    main()
