//! Attack tests: each one tries, from inside the sandbox, to break one isolation promise, and asserts it holds.
//! See docs/security.md for the layer behind each.

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{LaunchPath, Sandbox, check, check_eq, check_not_on_host, describe};
use libtest_mimic::{Failed, Trial};
use sandlot_core::{ConversationId, Language, Termination};

/// The attacks whose promise holds on every launch path (see `LaunchPath`): each runs once per path, named
/// `<test>::<path>` but on the server as root, which keeps the plain name. The rest need root (cgroups, leased uids,
/// the cached skeleton, idmapped `/data`) or the server's kept network namespace, and run there only.
const ON_EVERY_PATH: &[common::PathTest] = &[
    ("host_only_files_are_invisible", host_only_files_are_invisible),
    ("system_dirs_and_root_are_read_only", system_dirs_and_root_are_read_only),
    ("host_processes_are_invisible_and_unkillable", host_processes_are_invisible_and_unkillable),
    ("network_is_loopback_only", network_is_loopback_only),
    ("background_children_die_with_the_program", background_children_die_with_the_program),
    ("dangerous_syscalls_are_refused", dangerous_syscalls_are_refused),
    ("namespace_and_mount_tools_fail", namespace_and_mount_tools_fail),
    ("x32_syscalls_kill_the_process", x32_syscalls_kill_the_process),
    ("no_capabilities_and_no_new_privileges", no_capabilities_and_no_new_privileges),
    ("conversations_cannot_see_each_other", conversations_cannot_see_each_other),
    ("server_environment_does_not_leak", server_environment_does_not_leak),
    ("proc_shows_nothing_of_the_host_layout", proc_shows_nothing_of_the_host_layout),
    ("setsid_double_fork_dies_at_the_deadline", setsid_double_fork_dies_at_the_deadline),
    ("runs_as_the_launch_paths_host_uid", runs_as_the_launch_paths_host_uid),
];

pub fn trials() -> Vec<Trial> {
    let mut trials: Vec<Trial> = Vec::new();
    for path in LaunchPath::ALL {
        for &(name, test) in ON_EVERY_PATH {
            let name = match path.suffix() {
                None => format!("attacks::{name}"),
                Some(suffix) => format!("attacks::{name}::{suffix}"),
            };
            trials.push(Trial::test(name, move || test(path)));
        }
    }
    let root_only: Vec<common::Test> = vec![
        ("devices_work_and_dev_takes_no_new_node", devices_work_and_dev_takes_no_new_node),
        (
            "the_shared_root_skeleton_is_read_only_at_its_superblock",
            the_shared_root_skeleton_is_read_only_at_its_superblock,
        ),
        ("host_system_v_ipc_is_invisible", host_system_v_ipc_is_invisible),
        (
            "a_kept_network_namespace_holds_nothing_of_the_last_run",
            a_kept_network_namespace_holds_nothing_of_the_last_run,
        ),
        ("fork_bomb_is_contained", fork_bomb_is_contained),
        ("memory_bomb_is_killed_as_out_of_memory", memory_bomb_is_killed_as_out_of_memory),
        ("loopback_tcp_buffers_stay_within_the_memory_limit", loopback_tcp_buffers_stay_within_the_memory_limit),
        ("output_flood_is_capped_and_server_memory_stays_flat", output_flood_is_capped_and_server_memory_stays_flat),
        ("the_last_line_of_a_long_output_is_kept", the_last_line_of_a_long_output_is_kept),
        ("filling_tmp_stops_at_its_size", filling_tmp_stops_at_its_size),
        ("filling_data_with_many_files_hits_the_quota", filling_data_with_many_files_hits_the_quota),
        ("one_huge_file_in_data_hits_the_quota", one_huge_file_in_data_hits_the_quota),
        ("fallocate_cannot_reserve_disk_past_the_quota", fallocate_cannot_reserve_disk_past_the_quota),
        ("setuid_and_setgid_bits_cannot_be_set_in_data", setuid_and_setgid_bits_cannot_be_set_in_data),
        ("data_is_mounted_nosuid_and_nodev", data_is_mounted_nosuid_and_nodev),
        ("read_events_of_system_dirs_cannot_be_watched", read_events_of_system_dirs_cannot_be_watched),
        ("symlinks_in_data_are_never_followed_by_the_server", symlinks_in_data_are_never_followed_by_the_server),
        ("sandbox_never_runs_as_host_root", sandbox_never_runs_as_host_root),
        (
            "concurrent_runs_have_their_own_uid_and_inotify_instances",
            concurrent_runs_have_their_own_uid_and_inotify_instances,
        ),
        ("data_keeps_one_owner_across_runs_of_different_uids", data_keeps_one_owner_across_runs_of_different_uids),
        (
            "a_project_local_runner_exposes_nothing_of_its_project",
            a_project_local_runner_exposes_nothing_of_its_project,
        ),
    ];
    trials.extend(common::trials("attacks", root_only));
    trials
}

fn python(sandbox: &Sandbox, code: &str) -> sandlot_core::RunReport {
    sandbox.run("attack", Language::Python, code)
}

fn host_only_files_are_invisible(path: LaunchPath) -> Result<(), Failed> {
    let secret_dir = tempfile::tempdir()?;
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret")?;
    let sandbox = Sandbox::on(path, |_| {});
    let code = format!(
        r#"
import os
for path in [{secret:?}, "/etc/shadow", "/etc/hostname", "/root/.bashrc", "/home", "/work", "/var/log", "/sys/kernel", "/boot"]:
    try:
        with open(path) as f:
            print(path, "READ", f.read().strip())
    except Exception as e:
        print(path, type(e).__name__)
print(sorted(os.listdir("/")))
print(sorted(os.listdir("/etc")))
"#
    );
    let report = python(&sandbox, &code);
    let expected = format!(
        "{secret} FileNotFoundError\n/etc/shadow FileNotFoundError\n/etc/hostname READ sandlot\n/root/.bashrc FileNotFoundError\n\
         /home FileNotFoundError\n/work FileNotFoundError\n/var/log FileNotFoundError\n/sys/kernel FileNotFoundError\n\
         /boot FileNotFoundError\n\
         ['bin', 'data', 'dev', 'etc', 'lib', 'lib64', 'proc', 'root', 'sbin', 'tmp', 'usr']\n\
         ['alternatives', 'group', 'hostname', 'hosts', 'ld.so.cache', 'localtime', 'nsswitch.conf', 'passwd', 'resolv.conf', 'ssl']\n",
        secret = secret.display()
    );
    check_eq(report.outcome.stdout.as_str(), expected.as_str(), "what the sandbox sees")
}

fn system_dirs_and_root_are_read_only(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let marker = format!("sandlot-attack-{}", std::process::id());
    let dirs =
        ["/usr/bin", "/usr/lib", "/etc", "/", "/bin", "/lib", "/root", "/dev", "/proc/sys/kernel", "/tmp", "/data"];
    let code = format!(
        r#"{probe}
try:
    open("/proc/sys/kernel/hostname", "w").write("pwned")
    print("proc/sys WROTE")
except OSError:
    print("proc/sys refused")
"#,
        probe = common::write_probe(&dirs, &marker)
    );
    let report = python(&sandbox, &code);
    let expected = "/usr/bin refused\n/usr/lib refused\n/etc refused\n/ refused\n/bin refused\n/lib refused\n/root refused\n\
                    /dev refused\n/proc/sys/kernel refused\n/tmp WROTE\n/data WROTE\nproc/sys refused\n";
    check_eq(report.outcome.stdout.as_str(), expected, "writes")?;
    check_not_on_host(&marker, &["/usr/bin", "/usr/lib", "/etc", "/", "/root"])?;
    check(sandbox.data_dir("attack").join(&marker).exists(), || "the /data write did not reach the host".into())
}

