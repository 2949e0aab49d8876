//! The conversations' budget: how many conversations there are and how many bytes of disk they hold, per tenant
//! (the owner named in `<root>/<id>/owner`; `""` for none) and in all, kept in memory so that a check costs no walk.
//!
//! Invariants: a conversation directory is made only through [`Workspaces::create_conversation`], which refuses a
//! new one that would take its tenant or the server past a bound ([`Error::ConversationLimit`]) and records it; a
//! removal forgets it; bytes are what [`Workspaces::conversation_bytes`] measured last (after an upload, at a run's
//! end, at start-up). The ledger is built from the root on first use (the engine does it at start-up), so it
//! survives a restart. A conversation another process on the same root makes is counted when this one first uses it;
//! one it removes stays counted until a restart (over-counted: the bound errs on the safe side).

use std::collections::HashMap;
use std::path::Path;

use super::Workspaces;
use crate::private_dir::create_private_dir;
use crate::{ConversationId, Error, Result, Tenant};

/// The default of [`ConversationBounds::max_conversations`].
pub const DEFAULT_MAX_CONVERSATIONS: u64 = 10_000;

/// The default of [`ConversationBounds::tenant_max_conversations`].
pub const DEFAULT_TENANT_MAX_CONVERSATIONS: u64 = 1_000;

/// The share of the root filesystem's free space (at start-up) that conversations may hold by default, in percent.
pub const DEFAULT_FREE_SPACE_PERCENT: u64 = 90;

/// How many conversations, and bytes of disk in them, the server and each tenant may have. A new conversation is
/// refused when its tenant or the server is at a bound; existing ones keep working (each within its own quota).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationBounds {
    /// Conversations on the root, every tenant's (`SANDLOT_MAX_CONVERSATIONS`).
    pub max_conversations: u64,
    /// Conversations one tenant owns (`SANDLOT_TENANT_MAX_CONVERSATIONS`).
    pub tenant_max_conversations: u64,
    /// Bytes of disk all conversations may hold (`SANDLOT_CONVERSATIONS_MAX_MB`); `None`: what they held at
    /// start-up plus [`DEFAULT_FREE_SPACE_PERCENT`] of the root filesystem's free space then.
    pub max_bytes: Option<u64>,
    /// Bytes of disk one tenant's conversations may hold (`SANDLOT_TENANT_CONVERSATIONS_MAX_MB`); `None`: half of
    /// `max_bytes`.
    pub tenant_max_bytes: Option<u64>,
}

impl Default for ConversationBounds {
    fn default() -> Self {
        Self {
            max_conversations: DEFAULT_MAX_CONVERSATIONS,
            tenant_max_conversations: DEFAULT_TENANT_MAX_CONVERSATIONS,
            max_bytes: None,
            tenant_max_bytes: None,
        }
    }
}

/// Conversations and bytes of one tenant, or of all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub conversations: u64,
    pub bytes: u64,
}

/// What [`Workspaces::budget`] reports (all zero for [`Workspaces::unbounded`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgeted {
    /// Per owner (`""`: conversations without one).
    pub tenants: HashMap<String, Spent>,
    pub total: Spent,
    /// The byte bounds in force, derived at start-up when not configured.
    pub max_bytes: u64,
    pub tenant_max_bytes: u64,
}

/// The ledger, once built.
#[derive(Debug, Default)]
struct Ledger {
    /// Each conversation's owner and bytes.
    conversations: HashMap<ConversationId, (String, u64)>,
    /// Per owner.
    tenants: HashMap<String, Spent>,
    total: Spent,
    /// The byte bounds in force (derived at build when not configured).
    max_bytes: u64,
    tenant_max_bytes: u64,
}

impl Ledger {
    fn add(&mut self, id: ConversationId, owner: String, bytes: u64) {
        self.forget(&id);
        let tenant = self.tenants.entry(owner.clone()).or_default();
        tenant.conversations += 1;
        tenant.bytes += bytes;
        self.total.conversations += 1;
        self.total.bytes += bytes;
        self.conversations.insert(id, (owner, bytes));
    }

    fn forget(&mut self, id: &ConversationId) {
        let Some((owner, bytes)) = self.conversations.remove(id) else { return };
        if let Some(tenant) = self.tenants.get_mut(&owner) {
            tenant.conversations -= 1;
            tenant.bytes -= bytes;
            if tenant.conversations == 0 {
                self.tenants.remove(&owner);
            }
        }
        self.total.conversations -= 1;
        self.total.bytes -= bytes;
    }

