//! Attacks on the host through a conversation's `/data`: space hidden from the quota in what a size does not show
//! (directories, symlink targets, files unlinked while open), inodes and links, the server's own cost of measuring
//! a tree, and a setuid program left for the host's other users.
//! See docs/security.md, "Disk quota".

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::{LaunchPath, Sandbox, as_other_user, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, Termination};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "disk",
        vec![
            (
                "symlink_targets_and_directories_count_towards_the_quota",
                symlink_targets_and_directories_count_towards_the_quota,
            ),
            ("empty_files_count_towards_the_inode_limit", empty_files_count_towards_the_inode_limit),
            ("unlinked_open_files_count_towards_the_quota", unlinked_open_files_count_towards_the_quota),
            ("an_image_holds_the_quota_and_little_more", an_image_holds_the_quota_and_little_more),
            ("an_image_is_reused_grown_and_never_shrunk", an_image_is_reused_grown_and_never_shrunk),
            ("first_uses_at_once_mount_one_image", first_uses_at_once_mount_one_image),
            (
                "an_image_mounted_before_the_server_started_is_freed_when_removed",
                an_image_mounted_before_the_server_started_is_freed_when_removed,
            ),
            (
                "unlinked_open_files_count_towards_the_quota_of_a_plain_directory",
                unlinked_open_files_count_towards_the_quota_of_a_plain_directory,
            ),
            (
                "a_conversation_on_its_image_is_measured_without_a_walk",
                a_conversation_on_its_image_is_measured_without_a_walk,
            ),
            (
                "links_count_towards_the_inode_limit_of_a_plain_directory",
                links_count_towards_the_inode_limit_of_a_plain_directory,
            ),
            ("a_setuid_file_in_data_is_out_of_other_users_reach", a_setuid_file_in_data_is_out_of_other_users_reach),
            ("the_mount_table_names_no_host_path_of_the_root", the_mount_table_names_no_host_path_of_the_root),
        ],
    )
}

/// Symlinks with 4000-byte targets and directories with long entries take a block each but have no file size:
/// 40,000 of them hold ~160 MiB. Under an 8 MiB quota the run is stopped, and what is left is near the quota.
fn symlink_targets_and_directories_count_towards_the_quota() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_mb = 8;
        limits.timeout = Duration::from_secs(60);
    });
    let code = r#"
import os
target = "t" * 4000
os.makedirs("/data/links", exist_ok=True)
for i in range(40000):
    os.symlink(target, f"/data/links/{i}")
    if i % 100 == 0:
        os.mkdir(f"/data/d{i:0>200}")
print("done")
"#;
    let report = sandbox.run("attack", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let held = sandlot_core::directory_usage(&sandbox.data_dir("attack"), u64::MAX)?.bytes;
    check(held < 48 << 20, || format!("/data holds {held} bytes of disk under an 8 MiB quota"))
}

/// Empty files take no block but an inode each; past the inode limit the run is stopped.
fn empty_files_count_towards_the_inode_limit() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_inodes = 1000;
        limits.timeout = Duration::from_secs(60);
    });
    let code = "import itertools\nfor i in itertools.count():\n    open(f'/data/f{i}', 'w').close()\n    if i > 200000: break\nprint('done')";
    let report = sandbox.run("attack", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let inodes = std::fs::read_dir(sandbox.data_dir("attack"))?.count();
    check(inodes < 200_000, || format!("the run made {inodes} files under a limit of 1000"))
}

/// Files unlinked while open are in no directory, so a walk of `/data` never sees their blocks: thirty of them, each
/// just under `RLIMIT_FSIZE`, held 210 MiB under an 8 MiB quota for as long as the run went on. On its disk image
/// the kernel counts them: writing stops with `ENOSPC` a little past the quota.
fn unlinked_open_files_count_towards_the_quota() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_mb = 8;
        limits.timeout = Duration::from_secs(60);
    });
    let report = sandbox.run("attack", Language::Python, UNLINKED_WRITER);
    let written: u64 = report
        .outcome
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("written "))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no count\n{}", describe(&report)))?;
    // Before: 220,200,960 bytes (30 files of 7 MiB). The quota and the image's room past it: 9 MiB.
    check(written <= 9 << 20, || {
        format!("unlinked files held {written} bytes under an 8 MiB quota\n{}", describe(&report))
    })?;
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))
}

