//! Uploads into a conversation's `/data`, bounded: a file streams to a temporary file beside its path (never whole in
//! memory), and what it may write is promised against the quota before a byte is read.
//!
//! Invariants, per conversation: at most [`MAX_UPLOADS_PER_CONVERSATION`] uploads are in flight (more are
//! [`Error::Busy`]); admitting one (measure `/data`, add what the uploads in flight promised, add this one's size)
//! and committing one (measure `/data` with the file written, rename it into place) each happen under the
//! conversation's lock, so concurrent uploads never all pass a quota that fits one. An upload of an unknown size is
//! promised what is left of the quota and stopped when it writes more. A run of the conversation may write `/data`
//! meanwhile: the commit measures what is on disk then, the upload's file included, and is refused when that is over
//! the quota, so an upload never takes the pair over it; what the run writes after is its quota watchdog's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::AsyncWriteExt;

use crate::{Claim, ConversationId, Error, FileEntry, PendingFile, Result, Workspaces};

/// Uploads in flight at once into one conversation.
pub const MAX_UPLOADS_PER_CONVERSATION: usize = 4;

/// How large an upload says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadSize {
    /// The body's declared length (`Content-Length`, or bytes already in memory).
    Exactly(u64),
    /// Unknown (a chunked body), at most this many bytes.
    AtMost(u64),
}

/// What the uploads in flight into one conversation promised.
#[derive(Debug, Default)]
struct InFlight {
    uploads: usize,
    promised: u64,
}

/// One conversation's uploads: its lock and what its uploads promised, and how many hold it (the map entry goes
/// when none does).
#[derive(Debug, Default)]
struct Entry {
    holders: usize,
    in_flight: Arc<Mutex<InFlight>>,
}

/// Every conversation's uploads in flight, in this process.
#[derive(Debug, Default)]
pub(crate) struct Uploads {
    conversations: Mutex<HashMap<ConversationId, Entry>>,
}

impl Uploads {
    /// The conversation's entry, held until [`Uploads::release`].
    fn hold(self: &Arc<Self>, id: &ConversationId) -> Arc<Mutex<InFlight>> {
        let mut map = self.conversations.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(id.clone()).or_default();
        entry.holders += 1;
        entry.in_flight.clone()
    }

    fn release(&self, id: &ConversationId) {
        let mut map = self.conversations.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get_mut(id) {
            entry.holders -= 1;
            if entry.holders == 0 {
                map.remove(id);
            }
        }
    }
}

/// An upload admitted into the conversation's quota ([`crate::Engine::begin_upload`]): write its bytes with
/// [`Upload::write`], then [`Upload::finish`]. Dropped before, it leaves nothing behind and its promise goes.
#[derive(Debug)]
pub struct Upload {
    pending: PendingFile,
    file: tokio::fs::File,
    written: u64,
    /// Bytes this upload may write: its size, or what its promise left of the quota.
    allowed: u64,
    promise: Promise,
    quota_bytes: u64,
    max_inodes: u64,
    workspaces: Workspaces,
    path: String,
    /// Held to the end: the conversation is not removed under the upload.
    _claim: Claim,
}

/// An upload's place among the conversation's uploads in flight; given back when dropped.
#[derive(Debug)]
struct Promise {
    uploads: Arc<Uploads>,
    id: ConversationId,
    in_flight: Arc<Mutex<InFlight>>,
    bytes: u64,
}

impl Drop for Promise {
    fn drop(&mut self) {
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
            in_flight.uploads -= 1;
            in_flight.promised -= self.bytes;
        }
        self.uploads.release(&self.id);
    }
}

/// `bytes` rounded up to whole 4 KiB blocks, as a file of that size takes on disk.
fn in_blocks(bytes: u64) -> u64 {
    bytes.div_ceil(4096).saturating_mul(4096)
}

/// What [`admit`] needs to know of the conversation and its limits.
pub(crate) struct Admission<'a> {
    pub uploads: &'a Arc<Uploads>,
    pub workspaces: &'a Workspaces,
    pub id: &'a ConversationId,
    pub path: &'a str,
    pub size: UploadSize,
    pub owner: Option<(u32, u32)>,
    pub quota_bytes: u64,
    pub max_inodes: u64,
    pub claim: Claim,
}

