"""What each step of a forked Python run's own set-up costs the child, outside any sandbox:
`python3 scripts/fork_steps.py [--runs N] [--resolved]`. An interpreter importing what sandlot's template imports
forks N children per row; each runs `print(1)` after the row's steps, done as python_template.py does them (the
steps that need the run's namespaces, cgroups and uid are left out), and exits. Prints the children's minor faults
and CPU (user + system, from wait4) per child. `--resolved`: the ctypes functions are looked up before the forks, as
a template could."""

import argparse
import atexit
import builtins
import ctypes
import gc
import json
import os
import random
import resource
import signal
import sys
import threading
import types

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
RUN = json.dumps({
    "uid": 1000, "gid": 1000, "command": ["python3", "-c", "print(1)"], "cwd": "/tmp",
    "rlimits": [["RLIMIT_NOFILE", 1024, 1024], ["RLIMIT_CORE", 0, 0], ["RLIMIT_NPROC", 512, 512]],
    "program": {"code": "print(1)"}, "env": [["PATH", "/usr/bin"], ["HOME", "/tmp"], ["LANG", "C.UTF-8"]],
    "argv": ["-c"], "path0": "", "seccomp": "00" * 8 * 150, "landlock": True, "writable": ["/tmp"]})


class RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock(writable):
    """A ruleset with python_template.py's rules, not entered (entering it would confine this benchmark)."""
    attr = RulesetAttr((1 << 16) - 1, 0, 0)
    ruleset = libc.syscall(444, ctypes.byref(attr), 16, 0)
    for path in ("/", "/dev/null", "/dev/zero", "/dev/full", *writable):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        os.path.isdir(path)
        rule = PathBeneath(1 | 4 | 8, fd)
        libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0)
        os.close(fd)
    os.close(ruleset)


def child(steps):
    os.dup2(os.open("/dev/null", os.O_WRONLY), 1)
    run = json.loads(RUN) if steps else None
    if "prctl" in steps:  # dumpable, the bounding set, capset's buffers
        libc.prctl(4, 1, 0, 0, 0)
        for cap in range(41):
            libc.prctl(24, cap, 0, 0, 0)
        (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
    if "seccomp" in steps:  # the filter's buffer, not installed
        ctypes.create_string_buffer(bytes.fromhex(run["seccomp"]), len(run["seccomp"]) // 2)
    if "landlock" in steps:
        landlock(run["writable"])
    if "environment" in steps:
        os.environ.clear()
        random.seed()
        os.environ.update(dict(run["env"]))
    if "rlimits" in steps:
        for name, soft, hard in run["rlimits"]:
            resource.setrlimit(getattr(resource, name), (soft, hard))
    if "session" in steps:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.setsid()
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    exec(compile("print(1)", "<string>", "exec"), main.__dict__)
    if "finish" in steps:
        threading._shutdown()
        atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--resolved", action="store_true")
    args = parser.parse_args()
    if args.resolved:
        libc.prctl, libc.unshare, libc.setns  # noqa: B018 - looked up (and cached by ctypes) before the forks
    gc.collect()
    gc.freeze()
    steps = ["prctl", "seccomp", "landlock", "environment", "rlimits", "session", "finish"]
    rows = [[], ["json"]] + [["json", step] for step in steps] + [["json", *steps]]
    print(f"{'steps (each row also reads the run JSON but the first)':60s} {'faults':>7s} {'CPU ms':>7s}")
    for row in rows:
        faults, cpu = 0, 0.0
        for _ in range(args.runs):
            pid = os.fork()
            if pid == 0:
                child(set(row))
            _, _, usage = os.wait4(pid, 0)
            faults += usage.ru_minflt
            cpu += usage.ru_utime + usage.ru_stime
        print(f"{' + '.join(row) or 'fork, print(1), exit':60s} {faults / args.runs:7.0f} {cpu / args.runs * 1000:7.3f}")


if __name__ == "__main__":
    main()
