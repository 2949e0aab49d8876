#!/bin/bash
# The entrypoint of sandlot's image: readies two things the native jail needs from the container, then runs sandlot.
# Both take CAP_SYS_ADMIN, which the jail needs anyway (deploy/compose.yaml); without it they are skipped, and
# `sandlot doctor` says what the jail lacks. SANDLOT_CONTAINER_SETUP=0 skips them.
#
# 1. A /proc the kernel accepts as fully visible. Docker covers parts of the container's /proc with mounts (masked
#    paths such as /proc/kcore, read-only ones such as /proc/sys), and the kernel refuses a fresh procfs inside a
#    user namespace unless some procfs mount of the mount namespace is uncovered (mount_too_revealing), so each
#    sandbox's own /proc would fail. Rather than uncover the container's /proc (`--security-opt
#    systempaths=unconfined`, which Compose v1 does not know), this mounts a spare procfs at /run/sandlot-proc, mode
#    0700, that only root in the container can reach. Sandboxes never see it: their root is built from scratch.
# 2. The container's own cgroups, writable. Docker mounts them read-only unless --privileged, so the jail would fall
#    back to rlimits (no memory or pids cgroup, no CPU quota). Only the container's own subtree is mounted, so
#    sandlot's groups nest under the container's, within its limits.
#    - cgroup v1 (and hybrid): each controller sandlot uses (memory, pids, cpu) is remounted read-write.
#    - cgroup v2, only in a private cgroup namespace (Docker's default on v2): the mount is remounted read-write and
#      the processes of the namespace's root move to a leaf group `init`, since the kernel lets a group hand
#      controllers to its children only while it has no processes of its own (Docker's docker-in-docker image takes
#      the same step). Our machines are cgroup v1: tests/image/test-image.sh does not exercise this branch.
set -uo pipefail

mount_options() { # mount_options MOUNTPOINT: the per-mount options of the mount at MOUNTPOINT (the last one)
    local id parent dev root point options rest found=""
    while read -r id parent dev root point options rest; do
        [[ "$point" == "$1" ]] && found="$options"
    done </proc/self/mountinfo
    [[ -n "$found" ]] && printf '%s\n' "$found"
}
read_only() { [[ ",$(mount_options "$1")," == *,ro,* ]]; }

skipped=()
if [[ "${SANDLOT_CONTAINER_SETUP:-1}" != 0 ]]; then
    if grep -q '^[^ ]* [^ ]* [^ ]* [^ ]* /proc/' /proc/self/mountinfo && [[ -z "$(mount_options /run/sandlot-proc)" ]]; then
        mkdir -p -m 0700 /run/sandlot-proc
        mount -t proc -o nosuid,nodev,noexec proc /run/sandlot-proc 2>/dev/null || skipped+=("a spare /proc")
    fi
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
        if [[ "$(cat /proc/self/cgroup)" == "0::/" ]] && read_only /sys/fs/cgroup; then
            if mount -o remount,bind,rw /sys/fs/cgroup 2>/dev/null && mkdir -p /sys/fs/cgroup/init; then
                while read -r pid; do
                    echo "$pid" >/sys/fs/cgroup/init/cgroup.procs 2>/dev/null || true
                done </sys/fs/cgroup/cgroup.procs
            else
                skipped+=("writable cgroups")
            fi
        fi
    else
        for controller in memory pids cpu; do
            point="$(readlink -f "/sys/fs/cgroup/$controller")"
            if read_only "$point" && ! mount -o remount,bind,rw "$point" 2>/dev/null; then
                skipped+=("a writable $controller cgroup")
            fi
        done
    fi
fi
if (( ${#skipped[@]} > 0 )); then
    echo "sandlot entrypoint: no CAP_SYS_ADMIN? could not set up: ${skipped[*]}; see sandlot doctor and docs/container.md" >&2
fi
exec /usr/local/bin/sandlot "$@"