/// Opens thirty files in `/data`, unlinks each, writes 7 MiB to each (just under `RLIMIT_FSIZE` at an 8 MiB quota)
/// while holding them all, says how much it wrote, and holds them for two seconds more.
const UNLINKED_WRITER: &str = include_str!("common/unlinked_writer.py");

/// Where `/data` is a plain directory (an older version's conversation; or not root, no loop devices), the watchdog
/// counts what the run's processes hold open after unlinking it: the run is stopped as over its quota. Before, it
/// held 210 MiB under 8 for as long as it ran, and ended `ok`.
/// As root the run's processes are its cgroup's; without root (no cgroups, no images) those of its pid namespace.
fn unlinked_open_files_count_towards_the_quota_of_a_plain_directory() -> Result<(), Failed> {
    for path in [LaunchPath::ServerRoot, LaunchPath::ServerUnprivileged] {
        let sandbox = Sandbox::on(path, |limits| {
            limits.disk_mb = 8;
            limits.timeout = Duration::from_secs(60);
        });
        let files = sandbox.data_dir("attack");
        std::fs::create_dir_all(&files)?;
        std::fs::write(files.join("old.txt"), "made by an older version")?;
        let report = sandbox.run("attack", Language::Python, UNLINKED_WRITER);
        check_eq(
            report.outcome.termination.clone(),
            Termination::DiskQuotaExceeded,
            &format!("{path:?}: {}", describe(&report)),
        )?;
    }
    Ok(())
}

/// A conversation's image lets its users write the quota and [`sandlot_core::OVER_QUOTA_ROOM`] past it, little
/// more (ext4's own blocks are outside what they may write); it has inodes for the limit and a few more; and it costs
/// the host's disk what is written in it, not its size (sparse, no inode table zeroed).
fn an_image_holds_the_quota_and_little_more() -> Result<(), Failed> {
    const MIB: u64 = 1 << 20;
    for (disk_mb, inodes) in [(8, 1000), (100, 100_000), (1024, 100_000), (5000, 10_000)] {
        let root = tempfile::tempdir()?;
        let images = sandlot_core::DiskImages::detect(disk_mb, inodes)?;
        let workspaces = sandlot_core::Workspaces::new(root.path()).with_images(images);
        let id = sandlot_core::ConversationId::parse("c").unwrap();
        let files = workspaces.prepare(&id)?;
        let stat = nix::sys::statvfs::statvfs(&files)?;
        let writable = stat.blocks_available() * stat.fragment_size();
        let free_inodes = stat.files_available();
        let image = std::fs::metadata(root.path().join("c").join(sandlot_core::IMAGE_NAME))?;
        let listed: Vec<_> = std::fs::read_dir(&files)?.collect();
        workspaces.unmount_images();
        let what = format!("{disk_mb} MiB, {inodes} inodes: {writable} bytes writable, {free_inodes} inodes free");
        // Little more: here 1.4 MiB past the quota at 8 MiB, 2.4 at 1 GiB, 4 at 5000 MiB (ext4 gives what rounds up).
        check(writable >= (disk_mb + 1) * MIB && writable < (disk_mb + 3) * MIB + disk_mb * MIB / 500, || {
            what.clone()
        })?;
        check(free_inodes > inodes && free_inodes < inodes + 1000, || what.clone())?;
        use std::os::unix::fs::MetadataExt;
        check(image.mode() & 0o777 == 0o600, || format!("the image's mode is {:o}", image.mode()))?;
        check(image.blocks() * 512 < 16 * MIB, || {
            format!("{what}: an empty image holds {} bytes", image.blocks() * 512)
        })?;
        check(listed.is_empty(), || format!("{what}: a new /data lists {listed:?}"))?;
    }
    Ok(())
}

