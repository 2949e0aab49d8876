//! The open-sandbox profile (`reference/profiles.md` §3): its tools, on the tenant's workspace mounted at `/workspace`.

pub mod tools;
