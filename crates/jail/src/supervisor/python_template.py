# sandlot's Python template: one interpreter, started once with the preloaded modules imported, that forks a
# child per run into that run's fresh sandbox (built by the jail as for any run) and never runs code itself.
#
# Wire: fd 3 is a SOCK_SEQPACKET socket to the supervisor. The template says b"ready" once its imports are done.
# Each request is one message whose bytes are b"r" and whose descriptors (SCM_RIGHTS) are, in order: the setup
# pipe (the child reads the run's JSON from it), the status pipe (the template writes "p <pid>", then "e <code> <cpu>"
# or "s <signal> <cpu>", cpu in seconds; the child writes "f <why>" if its setup fails, and "r" just before the run's
# code may run), a pidfd of the run's pid 1, the program's stdin,
# stdout and stderr, and the run's cgroup.procs files. The template itself reads nothing of the run: what the run
# is (its uid, limits, environment) reaches only the child, so no run's data is ever in the template's memory for
# a later run to find.
#
# A prepared sandbox's child (message b"p") is forked before its run exists: its descriptors are the same, with its
# job socket (SOCK_SEQPACKET) after stderr, before the cgroup.procs files; its setup JSON says only who it is. It
# confines itself as far as it can without the run, writes "w" on the status pipe and waits for one message on the
# job socket: a memfd with the rest of the run's JSON and the conversation's tree, which it mounts at /data while it
# still holds its capabilities inside the sandbox; then it goes on as any child.
#
# The modules the child needs are imported here, once. Invariants: the template is single-threaded (forks and setns need it); it holds no descriptor but its socket and
# its own pid namespace between requests; a child closes everything of the template's before the run's code runs.
import atexit
import builtins
import ctypes
import gc
import io
import json
import os
import random
import resource
import select
import signal
import socket
import sys
import threading
import types

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
SYS_CAPSET = 126
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
SYS_CLOSE_RANGE = 436
SYS_MOVE_MOUNT = 429
MOVE_MOUNT_F_EMPTY_PATH = 0x4
AT_FDCWD = -100

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(result, what):
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def setns(fd, flags, what):
    check(libc.setns(fd, flags), what)


def preload(names):
    for name in filter(None, names.split(",")):
        try:
            __import__(name.strip())
        except Exception as error:  # a module that is missing or broken is simply not preloaded
            print(f"info: not preloading {name}: {error}", file=sys.stderr, flush=True)
    if "matplotlib.pyplot" in sys.modules:
        # pyplot picks its backend on first use, trying every GUI toolkit first: pick it once, here, as a run would
        # (no display: Agg).
        sys.modules["matplotlib"].get_backend()


def serve(sock):
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    children = {}  # pidfd -> (pid, status pipe)
    # What every fork needs (CAP_SYS_ADMIN, in a server that is root): tried once, so that a template that cannot
    # fork never says it is ready.
    setns(own_pidns, CLONE_NEWPID, "setns into the template's own pid namespace")
    gc.collect()
    gc.freeze()  # the children's collections then leave the template's objects (and their pages) alone
    sock.send(b"ready")
    while True:
        for fd, _ in poller.poll():
            if fd == sock.fileno():
                message, fds, _, _ = socket.recv_fds(sock, 16, 64)
                if not message:
                    os._exit(0)  # the supervisor is gone
                start_child(sock, own_pidns, message == b"p", fds, poller, children)
            else:
                pid, status = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, code, usage = os.wait4(pid, 0)
                end = f"s {os.WTERMSIG(code)}" if os.WIFSIGNALED(code) else f"e {os.waitstatus_to_exitcode(code)}"
                # The CPU the child and what it reaped used: a v1 cgroup does not count it, and it is reaped here,
                # not by the sandbox's pid 1.
                write_line(status, f"{end} {usage.ru_utime + usage.ru_stime:.6f}")
                os.close(status)


def write_line(fd, line):
    try:
        os.write(fd, (line + "\n").encode())
    except OSError:
        pass  # the supervisor stopped listening (the run was killed): nothing to tell