/// `/dev` has the host's harmless devices, usable (made with `mknod` like the host's when sandlot is root, else
/// bound from the host), and nothing can add a node there: a device node of the program's choice could reach the
/// host's hardware.
fn devices_work_and_dev_takes_no_new_node() -> Result<(), Failed> {
    use std::os::unix::fs::MetadataExt;
    let sandbox = Sandbox::new(|_| {});
    let code = r#"
import errno, os, stat
open("/dev/null", "w").write("x")
print("null reads empty", open("/dev/null", "rb").read() == b"")
print("zero reads zeros", open("/dev/zero", "rb").read(4) == bytes(4))
print("urandom gives", len(open("/dev/urandom", "rb").read(16)))
try:
    with open("/dev/full", "w") as f:
        f.write("x")
    print("full WROTE")
except OSError as e:
    print("full", errno.errorcode[e.errno])
for name in ["null", "zero", "full", "random", "urandom", "tty"]:
    st = os.stat("/dev/" + name)
    print(name, stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), oct(st.st_mode & 0o777))
try:
    os.mknod("/dev/sda", 0o666 | stat.S_IFBLK, os.makedev(8, 0))
    print("mknod MADE")
except OSError as e:
    print("mknod", "refused" if e.errno in (errno.EROFS, errno.EPERM) else errno.errorcode[e.errno])
"#;
    let report = python(&sandbox, code);
    let mut expected = "null reads empty True\nzero reads zeros True\nurandom gives 16\nfull ENOSPC\n".to_owned();
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = std::fs::metadata(format!("/dev/{name}"))?;
        let (major, minor) = (nix::sys::stat::major(host.rdev()), nix::sys::stat::minor(host.rdev()));
        expected.push_str(&format!("{name} True {major} {minor} {:#o}\n", host.mode() & 0o777));
    }
    expected.push_str("mknod refused\n");
    check_eq(report.outcome.stdout.as_str(), expected.as_str(), &describe(&report))
}

/// The server's zygote assembles the read-only skeleton (`/`, `/dev`) once and every run gets a copy of the same
/// mounts: they must be read-only at the superblock (so no sandbox can write to what all share, even by changing
/// its own mount's flags), and the skeleton must exist only in the zygote's mount namespace, not on the host.
fn the_shared_root_skeleton_is_read_only_at_its_superblock() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = r#"
import os
for path in ["/", "/dev"]:
    fields = next(l.split() for l in open("/proc/self/mountinfo") if l.split()[4] == path)
    dash = fields.index("-")
    print(path, fields[dash + 1], fields[dash + 3].split(",")[0], os.stat(path).st_dev)
"#;
    let first = sandbox.run("skeleton-a", Language::Python, code);
    let second = sandbox.run("skeleton-b", Language::Python, code);
    let lines: Vec<Vec<String>> =
        first.outcome.stdout.lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect();
    check_eq(lines.len(), 2, &describe(&first))?;
    for line in &lines {
        check_eq(&line[1..3], &["tmpfs".to_owned(), "ro".to_owned()][..], &format!("{} superblock", line[0]))?;
    }
    check_eq(second.outcome.stdout.as_str(), first.outcome.stdout.as_str(), "the same skeleton for both runs")?;
    let on_host = sandbox.root.path().join(sandlot_jail::SKELETON_DIR_NAME);
    let entries = std::fs::read_dir(&on_host).map(|dir| dir.count()).unwrap_or(usize::MAX);
    check_eq(entries, 0, &format!("{} on the host is an empty directory", on_host.display()))
}

fn host_processes_are_invisible_and_unkillable(path: LaunchPath) -> Result<(), Failed> {
    let mut victim = Command::new("sleep").arg("300").spawn()?;
    let sandbox = Sandbox::on(path, |_| {});
    let code = format!(
        "ls /proc | grep -cE '^[0-9]+$'\nkill -9 {pid} 2>/dev/null && echo KILLED-HOST || echo no-such-process\nkill -9 1 2>/dev/null && echo KILLED-INIT || echo init-refused\nkill -9 -1\necho still-here",
        pid = victim.id()
    );
    let report = sandbox.run("attack", Language::Bash, &code);
    let alive = victim.try_wait()?.is_none();
    victim.kill()?;
    victim.wait()?;
    check(alive, || "the host process was killed from the sandbox".into())?;
    // `kill -9 -1` reaches every process of the sandbox but its init and the caller: the shell goes on.
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, "termination")?;
    let lines: Vec<&str> = report.outcome.stdout.lines().collect();
    let visible: u32 = lines.first().and_then(|l| l.parse().ok()).unwrap_or(999);
    check(visible <= 4, || format!("the sandbox sees {visible} processes:\n{}", describe(&report)))?;
    check_eq(&lines[1..], &["no-such-process", "init-refused", "still-here"][..], "kill results")
}

/// A System V shared-memory segment of the host, found by its key from the host and not from the sandbox, where a
/// segment of the sandbox's own works.
fn host_system_v_ipc_is_invisible() -> Result<(), Failed> {
    let key = 0x5a00_0000 | (std::process::id() as libc::key_t & 0xffff);
    // SAFETY: shmget/shmctl with integer arguments only; the segment is never attached.
    let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o666) };
    check(id >= 0, || format!("cannot create the host's segment: {}", std::io::Error::last_os_error()))?;
    // SAFETY: as above.
    let visible_from_host = unsafe { libc::shmget(key, 0, 0) } == id;
    let sandbox = Sandbox::new(|_| {});
    let code = format!(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
found = libc.shmget({key}, 0, 0)
print("host-segment", "FOUND" if found >= 0 else os.strerror(ctypes.get_errno()))
own = libc.shmget({key}, 4096, 0o1600)
print("own-segment", "created" if own >= 0 else os.strerror(ctypes.get_errno()))
"#
    );
    let report = python(&sandbox, &code);
    // SAFETY: as above; removes the host's segment.
    unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    check(visible_from_host, || "the host's own segment was not found by its key".into())?;
    check_eq(
        report.outcome.stdout.as_str(),
        "host-segment No such file or directory\nown-segment created\n",
        &format!("System V IPC in the sandbox\n{}", describe(&report)),
    )
}

