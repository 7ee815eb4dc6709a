#!/usr/bin/env python3
"""Prints the last `cargo bench -p grl-client --bench decision` run as a Markdown table, with the
ratios the GRL issue sets targets on. Reads criterion's estimates under target/criterion.

    GRL_TEST_REDIS_SERVER=/usr/bin/redis-server cargo bench -p grl-client --bench decision
    python3 grl/client/benches/decision_summary.py
"""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion") / "decide"


def median_ns(name):
    f = root / name.replace("/", "_") / "new" / "estimates.json"
    if not f.exists():
        return None
    return json.loads(f.read_text())["median"]["point_estimate"]


names = [
    "grl/1 thread",
    "grl/2 threads same pair",
    "grl/2 threads distinct pairs",
    "governor keyed/1 thread",
    "governor keyed/2 threads same key",
    "governor keyed/2 threads distinct keys",
    "redis INCR+EXPIRE/1 thread, cpus may idle",
    "redis INCR+EXPIRE/1 thread, cpus kept awake",
]
m = {n: median_ns(n) for n in names}
print("| case | median |")
print("|---|---|")
for n in names:
    if m[n] is not None:
        v = m[n]
        print(f"| {n} | {v / 1000:.2f} µs |" if v > 10_000 else f"| {n} | {v:.2f} ns |")
grl = m["grl/1 thread"]
print()
print(f"- grl / governor keyed, 1 thread: {grl / m['governor keyed/1 thread']:.2f}x")
for n in names[1:3]:
    print(f"- 2-thread throughput / 1-thread, {n[4:]}: {grl / m[n]:.2f}x")
for n in names[4:6]:
    g1 = m["governor keyed/1 thread"]
    print(f"- governor 2-thread throughput / 1-thread, {n[15:]}: {g1 / m[n]:.2f}x")
for n in names[6:]:
    if m[n] is not None:
        print(f"- {n} / grl: {m[n] / grl:,.0f}x")
