#!/usr/bin/env python3
"""Suffix cache vs per-request n-grams vs no speculation on a workload that reuses earlier material.

Starts `tandem serve` once per mode (--spec-type none | ngram | suffix | ngram,suffix) and sends the same 50 completion requests
(greedy, 96 tokens each) in the same order:
  - 20 fresh story openings,
  - 15 of them asked again (a repeated question),
  - 10 "edits": an earlier answer with its first sentence changed, to be continued,
  -  5 turns of a loop whose prompt grows by the previous output (an agent reading back its own work).
Prints per mode: generated tokens/s over the whole workload (sum of tokens / sum of generation time), drafted and
accepted tokens, and the tokens/s of each part. Usage (from the project root):

  python3 bench/suffix_workload.py [--model ../shared/models/stories260K.gguf] [--bin build/bin/tandem]
"""
import argparse
import json
import subprocess
import time
import urllib.request

OPENINGS = [
    "Once upon a time", "Lily and Ben went to the", "The little dog was sad because", "One day, a big bear",
    "Tom had a red ball", "The sun was shining and", "Sara wanted to bake a cake", "In the forest there was",
    "The cat climbed the tree", "Max found a shiny stone", "It was a rainy day and", "The bird sang a song",
    "Mom said to Tim", "The boat was very small", "A girl named Amy", "The farmer had a cow",
    "Once there was a king", "Ben and his dad went", "The toy car was broken", "At the park, Lucy saw",
]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def workload(port):
    parts = {"fresh": [], "repeat": [], "edit": [], "loop": []}
    answers = {}

    def ask(part, prompt):
        j = post(port, {"prompt": prompt, "max_tokens": 96, "temperature": 0, "cache_prompt": False})
        t = j["timings"]
        parts[part].append((t["predicted_n"], t["predicted_ms"], t.get("draft_n", 0), t.get("draft_n_accepted", 0)))
        return j["choices"][0]["text"]

    for p in OPENINGS:
        answers[p] = ask("fresh", p)
    for p in OPENINGS[:15]:
        ask("repeat", p)
    for p in OPENINGS[:10]:
        text = answers[p]
        cut = text.find(".")
        edited = "The end came soon." + (text[cut + 1:] if cut >= 0 else text)
        ask("edit", p + edited[:200])
    loop = OPENINGS[0]
    for _ in range(5):
        loop += ask("loop", loop)
        loop = loop[-600:]
    return parts


def summary(rows):
    n = sum(r[0] for r in rows)
    ms = sum(r[1] for r in rows)
    return n, ms, sum(r[2] for r in rows), sum(r[3] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="../shared/models/stories260K.gguf")
    ap.add_argument("--bin", default="build/bin/tandem")
    ap.add_argument("--port", type=int, default=8397)
    a = ap.parse_args()
    print("| mode | tokens/s (all 50) | drafted | accepted | fresh t/s | repeat t/s | edit t/s | loop t/s |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in ["none", "ngram", "suffix", "ngram,suffix"]:  # the last: both proposers, the better one per round
        srv = subprocess.Popen([a.bin, "serve", "-m", a.model, "--port", str(a.port), "--spec-type", mode],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{a.port}/health", timeout=1)
                    break
                except Exception:
                    time.sleep(0.1)
            parts = workload(a.port)
        finally:
            srv.terminate()
            srv.wait()
        allrows = [r for rows in parts.values() for r in rows]
        n, ms, d, acc = summary(allrows)
        per = []
        for k in ["fresh", "repeat", "edit", "loop"]:
            pn, pms, _, _ = summary(parts[k])
            per.append(f"{pn / pms * 1e3:.0f}")
        print(f"| {mode} | {n / ms * 1e3:.0f} | {d} | {acc} | " + " | ".join(per) + " |")


if __name__ == "__main__":
    main()