fn network_is_loopback_only(path: LaunchPath) -> Result<(), Failed> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let sandbox = Sandbox::on(path, |_| {});
    let code = format!(
        r#"
import socket, threading
def attempt(label, fn):
    try:
        fn()
        print(label, "CONNECTED")
    except OSError as e:
        print(label, type(e).__name__)
attempt("host-loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
print("interfaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
print("routes", len(open("/proc/net/route").readlines()) - 1)
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
threading.Thread(target=lambda: server.accept()[0].sendall(b"hi"), daemon=True).start()
client = socket.create_connection(server.getsockname(), timeout=2)
print("own-loopback", client.recv(2).decode())
import os
print("netns", os.readlink("/proc/self/ns/net"))
"#
    );
    // A conversation's network namespace is kept for its next run built on the path (as a server keeps it, as
    // root): the second run must be just as closed, and another conversation must get a namespace of its own. A
    // Python run in a prepared sandbox has the new one its sandbox was built with, as every run on the other paths
    // has (freed when it ends, so its inode number may come again): only "not the host's" is checked for those. The
    // shell's `readlink` says which namespace a run built on the path has. A namespace is given back once its run's
    // sandbox is gone, off the run's path: the test waits for that, as a conversation's next call usually does.
    let expected = "host-loopback ConnectionRefusedError\ndns gaierror\ninterfaces ['lo']\nroutes 0\nown-loopback hi\n";
    let mut namespaces = Vec::new();
    for conversation in ["net-a", "net-a", "net-b"] {
        let report = sandbox.run(conversation, Language::Python, &code);
        let (probes, netns) = report.outcome.stdout.split_once("netns ").unwrap_or_default();
        check_eq(probes, expected, &format!("network probes in {conversation}\n{}", describe(&report)))?;
        namespaces.push(netns.trim().to_owned());
        check(!path.keeps_netns() || sandbox.wait_until_released(), || "a run's sandbox was not let go of".into())?;
        let report = sandbox.run(conversation, Language::Bash, "readlink /proc/self/ns/net");
        check(report.outcome.success(), || describe(&report))?;
        namespaces.push(report.outcome.stdout.trim().to_owned());
        check(!path.keeps_netns() || sandbox.wait_until_released(), || "a run's sandbox was not let go of".into())?;
    }
    let namespaces: Vec<String> = namespaces.into_iter().skip(1).step_by(2).collect(); // the shell's
    if path.keeps_netns() {
        check_eq(namespaces[0].as_str(), namespaces[1].as_str(), "the namespace kept for a conversation's next run")?;
        check(namespaces[1] != namespaces[2], || {
            format!("two conversations share a network namespace: {namespaces:?}")
        })?;
    }
    let host = std::fs::read_link("/proc/self/ns/net")?.to_string_lossy().into_owned();
    check(!namespaces.contains(&host), || "a sandbox is in the host's network namespace".into())?;
    check(listener.accept().is_err(), || "the host listener got a connection".into())
}

fn a_kept_network_namespace_holds_nothing_of_the_last_run() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    // The listener says when it listens (a file in /tmp), and the run waits for that (up to 60 s) rather than for a
    // guessed time: on a loaded machine it would otherwise end before the listener bound, and prove nothing.
    let listen = "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 8765)); s.listen()\n\
                  open('/tmp/listening', 'w').close()\ntime.sleep(60)";
    let first = format!(
        "(setsid python3 -c \"{listen}\" &); for i in $(seq 3000); do [ -e /tmp/listening ] && break; sleep 0.02; done; \
         [ -e /tmp/listening ] && echo listening"
    );
    let report = sandbox.run("kept-net", Language::Bash, &format!("{first}; readlink /proc/self/ns/net"));
    let (listening, first_netns) = report.outcome.stdout.split_once('\n').unwrap_or_default();
    check_eq(listening, "listening", &describe(&report))?;
    check(sandbox.wait_until_released(), || "the first run's sandbox was not let go of".into())?;
    // The second run is built on the path (a shell), so it joins the kept namespace: checked, or it proves nothing.
    let second = r#"
import socket
try:
    socket.create_connection(("127.0.0.1", 8765), timeout=2)
    print("the listener of the last run is alive")
except OSError as e:
    print(type(e).__name__)
s = socket.socket(); s.bind(("127.0.0.1", 8765)); s.listen()
print("bound")
"#;
    let report = sandbox.run("kept-net", Language::Bash, &format!("python3 -c '{second}'; readlink /proc/self/ns/net"));
    check_eq(
        report.outcome.stdout.as_str(),
        &format!("ConnectionRefusedError\nbound\n{first_netns}"),
        &describe(&report),
    )
}

/// Runs `/bin/true` on the host every 100 ms while `during` runs and returns the slowest start.
fn slowest_host_spawn(during: impl FnOnce()) -> Duration {
    slowest_host_spawn_every(Duration::from_millis(100), during)
}

/// Runs `/bin/true` on the host every `period` while `during` runs and returns the slowest start.
fn slowest_host_spawn_every(period: Duration, during: impl FnOnce()) -> Duration {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let prober = std::thread::spawn(move || {
        let mut slowest = Duration::ZERO;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let start = Instant::now();
            let _ = Command::new("/bin/true").status();
            slowest = slowest.max(start.elapsed());
            std::thread::sleep(period);
        }
        slowest
    });
    during();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    prober.join().unwrap_or(Duration::MAX)
}

fn fork_bomb_is_contained() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(3));
    let mut report = None;
    let slowest = slowest_host_spawn(|| {
        report = Some(sandbox.run("attack", Language::Bash, "bomb() { bomb | bomb & }; bomb; sleep 30"));
    });
    let report = report.unwrap();
    check_eq(report.outcome.termination.clone(), Termination::TimedOut, "termination")?;
    check(report.outcome.stderr.contains("Resource temporarily unavailable"), || {
        format!("the pids limit was not what stopped the bomb\n{}", describe(&report))
    })?;
    // An uncontained bomb stalls the host for the whole 3 s run; a contained one costs milliseconds (a second or so
    // on a loaded machine).
    check(slowest < Duration::from_secs(2), || format!("the host stalled: a process took {slowest:?} to run"))?;
    let left = common::sandbox_processes();
    check(left.is_empty(), || format!("processes left after the run: {left:?}"))
}

fn memory_bomb_is_killed_as_out_of_memory() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.memory_mb = 64);
    let report = python(&sandbox, "hog = 'x' * (512 * 1024 * 1024)\nprint('survived', len(hog))");
    check_eq(report.outcome.termination.clone(), Termination::OutOfMemory, &describe(&report))?;
    check(!report.outcome.stdout.contains("survived"), || "the allocation succeeded".into())
}

/// Kernel TCP buffers are memory too: on cgroup v1 they are charged to the run only once the run's group has a
/// `memory.kmem.tcp` limit, and without one a run limited to 64 MiB held 768 MiB of them over its own loopback (out
/// of the host-wide TCP budget). Many connections whose receiver never reads, with large buffers, fill them; what
/// the senders got into the kernel (a lower bound of the memory it takes) must stay within the run's limit.
fn loopback_tcp_buffers_stay_within_the_memory_limit() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.memory_mb = 64;
        limits.timeout = Duration::from_secs(30);
    });
    // Writing stops at 256 MiB so the unprotected case shows without eating the host's TCP budget.
    let code = r#"
import socket, time
MiB = 1 << 20
def tcp_mem():
    fields = next(l.split() for l in open("/proc/net/sockstat") if l.startswith("TCP:"))
    return int(fields[fields.index("mem") + 1]) * 4096 // MiB
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * MiB)
listener.bind(("127.0.0.1", 0))
listener.listen(128)
pairs = []
for _ in range(100):
    sender = socket.socket()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * MiB)
    sender.connect(listener.getsockname())
    receiver, _ = listener.accept()
    sender.setblocking(False)
    pairs.append((sender, receiver))
