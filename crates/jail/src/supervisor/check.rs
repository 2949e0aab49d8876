//! One line of `sandlot doctor`'s report: a layer of the jail and how it fares on this host.

/// How a layer fares on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// Present and used.
    Ok,
    /// Absent: the jail runs without it (weaker), as the detail says.
    Missing,
    /// The jail cannot run.
    Failed,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub layer: &'static str,
    pub status: CheckStatus,
    pub detail: String,
}

/// A line for `layer`.
pub fn check(layer: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check { layer, status, detail: detail.into() }
}