def start_child(sock, own_pidns, prepared, fds, poller, children):
    if len(fds) < (7 if prepared else 6):
        for fd in fds:
            os.close(fd)
        return
    status, pid1 = fds[1], fds[2]
    try:
        # The child is born in the run's pid namespace; the template's own children stay in its own.
        setns(pid1, CLONE_NEWPID, "setns into the run's pid namespace")
    except OSError as error:
        write_line(status, f"f {error}")
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:
        child(sock, own_pidns, prepared, fds)  # never returns
    try:
        setns(own_pidns, CLONE_NEWPID, "setns back into the template's pid namespace")
    except OSError as error:
        print(f"sandlot template: {error}", file=sys.stderr)
        os._exit(1)  # the supervisor starts another
    for fd in fds:
        if fd != status:
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = (pid, status)
    poller.register(pidfd, select.POLLIN)
    write_line(status, f"p {pid}")


def child(sock, own_pidns, prepared, fds):
    status = fds[1]
    step = "read the run"
    try:
        run = read_run(fds[0])
        step = "set up the run"
        run_child(sock, own_pidns, prepared, fds, run)  # runs the code and exits, or raises before the code runs
    except BaseException as error:  # noqa: BLE001 - any failure before the code runs is the setup's
        write_line(status, f"f {step}: {error}")
        os._exit(126)


def read_run(fd):
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks))


def run_child(sock, own_pidns, prepared, fds, run):
    status, pid1, stdin, stdout, stderr = fds[1:6]
    job, cgroups = (fds[6], fds[7:]) if prepared else (None, fds[6:])
    sock.close()
    os.close(own_pidns)
    # What the template held for its other children (their status pipes, pidfds): a copy here would keep a status
    # pipe open after its child and template are gone, and a prepared child waits long.
    close_all_but([0, 1, 2, *fds[1:]])
    # As root on the host: the command line an exec'd run would have (the template's is not the run's business),
    # the network namespace (made by root, so only root may enter it), the run's cgroups.
    set_command_line([PREPARED_COMMAND_LINE] if prepared else run["command"])
    setns(pid1, CLONE_NEWNET, "setns into the run's network namespace")
    for procs in cgroups:
        os.write(procs, b"0")
        os.close(procs)
    uid, gid = run["uid"], run["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # every capability on the host is gone from here on
    check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    # As the run's uid, which owns the run's user namespace: its namespaces, with every capability inside it.
    setns(pid1, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS, "setns into the run's namespaces")
    os.close(pid1)
    if cgroups:
        check(libc.unshare(CLONE_NEWCGROUP), "unshare the cgroup namespace")
    for target, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, target)
        os.close(fd)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.setsid()
    drop_bounding_set()
    # Everything that does not need the run's particulars, before they come (a prepared child waits after this).
    seccomp = seccomp_program(bytes.fromhex(run["seccomp"]))
    ruleset = landlock_ruleset(run["scoped"])
    fresh_state()
    compiled = None
    if job is not None:
        warm_up()
        compiled = precompile(run["command"])
        write_line(status, "w")
        run.update(wait_for_job(job))
        set_command_line(run["command"], rewritten=True)
    for name, soft, hard in run["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    os.chdir(run["cwd"])
    if "source" in run["program"]:
        write_program(run["program"])
    drop_capabilities()
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if ruleset is not None and run["landlock"]:
        restrict(ruleset, run["writable"])
    if status > 3:
        check(libc.syscall(SYS_CLOSE_RANGE, 3, status - 1, 0), "close_range")
    check(libc.syscall(SYS_CLOSE_RANGE, status + 1, 0xFFFFFFFF, 0), "close_range")
    install_seccomp(seccomp)
    write_line(status, "r")  # from here on the run's code may run: a failure is no longer the setup's
    if run["says_its_end"]:
        status = move_to_3(status)
    else:
        os.close(status)
        status = None
    take_environment(run)
    run_main(run["program"], status, compiled)


def argument_area():
    """Where the kernel finds this process's command line: `arg_start` and `arg_end` (fields 48 and 49 of stat(5)),
    the same in every child (a fork keeps the address space), so read once, by the template."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[45]), int(fields[46])


ARGUMENT_AREA = argument_area()


# What a prepared child shows as its command line until its run comes (operators, and the tests, tell the pool's
# sandboxes by it).
PREPARED_COMMAND_LINE = "sandlot: a prepared sandbox, waiting for its run"


def set_command_line(args, rewritten=False):
    """Shows `args` as this process's command line (`/proc/<pid>/cmdline`, `ps`), setproctitle's way: written over
    the template's own argument area (its source, far longer than any command line shown), the first NUL ending it,
    the area's last byte not a NUL (which tells the kernel the area was rewritten). `rewritten`: this process did
    that once already, so only the new line and its NUL are written. `PR_SET_MM` would need CAP_SYS_RESOURCE, which
    not every host grants."""
    start, end = ARGUMENT_AREA
    size = end - start
    if size < 2:
        return
    shown = " ".join(args).encode()[: size - 2]
    if rewritten:
        ctypes.memmove(start, shown + b"\0", len(shown) + 1)
        return
    area = shown + b"\0" * (size - len(shown) - 1) + b" "
    ctypes.memmove(start, area, size)


def close_all_but(keep):
    low = 0
    for fd in sorted(keep) + [0x7FFFFFFF]:
        if fd > low:
            check(libc.syscall(SYS_CLOSE_RANGE, low, fd - 1, 0), "close_range")
        low = fd + 1


def move_to_3(fd):
    """Moves `fd` to descriptor 3, close-on-exec (a run's program sees 0-2 and its status pipe there)."""
    if fd != 3:
        os.dup2(fd, 3, inheritable=False)
        os.close(fd)
    os.set_inheritable(3, False)
    return 3


def wait_for_job(job):
    """A prepared child's run: the rest of its JSON, from the memfd of the one message on `job`, with the
    conversation's tree mounted at /data (as the sandbox's root, which this process still is). A socket closed with
    no message: the sandbox was let go unused."""
    channel = socket.socket(fileno=job)
    message, fds, _, _ = socket.recv_fds(channel, 16, 2)
    channel.close()
    if not message or not fds:
        os._exit(0)
    rest = read_run(fds[0])
    for tree in fds[1:]:
        check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, b"/data", MOVE_MOUNT_F_EMPTY_PATH), "mount /data")
        os.close(tree)
    return rest


