//! A conversation's owner: the tenant that first used it, named in `<root>/<id>/owner`.
//!
//! The file lies beside `files`, in the server's private `<root>/<id>` (mode 0700), and a sandbox is only ever given
//! `files`, so no run can write, replace or plant it. It is made whole or not at all (written under a temporary
//! name, then hard-linked to `owner`, which fails when one exists), so of two tenants racing to use a new id exactly
//! one becomes its owner. Nothing here follows a symlink. The file goes with its conversation
//! ([`Workspaces::remove`] empties the whole directory).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::{Workspaces, open_conversation_dir};
use crate::{ConversationId, Error, Result, Tenant};

/// The owner file's name in `<root>/<id>`.
const OWNER_FILE: &str = "owner";

/// The longest owner name kept: an owner file is read only up to it.
const MAX_OWNER_BYTES: usize = 64 * 1024;

/// How often a claim starts over when the conversation is removed or made again under it.
const CLAIM_ATTEMPTS: usize = 10;

/// Makes the temporary names of concurrent claims of this process distinct.
static CLAIM_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Workspaces {
    /// The name of the tenant that owns the conversation; `None` when it has no directory, or a directory without an
    /// owner (made by a version without tenants, or only ever used without one). An owner file that is not a
    /// regular file (a symlink, which is never followed), too large or not UTF-8 is an error.
    pub fn owner(&self, id: &ConversationId) -> Result<Option<String>> {
        let conversation = self.root.join(id.as_str());
        match open_conversation_dir(&conversation)? {
            Some(dir) => read_owner(&dir, &conversation),
            None => Ok(None),
        }
    }

    /// Makes `tenant` the conversation's owner when it has none (creating `<root>/<id>`, mode 0700, if needed), and
    /// checks it may use the conversation when it has one: its own, or any for an admin; else
    /// [`Error::ConversationTaken`]. Of concurrent claims of a conversation without an owner, exactly one records its
    /// tenant; the others then find that owner. The file is on disk (file and directory synced) before this returns.
    /// Returns the owner (the tenant, or for an admin the owner it found).
    pub fn claim_owner(&self, id: &ConversationId, tenant: &Tenant) -> Result<String> {
        if tenant.name().len() > MAX_OWNER_BYTES {
            return Err(Error::invalid("tenant", format!("its name is longer than {MAX_OWNER_BYTES} bytes")));
        }
        let conversation = self.root.join(id.as_str());
        let taken = || Error::ConversationTaken { conversation: id.to_string() };
        for _ in 0..CLAIM_ATTEMPTS {
            self.create_conversation(id, Some(tenant))?;
            // Removed between its creation and here: start over.
            let Some(dir) = open_conversation_dir(&conversation)? else { continue };
            if let Some(owner) = read_owner(&dir, &conversation)? {
                return if tenant.may_use(&owner) { Ok(owner) } else { Err(taken()) };
            }
            // Not linked: another claim's owner is there now, read on the next round. Linked into a directory that
            // was removed meanwhile: the conversation at the path is a new one, claimed on the next round.
            if link_owner(&dir, &conversation, tenant.name())? && still_at(&dir, &conversation)? {
                self.budget_owner(id, tenant);
                return Ok(tenant.name().to_owned());
            }
        }
        Err(Error::io(
            "claim conversation",
            &conversation,
            std::io::Error::other("the conversation was removed and made again under every attempt"),
        ))
    }
}