/// A conversation's image outlives the server: one left mounted (a crashed server) is reused as it is, one
/// unmounted at shutdown is mounted again with its files; a larger quota grows it, a smaller one leaves it.
fn an_image_is_reused_grown_and_never_shrunk() -> Result<(), Failed> {
    const MIB: u64 = 1 << 20;
    let root = tempfile::tempdir()?;
    let id = sandlot_core::ConversationId::parse("kept").unwrap();
    let server = |disk_mb| -> Result<sandlot_core::Workspaces, Failed> {
        let images = sandlot_core::DiskImages::detect(disk_mb, 1000)?;
        Ok(sandlot_core::Workspaces::new(root.path()).with_images(images))
    };
    let writable = |files: &std::path::Path| -> Result<u64, Failed> {
        let stat = nix::sys::statvfs::statvfs(files)?;
        Ok((stat.blocks() - stat.blocks_free() + stat.blocks_available()) * stat.fragment_size())
    };
    let first = server(8)?;
    let files = first.prepare(&id)?;
    std::fs::write(files.join("kept.txt"), "kept")?;
    let device = std::fs::metadata(&files)?.dev();
    // A crashed server left it mounted: the next one finds the same filesystem.
    let files = server(8)?.prepare(&id)?;
    check_eq(std::fs::metadata(&files)?.dev(), device, "the mount left behind is reused")?;
    check_eq(first.unmount_images(), 1, "images unmounted at shutdown")?;
    check(std::fs::read_dir(&files)?.next().is_none(), || "files left under the mount point".into())?;
    // A server with a larger quota: mounted again, grown, the file still there.
    let grown = server(16)?;
    let files = grown.prepare(&id)?;
    check_eq(std::fs::read_to_string(files.join("kept.txt"))?.as_str(), "kept", "the file after a restart")?;
    let size = writable(&files)?;
    check(size >= 17 * MIB, || format!("a 16 MiB quota's image holds {size} bytes"))?;
    grown.unmount_images();
    // A smaller quota never shrinks it (the watchdog holds the lower quota).
    let smaller = server(4)?;
    let files = smaller.prepare(&id)?;
    check_eq(writable(&files)?, size, "the image's size under a smaller quota")?;
    check_eq(std::fs::read_to_string(files.join("kept.txt"))?.as_str(), "kept", "the file")?;
    smaller.unmount_images();
    Ok(())
}

/// Sixteen first uses of a new conversation at once (uploads into it, say): each gets the one image, mounted once.
/// Before, one that saw another's image mounted but not yet named took it for a crashed server's and renamed it
/// under the maker, which then failed (`No such file or directory`: a 500 for that upload).
fn first_uses_at_once_mount_one_image() -> Result<(), Failed> {
    let root = tempfile::tempdir()?;
    let id = sandlot_core::ConversationId::parse("raced").unwrap();
    let workspaces =
        sandlot_core::Workspaces::new(root.path()).with_images(sandlot_core::DiskImages::detect(1024, 100_000)?);
    let image = root.path().join("raced/files.img");
    // Each asks again and again until the image is named, so some ask while it is being made.
    let prepared: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16u64)
            .map(|i| {
                let (workspaces, id, image) = (&workspaces, &id, &image);
                scope.spawn(move || {
                    // Arrivals spread over the time an image takes to make, as uploads arrive.
                    std::thread::sleep(std::time::Duration::from_micros(i * 1500));
                    let mut answers = vec![workspaces.prepare(id)];
                    while !image.exists() && answers.len() < 100_000 {
                        answers.push(workspaces.prepare(id));
                    }
                    answers
                })
            })
            .collect();
        handles.into_iter().flat_map(|handle| handle.join().unwrap()).collect()
    });
    let mut devices = std::collections::BTreeSet::new();
    for files in prepared {
        devices.insert(std::fs::metadata(files?)?.dev());
    }
    let conversation = std::fs::metadata(root.path().join("raced"))?.dev();
    check(devices.len() == 1 && !devices.contains(&conversation), || format!("devices {devices:?}"))?;
    check(image.exists(), || "the image is named".into())?;
    check_eq(workspaces.unmount_images(), 1, "images unmounted")?;
    Ok(())
}

/// An image mounted when a server starts (a crashed server's) is copied into the zygote's mount namespace; removing
/// the conversation still frees its filesystem, loop device and file at once (the kernel detaches the mounts of a
/// directory removed in another namespace), so no image outlives its conversation while the server runs.
fn an_image_mounted_before_the_server_started_is_freed_when_removed() -> Result<(), Failed> {
    let root = tempfile::tempdir()?;
    let image = root.path().join("old").join(sandlot_core::IMAGE_NAME);
    let images = sandlot_core::DiskImages::detect(8, 1000)?;
    let old = sandlot_core::ConversationId::parse("old").unwrap();
    sandlot_core::Workspaces::new(root.path()).with_images(images).prepare(&old)?;
    let loops_of_image = || -> Vec<String> {
        let Ok(devices) = std::fs::read_dir("/sys/block") else { return Vec::new() };
        devices
            .flatten()
            .filter(|device| {
                std::fs::read_to_string(device.path().join("loop/backing_file"))
                    .is_ok_and(|file| file.starts_with(&*image.to_string_lossy()))
            })
            .map(|device| device.file_name().to_string_lossy().into_owned())
            .collect()
    };
    check(!loops_of_image().is_empty(), || "the image is not on a loop device".into())?;
    let sandbox = Sandbox::in_root(root, |_| {}, |_| {});
    let report = sandbox.run("other", Language::Bash, "true");
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    sandbox.runtime.block_on(sandbox.engine.delete_conversation(&old))?;
    // The loop device goes once the last mount of the filesystem does: at once here; 10 s is for a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !loops_of_image().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    check(loops_of_image().is_empty(), || format!("the removed image is still on {:?}", loops_of_image()))
}

