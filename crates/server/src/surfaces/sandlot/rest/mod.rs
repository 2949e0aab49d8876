//! sandlot's REST routes: the run history (`/v1/runs`, [`runs`]), conversations (`DELETE /v1/conversations/{id}`,
//! signed upload URLs, [`conversations`]) and their live sandboxes (`GET /v1/conversations[/{id}]`,
//! [`conversation_status`]).

pub mod conversation_status;
pub mod conversations;
pub mod runs;

/// The conversation id of a route's path, or the 400 `invalid_argument` every such route answers a malformed one with.
fn path_conversation(text: &str) -> Result<sandlot_core::ConversationId, Box<axum::response::Response>> {
    sandlot_core::ConversationId::parse(text).map_err(|error| {
        Box::new(crate::kit::rest_error(axum::http::StatusCode::BAD_REQUEST, "invalid_argument", &error.to_string()))
    })
}