def write_program(program):
    """Writes a prepared run's code where a run's pid 1 would have (its owner, its mode)."""
    fd = os.open(program["file"], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(program["source"])


def drop_bounding_set():
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
            break  # past the kernel's last capability
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")


def drop_capabilities():
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    check(libc.syscall(SYS_CAPSET, header, data), "capset")


# Landlock, as the jail's worker applies it (`sandbox/landlock.rs`): read and execute everywhere, write under the
# writable directories, the harmless devices, and (ABI 6) no signals or abstract sockets out of the domain.
LANDLOCK_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
LANDLOCK_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read file, read dir
LANDLOCK_FILE = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # what applies to a file that is no directory
DEVICE_ACCESS = (1 << 0) | (1 << 2) | (1 << 1) | (1 << 15)  # read, write file, ioctl on devices
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")


class RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_ruleset(scoped):
    """A ruleset with the rules that name no run's place (read everywhere, the devices): `(fd, handled)`, or `None`
    without Landlock in this kernel (best effort, as the worker's)."""
    abi = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, 1)
    if abi < 1:
        return None
    handled = LANDLOCK_FS_BY_ABI[min(abi, 5)]
    attr = RulesetAttr(handled, 0, 3 if abi >= 6 and scoped else 0)
    size = 24 if abi >= 6 else 16  # the scoped field exists from ABI 6
    ruleset = check(libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0), "landlock ruleset")
    allow(ruleset, handled, "/", LANDLOCK_READ)
    for device in WRITABLE_DEVICES:
        allow(ruleset, handled, device, DEVICE_ACCESS)
    return ruleset, handled


def allow(ruleset, handled, path, access):
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            access &= LANDLOCK_FILE
        rule = PathBeneath(access & handled, fd)
        check(libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock rule {path}")
    finally:
        os.close(fd)


def restrict(ruleset, writable):
    """Enters the Landlock domain of `ruleset` with write access under `writable` (the run's places, attached by
    now: a rule binds to what is mounted at its path when it is added)."""
    fd, handled = ruleset
    for path in writable:
        allow(fd, handled, path, handled)
    check(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0), "landlock restrict")
    os.close(fd)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_program(program):
    """The filter `program` as the kernel takes it (`None`: no filter), its buffer kept alive with it."""
    if not program:
        return None
    buffer = ctypes.create_string_buffer(program, len(program))
    return buffer, SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))


