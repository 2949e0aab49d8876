//! sandlot's REST routes: the run history (`/v1/runs`, [`runs`]) and conversations (`DELETE /v1/conversations/{id}`,
//! signed upload URLs, [`conversations`]).

pub mod conversations;
pub mod runs;
