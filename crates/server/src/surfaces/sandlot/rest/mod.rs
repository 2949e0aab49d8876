//! sandlot's REST routes: the run history (`/v1/runs`, [`runs`]), conversations (`DELETE /v1/conversations/{id}`,
//! signed upload URLs, [`conversations`]) and their live sandboxes (`GET /v1/conversations[/{id}]`,
//! [`conversation_status`]).

pub mod conversation_status;
pub mod conversations;
pub mod runs;
