#!/usr/bin/env python3
"""Checks that no SIMD instruction of a level leaks outside that level's code (src/backend/cpu/isa.h).

Every function of a linked binary is classified by its (demangled) name: code of a per-ISA unit lives in namespace
tandem::isa_<level>; everything else is baseline code and must run on the architecture's baseline CPU.
  x86-64:  VEX-encoded instructions (AVX, AVX2, FMA, F16C, AVX-VNNI) only in isa_avx2 / isa_avx512 /
           isa_avxvnni / isa_avx512vnni,
           EVEX-encoded ones (AVX-512) only in isa_avx512 / isa_avx512vnni. Encodings are read from the
           instruction bytes: in 64-bit mode a leading C4/C5 is always VEX and 62 always EVEX.
  AArch64: SDOT/UDOT only in isa_dotprod / isa_i8mm, SMMLA/UMMLA/USMMLA/USDOT/SUDOT only in isa_i8mm.
A function the linker took from a per-ISA unit for everyone (an inline function or template instantiation
emitted in both) would carry the baseline name and that level's instructions: this is the leak it finds.

usage: check_isa_leaks.py [--objdump OBJDUMP] BINARY...
"""
import re
import subprocess
import sys

X86_VEX_OK = ("isa_avx2::", "isa_avx512::", "isa_avxvnni::", "isa_avx512vnni::")
X86_EVEX_OK = ("isa_avx512::", "isa_avx512vnni::")
ARM_DOT_OK = ("isa_dotprod::", "isa_i8mm::")
ARM_MM_OK = ("isa_i8mm::",)
ARM_DOT = {"sdot", "udot"}
ARM_MM = {"smmla", "ummla", "usmmla", "usdot", "sudot"}
SKIP_PREFIXES = {"26", "2e", "36", "3e", "64", "65", "67"}  # segment / address-size prefixes may precede VEX


def scan(objdump, path):
    out = subprocess.run([objdump, "-d", "-w", "-C", path], check=True, capture_output=True, text=True).stdout
    arch = "x86" if "x86-64" in out[:2000] else "arm" if "aarch64" in out[:2000] else None
    if arch is None:
        sys.exit(f"{path}: unknown architecture in objdump output")
    func, bad, counts = None, {}, {"functions": 0, "simd_functions": 0}
    first_insn, skip_until, prologue_at = True, 0, None
    simd_funcs = set()
    head = re.compile(r"^[0-9a-f]+ <(.*)>:$")
    for line in out.splitlines():
        m = head.match(line)
        if m:
            func = m.group(1)
            counts["functions"] += 1
            first_insn, skip_until, prologue_at = True, 0, None
            continue
        if func is None or "\t" not in line:
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        if arch == "x86":
            # clang's -fsanitize=function starts each function with `jmp +6` over an 8-byte prologue: the
            # signature bytes 76 32, then a 4-byte type hash (data that objdump decodes as whatever it looks
            # like). Only that exact prologue is skipped: a function that merely begins with a jump keeps all of
            # its code checked.
            addr = int(parts[0].strip().rstrip(":"), 16)
            raw = parts[1].split()
            if first_insn:
                first_insn = False
                if raw == ["eb", "06"]:
                    prologue_at = addr
                    continue
            if prologue_at is not None:
                if addr == prologue_at + 2 and raw[:2] == ["76", "32"]:
                    skip_until = prologue_at + 8
                prologue_at = None
            if addr < skip_until or "(bad)" in parts[2]:  # "(bad)": bytes that are no instruction at all
                continue
            raw = parts[1].split()
            while raw and raw[0] in SKIP_PREFIXES:
                raw = raw[1:]
            if not raw:
                continue
            kind = "EVEX" if raw[0] == "62" else "VEX" if raw[0] in ("c4", "c5") else None
            if kind is None:
                continue
            simd_funcs.add(func)
            ok = X86_EVEX_OK if kind == "EVEX" else X86_VEX_OK
        else:
            mnemonic = parts[2].split()[0] if parts[2].split() else ""
            if mnemonic in ARM_MM:
                kind, ok = "i8mm " + mnemonic, ARM_MM_OK
            elif mnemonic in ARM_DOT:
                kind, ok = "dotprod " + mnemonic, ARM_DOT_OK
            else:
                continue
            simd_funcs.add(func)
        if not any(ns in func for ns in ok):
            bad.setdefault((func, kind), line.strip())
    counts["simd_functions"] = len(simd_funcs)
    return arch, bad, counts


def main():
    args = sys.argv[1:]
    objdump = "objdump"
    if len(args) >= 2 and args[0] == "--objdump":
        objdump, args = args[1], args[2:]
    if not args:
        sys.exit(__doc__)
    failed = False
    for path in args:
        arch, bad, counts = scan(objdump, path)
        print(f"{path}: {arch}, {counts['functions']} functions, {counts['simd_functions']} with level-specific instructions")
        if counts["simd_functions"] == 0:
            print(f"  FAIL: no level-specific instruction at all: the per-ISA units are missing or the scan is broken")
            failed = True
        for (func, kind), example in sorted(bad.items()):
            print(f"  LEAK: {kind} instruction in {func}\n        {example}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