chunk, held, idle, peak = b"x" * (256 * 1024), 0, 0, 0
while idle < 5 and held < 256 * MiB:
    before = held
    for sender, _ in pairs:
        try:
            held += sender.send(chunk)
        except BlockingIOError:
            pass
    peak = max(peak, tcp_mem())
    if held == before:
        idle += 1
        time.sleep(0.1)
    else:
        idle = 0
print(held // MiB, "MiB held;", peak, "MiB of TCP memory on the host at the peak")
"#;
    let report = python(&sandbox, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    let held: u64 = report.outcome.stdout.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(u64::MAX);
    // Slack: each connection may force one buffer past the limit (the kernel never fails the first skb of a send).
    check(held < 64 + 32, || format!("the run's sockets held more than its 64 MiB limit: {}", describe(&report)))
}

fn setsid_double_fork_dies_at_the_deadline(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |limits| limits.timeout = Duration::from_secs(2));
    let code = "setsid bash -c 'sleep 1000 & disown' &\n( setsid sleep 999 & )\nnohup sleep 998 >/dev/null 2>&1 &\nwhile :; do :; done";
    let report = sandbox.run("attack", Language::Bash, code);
    check_eq(report.outcome.termination.clone(), Termination::TimedOut, "termination")?;
    let left = sandbox.processes();
    check(left.is_empty(), || format!("processes left after the deadline: {left:?}"))
}

fn background_children_die_with_the_program(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let report = sandbox.run("attack", Language::Bash, "( setsid sleep 1000 & )\nsleep 1000 &\ndisown\necho done");
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, "termination")?;
    check_eq(report.outcome.stdout.as_str(), "done\n", "stdout")?;
    // Gone when the run returns: the run ends with pid 1's report, which it sends after killing them all.
    let left = sandbox.program_processes();
    check(left.is_empty(), || format!("processes of the program left after it exited: {left:?}"))?;
    // The init and pid 1 finish exiting a moment later (generous for a loaded machine; they would otherwise stay).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !sandbox.processes().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = sandbox.processes();
    check(left.is_empty(), || format!("processes of the sandbox uid left 10 s after the run: {left:?}"))
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").parse().ok()))?
        })
        .unwrap_or(0)
}

fn output_flood_is_capped_and_server_memory_stays_flat() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(3));
    let before = resident_kib();
    let report = python(&sandbox, "import sys\nchunk = b'x' * 65536\nwhile True:\n    sys.stdout.buffer.write(chunk)");
    let growth_kib = resident_kib().saturating_sub(before);
    check_eq(report.outcome.termination.clone(), Termination::TimedOut, "termination")?;
    // The default SANDLOT_MAX_OUTPUT_BYTES (1 MiB): its first and last halves, around the cut marker.
    check_eq(report.outcome.stdout.matches('x').count(), 1024 * 1024, "kept stdout bytes")?;
    check(report.outcome.stdout_truncated, || "stdout not marked truncated".into())?;
    check(growth_kib < 32 * 1024, || format!("the server grew by {growth_kib} KiB while the sandbox flooded"))
}

/// A run that prints 3.2 MB and then its answer: with the default cap (1 MiB a stream) the answer is kept (the cap
/// keeps the first and last 512 KiB, with a marker line saying how many bytes were cut between them), and live
/// listeners get exactly the kept text. Before the ring, only the first 1 MiB was kept and `LAST-LINE` was lost.
fn the_last_line_of_a_long_output_is_kept() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "for i in range(50000):\n    print(f'line {i:06d} ' + 'x' * 51)\nprint('LAST-LINE')";
    let printed: String =
        (0..50_000).map(|i| format!("line {i:06} {}\n", "x".repeat(51))).collect::<String>() + "LAST-LINE\n";
    let half = 512 * 1024;
    let cut = sandlot_core::cut_marker((printed.len() - 2 * half) as u64, half, half);
    let expected = format!("{}{cut}{}", &printed[..half], &printed[printed.len() - half..]);
    let live = std::sync::Mutex::new(Vec::new());
    let sink = |chunk: sandlot_core::OutputChunk| live.lock().expect("live output").extend_from_slice(&chunk.data);
    let request = sandlot_core::RunRequest {
        conversation_id: "attack".into(),
        language: "python".into(),
        code: code.into(),
        ..Default::default()
    };
    let report = sandbox.runtime.block_on(sandbox.engine.run(request, &sink)).expect("run");
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, "termination")?;
    check(report.outcome.stdout_truncated, || "stdout not marked truncated".into())?;
    check(report.outcome.stdout == expected, || {
        let kept = &report.outcome.stdout;
        format!("kept {} bytes ending {:?}", kept.len(), &kept[kept.len().saturating_sub(80)..])
    })?;
    let live = String::from_utf8(live.into_inner().expect("live output")).expect("utf-8");
    check(live == expected, || format!("live listeners got {} bytes, not the {} kept", live.len(), expected.len()))
}

fn filling_tmp_stops_at_its_size() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.tmp_mb = 16);
    let report = sandbox.run(
        "attack",
        Language::Bash,
        "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1; echo exit=$?; du -m /tmp/fill | cut -f1",
    );
    let out = &report.outcome.stdout;
    check(out.contains("No space left on device") && out.contains("exit=1\n"), || describe(&report))?;
    check(out.ends_with("16\n") || out.ends_with("15\n"), || {
        format!("/tmp held more than its size\n{}", describe(&report))
    })
}

fn filling_data_with_many_files_hits_the_quota() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_mb = 32;
        limits.timeout = Duration::from_secs(20);
    });
    let code = "import itertools\nchunk = b'x' * (4 * 1024 * 1024)\nfor i in itertools.count():\n    with open(f'/data/f{i}', 'wb') as f:\n        f.write(chunk)";
    let report = python(&sandbox, code);
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let bytes = sandlot_core::directory_usage(&sandbox.data_dir("attack"), u64::MAX)?.bytes;
    check(bytes < 512 * 1024 * 1024, || format!("/data grew to {bytes} bytes past a 32 MiB quota"))
}

fn one_huge_file_in_data_hits_the_quota() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.disk_mb = 16);
    let report = sandbox.run("attack", Language::Bash, "dd if=/dev/zero of=/data/huge bs=1M count=64");
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let size = std::fs::metadata(sandbox.data_dir("attack").join("huge"))?.len();
    check(size <= 16 * 1024 * 1024, || format!("the file reached {size} bytes"))
}