/// The owner named in the conversation directory `dir` (at `conversation`, for messages), if any.
fn read_owner(dir: &OwnedFd, conversation: &Path) -> Result<Option<String>> {
    let path = conversation.join(OWNER_FILE);
    let corrupt = |message: &str| Error::io("read conversation owner", &path, std::io::Error::other(message));
    // O_NONBLOCK: a FIFO there is opened without waiting, then refused by its type.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match rustix::fs::openat(dir, OWNER_FILE, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(corrupt("is a symlink, which is never followed")),
        Err(e) => return Err(Error::io("read conversation owner", &path, e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| Error::io("read conversation owner", &path, e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(corrupt("is not a regular file"));
    }
    let mut name = Vec::new();
    File::from(fd)
        .take(MAX_OWNER_BYTES as u64 + 1)
        .read_to_end(&mut name)
        .map_err(|e| Error::io("read conversation owner", &path, e))?;
    if name.len() > MAX_OWNER_BYTES {
        return Err(corrupt("is larger than an owner name may be"));
    }
    String::from_utf8(name).map(Some).map_err(|_| corrupt("is not UTF-8"))
}

/// Writes `name` to a fresh temporary file in `dir` and links it as the owner file; `false` when an owner file was
/// there first (nothing is replaced). The temporary name goes in every case.
fn link_owner(dir: &OwnedFd, conversation: &Path, name: &str) -> Result<bool> {
    let path = conversation.join(OWNER_FILE);
    let temp =
        format!(".owner-{}-{}", std::process::id(), CLAIM_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, temp.as_str(), flags, Mode::from_raw_mode(0o600))
        .map_err(|e| Error::io("record conversation owner", &path, e.into()))?;
    let linked = (|| {
        let mut file = File::from(fd);
        file.write_all(name.as_bytes())?;
        // Synced before it is linked: after a crash the owner file is whole or absent, never empty.
        file.sync_all()?;
        match rustix::fs::linkat(dir, temp.as_str(), dir, OWNER_FILE, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(std::io::Error::from(e)),
        }
    })();
    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    let linked = linked.map_err(|e| Error::io("record conversation owner", &path, e))?;
    if linked {
        rustix::fs::fsync(dir).map_err(|e| Error::io("record conversation owner", &path, e.into()))?;
    }
    Ok(linked)
}

/// Whether the open directory `dir` is still the one at `conversation` (not removed, nor replaced, since it was
/// opened).
fn still_at(dir: &OwnedFd, conversation: &Path) -> Result<bool> {
    let held = rustix::fs::fstat(dir).map_err(|e| Error::io("stat conversation", conversation, e.into()))?;
    match rustix::fs::stat(conversation) {
        Ok(now) => Ok((now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(Error::io("stat conversation", conversation, e.into())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workspaces, ConversationId) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(tmp.path().join("root"));
        (tmp, ws, ConversationId::parse("conv").unwrap())
    }

    fn taken(id: &ConversationId) -> String {
        Error::ConversationTaken { conversation: id.to_string() }.to_string()
    }

    #[test]
    fn the_first_tenant_owns_a_conversation_and_others_are_refused() {
        let (_tmp, ws, id) = setup();
        assert_eq!(ws.owner(&id).unwrap(), None);
        ws.claim_owner(&id, &Tenant::new("alice")).unwrap();
        ws.claim_owner(&id, &Tenant::new("alice")).unwrap();
        assert_eq!(ws.owner(&id).unwrap().as_deref(), Some("alice"));
        assert_eq!(ws.claim_owner(&id, &Tenant::new("bob")).unwrap_err().to_string(), taken(&id));
        assert_eq!(ws.owner(&id).unwrap().as_deref(), Some("alice"));
        // Only `files` and the owner are left in the conversation directory (no temporary file).
        ws.prepare(&id).unwrap();
        let mut names: Vec<_> =
            std::fs::read_dir(ws.root().join("conv")).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["files", "owner"]);
    }

    #[test]
    fn an_admin_uses_any_conversation_and_owns_the_new_ones_it_uses_first() {
        let (_tmp, ws, id) = setup();
        let other = ConversationId::parse("other").unwrap();
        ws.claim_owner(&id, &Tenant::new("alice")).unwrap();
        ws.claim_owner(&id, &Tenant::admin("root")).unwrap();
        assert_eq!(ws.owner(&id).unwrap().as_deref(), Some("alice"), "an admin's use takes nothing over");
        ws.claim_owner(&other, &Tenant::admin("root")).unwrap();
        assert_eq!(ws.owner(&other).unwrap().as_deref(), Some("root"));
        assert_eq!(ws.claim_owner(&other, &Tenant::new("alice")).unwrap_err().to_string(), taken(&other));
    }

    #[test]
    fn a_conversation_made_without_an_owner_is_claimed_by_its_next_user() {
        let (_tmp, ws, id) = setup();
        let files = ws.prepare(&id).unwrap();
        std::fs::write(files.join("old.txt"), "kept").unwrap();
        assert_eq!(ws.owner(&id).unwrap(), None);
        ws.claim_owner(&id, &Tenant::new("bob")).unwrap();
        assert_eq!(ws.owner(&id).unwrap().as_deref(), Some("bob"));
        assert_eq!(std::fs::read_to_string(files.join("old.txt")).unwrap(), "kept");
    }

    #[test]
    fn of_two_tenants_racing_on_a_new_id_exactly_one_owns_it() {
        for round in 0..20 {
            let (_tmp, ws, _) = setup();
            let id = ConversationId::parse(&format!("race-{round}")).unwrap();
            let barrier = std::sync::Barrier::new(2);
            let results: Vec<_> = std::thread::scope(|scope| {
                let claims: Vec<_> = ["alice", "bob"]
                    .map(|name| {
                        let (ws, id, barrier) = (&ws, &id, &barrier);
                        scope.spawn(move || {
                            barrier.wait();
                            ws.claim_owner(id, &Tenant::new(name)).map_err(|e| e.to_string())
                        })
                    })
                    .into_iter()
                    .collect();
                claims.into_iter().map(|claim| claim.join().unwrap()).collect()
            });
            let owner = ws.owner(&id).unwrap().unwrap();
            let expected = |name: &str| if name == owner { Ok(owner.clone()) } else { Err(taken(&id)) };
            assert_eq!(results, [expected("alice"), expected("bob")], "round {round}");
        }
    }

    /// ATTACK: a symlink at `<root>/<id>/owner` (to a file naming the attacker, or to a file the claim would
    /// overwrite) is neither read through nor written through, and the conversation is refused to everyone.
    #[test]
    fn attack_a_symlink_planted_as_the_owner_is_never_followed() {
        let (tmp, ws, id) = setup();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "mallory").unwrap();
        std::fs::create_dir_all(ws.root().join("conv")).unwrap();
        symlink(&outside, ws.root().join("conv/owner")).unwrap();
        let err = ws.owner(&id).unwrap_err();
        assert!(matches!(&err, Error::Io { action: "read conversation owner", .. }), "{err}");
        for tenant in [Tenant::new("mallory"), Tenant::new("alice")] {
            let err = ws.claim_owner(&id, &tenant).unwrap_err();
            assert!(matches!(&err, Error::Io { action: "read conversation owner", .. }), "{err}");
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mallory");
        assert!(std::fs::symlink_metadata(ws.root().join("conv/owner")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn removing_a_conversation_removes_its_owner() {
        let (_tmp, ws, id) = setup();
        ws.claim_owner(&id, &Tenant::new("alice")).unwrap();
        std::fs::write(ws.prepare(&id).unwrap().join("f"), "x").unwrap();
        assert!(ws.remove(&id).unwrap());
        assert!(!ws.root().join("conv").exists());
        assert_eq!(ws.owner(&id).unwrap(), None);
        ws.claim_owner(&id, &Tenant::new("bob")).unwrap();
        assert_eq!(ws.owner(&id).unwrap().as_deref(), Some("bob"));
    }
}
