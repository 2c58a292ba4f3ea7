#!/usr/bin/env python3
"""Where a faulting campaign's time went (issue 29): from a CUDAFUZZ_TRACE file and the
campaign's --out folder, the cases that took over STALL_MS (default 2000) in the worker, the
failing ones among them with their finding from the journals, and the worker starts that
waited longest. A fault that stalls every worker at once shows as one failing case whose
kernel time matches the passing cases' stalls around it.

    python3 ci/fault-stalls.py TRACE OUT_DIR
"""
import glob
import json
import os
import sys

trace, out = sys.argv[1], sys.argv[2]
stall_ms = int(os.environ.get("STALL_MS", "2000"))
events = [json.loads(line) for line in open(trace)]
cases = [e for e in events if "times" in e and "case" in e]
slow = [c for c in cases if c["times"]["supervised_us"] > stall_ms * 1000]
journal = {}
for path in glob.glob(os.path.join(out, "journal*.jsonl")):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        i = r.get("index", r.get("case", {}).get("index") if isinstance(r.get("case"), dict) else r.get("case"))
        if isinstance(i, int):
            journal.setdefault(i, []).append(r)
print(f"{len(cases)} cases, {len(slow)} over {stall_ms} ms")
for c in slow:
    t = {k[:-3]: v // 1000 for k, v in c["times"].items() if v >= 1000}
    start = c["ms"] - c["times"]["supervised_us"] // 1000
    line = f"  case {c['case']} {c['outcome']} {start}..{c['ms']} ms pushed={c['pushed']} {t}"
    if c["outcome"] != "pass":
        for r in journal.get(c["case"], [])[:2]:
            text = json.dumps(r.get("findings", r.get("verdict", r)))[:400]
            line += f"\n      {text}"
    print(line)
ready = sorted((e["ms"] - e["spawned_ms"], e["spawned_ms"], e["ms"]) for e in events if e.get("event") == "worker_ready")
print("slowest worker starts (ms, spawned, ready):", ready[-5:])
