#!/usr/bin/env bash
# Where the time of one `sandlot run` goes: median microseconds after the command's exec at which each process of
# the run is forked, the init first gets a CPU, starts waiting for its spec and reads it, python is exec'd and
# exits, and pid 1 and the command exit. Traces the sched_process_fork/exec/exit, sched_switch and raw_syscalls
# tracepoints with bpftrace (installed if missing). Run as root, on an otherwise idle machine.  Usage: scripts/timeline-jail.sh [RUNS]
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

[[ "$(id -u)" == 0 ]] || { echo "timeline-jail.sh: run as root (bpftrace)" >&2; exit 1; }
command -v bpftrace >/dev/null || { apt-get update -qq && apt-get install -y -qq bpftrace >/dev/null; }
runs="${1:-80}"
binary="$(scripts/release-build.sh)"
work="$(mktemp -d /tmp/sandlot-timeline-XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo 'print(1)' > "$work/print1.py"

# Generations: 0 the command, 1 the init, 2 pid 1, 3 the worker (python once it has exec'd).
cat > "$work/timeline.bt" <<'BT'
tracepoint:sched:sched_process_exec /str(args->filename) == str($1)/ { @t0[pid] = nsecs; @gen[pid] = 0; @in[pid] = 1; }
tracepoint:sched:sched_process_fork /@in[args->parent_pid]/ {
  @in[args->child_pid] = 1; @t0[args->child_pid] = @t0[args->parent_pid]; @gen[args->child_pid] = @gen[args->parent_pid] + 1;
  printf("fork%d %d\n", @gen[args->parent_pid] + 1, (nsecs - @t0[args->parent_pid]) / 1000); }
tracepoint:sched:sched_switch /@in[args->next_pid] && @gen[args->next_pid] == 1 && !@ran[args->next_pid]/ {
  @ran[args->next_pid] = 1; printf("run1 %d\n", (nsecs - @t0[args->next_pid]) / 1000); }
tracepoint:sched:sched_process_exec /@in[pid] && @gen[pid] == 3/ { printf("exec %d\n", (nsecs - @t0[pid]) / 1000); }
tracepoint:raw_syscalls:sys_enter /@in[tid] && @gen[tid] == 1 && args->id == 0 && !@read[tid]/ { printf("wait %d\n", (nsecs - @t0[tid]) / 1000); }
tracepoint:raw_syscalls:sys_exit /@in[tid] && @gen[tid] == 1 && args->id == 0 && !@read[tid]/ { @read[tid] = 1; printf("spec %d\n", (nsecs - @t0[tid]) / 1000); }
END { clear(@in); clear(@t0); clear(@gen); clear(@read); clear(@ran); }
tracepoint:sched:sched_process_exit /@in[tid]/ { printf("exit%d %d\n", @gen[tid], (nsecs - @t0[tid]) / 1000); delete(@in[tid]); delete(@t0[tid]); delete(@gen[tid]); delete(@read[tid]); delete(@ran[tid]); }
BT
bpftrace "$work/timeline.bt" "$binary" > "$work/trace.out" 2>/dev/null &
tracer=$!
sleep 4 # attaching takes a moment
for _ in $(seq "$runs"); do
  env -i PATH=/usr/bin:/bin SANDLOT_PYTHON=/usr/bin/python3 SANDLOT_LOG=error \
    "$binary" run -l python --root "$work/root" -c timeline "$work/print1.py" > /dev/null
done
sleep 1
kill -INT "$tracer"
# bpftrace has been seen to hang on exit (once in ~10 runs): give it 10 s, then kill it (its output is complete).
for _ in $(seq 20); do kill -0 "$tracer" 2>/dev/null || break; sleep 0.5; done
kill -9 "$tracer" 2>/dev/null || true
wait "$tracer" 2>/dev/null || true
/usr/bin/python3 - "$work/trace.out" "$runs" <<'PY'
import collections, statistics, sys
events = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 2 and parts[1].isdigit():
        events[parts[0]].append(int(parts[1]))
names = [("fork1", "init forked"), ("run1", "init first runs"), ("wait", "init waits for its spec"), ("spec", "spec read"), ("fork2", "pid 1 forked"),
         ("fork3", "worker forked"), ("exec", "python exec'd"), ("exit3", "python exits"), ("exit2", "pid 1 exits"),
         ("exit0", "command exits")]
print(f"sandlot run, {sys.argv[2]} runs: median µs after the command's exec")
for key, name in names:
    if events[key]:
        print(f"{name:26} {statistics.median(events[key]):8.0f}   (n={len(events[key])})")
PY