    /// Refuses a new conversation of `owner` that would pass a bound, naming the bound and its setting.
    fn admit(&self, owner: &str, bounds: &ConversationBounds) -> Result<()> {
        let tenant = self.tenants.get(owner).copied().unwrap_or_default();
        let bounds = [
            (
                self.total.conversations,
                bounds.max_conversations,
                "conversations on this server",
                "SANDLOT_MAX_CONVERSATIONS",
            ),
            (
                tenant.conversations,
                bounds.tenant_max_conversations,
                "conversations of this tenant",
                "SANDLOT_TENANT_MAX_CONVERSATIONS",
            ),
            (
                self.total.bytes,
                self.max_bytes,
                "bytes of disk in this server's conversations",
                "SANDLOT_CONVERSATIONS_MAX_MB",
            ),
            (
                tenant.bytes,
                self.tenant_max_bytes,
                "bytes of disk in this tenant's conversations",
                "SANDLOT_TENANT_CONVERSATIONS_MAX_MB",
            ),
        ];
        match bounds.into_iter().find(|(spent, limit, ..)| spent >= limit) {
            Some((spent, limit, what, setting)) => Err(Error::ConversationLimit { what, setting, spent, limit }),
            None => Ok(()),
        }
    }
}

/// The budget of one root: its bounds and its ledger, built on first use; no bounds and no ledger for
/// [`Workspaces::unbounded`].
#[derive(Debug, Default)]
pub(super) struct Budget {
    bounds: Option<ConversationBounds>,
    ledger: std::sync::Mutex<Option<Ledger>>,
}

impl Budget {
    pub(super) fn new(bounds: Option<ConversationBounds>) -> Self {
        Self { bounds, ledger: Default::default() }
    }
}

impl Workspaces {
    /// Makes `<root>/<id>` (private to the server, mode 0700) for `tenant` (`None`: a run without one) unless it
    /// exists; the one place a conversation directory is made. A new one that would take the tenant or the server
    /// past a bound of [`ConversationBounds`] is refused with [`Error::ConversationLimit`]; one that exists is
    /// always allowed (made private again, as an older version may have left it).
    pub fn create_conversation(&self, id: &ConversationId, tenant: Option<&Tenant>) -> Result<()> {
        let conversation = self.root.join(id.as_str());
        let create = || {
            create_private_dir(&conversation, "create conversation directory", "make conversation directory private")
        };
        if self.budget.bounds.is_none() {
            return create();
        }
        let exists = conversation.symlink_metadata().is_ok();
        self.with_ledger(|ledger, bounds| {
            if !exists && !ledger.conversations.contains_key(id) {
                ledger.admit(tenant.map_or("", Tenant::name), bounds)?;
            }
            create()?;
            if !ledger.conversations.contains_key(id) {
                let owner = match exists {
                    true => self.owner(id).ok().flatten().unwrap_or_default(),
                    false => tenant.map_or("", Tenant::name).to_owned(),
                };
                ledger.add(id.clone(), owner, 0);
            }
            Ok(())
        })
    }

    /// Records that `tenant` became the owner of the conversation (its bytes move to the tenant's account).
    pub(super) fn budget_owner(&self, id: &ConversationId, tenant: &Tenant) {
        let _ = self.with_ledger(|ledger, _| {
            let bytes = ledger.conversations.get(id).map_or(0, |(_, bytes)| *bytes);
            ledger.add(id.clone(), tenant.name().to_owned(), bytes);
            Ok(())
        });
    }

    /// Records that the conversation is gone.
    pub(super) fn budget_forget(&self, id: &ConversationId) {
        let _ = self.with_ledger(|ledger, _| {
            ledger.forget(id);
            Ok(())
        });
    }

    /// Measures the conversation again ([`Workspaces::conversation_bytes`]) and records its bytes; after an upload
    /// and at a run's end. A conversation that is gone is forgotten.
    pub fn remeasure(&self, id: &ConversationId) {
        if self.budget.bounds.is_none() {
            return;
        }
        let bytes = self.conversation_bytes(id);
        let _ = self.with_ledger(|ledger, _| {
            match (bytes, ledger.conversations.get(id)) {
                (Some(bytes), Some((owner, _))) => ledger.add(id.clone(), owner.clone(), bytes),
                (None, _) => ledger.forget(id),
                (Some(_), None) => {}
            }
            Ok(())
        });
    }

    /// What every tenant's conversations, and all together, count now, and the byte bounds in force. Builds the
    /// ledger if needed (a walk of the root: the engine does it at start-up).
    pub fn budget(&self) -> Result<Budgeted> {
        self.with_ledger(|ledger, _| {
            Ok(Budgeted {
                tenants: ledger.tenants.clone(),
                total: ledger.total,
                max_bytes: ledger.max_bytes,
                tenant_max_bytes: ledger.tenant_max_bytes,
            })
        })
    }

    /// What the conversation's directory holds on disk, in bytes; `None` when it is gone. The budget's one
    /// measurement, [`Workspaces::usage`] as the quota's (today a walk of `files`; a conversation whose files live
    /// in an image of their own would measure the image there).
    pub fn conversation_bytes(&self, id: &ConversationId) -> Option<u64> {
        if !self.root.join(id.as_str()).exists() {
            return None;
        }
        // A tree the walk refuses (nested too deep) counts nothing here: the conversation's quota already stops its
        // runs.
        Some(self.usage(id, u64::MAX).map_or(0, |usage| usage.bytes))
    }

