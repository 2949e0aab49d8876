//! What an OAuth access token's scopes let its holder do. Three scopes: `sandlot:read` (the run history, resources,
//! event streams, task state), `sandlot:run` (running code and everything that changes a conversation; it includes
//! read) and `sandlot:admin` (every tenant's conversations and runs, as `SANDLOT_ADMINS`; it includes both). A static
//! token or a self-issued JWT has no scopes and may do everything its tenant may.

use axum::http::Method;

/// A scope sandlot knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Read,
    Run,
    Admin,
}

impl Scope {
    /// Every scope, as `scopes_supported` lists them.
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Run, Scope::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "sandlot:read",
            Scope::Run => "sandlot:run",
            Scope::Admin => "sandlot:admin",
        }
    }

    /// Whether a token granted `granted` (space-separated names) may do what needs `self`.
    pub fn granted_by<'a>(self, mut granted: impl Iterator<Item = &'a str>) -> bool {
        let covers = |name: &str| match self {
            Scope::Read => [Scope::Read, Scope::Run, Scope::Admin].iter().any(|s| s.name() == name),
            Scope::Run => [Scope::Run, Scope::Admin].iter().any(|s| s.name() == name),
            Scope::Admin => name == Scope::Admin.name(),
        };
        granted.any(covers)
    }
}

/// The scope an HTTP request needs, from its method and path; `None` when the JSON-RPC message decides (a POST to an
/// MCP endpoint, see [`for_message`]) or nothing is needed (ending one's own session).
pub fn for_route(method: &Method, path: &str) -> Option<Scope> {
    let mcp_endpoint = path.trim_end_matches('/').ends_with("/mcp") || path.trim_end_matches('/') == "/mcp";
    match *method {
        Method::POST if mcp_endpoint => None,
        Method::DELETE if mcp_endpoint => None,
        Method::GET | Method::HEAD => Some(Scope::Read),
        _ => Some(Scope::Run),
    }
}

/// The scope a JSON-RPC request to an MCP endpoint needs, from its method.
pub fn for_message(method: &str) -> Option<Scope> {
    match method {
        "tools/call" | "tasks/cancel" | "tasks/update" => Some(Scope::Run),
        "resources/read"
        | "resources/list"
        | "resources/templates/list"
        | "resources/subscribe"
        | "resources/unsubscribe"
        | "subscriptions/listen"
        | "tasks/get"
        | "logging/setLevel" => Some(Scope::Read),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_includes_read_and_admin_includes_both() {
        assert!(Scope::Read.granted_by(["sandlot:run"].into_iter()));
        assert!(Scope::Run.granted_by(["openid", "sandlot:admin"].into_iter()));
        assert!(!Scope::Run.granted_by(["sandlot:read"].into_iter()));
        assert!(!Scope::Admin.granted_by(["sandlot:run", "sandlot:read"].into_iter()));
        assert!(!Scope::Read.granted_by(std::iter::empty()));
    }

    #[test]
    fn routes_and_messages_need_what_they_do() {
        assert_eq!(for_route(&Method::GET, "/v1/runs"), Some(Scope::Read));
        assert_eq!(for_route(&Method::DELETE, "/v1/conversations/c"), Some(Scope::Run));
        assert_eq!(for_route(&Method::POST, "/mcp"), None);
        assert_eq!(for_route(&Method::POST, "/p/sandlot/mcp/"), None);
        assert_eq!(for_route(&Method::POST, "/message"), Some(Scope::Run));
        assert_eq!(for_message("tools/call"), Some(Scope::Run));
        assert_eq!(for_message("resources/read"), Some(Scope::Read));
        assert_eq!(for_message("tools/list"), None);
    }
}