/// `fallocate` with `FALLOC_FL_KEEP_SIZE` reserves disk blocks without growing the file, so neither `RLIMIT_FSIZE`
/// nor the quota's count of sizes would see them: 64 MiB under an 8 MiB quota in one call, kept after the run.
/// Seccomp refuses every mode but plain allocation, hole punching and zeroing a range that grows the file.
fn fallocate_cannot_reserve_disk_past_the_quota() -> Result<(), Failed> {
    use std::os::unix::fs::MetadataExt;
    let sandbox = Sandbox::new(|limits| limits.disk_mb = 8);
    let code = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
MiB = 1 << 20
KEEP_SIZE, PUNCH_HOLE, COLLAPSE_RANGE, ZERO_RANGE, INSERT_RANGE, UNSHARE_RANGE = 0x1, 0x2, 0x8, 0x10, 0x20, 0x40
def falloc(label, name, mode, offset, length):
    fd = os.open("/data/" + name, os.O_RDWR | os.O_CREAT, 0o644)
    ctypes.set_errno(0)
    rc = libc.fallocate(fd, mode, offset, length)
    result = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
    print(label, result, os.fstat(fd).st_size)
    os.close(fd)
falloc("keep-size", "reserved", KEEP_SIZE, 0, 64 * MiB)
falloc("zero-range+keep-size", "zeroed", ZERO_RANGE | KEEP_SIZE, 0, 64 * MiB)
falloc("unshare+keep-size", "unshared", UNSHARE_RANGE | KEEP_SIZE, 0, 64 * MiB)
falloc("mode-0", "small", 0, 0, MiB)
falloc("punch-hole", "small", PUNCH_HOLE | KEEP_SIZE, 0, MiB // 2)
falloc("zero-range", "small", ZERO_RANGE, MiB, MiB)
falloc("collapse-range", "small", COLLAPSE_RANGE, 0, MiB // 2)
falloc("insert-range", "small", INSERT_RANGE, 0, 64 * MiB)
falloc("mode-0-past-the-quota", "big", 0, 0, 64 * MiB)
falloc("zero-range-past-the-quota", "big", ZERO_RANGE, 0, 64 * MiB)
fd = os.open("/data/posix", os.O_RDWR | os.O_CREAT, 0o644)
os.posix_fallocate(fd, 0, 2 * MiB)
print("posix_fallocate", os.fstat(fd).st_size)
"#;
    let report = python(&sandbox, code);
    let expected = "keep-size ENOTSUP 0\nzero-range+keep-size ENOTSUP 0\nunshare+keep-size ENOTSUP 0\n\
                    mode-0 ok 1048576\npunch-hole ok 1048576\nzero-range ok 2097152\n\
                    collapse-range ENOTSUP 2097152\ninsert-range ENOTSUP 2097152\n\
                    mode-0-past-the-quota EFBIG 0\nzero-range-past-the-quota EFBIG 0\nposix_fallocate 2097152\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))?;
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, "termination")?;
    let data = sandbox.data_dir("attack");
    let mut allocated = 0;
    for name in ["reserved", "zeroed", "unshared", "big"] {
        let blocks = std::fs::metadata(data.join(name))?.blocks();
        check_eq((name, blocks), (name, 0), "512-byte blocks on the host")?;
    }
    for entry in std::fs::read_dir(&data)? {
        allocated += entry?.metadata()?.blocks() * 512;
    }
    check(allocated <= 8 * 1024 * 1024, || format!("/data holds {allocated} bytes of blocks under an 8 MiB quota"))
}

fn dangerous_syscalls_are_refused(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let code = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x40000000, 17
calls = [
    ("ptrace", 101, 16, 1, 0, 0),          # PTRACE_ATTACH to pid 1
    ("process_vm_readv", 310, 1, 0, 0, 0),
    ("mount", 165, 0, 0, 0, 0),
    ("umount2", 166, 0, 0, 0, 0),
    ("unshare", 272, CLONE_NEWUSER, 0, 0, 0),
    ("setns", 308, 0, 0, 0, 0),
    ("chroot", 161, 0, 0, 0, 0),
    ("pivot_root", 155, 0, 0, 0, 0),
    ("keyctl", 250, 0, 0, 0, 0),
    ("add_key", 248, 0, 0, 0, 0),
    ("bpf", 321, 0, 0, 0, 0),
    ("perf_event_open", 298, 0, 0, 0, 0),
    ("userfaultfd", 323, 0, 0, 0, 0),
    ("io_uring_setup", 425, 1, 0, 0, 0),
    ("open_tree", 428, 0, 0, 0, 0),
    ("fsopen", 430, 0, 0, 0, 0),
    ("init_module", 175, 0, 0, 0, 0),
    ("kexec_load", 246, 0, 0, 0, 0),
    ("reboot", 169, 0, 0, 0, 0),
    ("clone(NEWUSER)", 56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0),
    ("clone(NEWNET)", 56, CLONE_NEWNET | SIGCHLD, 0, 0, 0),
    ("clone3", 435, 0, 0, 0, 0),
    ("socket(NETLINK)", 41, 16, 3, 0, 0),
    ("socket(PACKET)", 41, 17, 3, 0, 0),
    ("socket(VSOCK)", 41, 40, 1, 0, 0),
]
for name, nr, *args in calls:
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
"#;
    let report = python(&sandbox, code);
    let expected: String = [
        "ptrace",
        "process_vm_readv",
        "mount",
        "umount2",
        "unshare",
        "setns",
        "chroot",
        "pivot_root",
        "keyctl",
        "add_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "open_tree",
        "fsopen",
        "init_module",
        "kexec_load",
        "reboot",
        "clone(NEWUSER)",
        "clone(NEWNET)",
    ]
    .iter()
    .map(|name| format!("{name} -1 EPERM\n"))
    .chain(["clone3 -1 ENOSYS\n".into()])
    .chain(["socket(NETLINK)", "socket(PACKET)", "socket(VSOCK)"].iter().map(|n| format!("{n} -1 EAFNOSUPPORT\n")))
    .collect();
    check_eq(report.outcome.stdout.as_str(), expected.as_str(), &describe(&report))
}

fn namespace_and_mount_tools_fail(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let code = "unshare -r true 2>/dev/null && echo unshare-ok || echo unshare-refused\n\
                mkdir -p /tmp/m; mount -t tmpfs none /tmp/m 2>/dev/null && echo mount-ok || echo mount-refused\n\
                mknod /tmp/sda b 8 0 2>/dev/null && echo mknod-ok || echo mknod-refused\n\
                chroot / true 2>/dev/null && echo chroot-ok || echo chroot-refused";
    let report = sandbox.run("attack", Language::Bash, code);
    check_eq(
        report.outcome.stdout.as_str(),
        "unshare-refused\nmount-refused\nmknod-refused\nchroot-refused\n",
        &describe(&report),
    )
}

fn x32_syscalls_kill_the_process(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    // getpid through the x32 ABI: the filter must not let x32 numbers alias the x86_64 ones.
    let code = "import ctypes\nlibc = ctypes.CDLL(None)\nprint('before', flush=True)\nlibc.syscall(0x40000000 | 39)\nprint('after')";
    let report = python(&sandbox, code);
    check_eq(report.outcome.termination.clone(), Termination::Signaled { signal: 31 }, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "before\n", "stdout")
}

fn no_capabilities_and_no_new_privileges(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let code = "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '\n\
                awk '$5 != \"/proc\" && $5 !~ /^\\/proc\\// && $6 !~ /nosuid/ {print \"suid allowed on\", $5}' /proc/self/mountinfo";
    let report = sandbox.run("attack", Language::Bash, code);
    let expected = "CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n\
                    CapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))
}

/// A setuid copy of a shell in `/data` would be a door into the sandbox's uid for any local user who can reach the
/// directory: seccomp refuses to set `S_ISUID`/`S_ISGID` with any `chmod` and to create a file with them
/// (`open`/`openat`/`creat`/`mknod`; `openat2`, whose mode a filter cannot read, is `ENOSYS`). `mkdir` drops both
/// bits itself. No file in the conversation may have either bit on the host afterwards.
fn setuid_and_setgid_bits_cannot_be_set_in_data() -> Result<(), Failed> {
    use std::os::unix::fs::MetadataExt;
    let sandbox = Sandbox::new(|_| {});
    let code = r#"
import ctypes, errno, os, shutil, stat, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
def raw(nr, *args):
    ctypes.set_errno(0)
    if libc.syscall(nr, *args) < 0:
        raise OSError(ctypes.get_errno(), "")
def attempt(label, fn):
    try:
        fn()
        print(label, "done")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
def create(path, flags, mode, dir_fd=None):
    os.close(os.open(path, flags, mode, dir_fd=dir_fd))
class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
shutil.copy("/bin/bash", "/data/sh")
fd = os.open("/data/sh", os.O_RDONLY)
data = os.open("/data", os.O_RDONLY | os.O_DIRECTORY)
attempt("chmod 4755", lambda: os.chmod("/data/sh", 0o4755))
attempt("chmod 2755", lambda: os.chmod("/data/sh", 0o2755))
attempt("chmod syscall", lambda: raw(90, b"/data/sh", 0o4755))
attempt("fchmod", lambda: os.fchmod(fd, 0o4755))
attempt("fchmodat", lambda: raw(268, AT_FDCWD, b"/data/sh", 0o6755, 0))
attempt("fchmodat2", lambda: raw(452, fd, b"", 0o4755, AT_EMPTY_PATH))
attempt("chmod 0700", lambda: os.chmod("/data/sh", 0o700))
attempt("open O_CREAT", lambda: create("/data/o1", os.O_CREAT | os.O_WRONLY, 0o4755))
attempt("openat O_CREAT", lambda: create("o2", os.O_CREAT | os.O_WRONLY, 0o2755, dir_fd=data))
attempt("open syscall", lambda: raw(2, b"/data/o3", os.O_CREAT | os.O_WRONLY, 0o4755))
attempt("creat", lambda: raw(85, b"/data/o4", 0o4755))
attempt("open O_TMPFILE", lambda: create("/data", os.O_TMPFILE | os.O_WRONLY, 0o4755))
how = OpenHow(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
attempt("openat2", lambda: raw(437, AT_FDCWD, b"/data/o5", ctypes.byref(how), ctypes.sizeof(how)))
attempt("mknod", lambda: os.mknod("/data/o6", stat.S_IFREG | 0o4755))
attempt("mknodat", lambda: raw(259, AT_FDCWD, b"/data/o7", stat.S_IFREG | 0o2755, 0))
attempt("mkdir 6755", lambda: os.mkdir("/data/d", 0o6755))
print("mkdir 6755 made", oct(os.stat("/data/d").st_mode & 0o7777))
attempt("chmod g+s dir", lambda: os.chmod("/data/d", 0o2755))
attempt("openat with a mode, no O_CREAT", lambda: raw(257, AT_FDCWD, b"/data/sh", os.O_RDONLY, 0o4755))
attempt("open O_CREAT 0644", lambda: create("/data/plain", os.O_CREAT | os.O_WRONLY, 0o644))
for label, command in [("cp + chmod u+s", "cp /bin/bash /data/sh2 && chmod u+s /data/sh2"),
                       ("install -m 4755", "install -m 4755 /bin/bash /data/sh3"),
                       ("mkdir + chmod g+s", "mkdir /data/d2 && chmod g+s /data/d2")]:
    print(label, "exit", subprocess.run(command, shell=True, stderr=subprocess.DEVNULL).returncode)
for root, dirs, files in os.walk("/data"):
    for name in dirs + files:
        mode = os.lstat(os.path.join(root, name)).st_mode
        if mode & (stat.S_ISUID | stat.S_ISGID):
            print("set-id", os.path.join(root, name), oct(mode))
"#;
    let report = python(&sandbox, code);
    let expected = "chmod 4755 EPERM\nchmod 2755 EPERM\nchmod syscall EPERM\nfchmod EPERM\nfchmodat EPERM\n\
                    fchmodat2 EPERM\nchmod 0700 done\nopen O_CREAT EPERM\nopenat O_CREAT EPERM\nopen syscall EPERM\n\
                    creat EPERM\nopen O_TMPFILE EPERM\nopenat2 ENOSYS\nmknod EPERM\nmknodat EPERM\nmkdir 6755 done\nmkdir 6755 made 0o755\n\
                    chmod g+s dir EPERM\nopenat with a mode, no O_CREAT done\nopen O_CREAT 0644 done\n\
                    cp + chmod u+s exit 1\ninstall -m 4755 exit 1\nmkdir + chmod g+s exit 1\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))?;
    let mut set_id = Vec::new();
    let mut pending = vec![sandbox.data_dir("attack")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = std::fs::symlink_metadata(entry.path())?;
            if meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0 {
                set_id.push(format!("{} {:o}", entry.path().display(), meta.mode()));
            }
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    check(set_id.is_empty(), || format!("set-id files in the conversation on the host: {set_id:?}"))
}

/// `/data` is the one host directory the sandbox writes: it must not honour setuid bits or device nodes.
fn data_is_mounted_nosuid_and_nodev() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "awk '$5 == \"/data\" { n = split($6, o, \",\"); for (i = 1; i <= n; i++) if (o[i] == \"nosuid\" || o[i] == \"nodev\") print o[i] }' /proc/self/mountinfo | sort";
    let report = sandbox.run("attack", Language::Bash, code);
    check_eq(report.outcome.stdout.as_str(), "nodev\nnosuid\n", &describe(&report))
}

/// The system directories are the host's inodes, bound read-only: an inotify watch for read-side events on
/// `/usr/bin` would see every program the host (or another sandbox) runs from there, and fanotify the same on one
/// file. Seccomp refuses watches for `IN_ACCESS`, `IN_OPEN` and `IN_CLOSE_NOWRITE`, and `fanotify_init`; watches for
/// changes, as `fs.watch` and most tools ask, keep working, in `/data` as anywhere.
fn read_events_of_system_dirs_cannot_be_watched() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = r#"
import ctypes, errno, os, select, struct, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
IN_ACCESS, IN_MODIFY, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN, IN_CREATE, IN_DELETE = 0x1, 0x2, 0x8, 0x10, 0x20, 0x100, 0x200
IN_ALL_EVENTS = 0xfff
def watch(fd, path, mask):
    ctypes.set_errno(0)
    wd = libc.inotify_add_watch(fd, path.encode(), mask)
    return "watching" if wd >= 0 else errno.errorcode[ctypes.get_errno()]
def events(fd, seconds):
    names, deadline = set(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        select.select([fd], [], [], 0.1)
        try:
            buf = os.read(fd, 65536)
        except BlockingIOError:
            continue
        offset = 0
        while offset < len(buf):
            _, mask, _, length = struct.unpack_from("iIII", buf, offset)
            names.add(buf[offset + 16:offset + 16 + length].rstrip(b"\0").decode())
            offset += 16 + length
    return sorted(names)
spy = libc.inotify_init1(os.O_NONBLOCK)
for label, mask in [("open", IN_OPEN), ("access", IN_ACCESS), ("close-nowrite", IN_CLOSE_NOWRITE),
                    ("all", IN_ALL_EVENTS), ("open+modify", IN_OPEN | IN_MODIFY)]:
    print("/usr/bin", label, watch(spy, "/usr/bin", mask))
print("/usr/bin events", events(spy, 3))
ctypes.set_errno(0)
FAN_CLASS_NOTIF, FAN_REPORT_FID = 0x0, 0x200
rc = libc.syscall(300, FAN_CLASS_NOTIF | FAN_REPORT_FID, os.O_RDONLY)
print("fanotify_init", "ok" if rc >= 0 else errno.errorcode[ctypes.get_errno()])
changes = libc.inotify_init1(os.O_NONBLOCK)
print("/usr/lib changes", watch(changes, "/usr/lib", IN_MODIFY | IN_CREATE | IN_DELETE))
print("/data changes", watch(changes, "/data", IN_MODIFY | IN_CREATE | IN_DELETE | IN_CLOSE_WRITE))
with open("/data/new.txt", "w") as f:
    f.write("x")
print("/data events", events(changes, 1))
"#;
    let mut report = None;
    // The host runs /usr/bin/true all along; a watch on /usr/bin that sees "true" sees the host.
    slowest_host_spawn_every(Duration::from_millis(50), || report = Some(python(&sandbox, code)));
    let report = report.unwrap();
    let expected = "/usr/bin open EPERM\n/usr/bin access EPERM\n/usr/bin close-nowrite EPERM\n/usr/bin all EPERM\n\
                    /usr/bin open+modify EPERM\n/usr/bin events []\nfanotify_init EPERM\n/usr/lib changes watching\n\
                    /data changes watching\n/data events ['new.txt']\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))
}

fn symlinks_in_data_are_never_followed_by_the_server() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "ln -s /etc/passwd /data/leak\nln -s / /data/root\nln -s /etc /data/etc\necho real > /data/real.txt";
    let report = sandbox.run("attack", Language::Bash, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, "termination")?;
    let names: Vec<&str> = report.files.files.iter().map(|f| f.path.as_str()).collect();
    check_eq(names, vec!["real.txt"], "listed files")?;
    common::check_server_refuses(&sandbox, "attack", &["leak", "root/etc/passwd", "etc/passwd", "root/etc/shadow"])?;
    let workspaces = sandbox.engine.workspaces();
    let id = ConversationId::parse("attack")?;
    let mut text = String::new();
    workspaces.open(&id, "real.txt")?.read_to_string(&mut text)?;
    check_eq(text.as_str(), "real\n", "real file")
}

fn conversations_cannot_see_each_other(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let a = sandbox.run("conv-a", Language::Bash, "echo alpha-secret > /data/secret-a.txt");
    check_eq(a.outcome.termination.clone(), Termination::Exited { code: 0 }, "first run")?;
    let b = sandbox.run(
        "conv-b",
        Language::Bash,
        "ls -A /data; ls -A /data/..; grep -rs 'alpha-[s]ecret' / --exclude-dir=proc --exclude-dir=usr || echo not-found",
    );
    check_eq(
        b.outcome.stdout.as_str(),
        "bin\ndata\ndev\netc\nlib\nlib64\nproc\nroot\nsbin\ntmp\nusr\nnot-found\n",
        &describe(&b),
    )
}

fn server_environment_does_not_leak(path: LaunchPath) -> Result<(), Failed> {
    // The test process runs under cargo, with CARGO_* and PATH variables of its own; none may reach the program.
    check(std::env::vars().any(|(k, _)| k.starts_with("CARGO")), || "expected cargo's variables in the test".into())?;
    let sandbox = Sandbox::on(path, |_| {});
    let env = [("MY_SETTING".to_owned(), "42".to_owned())].into_iter().collect();
    // The sandbox's pid 1 keeps capabilities the program lacks, so the program cannot read its memory or environ
    // (its /proc directory is hidden, `hidepid=invisible`).
    let code = "import os\nprint(sorted(os.environ.items()))\ntry:\n    open('/proc/1/environ').read()\nexcept (PermissionError, FileNotFoundError):\n    print('pid 1 protected')";
    let report = sandbox.run_with("attack", Language::Python, code, Vec::new(), env);
    let expected = "[('HOME', '/tmp'), ('LANG', 'C.UTF-8'), ('MY_SETTING', '42'), ('NO_COLOR', '1'), \
                    ('PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'), ('PYTHONDONTWRITEBYTECODE', '1'), \
                    ('PYTHONUNBUFFERED', '1'), ('TMPDIR', '/tmp'), ('USER', 'sandbox')]\npid 1 protected\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))
}

fn sandbox_never_runs_as_host_root() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let report = sandbox.run("attack", Language::Bash, "id -u; cat /proc/self/uid_map | tr -s ' '; touch /data/owned");
    let host_uid = run_uid_of(&report)?;
    check(common::sandbox_uids().run_uids().contains(&host_uid), || format!("host uid {host_uid} is not a run uid"))?;
    let expected = format!("1000\n 1000 {host_uid} 1\n");
    check_eq(report.outcome.stdout.as_str(), expected.as_str(), &describe(&report))?;
    let meta = std::fs::metadata(sandbox.data_dir("attack").join("owned"))?;
    check_eq(std::os::unix::fs::MetadataExt::uid(&meta), common::storage_uid(), "owner of a file written in /data")
}

