#!/usr/bin/env python3
"""Stack completeness and self time of one profile, for bench/bpf.sh.

  bpf_compare.py perf PERF.DATA           reads `perf script` of a perf.data
  bpf_compare.py ft TRACE FERROTRACE      reads `ferrotrace dump --format folded` and `report --json`

Prints one JSON object: samples, complete (share of samples whose stack holds `main` or a thread's
start), self (share of samples per function whose own code ran, names without Rust hashes).
"""
import json
import re
import subprocess
import sys
from collections import Counter

ROOTS = {"main", "_start", "start_thread", "__clone3", "clone3", "__clone", "clone"}
HASH = re.compile(r"::h[0-9a-f]{16}$")


def norm(name):
    name = name.split("+0x")[0]
    return HASH.sub("", name.strip())


def perf(data):
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,tid,ip,sym", "--no-inline"],
        capture_output=True, text=True, check=True).stdout
    samples = complete = 0
    self_ = Counter()
    for block in out.split("\n\n"):
        lines = [l for l in block.split("\n") if l.strip()]
        if not lines:
            continue
        frames = [norm(l.strip().split(None, 1)[1]) if len(l.strip().split(None, 1)) > 1 else "[unknown]"
                  for l in lines[1:]]
        samples += 1
        if any(f in ROOTS for f in frames):
            complete += 1
        # The leaf's own function: the first user or kernel frame.
        self_[frames[0] if frames else "[unknown]"] += 1
    return samples, complete, self_


def ft(trace, exe):
    folded = subprocess.run([exe, "dump", "--format", "folded", "-i", trace],
                            capture_output=True, text=True, check=True).stdout
    samples = complete = 0
    for line in folded.splitlines():
        stack, n = line.rsplit(" ", 1)
        n = int(n)
        samples += n
        if any(f in ROOTS for f in stack.split(";")):
            complete += n
    report = json.loads(subprocess.run([exe, "report", "--json", "-i", trace],
                                       capture_output=True, text=True, check=True).stdout)
    self_ = Counter({norm(f["function"]): f["self"] for f in report["functions"] if f["self"]})
    return samples, complete, self_


if __name__ == "__main__":
    if sys.argv[1] == "perf":
        s, c, selfc = perf(sys.argv[2])
    else:
        s, c, selfc = ft(sys.argv[2], sys.argv[3])
    total = sum(selfc.values()) or 1
    print(json.dumps({
        "samples": s,
        "complete": c / s if s else 0.0,
        "self": {k: v / total for k, v in selfc.items()},
    }))
