#!/usr/bin/env python3
"""Lists llama-server's command-line flags from llama.cpp's common/arg.cpp: one line per option,
`names|negated names|value`, for keeping tools/tandem/llama_flags.cpp in step with llama.cpp releases.
Reads the facts (names, whether a value follows); writes no llama.cpp code.

    python3 scripts/llama_server_flags.py /path/to/llama.cpp/common/arg.cpp
"""
import re
import sys


def split_top(s):
    """Splits the argument list of a call at top-level commas (strings, braces, parens, lambdas respected)."""
    out, depth, cur, i, in_str = [], 0, '', 0, False
    while i < len(s):
        c = s[i]
        if in_str:
            cur += c
            if c == '\\':
                cur += s[i + 1]
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur += c
        elif c in '({[':
            depth += 1
            cur += c
        elif c in ')}]':
            if depth == 0:
                out.append(cur)
                return out, i
            depth -= 1
            cur += c
        elif c == ',' and depth == 0:
            out.append(cur)
            cur = ''
        else:
            cur += c
        i += 1
    return out, i


def main(path):
    src = open(path).read()
    pos = 0
    while True:
        k = src.find('add_opt(common_arg(', pos)
        if k < 0:
            break
        args, end = split_top(src[k + len('add_opt(common_arg('):])
        rest = src[k + len('add_opt(common_arg(') + end:k + len('add_opt(common_arg(') + end + 400]
        pos = k + 1
        ex = re.match(r'\)\s*\.set_examples\(\{([^}]*)\}', rest) or re.search(r'set_examples\(\{([^}]*)\}', rest.split('add_opt(')[0])
        examples = ex.group(1) if ex else 'ALL'
        if 'SERVER' not in examples and 'COMMON' not in examples and examples != 'ALL':
            continue
        args = [a.strip() for a in args]
        names = re.findall(r'"([^"]+)"', args[0])
        neg = []
        i = 1
        if args[1].startswith('{'):
            neg = re.findall(r'"([^"]+)"', args[1])
            i = 2
        # a value hint is a string argument followed by another string (the help) before the handler
        strings = []
        for a in args[i:]:
            if a.startswith('"') or a.startswith('string_format') or a.startswith('std::string'):
                strings.append(a)
            else:
                break
        handler = ' '.join(args[i + len(strings):])
        takes_value = len(strings) >= 2 or ('const std::string' in handler or 'const std::string &' in handler or 'int value' in handler)
        takes_value = takes_value and not neg
        print('%s|%s|%s' % (' '.join(names), ' '.join(neg), 'value' if takes_value else 'flag'))


if __name__ == '__main__':
    main(sys.argv[1])