/// Each path runs the program as whom it should on the host (so the suite's other tests ran on the path they are
/// named for): a leased run uid as root, the unprivileged child's own uid otherwise; never root.
fn runs_as_the_launch_paths_host_uid(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let report = sandbox.run("attack", Language::Bash, "id -u; cat /proc/self/uid_map | tr -s ' '");
    let host_uid = run_uid_of(&report)?;
    if path.is_root() {
        check(common::sandbox_uids().run_uids().contains(&host_uid), || format!("host uid {host_uid} is no run uid"))?;
    } else {
        check_eq(host_uid, common::unprivileged_uid(), "host uid of an unprivileged run")?;
    }
    check_eq(report.outcome.stdout.as_str(), format!("1000\n 1000 {host_uid} 1\n").as_str(), &describe(&report))
}

/// The host uid in the `uid_map` line a run printed (`1000 <host uid> 1`).
fn run_uid_of(report: &sandlot_core::RunReport) -> Result<u32, Failed> {
    report
        .outcome
        .stdout
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next() == Some("1000")).then(|| fields.next()?.parse().ok()).flatten()
        })
        .ok_or_else(|| format!("no uid_map line:\n{}", describe(report)).into())
}

/// fs.inotify.max_user_instances (128) counts per host uid: a run that takes every inotify instance it can must
/// leave another conversation's concurrent run its own, and the two run as different host uids.
fn concurrent_runs_have_their_own_uid_and_inotify_instances() -> Result<(), Failed> {
    // Every instance the per-user limit allows must be within the run's descriptor limit.
    let max: u64 = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")?.trim().parse()?;
    let sandbox = Sandbox::new(|limits| {
        limits.timeout = Duration::from_secs(30);
        limits.open_files = limits.open_files.max(max + 64);
    });
    let hog = "import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nheld = []\nwhile True:\n    fd = libc.inotify_init1(0)\n    if fd < 0:\n        break\n    held.append(fd)\nprint(open('/proc/self/uid_map').read().strip())\nprint('held', len(held), os.strerror(ctypes.get_errno()))\nopen('/data/ready', 'w').close()\nwhile not os.path.exists('/data/done'):\n    time.sleep(0.02)";
    let ready = sandbox.data_dir("hog").join("ready");
    let done = sandbox.data_dir("hog").join("done");
    std::thread::scope(|scope| {
        let hog = scope.spawn(|| sandbox.run("hog", Language::Python, hog));
        let waited = common::wait_for(&ready);
        let other = sandbox.run(
            "other",
            Language::Python,
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(open('/proc/self/uid_map').read().strip())\nfd = libc.inotify_init1(0)\nprint('inotify', 'ok' if fd >= 0 else os.strerror(ctypes.get_errno()))",
        );
        std::fs::write(&done, "")?;
        let hog = hog.join().expect("hog run");
        waited?;
        check(hog.outcome.stdout.contains(&format!("held {max} Too many open files")), || {
            format!("the hog did not take all its instances:\n{}", describe(&hog))
        })?;
        check(other.outcome.stdout.ends_with("inotify ok\n"), || {
            format!("the other conversation's run could not make an inotify instance:\n{}", describe(&other))
        })?;
        let (a, b) = (run_uid_of(&hog)?, run_uid_of(&other)?);
        check(a != b, || format!("both runs ran as host uid {a}"))?;
        let run_uids = common::sandbox_uids().run_uids();
        check(run_uids.contains(&a) && run_uids.contains(&b), || format!("{a} and {b} are not both run uids"))
    })
}

