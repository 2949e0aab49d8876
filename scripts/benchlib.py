"""Helpers shared by the benchmark scripts: timing a spawned command, percentiles."""

import os
import time


def percentile(samples, p):
    """The p-th percentile (nearest rank) of the samples."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def spawn_and_wait(argv, env):
    """Milliseconds from posix_spawn to reaping `argv` (stdout discarded); fails on a non-zero exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        start = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status = os.waitpid(pid, 0)
        elapsed = time.perf_counter_ns() - start
    finally:
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed ({status}): {' '.join(argv)}")
    return elapsed / 1e6
