//! PLACEHOLDER until the drivers land: the interface the session manager uses.
#![allow(dead_code, unused_variables)]

use std::pin::Pin;

use tokio::io::AsyncRead;

use crate::{Language, Spawn, Stream};

pub(crate) struct CellEnd {
    pub exit_code: i32,
    pub interrupted: bool,
}

#[derive(Debug)]
pub(crate) struct DriverGone;

pub(crate) struct DriverOutput {
    stdout: Pin<Box<dyn AsyncRead + Send>>,
    stderr: Pin<Box<dyn AsyncRead + Send>>,
}

impl DriverOutput {
    pub fn new(stdout: Pin<Box<dyn AsyncRead + Send>>, stderr: Pin<Box<dyn AsyncRead + Send>>) -> Self {
        Self { stdout, stderr }
    }

    pub async fn read_cell(
        &mut self,
        nonce: &str,
        sink: &mut (dyn FnMut(Stream, &[u8]) + Send),
    ) -> Result<CellEnd, DriverGone> {
        Err(DriverGone)
    }
}

pub(crate) fn spawn_for(language: Language) -> Spawn {
    Spawn { language, args: Vec::new(), env: Default::default() }
}

pub(crate) fn driver_language(language: Language) -> Language {
    if language == Language::TypeScript { Language::JavaScript } else { language }
}

pub(crate) fn encode_request(nonce: &str, language: Language, code: &str) -> Vec<u8> {
    format!("{nonce} {} {language}\n{code}", code.len()).into_bytes()
}
