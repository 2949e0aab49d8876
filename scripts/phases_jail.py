#!/usr/bin/env python3
"""Reads the timestamps scripts/phases-jail.sh collected and prints the median µs after the command's main at each
step, per build (and the difference when there are two).

Usage: phases_jail.py LOG REV [REV]
"""

import statistics
import sys


def main():
    log, revs = sys.argv[1], sys.argv[2:]
    runs = {i: [] for i in range(len(revs))}
    current, base, tag = None, 0, 0
    for line in open(log):
        label, value = line.split()
        if label == "tag":
            tag = int(value)
            continue
        ns = int(value)
        if label == "c.main":  # the command's main: a new run
            current, base = {}, ns
            runs[tag].append(current)
        if current is not None:
            current[label] = (ns - base) / 1000

    def median(builds_runs, label):
        values = [run[label] for run in builds_runs if label in run]
        return statistics.median(values) if values else float("nan")

    labels = sorted({label for build in runs.values() for run in build for label in run},
                    key=lambda label: median(runs[0], label))
    header = "".join(f"{rev[:12]:>14}" for rev in revs) + ("      B - A" if len(revs) == 2 else "")
    print(f"{len(runs[0])} runs each; median µs after the command's main (c. command, i. init, s. skeleton, p. pid 1, w. worker)")
    print(f"{'step':18}{header}")
    for label in labels:
        values = [median(runs[i], label) for i in range(len(revs))]
        row = "".join(f"{value:14.0f}" for value in values)
        if len(values) == 2:
            row += f"{values[1] - values[0]:11.0f}"
        print(f"{label:18}{row}")


if __name__ == "__main__":
    main()
