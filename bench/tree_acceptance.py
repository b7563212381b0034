#!/usr/bin/env python3
"""Token trees vs chains: tokens emitted per target pass on stories260K (a real model) with its drafts.

For each draft (Q4_0 of the whole model; the first 3 and the first 1 layers, Q8_0), temperature (0 and 1) and mode:
  chain  --spec-tree off
  auto   --spec-tree auto (alternatives verified when their expected gain pays for them, the default)
  forced --spec-tree-min-gain 0 (every alternative the width and node caps allow)
runs `tandem generate --json` on 8 prompts (128 tokens each, --draft-max 4, the default --draft-p-min 0.75, fixed
draft length so that the three modes draft the same chains) and prints the mean tokens per target pass (all tokens
/ all passes), the alternatives verified and taken, and tokens/s (all tokens / all generation time).
Usage (from the project root, after building):

  python3 bench/tree_acceptance.py [--model ../shared/models/stories260K.gguf] [--bin build/bin/tandem]
"""
import argparse
import json
import os
import subprocess
import tempfile

PROMPTS = ["Once upon a time", "Lily and Ben went to the", "The little dog was sad because", "One day, a big bear",
           "Tom had a red ball", "Sara wanted to bake a cake", "The cat climbed the tree", "Max found a shiny stone"]
MODES = {"chain": ["--spec-tree", "off"], "auto": ["--spec-tree", "auto"], "forced": ["--spec-tree-min-gain", "0"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="../shared/models/stories260K.gguf")
    ap.add_argument("--bin", default="build/bin/tandem")
    ap.add_argument("-n", type=int, default=128)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    drafts = {}
    for name, extra in [("Q4_0", ["Q4_0"]), ("3 layers", ["Q8_0", "--keep-layers", "3"]), ("1 layer", ["Q8_0", "--keep-layers", "1"])]:
        out = os.path.join(tmp, name.replace(" ", "_") + ".gguf")
        subprocess.run([args.bin, "quantize", args.model, out] + extra, check=True, capture_output=True)
        drafts[name] = out
    print("| draft | temp | mode | tokens per target pass | alternatives verified | taken | t/s |")
    print("|---|---|---|---|---|---|---|")
    for dname, dpath in drafts.items():
        for temp in (0, 1):
            for mode, flags in MODES.items():
                gen = passes = alts = taken = 0
                ms = 0.0
                for i, p in enumerate(PROMPTS):
                    cmd = [args.bin, "generate", "-m", args.model, "-md", dpath, "-p", p, "-n", str(args.n),
                           "--temp", str(temp), "-s", str(1000 + i), "--ignore-eos", "--draft-max", "4",
                           "--draft-adaptive", "off", "-t", "1", "--json"] + flags
                    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                    s = j["spec"]
                    gen += j["timings"]["predicted_n"]
                    ms += j["timings"]["predicted_ms"]
                    passes += s["n_rounds"]
                    alts += s["tree"]["alternatives"]
                    taken += s["tree"]["alternatives_accepted"]
                print(f"| {dname} | {temp} | {mode} | {gen / passes:.2f} | {alts} | {taken} | {gen / (ms / 1e3):.0f} |", flush=True)


if __name__ == "__main__":
    main()
