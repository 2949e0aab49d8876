//! Tests of the drivers: the marker parsing on its own, and each driver in this machine's real interpreter.

mod bash;
mod harness;
mod node;
mod protocol;
mod python;