    /// `act` on the ledger (built first if needed) and the bounds; `T::default()` when unbounded.
    fn with_ledger<T: Default>(&self, act: impl FnOnce(&mut Ledger, &ConversationBounds) -> Result<T>) -> Result<T> {
        let Some(bounds) = &self.budget.bounds else { return Ok(T::default()) };
        let mut guard = self.budget.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(self.build_ledger(bounds)?);
        }
        match guard.as_mut() {
            Some(ledger) => act(ledger, bounds),
            None => Err(Error::io("count conversations", &self.root, std::io::Error::other("no ledger"))),
        }
    }

    /// The ledger of what is on the root now: every conversation, its owner and its bytes; and the byte bounds.
    fn build_ledger(&self, bounds: &ConversationBounds) -> Result<Ledger> {
        let mut ledger = Ledger::default();
        for (id, _) in self.conversations()? {
            let owner = self.owner(&id).ok().flatten().unwrap_or_default();
            let bytes = self.conversation_bytes(&id).unwrap_or(0);
            ledger.add(id, owner, bytes);
        }
        ledger.max_bytes = bounds.max_bytes.unwrap_or_else(|| {
            ledger.total.bytes.saturating_add(free_bytes(&self.root) / 100 * DEFAULT_FREE_SPACE_PERCENT)
        });
        ledger.tenant_max_bytes = bounds.tenant_max_bytes.unwrap_or(ledger.max_bytes / 2);
        tracing::info!(
            conversations = ledger.total.conversations,
            bytes = ledger.total.bytes,
            max_bytes = ledger.max_bytes,
            tenant_max_bytes = ledger.tenant_max_bytes,
            "conversations counted"
        );
        Ok(ledger)
    }
}

/// Bytes an unprivileged user may still write on the filesystem of `root` (or of its nearest existing ancestor).
fn free_bytes(root: &Path) -> u64 {
    let existing = root.ancestors().find(|dir| dir.exists()).unwrap_or(root);
    rustix::fs::statvfs(existing).map_or(0, |stat| stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ConversationId {
        ConversationId::parse(name).unwrap()
    }

    fn spent(ws: &Workspaces, owner: &str) -> Spent {
        ws.budget().unwrap().tenants.get(owner).copied().unwrap_or_default()
    }

    #[test]
    fn new_conversations_are_counted_refused_past_a_bound_and_forgotten_when_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let bounds = ConversationBounds { max_conversations: 3, tenant_max_conversations: 2, ..Default::default() };
        let ws = Workspaces::with_bounds(tmp.path(), bounds);
        let alice = Tenant::new("alice");
        ws.claim_owner(&id("a1"), &alice).unwrap();
        ws.claim_owner(&id("a2"), &alice).unwrap();
        let refused = ws.claim_owner(&id("a3"), &alice).unwrap_err();
        assert!(matches!(refused, Error::ConversationLimit { setting: "SANDLOT_TENANT_MAX_CONVERSATIONS", .. }));
        assert!(!tmp.path().join("a3").exists());
        // Its own conversations are not new: they are always allowed.
        ws.claim_owner(&id("a1"), &alice).unwrap();
        ws.prepare(&id("a2")).unwrap();
        // A run without a tenant makes one of its own, within the server's bound.
        ws.prepare(&id("anyone")).unwrap();
        let refused = ws.claim_owner(&id("b1"), &Tenant::new("bob")).unwrap_err();
        assert!(matches!(refused, Error::ConversationLimit { setting: "SANDLOT_MAX_CONVERSATIONS", .. }));
        assert_eq!(ws.budget().unwrap().total.conversations, 3);
        // A removal gives the room back.
        ws.remove(&id("a1")).unwrap();
        assert_eq!(spent(&ws, "alice").conversations, 1);
        ws.claim_owner(&id("a3"), &alice).unwrap();
        assert_eq!(spent(&ws, "alice").conversations, 2);
    }

    #[test]
    fn the_ledger_is_built_from_the_root_and_measures_what_conversations_hold() {
        let tmp = tempfile::tempdir().unwrap();
        let before = Workspaces::new(tmp.path());
        before.claim_owner(&id("a1"), &Tenant::new("alice")).unwrap();
        std::fs::write(before.prepare(&id("a1")).unwrap().join("data"), vec![1u8; 100_000]).unwrap();
        before.prepare(&id("loose")).unwrap();
        // A restart: the new ledger finds both, their owners and their bytes.
        let ws = Workspaces::new(tmp.path());
        let alice = spent(&ws, "alice");
        assert_eq!(alice.conversations, 1);
        assert!(alice.bytes >= 100_000, "{alice:?}");
        assert_eq!(spent(&ws, "").conversations, 1);
        // What a run writes counts once measured; a conversation made meanwhile by another process on the root
        // counts when first used.
        std::fs::write(ws.files_dir(&id("loose")).join("more"), vec![1u8; 200_000]).unwrap();
        ws.remeasure(&id("loose"));
        assert!(spent(&ws, "").bytes >= 200_000);
        Workspaces::unbounded(tmp.path()).prepare(&id("elsewhere")).unwrap();
        ws.prepare(&id("elsewhere")).unwrap();
        assert_eq!(ws.budget().unwrap().total.conversations, 3);
    }
}
