//! What Baponi's REST routes share: their state (the profile's, and the executions this face can cancel), the
//! tenant of a request, which requests open a stream, and the shape of their refusals (`{"error": kind,
//! "message": message}`, 400 `validation_error` naming the field).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::Response;
use tokio_util::sync::CancellationToken;

use super::BaponiState;
use crate::kit::{Caller, Opens, rest_error};

/// The REST face's state: the profile's, and the cancellation of each execution it runs, by conversation.
#[derive(Clone)]
pub struct RestState {
    pub baponi: BaponiState,
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
}

impl RestState {
    pub fn new(baponi: BaponiState) -> Self {
        Self { baponi, running: Arc::default() }
    }

    pub(super) fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the execution in `conversation` cancellable through `/cancel` until the guard is dropped; `None` when
    /// one is registered there already (that execution keeps the thread: this one will be refused as busy).
    pub(super) fn register(&self, conversation: &str, cancel: CancellationToken) -> Option<Registered> {
        let mut table = self.table();
        if table.contains_key(conversation) {
            return None;
        }
        table.insert(conversation.to_owned(), cancel);
        Some(Registered { state: self.clone(), conversation: conversation.to_owned() })
    }
}

/// An execution registered for cancellation.
pub(super) struct Registered {
    state: RestState,
    conversation: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.state.table().remove(&self.conversation);
    }
}

/// The tenant of a request: its caller's (sandlot's auth puts it there), else the ordinary tenant `anonymous`.
pub(super) fn tenant_of(caller: Option<Extension<Caller>>) -> sandlot_core::Tenant {
    caller.map_or_else(|| Caller::anonymous().tenant(), |Extension(caller)| caller.tenant())
}

/// What a REST request opens: a stream for an execution's output and for an execute that asks for NDJSON
/// (`Accept: application/x-ndjson`), an exchange otherwise.
pub(super) fn opens(request: &Request) -> Opens {
    let ndjson = request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .any(|accept| accept.to_str().is_ok_and(|accept| accept.contains("application/x-ndjson")));
    if ndjson || request.uri().path().ends_with("/output") { Opens::Stream } else { Opens::Exchange }
}

/// A Baponi REST error: `{"error": kind, "message": message}`.
pub(super) fn refuse(status: StatusCode, kind: &str, message: &str) -> Response {
    rest_error(status, kind, message)
}

/// 400 `validation_error`.
pub(super) fn invalid(message: &str) -> Response {
    refuse(StatusCode::BAD_REQUEST, "validation_error", message)
}

/// Parses a JSON body; a bad or missing field is a 400 that names it.
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner();
        Box::new(if field == "." {
            invalid(&format!("invalid body: {inner}"))
        } else {
            invalid(&format!("{field}: {inner}"))
        })
    })
}
