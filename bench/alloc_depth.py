#!/usr/bin/env python3
"""Mean depth of allocation stacks, one figure per allocation (frames per recorded stack, weighted by
the allocations made from it).

  alloc_depth.py folded FILE     ferrotrace flame --weight allocations --folded output
  alloc_depth.py heaptrack FILE  a heaptrack data file (.zst): trace-tree depth of each `+` line

Prints: allocations mean-depth share-of-allocations-with-depth<=2
"""
import subprocess
import sys


def folded(path):
    n = total = shallow = 0
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, count = line.rsplit(" ", 1)
        count = int(count)
        depth = stack.count(";") + 1
        n += count
        total += depth * count
        shallow += count if depth <= 2 else 0
    return n, total, shallow


def heaptrack(path):
    raw = subprocess.run(["zstdcat", path], check=True, capture_output=True, text=True).stdout
    parents = [None]  # trace 0: the root
    depth = [0]
    infos = []
    n = total = shallow = 0
    for line in raw.splitlines():
        tag = line[:2]
        if tag == "t ":
            parent = int(line.split()[2], 16)
            parents.append(parent)
            depth.append(depth[parent] + 1)
        elif tag == "a ":
            infos.append(int(line.split()[2], 16))
        elif tag == "+ ":
            d = depth[infos[int(line[2:], 16)]]
            n += 1
            total += d
            shallow += 1 if d <= 2 else 0
    return n, total, shallow


n, total, shallow = {"folded": folded, "heaptrack": heaptrack}[sys.argv[1]](sys.argv[2])
print(f"{n} {total / max(n, 1):.2f} {shallow / max(n, 1):.3f}")