/// A conversation's files stay its own across runs of different host uids: on disk they belong to the storage uid,
/// and a later run, leased another uid (a concurrent run holds the first), can change them.
fn data_keeps_one_owner_across_runs_of_different_uids() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(30));
    let first = sandbox.run(
        "kept",
        Language::Bash,
        "cat /proc/self/uid_map; mkdir /data/dir; echo one > /data/dir/file; chmod 600 /data/dir/file; stat -c '%u %a' /data/dir/file",
    );
    check(first.outcome.success(), || describe(&first))?;
    let data = sandbox.data_dir("kept");
    for path in [data.clone(), data.join("dir"), data.join("dir/file")] {
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&path)?);
        check_eq(owner, common::storage_uid(), &format!("owner of {} on the host", path.display()))?;
    }
    // Once the first run's init and pid 1 are gone its uid is free again: the holder, started then, takes it (the
    // lowest free), and the second run gets another.
    let first_uid = run_uid_of(&first)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::processes_of_uid(first_uid).is_empty() {
        check(Instant::now() < deadline, || format!("processes of uid {first_uid} are still there"))?;
        std::thread::sleep(Duration::from_millis(10));
    }
    let ready = sandbox.data_dir("holder").join("ready");
    let done = sandbox.data_dir("holder").join("done");
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| {
            sandbox.run(
                "holder",
                Language::Bash,
                "cat /proc/self/uid_map; touch /data/ready; while [ ! -e /data/done ]; do sleep 0.02; done",
            )
        });
        let waited = common::wait_for(&ready);
        let second = sandbox.run(
            "kept",
            Language::Bash,
            "cat /proc/self/uid_map; echo two >> /data/dir/file && cat /data/dir/file && touch /data/dir/new && stat -c '%u' /data/dir/new",
        );
        std::fs::write(&done, "")?;
        let holder = holder.join().expect("holder run");
        waited?;
        check(second.outcome.success(), || describe(&second))?;
        let uids = [first_uid, run_uid_of(&holder)?, run_uid_of(&second)?];
        check(uids[2] != uids[0], || format!("the second run had the first's uid: {uids:?}"))?;
        check(second.outcome.stdout.ends_with("one\ntwo\n1000\n"), || describe(&second))?;
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(data.join("dir/new"))?);
        check_eq(owner, common::storage_uid(), "owner on the host of a file the second run made")
    })
}

