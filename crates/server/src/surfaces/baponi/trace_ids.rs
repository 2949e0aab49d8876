//! Baponi's trace ids: how a sandlot run is named to Baponi clients, and found again.
//!
//! A trace id is `trc_` + the first 15 bytes of the run id (a simple UUID: 32 hex digits, 16 bytes) in unpadded
//! base64url, 20 characters: as much of the run id as Baponi's SDK accepts (it refuses a trace id that is not
//! `trc_` and 1 to 20 of `[A-Za-z0-9_-]`). 20 characters are exactly 120 bits, so every trace id of that length
//! names one 30-digit prefix of a run id and back, and nothing shorter names anything.
//!
//! Invariant: a trace id is looked up whole (all 20 characters; no shortened id is ever matched) and only among the
//! caller's own runs ([`run_id_of`]): another tenant's trace id is answered exactly as an unknown one. The 114 random
//! bits it carries cannot be guessed either.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sandlot_core::Tenant;

use super::BaponiState;

/// What a trace id starts with.
const PREFIX: &str = "trc_";
/// The bytes of a run id a trace id carries: 20 base64url characters.
const CARRIED_BYTES: usize = 15;
/// The length of a run id, in hex digits.
const RUN_ID_DIGITS: usize = 32;

/// Baponi's trace id of the sandlot run `run_id`.
pub fn trace_id(run_id: &str) -> String {
    // Run ids are the engine's simple UUIDs; anything else would carry no bytes, and name no run.
    let bytes = hex::decode(run_id).unwrap_or_default();
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&bytes[..bytes.len().min(CARRIED_BYTES)]))
}

/// The run id prefix (30 lowercase hex digits) a whole, well-formed trace id carries; `None` for any other text.
fn carried(trace_id: &str) -> Option<String> {
    let encoded = trace_id.strip_prefix(PREFIX)?;
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    (bytes.len() == CARRIED_BYTES).then(|| hex::encode(bytes))
}

/// The run a trace id names, if it is `tenant`'s (an admin's: any): among the runs executing now, those in a
/// conversation the tenant owns; then, in the history, those it asked for (`History::get_for`). `None` for a
/// malformed or shortened trace id, an unknown run and another tenant's, alike.
pub fn run_id_of(state: &BaponiState, tenant: &Tenant, trace_id: &str) -> Result<Option<String>, sandlot_core::Error> {
    let Some(carried) = carried(trace_id) else {
        return Ok(None);
    };
    let names = |run_id: &str| run_id.len() == RUN_ID_DIGITS && run_id.starts_with(&carried);
    let engine = &state.app.engine;
    if let Some((run_id, conversation, _)) = engine.in_flight().into_iter().find(|(id, _, _)| names(id)) {
        let owner = engine.owner_of(&conversation)?;
        let own = tenant.is_admin() || owner.is_some_and(|owner| tenant.may_use(&owner));
        return Ok(own.then_some(run_id));
    }
    let Some(history) = engine.history() else {
        return Ok(None);
    };
    // The prefix is 30 of 32 digits: two runs sharing it (one in 2^114 per pair) would be the only ambiguity.
    match history.find_by_prefix(&carried)? {
        Some(run_id) if names(&run_id) => Ok(history.get_for(tenant, &run_id)?.map(|run| run.id)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_id_is_20_characters_that_carry_30_digits_of_the_run_id() {
        let run_id = "0123456789abcdef0123456789abcdef";
        let trace = trace_id(run_id);
        assert_eq!(trace, "trc_ASNFZ4mrze8BI0VniavN");
        assert_eq!(carried(&trace), Some(run_id[..30].to_owned()));
        let sdk_accepts = |t: &str| {
            t.strip_prefix("trc_").is_some_and(|rest| {
                (1..=20).contains(&rest.len())
                    && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            })
        };
        assert!(sdk_accepts(&trace));
        assert!(
            sdk_accepts(&trace_id("ffffffffffffffffffffffffffffffff")),
            "{}",
            trace_id("ffffffffffffffffffffffffffffffff")
        );
    }

    #[test]
    fn only_a_whole_trace_id_carries_anything() {
        let trace = trace_id("0123456789abcdef0123456789abcdef");
        for shortened in (0..trace.len()).map(|end| &trace[..end]) {
            assert_eq!(carried(shortened), None, "{shortened}");
        }
        for bad in [
            "trc_ASNFZ4mrze8BI0VniavN0",
            "TRC_ASNFZ4mrze8BI0VniavN",
            "trc_ASNFZ4mrze8BI0Vniav=",
            "trc_ASNFZ4mrze8BI0Vni+vN",
        ] {
            assert_eq!(carried(bad), None, "{bad}");
        }
    }
}
