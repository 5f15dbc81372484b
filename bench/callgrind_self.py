"""Self instruction counts (Ir) per object and function, summed over callgrind output files.

Used by bench/hook_instructions.sh: reads callgrind's text format (compressed names, `calls=` lines
whose next cost line is a callee's inclusive cost and is left out of the caller's own), and prints one
line per object and function: `Ir<TAB>object<TAB>function`, largest first. With `--outside REGEX`, adds
one line per object matching REGEX: `Ir<TAB>object<TAB>(calls out)`, the inclusive cost of the calls its
functions make into objects that do not match (a tracer's calls into the C library: uftrace's
`clock_gettime`, `pthread_getspecific`). Not a general callgrind reader: it knows the one event (Ir)
that `valgrind --tool=callgrind` records by default, and positions by line only.

Usage: python3 callgrind_self.py [--outside REGEX] FILE...
"""

import collections
import re
import sys

NAMED = re.compile(r"^\((\d+)\)(?: (.*))?$")


def resolve(table, value):
    """Resolves callgrind's name compression: `(id) name` defines, `(id)` refers."""
    m = NAMED.match(value)
    if not m:
        return value
    if m.group(2) is not None:
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), value)


def self_costs(path, totals, outside):
    objects, functions = {}, {}
    ob = fn = cob = None
    after_calls = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if after_calls:
                    after_calls = False  # the callee's inclusive cost: not this function's own
                    callee = cob if cob is not None else ob
                    cob = None
                    if outside and outside.search(ob or "") and not outside.search(callee or ""):
                        totals[(ob, "(calls out)")] += int(line.split()[1])
                    continue
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    totals[(ob, fn)] += int(parts[1])
                continue
            key, _, value = line.partition("=")
            if key == "ob":
                ob = resolve(objects, value)
            elif key == "fn":
                fn = resolve(functions, value)
            elif key == "cob":
                cob = resolve(objects, value)
            elif key == "cfn" or key == "cfi" or key == "cfl":
                if key == "cfn":
                    resolve(functions, value)
            elif key == "calls":
                after_calls = True


def main():
    args = sys.argv[1:]
    outside = None
    if args[:1] == ["--outside"]:
        outside = re.compile(args[1])
        args = args[2:]
    totals = collections.Counter()
    for path in args:
        self_costs(path, totals, outside)
    for (ob, fn), ir in totals.most_common():
        print(f"{ir}\t{ob}\t{fn}")


if __name__ == "__main__":
    main()
