#!/usr/bin/env python3
"""How long a finding takes to reach the screen, and to be named (issue 29's latency table).

Runs `cudafuzz fuzz --kernel K --stop-after 1 --jobs 3` on every kernel given, PARALLEL
campaigns at a time, each with its own CUDAFUZZ_TRACE, then reads the traces:

- shown: from the verdict of the first finding's case (the pool's `verdict` event) to its
  `found_early` event (a failed case shown while earlier cases are still out) or its
  `new_finding` event, whichever comes first: each is written where a `FOUND` line is printed;
- named: from that verdict to the first line that says which bug it is (`new_bug`, `named`,
  `named_known`) or that nothing could name it (`not_named`, `not_yet_named`).

Prints one row per campaign and the median and maximum of each, last.

With --wraps, each campaign instead runs its first 256 cases (`--cases 256 --escalate none`,
no --stop-after), where every tensor that can be pushed past 2^31 elements is pushed once, and
the table gives, per pushed tensor, its case, the outcome and when its verdict came. A kernel
given as `PATH:x,y` indexes only those tensors in 32 bits: the others' pushed cases may pass.

    python3 ci/latency.py --bin .gpu/bin/cudafuzz --out DIR kernels/mutants/*.toml kernels/attention/fa_s512.toml
    python3 ci/latency.py --wraps --bin .gpu/bin/cudafuzz --out DIR kernels/mutants/int32_offset.toml
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

NAMING = ("new_bug", "named", "named_known", "not_named")


def campaign(binary, kernel, out, extra, wraps=False):
    kernel = kernel.split(":")[0]
    name = os.path.splitext(os.path.basename(kernel))[0]
    trace = os.path.join(out, f"trace-{name}.jsonl")
    log = os.path.join(out, f"fuzz-{name}.log")
    if os.path.exists(trace):
        os.remove(trace)
    env = dict(os.environ, CUDAFUZZ_TRACE=trace)
    stop = ["--cases", "256", "--escalate", "none"] if wraps else ["--stop-after", "1"]
    cmd = [binary, "fuzz", "--kernel", kernel, "--jobs", "3", "--out", os.path.join(out, f"out-{name}")] + stop + extra
    started = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    return name, rc, time.monotonic() - started, trace, log


def read_trace(path):
    events = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except OSError:
        pass
    return events


def timings(events):
    """(case, shown_s, named_s, how it was named) for the campaign's first finding, or None."""
    verdict_ms = {}
    for e in events:
        if e.get("event") == "verdict" and e.get("index") is not None:
            verdict_ms.setdefault(e["index"], e["ms"])
    found = next((e for e in events if e.get("event") in ("found_early", "new_finding")), None)
    if found is None:
        return None
    case = found["index"]
    at = verdict_ms.get(case)
    if at is None:
        return None
    named = next((e for e in events if e.get("event") in NAMING and e.get("index") == case), None)
    how = None if named is None else named["event"]
    if named is None:
        # Its bug announced under the first case it was filed from, an earlier or later one.
        named = next((e for e in events if e.get("event") == "new_bug"), None)
        how = None if named is None else f"new_bug (case #{named.get('index')})"
    if named is None:
        named = next((e for e in events if e.get("event") == "not_yet_named"), None)
        how = None if named is None else "not_yet_named"
    named_s = None if named is None else (named["ms"] - at) / 1000
    return case, (found["ms"] - at) / 1000, named_s, how


def wraps_table(results, kernels):
    """Per pushed tensor: its case, outcome and verdict time; 0 when every one the kernel indexes
    in 32 bits failed within 60 s."""
    bad = 0
    print(f"{'kernel':34} {'tensor':8} {'case':>5} {'outcome':8} {'at s':>6}")
    for (name, rc, took, trace, _log), given in zip(results, kernels):
        narrow = set(given.split(":")[1].split(",")) if ":" in given else None
        events = read_trace(trace)
        verdict_ms = {e["index"]: e["ms"] for e in events if e.get("event") == "verdict" and e.get("index") is not None}
        pushed = [e for e in events if e.get("pushed")]
        if not pushed:
            print(f"{name:34} {'-':8} {'-':>5} {'none':8} {'-':>6}  (exit {rc}, {took:.1f} s)")
            bad += 1
        for e in pushed:
            at = verdict_ms.get(e["case"], e["ms"]) / 1000
            if narrow is not None and e["pushed"] not in narrow:
                print(f"{name:34} {e['pushed']:8} {e['case']:>5} {e['outcome']:8} {at:>6.1f}  (not indexed in 32 bits)")
                continue
            ok = e["outcome"] == "fail" and at <= 60
            bad += not ok
            print(f"{name:34} {e['pushed']:8} {e['case']:>5} {e['outcome']:8} {at:>6.1f}{'' if ok else '  <-'}")
    print()
    print(f"wraps: {'every pushed tensor failed within 60 s' if bad == 0 else f'{bad} pushed tensor(s) not found within 60 s'}")
    return 0 if bad == 0 else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--parallel", type=int, default=5)
    p.add_argument("--time", default="120s", help="each campaign's --time")
    p.add_argument("--wraps", action="store_true", help="the first 256 cases, per pushed tensor")
    p.add_argument("--read", action="store_true", help="only read the traces an earlier run left in --out")
    p.add_argument("kernels", nargs="+")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    extra = ["--time", a.time]
    if a.read:
        names = [os.path.splitext(os.path.basename(k.split(":")[0]))[0] for k in a.kernels]
        results = [(n, "-", 0.0, os.path.join(a.out, f"trace-{n}.jsonl"), None) for n in names]
    else:
        with ThreadPoolExecutor(a.parallel) as pool:
            results = list(pool.map(lambda k: campaign(a.bin, k, a.out, extra, a.wraps), a.kernels))
    if a.wraps:
        return wraps_table(results, a.kernels)
    shown, named = [], []
    print(f"{'kernel':34} {'exit':>4} {'case':>6} {'shown s':>8} {'named s':>8}  named by / campaign")
    for name, rc, took, trace, _log in results:
        t = timings(read_trace(trace))
        if t is None:
            print(f"{name:34} {rc:>4} {'-':>6} {'-':>8} {'-':>8}  no finding ({took:.1f} s)")
            continue
        case, s, n, how = t
        shown.append(s)
        if n is not None:
            named.append(n)
        n_txt = "-" if n is None else f"{n:.2f}"
        print(f"{name:34} {rc:>4} {case:>6} {s:>8.2f} {n_txt:>8}  {how or 'never'} / {took:.1f} s")
    print()
    found = len(shown)
    if shown:
        print(f"latency: {found}/{len(results)} campaigns found; shown median {statistics.median(shown):.2f} s, max {max(shown):.2f} s")
    if named:
        print(f"latency: named in {len(named)}/{found}: median {statistics.median(named):.2f} s, max {max(named):.2f} s")
    return 0 if found == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
