//! Tenants: the callers a multi-tenant server keeps apart (a named static token, a JWT's subject).
//!
//! A conversation belongs to the tenant that first used it (its owner file, see `workspaces/owner.rs`), a run to the
//! tenant named in its history row's `caller`. An ordinary tenant uses only its own; an admin tenant uses every
//! tenant's. The engine's single-user callers (`sandlot run`) have no tenant and check nothing.

/// One caller of a multi-tenant server, as its face authenticated it. The name is compared as given, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant {
    name: String,
    admin: bool,
}

impl Tenant {
    /// An ordinary tenant: it sees and uses only its own conversations and runs.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), admin: false }
    }

    /// An admin tenant: it sees and uses every tenant's conversations and runs. A new conversation it uses first is
    /// its own, like any tenant's.
    pub fn admin(name: impl Into<String>) -> Self {
        Self { name: name.into(), admin: true }
    }

    /// The tenant's name: what a conversation's owner file and a run's `caller` hold.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the tenant is an admin.
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether the tenant may use what the tenant named `owner` owns: its own, or anything for an admin.
    pub fn may_use(&self, owner: &str) -> bool {
        self.admin || self.name == owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_tenant_uses_its_own_and_an_admin_everything() {
        let (alice, root) = (Tenant::new("alice"), Tenant::admin("root"));
        let uses = |tenant: &Tenant| ["alice", "bob", "root", ""].map(|owner| tenant.may_use(owner));
        assert_eq!(uses(&alice), [true, false, false, false]);
        assert_eq!(uses(&root), [true, true, true, true]);
        assert_eq!((alice.name(), alice.is_admin(), root.name(), root.is_admin()), ("alice", false, "root", true));
        assert_ne!(Tenant::new("root"), root, "an admin is not the ordinary tenant of the same name");
    }
}