/// Admits an upload (blocking: it measures `/data`): refused when the conversation has
/// [`MAX_UPLOADS_PER_CONVERSATION`] in flight, or when what is on disk, plus what the uploads in flight promised, plus
/// this one would pass the quota (or its inodes); else its promise is recorded and its temporary file made.
pub(crate) fn admit(admission: Admission<'_>) -> Result<Upload> {
    let Admission { uploads, workspaces, id, path, size, owner, quota_bytes, max_inodes, claim } = admission;
    let in_flight = uploads.hold(id);
    let mut state = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
    if state.uploads >= MAX_UPLOADS_PER_CONVERSATION {
        drop(state);
        uploads.release(id);
        return Err(Error::Busy {
            reason: format!(
                "conversation {id} has {MAX_UPLOADS_PER_CONVERSATION} uploads in flight, the most it may have"
            ),
            retry_after: std::time::Duration::from_secs(1),
        });
    }
    // From here the promise counts in `state`: dropping it gives this upload's place back.
    state.uploads += 1;
    let mut promise = Promise { uploads: uploads.clone(), id: id.clone(), in_flight: in_flight.clone(), bytes: 0 };
    let usage = match workspaces.usage(id, max_inodes) {
        Ok(usage) => usage,
        Err(error) => {
            drop(state);
            return Err(error);
        }
    };
    let used = usage.bytes.saturating_add(state.promised);
    let (declared, wanted) = match size {
        UploadSize::Exactly(bytes) => (bytes, in_blocks(bytes)),
        UploadSize::AtMost(bytes) => (bytes, in_blocks(bytes).min(quota_bytes.saturating_sub(used))),
    };
    let inodes = usage.inodes.saturating_add(state.uploads as u64);
    if (wanted == 0 && declared > 0) || used.saturating_add(wanted) > quota_bytes || inodes > max_inodes {
        drop(state);
        return Err(Error::QuotaExceeded { path: path.to_owned(), used, size: declared, quota: quota_bytes });
    }
    state.promised += wanted;
    promise.bytes = wanted;
    drop(state);
    let allowed = match size {
        UploadSize::Exactly(bytes) => bytes,
        UploadSize::AtMost(_) => wanted,
    };
    let (pending, file) = workspaces.create_upload(id, path, owner)?;
    Ok(Upload {
        pending,
        file: tokio::fs::File::from_std(file),
        written: 0,
        allowed,
        promise,
        quota_bytes,
        max_inodes,
        workspaces: workspaces.clone(),
        path: path.to_owned(),
        _claim: claim,
    })
}

impl Upload {
    /// Appends `chunk` to the file; refused ([`Error::QuotaExceeded`]) when the upload would write more than it
    /// declared or was promised.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<()> {
        let written = self.written.saturating_add(chunk.len() as u64);
        if written > self.allowed {
            // What was left of the quota when the upload was admitted is what it was promised.
            return Err(Error::QuotaExceeded {
                path: self.path.clone(),
                used: self.quota_bytes.saturating_sub(self.promise.bytes),
                size: written,
                quota: self.quota_bytes,
            });
        }
        self.file.write_all(chunk).await.map_err(|e| self.write_error(e))?;
        self.written = written;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Puts the file in place, unless `/data` with the file in it is now over the quota (a run wrote meanwhile):
    /// then it is removed and the upload refused ([`Error::QuotaExceeded`]). Measured and renamed under the
    /// conversation's lock.
    pub async fn finish(mut self) -> Result<FileEntry> {
        self.file.flush().await.map_err(|e| self.write_error(e))?;
        let Upload {
            pending, file, written, promise, quota_bytes, max_inodes, workspaces, path, _claim: claim, ..
        } = self;
        drop(file.into_std().await);
        tokio::task::spawn_blocking(move || {
            let committed = {
                let _serial = promise.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
                let usage = workspaces.usage(&promise.id, max_inodes)?;
                if usage.bytes > quota_bytes {
                    let used = usage.bytes.saturating_sub(in_blocks(written));
                    return Err(Error::QuotaExceeded { path, used, size: written, quota: quota_bytes });
                }
                pending.commit(written)
            };
            workspaces.remeasure(&promise.id);
            drop((promise, claim));
            committed
        })
        .await
        .map_err(|e| Error::io("write file", std::path::PathBuf::new(), std::io::Error::other(e)))?
    }

    fn write_error(&self, error: std::io::Error) -> Error {
        Error::io("write file", self.workspaces.files_dir(&self.promise.id).join(&self.path), error)
    }
}