def install_seccomp(filter):
    if filter is not None:
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(filter[1]), 0, 0), "seccomp")


def warm_up():
    """A prepared child, before its run comes, compiles and runs a little code of its own (its output goes nowhere):
    the interpreter's pages that doing so writes to (reference counts, allocator arenas) are copied from the
    template's now, not on the run's path."""
    sink = io.StringIO()
    code = "import sys\nfor n in range(3):\n    print('warm', n, [n] * 2, {'n': n}, file=sink)\n"
    exec(compile(code, "<warm-up>", "exec"), {"sink": sink})
    json.loads('{"warm": [1, "up"]}')


def fresh_state():
    """What a child must not share with the template or another child: the template's environment and random
    state (the child is used for one run only, so its own state is the run's)."""
    os.environ.clear()
    random.seed()  # also done by the module's own fork hook; said here so nobody needs to know that
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # the legacy global generator, seeded once at import in the template


def take_environment(run):
    """The run's environment and arguments."""
    os.environ.update(dict(run["env"]))
    sys.argv = run["argv"]
    sys.path[0] = run["path0"]  # as `python <file>` or `python -c` sets it


def precompile(command):
    """A prepared child whose command is `python -c CODE` (a live sandbox's session driver, forked ahead) compiles
    CODE while it waits, off its run's path: (CODE, its code object). Compiling runs nothing."""
    if len(command) == 3 and command[1] == "-c":
        return command[2], compile(command[2], "<string>", "exec")
    return None


def run_main(program, status, compiled=None):
    """Runs the program as `python <file>` (`{"file": path}`) or `python -c <code>` (`{"code": code}`) would. Its end
    is said on `status` ("x <code>"; `None`: the template says it) once its streams are closed, before the process
    frees its memory: the run's end need not wait for that (the program could write the word itself, which only
    ends its own run)."""
    main = types.ModuleType("__main__")
    if "file" in program:
        main.__file__ = program["file"]
    main.__builtins__ = builtins
    main.__cached__ = None
    sys.modules["__main__"] = main
    code, interrupted = 0, False
    try:
        if "file" in program:
            with open(program["file"], "rb") as source:
                compiled = compile(source.read(), program["file"], "exec")
        elif compiled is not None and compiled[0] == program["code"]:
            compiled = compiled[1]  # `precompile`'s, of this very code
        else:
            compiled = compile(program["code"], "<string>", "exec")
        exec(compiled, main.__dict__)
    except SystemExit as stop:
        code = exit_code(stop)
    except BaseException as error:  # noqa: BLE001 - the interpreter's own top level
        code = report(error)
        interrupted = isinstance(error, KeyboardInterrupt)
    code = finish(code)
    if interrupted:  # as the interpreter does: die of the SIGINT it did not handle
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    if status is not None:
        for stream in (0, 1, 2):
            os.close(stream)
        write_line(status, f"x {code}")
    os._exit(code)


def exit_code(stop):
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def report(error):
    # Leave out this file's frame: the traceback reads as `python <file>`'s does.
    traceback = error.__traceback__.tb_next if error.__traceback__ is not None else None
    sys.excepthook(type(error), error.with_traceback(traceback), traceback)
    return 1


def finish(code):
    """The interpreter's own end without its finalisation (the template's modules need none): threads, atexit, flush."""
    try:
        threading._shutdown()
    except BaseException:  # noqa: BLE001
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            code = code or 120  # what the interpreter exits with when it cannot flush
    return code


def main():
    sock = socket.socket(fileno=3)  # the template ends when the supervisor closes it
    preload(os.environ.get("SANDLOT_TEMPLATE_PRELOAD", ""))
    os.environ.pop("SANDLOT_TEMPLATE_PRELOAD", None)
    sys.stdout.flush()
    serve(sock)


main()
