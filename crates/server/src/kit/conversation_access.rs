//! A tenant's access to a conversation, for the profiles' faces that take a conversation, thread or workspace id:
//! a read goes through a [`TenantView`], which shows another tenant's conversation exactly as one that does not
//! exist; a write first [`claim`]s the conversation (its first user becomes its owner); a face that marks a run
//! before the engine sees it (Baponi's busy threads) first [`admit_run`]s it, and the engine's `run_as` claims it.
//!
//! Besides the engine's owner check, the derived workspace of another tenant ([`super::tenant_workspaces`]) is
//! refused even before its subject first used it: nobody else makes it, plants files in it, or reads what a
//! version without tenants left there. An admin passes both checks.

use std::fs::File;

use sandlot_core::{ConversationId, Engine, Error, FileListing, Result, Tenant, WalkEnd, WalkLimits, Workspaces};

use super::tenant_workspaces::{derived_for_another, refuse_derived_for_another};

/// Makes `tenant` the owner of the conversation when it has none, or checks it may use it (its own, any for an
/// admin); [`Error::ConversationTaken`] for another tenant's, and for another tenant's derived workspace. Before a
/// face writes into a conversation outside a run (an upload, a file tool), or signs a URL that will.
pub fn claim(engine: &Engine, tenant: &Tenant, id: &ConversationId) -> Result<()> {
    refuse_derived_for_another(id, tenant)?;
    engine.claim_conversation(tenant, id)
}

/// Checks, without claiming it, that a run of `tenant` may go into the conversation: [`Error::ConversationTaken`]
/// (as `Engine::run_as` refuses it) for another tenant's, and for another tenant's derived workspace.
pub fn admit_run(engine: &Engine, tenant: &Tenant, id: &ConversationId) -> Result<()> {
    refuse_derived_for_another(id, tenant)?;
    match engine.check_conversation(tenant, id) {
        Err(Error::ConversationHidden { .. }) => Err(Error::ConversationTaken { conversation: id.to_string() }),
        other => other,
    }
}

/// One conversation's files as one tenant may read them. Invariant: for another tenant's conversation (or derived
/// workspace) every read answers what it answers for a conversation that does not exist, error for error, so the
/// answers never tell the two apart.
#[derive(Debug, Clone)]
pub struct TenantView {
    workspaces: Workspaces,
    id: ConversationId,
    hidden: bool,
}

impl TenantView {
    /// The conversation `id` as `tenant` sees it. `Err` only when its owner cannot be read.
    pub fn new(engine: &Engine, tenant: &Tenant, id: ConversationId) -> Result<Self> {
        let hidden = derived_for_another(&id, tenant)
            || match engine.check_conversation(tenant, &id) {
                Ok(()) => false,
                Err(Error::ConversationHidden { .. }) => true,
                Err(error) => return Err(error),
            };
        Ok(Self { workspaces: engine.workspaces().clone(), id, hidden })
    }

    /// The conversation.
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    /// [`Workspaces::open_file`].
    pub fn open_file(&self, path: &str) -> Result<File> {
        if self.hidden {
            return Err(missing(path));
        }
        self.workspaces.open_file(&self.id, path)
    }

    /// [`Workspaces::open`].
    pub fn open(&self, path: &str) -> Result<File> {
        if self.hidden {
            // What `open` adds to `open_file` (a directory or a FIFO read as missing) cannot happen in a missing
            // conversation.
            return Err(missing(path));
        }
        self.workspaces.open(&self.id, path)
    }

    /// [`Workspaces::list_within`].
    pub fn list_within(&self, max_entries: usize, max_path_bytes: usize) -> Result<FileListing> {
        if self.hidden {
            return Ok(FileListing::default());
        }
        self.workspaces.list_within(&self.id, max_entries, max_path_bytes)
    }

    /// [`Workspaces::list_limited`].
    pub fn list_limited(&self, limits: &WalkLimits<'_>) -> Result<(FileListing, WalkEnd)> {
        if self.hidden {
            return Ok((FileListing::default(), WalkEnd::Complete));
        }
        self.workspaces.list_limited(&self.id, limits)
    }
}

