//! A DevTools protocol client over Chromium's `--remote-debugging-pipe`: JSON messages, each ended by a NUL byte,
//! written to the browser's fd 3 and read from its fd 4 (here, the stdin and stdout of its process in the sandbox).
//!
//! Commands carry an id and get one answer with the same id; events carry a `method` (and, for a page attached in
//! flat mode, its `sessionId`) and go to every subscriber. One task reads the pipe for the browser's life; when it
//! ends (the browser exited), every command waiting fails and [`Cdp::is_open`] turns false. The handful of commands
//! sandlot sends are plain JSON (`serde_json`): the protocol's crates speak only its WebSocket transport.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, oneshot};

/// The largest message read (a full-page screenshot in base64 is a few MiB); a longer one ends the connection.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// An event of the browser or of one of its pages.
#[derive(Debug, Clone)]
pub struct Event {
    pub method: String,
    /// The page's session, for a page's event.
    pub session: Option<String>,
    pub params: Value,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

pub struct Cdp {
    writer: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    next_id: AtomicU64,
    pending: Pending,
    events: broadcast::Sender<Event>,
    open: Arc<AtomicBool>,
}

impl Cdp {
    /// A client over the browser's pipe: `writer` is its fd 3, `reader` its fd 4.
    pub fn new(writer: Pin<Box<dyn AsyncWrite + Send>>, reader: Pin<Box<dyn AsyncRead + Send>>) -> Self {
        let pending: Pending = Arc::default();
        let (events, _) = broadcast::channel(1024);
        let open = Arc::new(AtomicBool::new(true));
        tokio::spawn(read_loop(reader, Arc::clone(&pending), events.clone(), Arc::clone(&open)));
        Self { writer: tokio::sync::Mutex::new(writer), next_id: AtomicU64::new(1), pending, events, open }
    }

    /// Whether the browser's end of the pipe is still there.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Events from now on.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Sends `method` (to the page of `session`, or to the browser) and waits at most `patience` for its answer:
    /// its `result`, or its error's message.
    pub async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        patience: Duration,
    ) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = Value::String(session.to_owned());
        }
        let (answer, answered) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, answer);
        if !self.is_open() {
            self.forget(id);
            return Err("the browser has exited".to_owned());
        }
        let mut bytes = serde_json::to_vec(&message).map_err(|e| e.to_string())?;
        bytes.push(0);
        let written = {
            let mut writer = self.writer.lock().await;
            match writer.write_all(&bytes).await {
                Ok(()) => writer.flush().await,
                Err(e) => Err(e),
            }
        };
        if let Err(error) = written {
            // Its reading end is gone: so is the browser, whatever the reader has noticed yet.
            self.open.store(false, Ordering::SeqCst);
            self.forget(id);
            return Err(format!("the browser's pipe is closed: {error}"));
        }
        match tokio::time::timeout(patience, answered).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the browser has exited".to_owned()),
            Err(_) => {
                self.forget(id);
                Err(format!("{method} got no answer in {} s", patience.as_secs()))
            }
        }
    }

    fn forget(&self, id: u64) {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }
}

/// Reads messages until the pipe ends or breaks, then fails every command still waiting.
async fn read_loop(
    mut reader: Pin<Box<dyn AsyncRead + Send>>,
    pending: Pending,
    events: broadcast::Sender<Event>,
    open: Arc<AtomicBool>,
) {
    let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    'reading: loop {
        let read = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        buffer.extend_from_slice(&chunk[..read]);
        while let Some(end) = buffer.iter().position(|byte| *byte == 0) {
            let message: Vec<u8> = buffer.drain(..=end).collect();
            dispatch(&message[..end], &pending, &events);
        }
        if buffer.len() > MAX_MESSAGE {
            tracing::warn!(bytes = buffer.len(), "a browser message is too long: the connection is dropped");
            break 'reading;
        }
    }
    open.store(false, Ordering::SeqCst);
    pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

fn dispatch(message: &[u8], pending: &Pending, events: &broadcast::Sender<Event>) {
    let Ok(message) = serde_json::from_slice::<Value>(message) else {
        tracing::debug!("a browser message is not JSON");
        return;
    };
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        let answer = match message.get("error") {
            Some(error) => Err(error.get("message").and_then(Value::as_str).unwrap_or("error").to_owned()),
            None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
        };
        if let Some(waiting) = pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
            let _ = waiting.send(answer);
        }
    } else if let Some(method) = message.get("method").and_then(Value::as_str) {
        let session = message.get("sessionId").and_then(Value::as_str).map(str::to_owned);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let _ = events.send(Event { method: method.to_owned(), session, params });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake browser's end of the pipe: answers each command with its own method, and sends one event first.
    #[tokio::test]
    async fn answers_find_their_commands_and_events_their_subscribers() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (our_read, our_write) = tokio::io::split(ours);
        let cdp = Cdp::new(Box::pin(our_write), Box::pin(our_read));
        let mut events = cdp.events();
        let (mut their_read, mut their_write) = tokio::io::split(theirs);
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 1024];
            loop {
                let read = their_read.read(&mut chunk).await.unwrap();
                if read == 0 {
                    return;
                }
                buffer.extend_from_slice(&chunk[..read]);
                while let Some(end) = buffer.iter().position(|b| *b == 0) {
                    let message: Vec<u8> = buffer.drain(..=end).collect();
                    let message: Value = serde_json::from_slice(&message[..end]).unwrap();
                    let event = json!({"method": "Page.lifecycleEvent", "sessionId": "S", "params": {"name": "load"}});
                    let answer = json!({"id": message["id"], "result": {"echo": message["method"]}});
                    let mut out = serde_json::to_vec(&event).unwrap();
                    out.push(0);
                    out.extend(serde_json::to_vec(&answer).unwrap());
                    out.push(0);
                    their_write.write_all(&out).await.unwrap();
                }
            }
        });
        let answer = cdp.call(Some("S"), "Page.navigate", json!({}), Duration::from_secs(10)).await.unwrap();
        assert_eq!(answer, json!({"echo": "Page.navigate"}));
        let event = events.recv().await.unwrap();
        assert_eq!((event.method.as_str(), event.session.as_deref()), ("Page.lifecycleEvent", Some("S")));
    }

    #[tokio::test]
    async fn a_closed_pipe_fails_the_commands() {
        let (ours, theirs) = tokio::io::duplex(1024);
        let (our_read, our_write) = tokio::io::split(ours);
        let cdp = Cdp::new(Box::pin(our_write), Box::pin(our_read));
        drop(theirs);
        let error = cdp.call(None, "Browser.getVersion", json!({}), Duration::from_secs(10)).await.unwrap_err();
        assert!(error.contains("browser"), "{error}");
        assert!(!cdp.is_open());
    }
}
