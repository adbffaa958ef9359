#!/usr/bin/env python3
"""How far deployment precision reorders candidates (issue 36, item 5).

Reads two `hilnas latency collect` CSVs of the same architectures (same
space, --n and --seed) measured at two precisions, matches rows by
architecture and prompt length, and prints per metric (TTFT, decode):
Kendall's tau-b between the two precisions' latencies, the range of the
latency ratio B/A with the shapes at either end, and how many pairs of
architectures swap order.

  python3 bench/precision_tau.py A.csv B.csv

A value is the geometric mean of an architecture's passes. Only the
standard library: the tau is the O(n^2) definition (n is a few hundred).
"""
import csv
import math
import sys
from collections import defaultdict


def read(path):
    values = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        for r in rows:
            key = (int(r["num_layers"]), int(r["d_model"]), int(r["d_ffn"]), r["pattern"],
                   int(r["prompt_tokens"]))
            for metric in ("ttft_ms", "decode_ms"):
                values[metric][key].append(float(r[metric]))
    return {m: {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in d.items()}
            for m, d in values.items()}


def tau_b(x, y):
    concordant = discordant = tie_x = tie_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tie_x += 1
            elif dy == 0:
                tie_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + tie_x) * (concordant + discordant + tie_y))
    return (concordant - discordant) / denom, discordant, concordant + discordant


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: precision_tau.py A.csv B.csv")
    a, b = read(sys.argv[1]), read(sys.argv[2])
    print(f"A: {sys.argv[1]}\nB: {sys.argv[2]}\n")
    print("| metric | architectures | Kendall tau-b (A vs B) | pairs swapped | B/A min (shape) "
          "| B/A max (shape) |")
    print("|---|---:|---:|---:|---|---|")
    for metric in ("ttft_ms", "decode_ms"):
        keys = sorted(set(a[metric]) & set(b[metric]))
        if len(keys) < 3:
            sys.exit(f"precision_tau.py: {len(keys)} architectures in both files")
        x = [a[metric][k] for k in keys]
        y = [b[metric][k] for k in keys]
        tau, swapped, pairs = tau_b(x, y)
        ratios = sorted((y[i] / x[i], keys[i]) for i in range(len(keys)))

        def shape(k):
            return f"{k[0]} x {k[1]}, ffn {k[2]}, {k[3]}"

        lo, hi = ratios[0], ratios[-1]
        print(f"| {metric} | {len(keys)} | {tau:.3f} | {swapped} of {pairs} ({100 * swapped / pairs:.1f}%) "
              f"| {lo[0]:.3f} ({shape(lo[1])}) | {hi[0]:.3f} ({shape(hi[1])}) |")


if __name__ == "__main__":
    main()