/// What a read of `path` in a conversation that does not exist gives: the path's shape is checked first, then the
/// file is not found.
fn missing(path: &str) -> Error {
    match sandlot_core::validate_relative_path(path) {
        Err(error) => error,
        Ok(()) => Error::FileNotFound { path: path.to_owned() },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    struct NoBackend;

    #[async_trait::async_trait]
    impl sandlot_core::Backend for NoBackend {
        fn name(&self) -> &'static str {
            "none"
        }
        fn runners(&self) -> Vec<sandlot_core::RunnerInfo> {
            Vec::new()
        }
        async fn run(
            &self,
            _job: sandlot_core::Job,
            _sink: &dyn sandlot_core::OutputSink,
        ) -> Result<sandlot_core::RunOutcome> {
            unreachable!("no run here")
        }
    }

    fn engine(root: &std::path::Path) -> Engine {
        Engine::new(Arc::new(NoBackend), Workspaces::new(root), Default::default())
    }

    /// What a view answers, as text: errors by their Debug form (which names the variant and every field).
    fn answers(view: &TenantView, path: &str) -> [String; 3] {
        let shown = |result: Result<File>| result.map(drop).map_err(|e| format!("{e:?}"));
        [
            format!("{:?}", shown(view.open_file(path))),
            format!("{:?}", shown(view.open(path))),
            format!("{:?}", view.list_within(100, 1 << 20).map_err(|e| format!("{e:?}"))),
        ]
    }

    #[test]
    fn another_tenants_conversation_reads_exactly_as_a_missing_one() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine(root.path());
        let (alice, bob) = (Tenant::new("alice"), Tenant::new("bob"));
        let taken = ConversationId::parse("taken").unwrap();
        claim(&engine, &alice, &taken).unwrap();
        let files = engine.workspaces().prepare(&taken).unwrap();
        std::fs::write(files.join("a.txt"), "mine").unwrap();
        std::fs::create_dir(files.join("dir")).unwrap();
        let long = "x".repeat(256);
        let paths =
            ["a.txt", "dir", "nope", "", "/abs", "a//b", "../a", "a\u{1}", &long, &"y/".repeat(2100), "dir/a.txt"];
        for path in paths {
            let hidden = TenantView::new(&engine, &bob, taken.clone()).unwrap();
            let missing = TenantView::new(&engine, &bob, ConversationId::parse("missing").unwrap()).unwrap();
            assert_eq!(answers(&hidden, path), answers(&missing, path), "{path:?}");
        }
        let own = TenantView::new(&engine, &alice, taken.clone()).unwrap();
        assert_eq!(std::io::read_to_string(own.open("a.txt").unwrap()).unwrap(), "mine");
        let admin = TenantView::new(&engine, &Tenant::admin("ops"), taken.clone()).unwrap();
        assert_eq!(admin.list_within(10, 1 << 20).unwrap().files.len(), 1);
    }

    #[test]
    fn another_tenants_derived_workspace_is_hidden_and_refused_before_its_first_use() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine(root.path());
        let (alice, bob) = (Tenant::new("alice"), Tenant::new("bob"));
        let of_alice = super::super::tenant_workspaces::profile_workspace("codegen", "alice", None).unwrap();
        let taken = || Err::<(), _>(format!("{:?}", Error::ConversationTaken { conversation: of_alice.to_string() }));
        let debug = |result: Result<()>| result.map_err(|e| format!("{e:?}"));
        assert_eq!(debug(admit_run(&engine, &bob, &of_alice)), taken());
        assert_eq!(debug(claim(&engine, &bob, &of_alice)), taken());
        assert_eq!(engine.owner_of(&of_alice).unwrap(), None, "a refused claim records nothing");
        let hidden = TenantView::new(&engine, &bob, of_alice.clone()).unwrap();
        assert!(hidden.hidden);
        assert_eq!(debug(admit_run(&engine, &alice, &of_alice)), Ok(()));
        assert_eq!(debug(claim(&engine, &alice, &of_alice)), Ok(()));
        assert_eq!(engine.owner_of(&of_alice).unwrap(), Some("alice".to_owned()));
        // Once it is Alice's, the engine's own check refuses it too, and an admin uses it.
        assert_eq!(debug(admit_run(&engine, &bob, &of_alice)), taken());
        assert_eq!(debug(admit_run(&engine, &Tenant::admin("ops"), &of_alice)), Ok(()));
    }
}
