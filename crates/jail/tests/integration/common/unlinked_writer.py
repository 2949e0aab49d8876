# Opens thirty files in /data, unlinks each, writes 7 MiB to each (just under RLIMIT_FSIZE at an 8 MiB quota)
# while holding them all, says how much it wrote, and holds them two seconds more. Shared by the jail's and
# Docker's attack tests on the disk quota.
import os, time
held, written, chunk = [], 0, b"x" * (1 << 20)
try:
    for i in range(30):
        fd = os.open(f"/data/f{i}", os.O_WRONLY | os.O_CREAT, 0o600)
        os.unlink(f"/data/f{i}")
        held.append(fd)
        for _ in range(7):
            written += os.write(fd, chunk)
except OSError as e:
    print("stopped:", e.strerror, flush=True)
print("written", written, flush=True)
time.sleep(2)