/// What `/proc` shows the program of its own mounts and of its pid 1 (a clone of the zygote, whose command line,
/// environment, memory map and executable are the server's, and whose cgroup is the server's): none of it may name
/// the conversation root on the host, the server's cgroup or the server's command line. The one exception is
/// documented in docs/security.md: the root field of `/data`'s line in `mountinfo`.
fn proc_shows_nothing_of_the_host_layout(path: LaunchPath) -> Result<(), Failed> {
    let sandbox = Sandbox::on(path, |_| {});
    let report = sandbox.run("attack", Language::Bash, common::PROC_LEAK_SCRIPT);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    let root = std::fs::canonicalize(sandbox.root.path())?;
    let program = std::env::current_exe()?;
    common::check_no_host_layout(&report.outcome.stdout, &[root.to_str().unwrap(), program.to_str().unwrap()])
}

/// A TypeScript runner installed in a project (`<app>/node_modules/.bin/tsx`, as `npm install tsx` makes it) must
/// not expose the project: `<app>/.env` is readable neither from a Python run nor from a TypeScript run, while tsx
/// still works; and its `node_modules` is bound in TypeScript runs only. Needs tsx installed globally at /usr/lib/node_modules/tsx (scripts/test.sh installs it), which is
/// copied into the project.
fn a_project_local_runner_exposes_nothing_of_its_project() -> Result<(), Failed> {
    use std::os::unix::fs::PermissionsExt;
    // Not under /tmp: the sandbox's own /tmp would cover the bind.
    std::fs::create_dir_all("/var/tmp")?;
    let app = tempfile::tempdir_in("/var/tmp")?;
    std::fs::set_permissions(app.path(), std::fs::Permissions::from_mode(0o755))?;
    let env_file = app.path().join(".env");
    std::fs::write(&env_file, "API_KEY=project-secret\n")?;
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o644))?;
    let modules = app.path().join("node_modules");
    std::fs::create_dir_all(modules.join(".bin"))?;
    let copied = Command::new("cp").arg("-a").arg("/usr/lib/node_modules/tsx").arg(&modules).status()?;
    check(copied.success(), || "tsx must be installed at /usr/lib/node_modules/tsx (npm install -g tsx)".into())?;
    std::os::unix::fs::symlink("../tsx/dist/cli.mjs", modules.join(".bin/tsx"))?;
    let tsx = modules.join(".bin/tsx");
    // TypeScript through the backend's runner (tsx), not stripped in the server.
    let sandbox = Sandbox::with_engine_config(
        tempfile::tempdir()?,
        |config| {
            config.languages = vec![Language::Python, Language::TypeScript];
            config.overrides.typescript = Some(tsx.clone());
        },
        |config| config.typescript = sandlot_core::TypeScriptMode::Runner,
    );
    let path = env_file.display();
    let python = sandbox.run(
        "attack",
        Language::Python,
        &format!(
            "import os\ntry:\n    print(open('{path}').read())\nexcept OSError as e:\n    print(type(e).__name__)\nprint(os.listdir('{}'))",
            modules.display()
        ),
    );
    // The runner's prefix is bound in TypeScript runs only: Python sees an empty mount point.
    check_eq(python.outcome.stdout.as_str(), "FileNotFoundError\n[]\n", &describe(&python))?;
    let typescript = sandbox.run(
        "attack",
        Language::TypeScript,
        &format!(
            "import {{ readFileSync }} from 'node:fs';\nconst n: number = 2;\ntry {{ console.log(readFileSync('{path}', 'utf8')); }} catch (e) {{ console.log((e as {{ code: string }}).code, n * 21); }}"
        ),
    );
    check_eq(typescript.outcome.stdout.as_str(), "ENOENT 42\n", &describe(&typescript))
}
