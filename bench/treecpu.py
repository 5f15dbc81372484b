#!/usr/bin/env python3
"""treecpu.py CMD ARGS...: runs CMD, passes its standard output on, then prints `tree_us=N`, the CPU
time (user + system, microseconds) of CMD and of every process under it that was waited for (the
RUSAGE_CHILDREN of this process: a traced program, its tracer's threads and helper processes)."""
import os
import resource
import subprocess
import sys

before = resource.getrusage(resource.RUSAGE_CHILDREN)
rc = subprocess.run(sys.argv[1:]).returncode
after = resource.getrusage(resource.RUSAGE_CHILDREN)
us = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e6
sys.stdout.flush()
print(f"tree_us={int(us)}")
sys.exit(rc)