/// The server's cost of measuring `/data` is bounded by design: a conversation on its own image is measured from its
/// filesystem's counters, never walked. Shown by a tree a walk cannot measure (nested deeper than the walk goes, which
/// stops a run whose `/data` is walked, as over its quota): on an image the run goes on to its end.
fn a_conversation_on_its_image_is_measured_without_a_walk() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(60));
    let code = "import os, time\nos.makedirs('/data/' + '/'.join(['d'] * 200))\ntime.sleep(2)\nprint('done')";
    let report = sandbox.run("attack", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "done\n", "stdout")
}

/// A conversation an older version made (a plain directory with files in it) keeps the watchdog, which now counts
/// every link against the inode limit: a file linked 200,000 times under a limit of 1,000 is stopped. Before, the
/// links were counted once, as one inode, and the run made them all (and every walk of them cost the server).
fn links_count_towards_the_inode_limit_of_a_plain_directory() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_inodes = 1000;
        limits.timeout = Duration::from_secs(60);
    });
    let files = sandbox.data_dir("attack");
    std::fs::create_dir_all(&files)?;
    std::fs::write(files.join("old.txt"), "made by an older version")?;
    let code = "import os\nopen('/data/f', 'w').close()\nfor i in range(200000):\n    os.link('/data/f', f'/data/l{i}')\nprint('done')";
    let report = sandbox.run("attack", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let entries = std::fs::read_dir(&files)?.count();
    check(entries < 200_000, || format!("the run made {entries} links under a limit of 1000"))
}

/// A run copies bash into `/data` and tries to make it setuid and setgid (a backdoor for the host's local users,
/// who would run it as the sandbox uid). `/data` is mounted nosuid,nodev, and no other host user can reach the
/// conversation's directory, to run the copy or even list it.
fn a_setuid_file_in_data_is_out_of_other_users_reach() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "cp /bin/bash /data/sh; chmod 6755 /data/sh; chmod 755 /data; grep ' /data ' /proc/self/mountinfo";
    let report = sandbox.run("attack", Language::Bash, code);
    let mount_options = report.outcome.stdout.split_whitespace().nth(5).unwrap_or_default().to_owned();
    check(mount_options.split(',').any(|o| o == "nosuid") && mount_options.split(',').any(|o| o == "nodev"), || {
        format!("/data is mounted {mount_options:?}\n{}", describe(&report))
    })?;
    let data = sandbox.data_dir("attack");
    check(data.join("sh").exists(), || format!("the copy was not made\n{}", describe(&report)))?;
    for command in [format!("ls {}", data.display()), format!("{}/sh -p -c id", data.display())] {
        let (code, output) = as_other_user(&command);
        check(code != 0 && output.contains("Permission denied"), || {
            format!("another host user ran `{command}`: exit {code}\n{output}")
        })?;
    }
    Ok(())
}

/// `/proc/self/mountinfo` names each mount's root within its filesystem (field 4): a bind of the conversation's
/// directory named its host path, and so `SANDBOX_ROOT` and the conversation's id. On its image `/data`'s root is
/// the image's `/`; nothing in the table names the root (the other binds are the host's system paths and runner
/// prefixes, mounted at the same paths they name).
fn the_mount_table_names_no_host_path_of_the_root() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let report = sandbox.run("attack", Language::Bash, "cat /proc/self/mountinfo /proc/self/mounts");
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    let root = sandbox.root.path().to_string_lossy().into_owned();
    let data = report.outcome.stdout.lines().find(|line| line.split(' ').nth(4) == Some("/data")).unwrap_or_default();
    check_eq(data.split(' ').nth(3), Some("/"), &describe(&report))?;
    check(!report.outcome.stdout.contains(&root), || format!("the mount table names {root}\n{}", describe(&report)))
}
