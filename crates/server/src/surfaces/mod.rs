//! The surfaces: sandlot's own ([`sandlot`]) and the drop-in profiles, the MCP and REST surfaces of other products
//! served over sandlot's one engine so that their clients change only the base URL (docs/profiles.md). Each stands
//! on the kit alone; no surface imports another.
//!
//! One folder per surface; each has a `router` that serves its paths relative to its base. The app mounts every
//! enabled profile under `/p/<name>`, sandlot's own surface at the root and under [`SANDLOT_PREFIX`], and one
//! profile may take the root paths instead of sandlot's own (`SANDLOT_ROOT_PROFILE`; docs/profiles.md). Every run
//! goes through `Engine::run_as` for the caller's tenant, so history, limits, auth, tenants and metrics are shared.
//! Where a product is looser than sandlot on safety (symlink escapes, missing auth), its surface stays as strict as
//! sandlot.

pub mod baponi;
pub mod codegen;
pub mod open_sandbox;
pub mod sandlot;

use axum::Router;

use crate::AppState;
use crate::kit::Gate;

/// Where sandlot's own MCP and REST surface is always served, and only there when a profile has the root.
pub const SANDLOT_PREFIX: &str = "/p/sandlot";

/// What the profiles are configured with, beyond sandlot's own state.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Baponi's named volumes (`SANDLOT_BAPONI_VOLUMES`).
    pub baponi_volumes: baponi::Volumes,
}

/// A product whose surface sandlot can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Baponi: stateless MCP (`sandbox_execute`, `files_download`), REST execute and the Files API.
    Baponi,
    /// codegen-sandbox: Claude-Code-style workspace tools over legacy HTTP+SSE.
    Codegen,
    /// open-sandbox: tools as JSON-RPC methods over `POST /mcp`, one-shot SSE, NDJSON and stdio; unified errors.
    OpenSandbox,
}

impl Profile {
    /// Every profile sandlot has.
    pub const ALL: [Profile; 3] = [Profile::Baponi, Profile::Codegen, Profile::OpenSandbox];

    /// The name in configuration and in the path prefix.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Baponi => "baponi",
            Profile::Codegen => "codegen",
            Profile::OpenSandbox => "open-sandbox",
        }
    }

    /// The profile called `name` (as in `SANDLOT_PROFILES`).
    pub fn from_name(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|profile| profile.name() == name)
    }

    /// Where the profile is mounted beside sandlot's own surface: `/p/<name>`.
    pub fn prefix(self) -> String {
        format!("/p/{}", self.name())
    }

    /// The path of the profile's MCP endpoint, relative to its base: what its clients are given.
    pub fn endpoint(self) -> &'static str {
        match self {
            Profile::Baponi => "/mcp",
            Profile::Codegen => "/sse",
            Profile::OpenSandbox => "/mcp",
        }
    }

    /// The profile's routes, relative to its base, behind `gate` where they need a credential.
    pub fn router(self, state: AppState, gate: &Gate, settings: &Settings) -> Router {
        match self {
            Profile::Baponi => baponi::router(baponi::BaponiState::new(state, settings.baponi_volumes.clone()), gate),
            Profile::Codegen => codegen::router(state, gate),
            Profile::OpenSandbox => open_sandbox::router(state, gate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_surface_knows_its_own_prefix() {
        assert_eq!(Profile::Baponi.prefix(), baponi::PREFIX);
    }
}
