#!/usr/bin/env python3
"""Expected token ids for a pre-tokenizer that has no vocab file of its own in ../shared/tokenizer-tests.

Copies a vocab-only GGUF (no tensors) with `tokenizer.ggml.pre` set to another name, tokenizes the test strings of
the source vocab with llama.cpp's `llama-tokenize` (add_special = false, parse_special = false, as the shared
vectors are made) and writes one line of ids per string. tests/test_tokenizer.cpp builds the same renamed vocab
in memory and compares. Usage:

  scripts/make-pretokenizer-vectors.py LLAMA_TOKENIZE ../shared/tokenizer-tests/ggml-vocab-deepseek-llm.gguf \
      deepseek-v3 tests/data/tokenizer/deepseek-v3.out

LLAMA_TOKENIZE: a build of llama.cpp's tools/tokenize (e.g. from the source in node-llama-cpp 3.22.1).
"""
import os
import struct
import subprocess
import sys
import tempfile


def rename_pre(src: bytes, new_pre: str) -> bytes:
    # GGUF v3: magic, version u32, n_tensors u64, n_kv u64, then key/value pairs. Tensor-less files only.
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", src, 0)
    assert magic == b"GGUF" and version == 3 and n_tensors == 0, "a GGUF v3 vocab file without tensors"
    pos = 24

    def read_str(p):
        (n,) = struct.unpack_from("<Q", src, p)
        return src[p + 8:p + 8 + n], p + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(t, p):
        if t == 8:
            return read_str(p)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", src, p)
            p += 12
            for _ in range(n):
                p = skip_value(et, p)
            return p
        return p + sizes[t]

    for _ in range(n_kv):
        key, p = read_str(pos)
        (t,) = struct.unpack_from("<I", src, p)
        end = skip_value(t, p + 4)
        if key == b"tokenizer.ggml.pre":
            assert t == 8
            val = new_pre.encode()
            return src[:p + 4] + struct.pack("<Q", len(val)) + val + src[end:]
        pos = end
    raise SystemExit("no tokenizer.ggml.pre in the source vocab")


def main():
    tool, src_vocab, new_pre, out_path = sys.argv[1:5]
    data = rename_pre(open(src_vocab, "rb").read(), new_pre)
    strings = open(src_vocab + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    if strings and strings[-1] == "":
        strings.pop()
    with tempfile.TemporaryDirectory() as tmp:
        vocab = os.path.join(tmp, "vocab.gguf")
        open(vocab, "wb").write(data)
        lines = []
        for s in strings:
            f = os.path.join(tmp, "text.txt")
            open(f, "w", encoding="utf-8", newline="").write(s)
            r = subprocess.run([tool, "-m", vocab, "-f", f, "--ids", "--no-bos", "--no-escape", "--log-disable"],
                               capture_output=True, text=True, check=True)
            ids = r.stdout.strip().splitlines()[-1].strip("[]").replace(",", " ").split()
            lines.append(" ".join(ids))
    open(out_path, "w").write("\n".join(lines) + "\n")
    print(f"{out_path}: {len(lines)} strings")


if __name__ == "__main__":
    main()
