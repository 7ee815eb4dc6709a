#!/usr/bin/env python3
"""Writes a config repo of 10 services x N buckets (N <= 100) for the `rlc run` scale benchmark.

Usage: scale_config.py N DIR [POLICY]   (then `git init -b main DIR && git -C DIR add -A && git -C DIR commit -m seed`)
The buckets match the series `cargo bench -p rlc --bench source` backfills into
target/bench-source-prom (10 services svc0..svc9, callers c0..c4, procedures Api<s>/m0..m4).
"""
import sys, os, subprocess
n_per = int(sys.argv[1]); out = sys.argv[2]
# POLICY is the flow mapping every bucket gets, e.g. "{ kind: auto, window: 28d }".
policy = sys.argv[3] if len(sys.argv) > 3 else "{ kind: historical-peak, window: 28d, buffer: 0.25 }"
os.makedirs(out + "/services", exist_ok=True)
for s in range(10):
    rules = []
    for c in range(5):
        for p in range(5):
            rules.append((f"c{c}", f"Api{s}/m{p}"))
    for c in range(5):
        for p in range(5):
            rules.append((f"c{c}", f"Api{s}/m{p}*"))
    for c in range(5):
        rules += [(f"c{c}", None), (f"c{c}", f"Api{s}/*"), (f"c{c}", f"Api{s}/m*"), (f"c{c}", "Api*"), (f"c{c}", "A*"), (f"c{c}", "Ap*"), (f"c{c}", f"Api{s}*")]
    for p in range(5):
        rules += [(None, f"Api{s}/m{p}"), (None, f"Api{s}/m{p}*")]
    rules += [(None, f"Api{s}/*"), (None, "Api*"), (None, "A*"), (None, "Ap*"), (None, f"Api{s}*")]
    # order: interleave so a prefix of the list covers every kind
    rules = rules[:n_per] if n_per <= len(rules) else rules
    lines = [f"service: svc{s}", "buckets:"]
    for i, (c, p) in enumerate(rules):
        m = []
        if c: m.append(f"caller: {c}")
        if p: m.append(f'procedure: "{p}"')
        lines += [f"  - name: b{i}", "    match: { " + ", ".join(m) + " }", "    scope: global", "    mode: deny", "    policy: " + policy]
    open(f"{out}/services/svc{s}.yaml", "w").write("\n".join(lines) + "\n")
print(sum(1 for _ in open(f"{out}/services/svc0.yaml")) )
