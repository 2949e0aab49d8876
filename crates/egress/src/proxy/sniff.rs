//! A connection's first bytes, read without consuming them (`peek`): the HTTP request head a proxy client sends,
//! the TLS ClientHello's SNI or the HTTP `Host` of a transparently caught connection. Whatever is peeked is still
//! in the socket for the splice (or for an [`crate::intercept::Intercept`], which wants the ClientHello unread).
//!
//! `peek` returns at once while data is waiting, so waiting for more than what is there polls every few
//! milliseconds, under a deadline and a size bound (a ClientHello is one TLS record, at most 16 KiB and a header).

use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The most a head or a ClientHello may take.
pub const LIMIT: usize = 16 * 1024 + 5;

/// How often to look again when the bytes so far are not enough.
const POLL: Duration = Duration::from_millis(5);

/// What the first bytes of a connection were.
#[derive(Debug, PartialEq, Eq)]
pub enum First {
    /// A TLS ClientHello, with its server name if it has one.
    Tls(Option<String>),
    /// An HTTP request head: its length in bytes and its `Host` header (without a port) if it has one.
    Http { length: usize, host: Option<String> },
    /// Nothing in time (a protocol where the server speaks first), or bytes that are neither.
    Other,
}

/// What one look at the bytes so far found.
enum Look<T> {
    Done(T),
    More,
}

/// Peeks until `look` is done with the bytes, the peer closes, `deadline` passes or [`LIMIT`] bytes are there
/// (then `look` gets the bytes as they are, with `complete` false). `None` when no byte came at all.
async fn peek<T>(stream: &TcpStream, deadline: Instant, look: impl Fn(&[u8], bool) -> Look<T>) -> Option<T> {
    let mut buffer = vec![0u8; LIMIT];
    let mut seen = 0;
    loop {
        let peeked = tokio::time::timeout_at(deadline, stream.peek(&mut buffer)).await;
        let length = match peeked {
            Ok(Ok(length)) => length,
            Ok(Err(_)) | Err(_) if seen == 0 => return None,
            Ok(Err(_)) | Err(_) => return finish(look(&buffer[..seen], false)),
        };
        if length == 0 {
            return if seen == 0 { None } else { finish(look(&buffer[..seen], false)) };
        }
        if length > seen {
            seen = length;
            if let Look::Done(found) = look(&buffer[..seen], seen == LIMIT) {
                return Some(found);
            }
            if seen == LIMIT {
                return finish(look(&buffer[..seen], false));
            }
        }
        if Instant::now() + POLL > deadline {
            return finish(look(&buffer[..seen], false));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn finish<T>(look: Look<T>) -> Option<T> {
    match look {
        Look::Done(found) => Some(found),
        Look::More => None,
    }
}

/// The request head a proxy client sent: its length, `None` if it did not send a whole one in time.
pub async fn request_head(stream: &TcpStream, within: Duration) -> Option<Vec<u8>> {
    peek(stream, Instant::now() + within, |bytes, _| match head_length(bytes) {
        Some(length) => Look::Done(bytes[..length].to_vec()),
        None => Look::More,
    })
    .await
}

/// What a transparently caught connection starts with: its first bytes are awaited `first_within`, the rest of
/// a ClientHello or a head `within`.
pub async fn first(stream: &TcpStream, first_within: Duration, within: Duration) -> First {
    let mut probe = [0u8; 1];
    match tokio::time::timeout(first_within, stream.peek(&mut probe)).await {
        Ok(Ok(1)) => {}
        _ => return First::Other,
    }
    let deadline = Instant::now() + within;
    if probe[0] == 0x16 {
        return peek(stream, deadline, |bytes, last| match server_name(bytes) {
            Hello::Name(name) => Look::Done(First::Tls(name)),
            Hello::Partial if !last => Look::More,
            Hello::Partial | Hello::Invalid => Look::Done(First::Other),
        })
        .await
        .unwrap_or(First::Other);
    }
    peek(stream, deadline, |bytes, _| match head_length(bytes) {
        Some(length) => Look::Done(First::Http { length, host: host_header(&bytes[..length]) }),
        None if looks_like_http(bytes) => Look::More,
        None => Look::Done(First::Other),
    })
    .await
    .unwrap_or(First::Other)
}

/// The length of a complete HTTP request head at the start of `bytes`.
pub fn head_length(bytes: &[u8]) -> Option<usize> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    match httparse::Request::new(&mut headers).parse(bytes) {
        Ok(httparse::Status::Complete(length)) => Some(length),
        _ => None,
    }
}

/// Whether `bytes` can still become an HTTP request head (a token, then a space...).
fn looks_like_http(bytes: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    matches!(httparse::Request::new(&mut headers).parse(bytes), Ok(httparse::Status::Partial))
}

/// The `Host` header of a complete head, without its port, as rules compare names.
pub fn host_header(head: &[u8]) -> Option<String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    request.parse(head).ok()?;
    let value = request.headers.iter().find(|header| header.name.eq_ignore_ascii_case("host"))?.value;
    let value = std::str::from_utf8(value).ok()?.trim();
    let host = match value.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?.0,
        None => value.rsplit_once(':').map_or(value, |(host, _)| host),
    };
    Some(crate::policy::normalize(host))
}

enum Hello {
    Name(Option<String>),
    Partial,
    Invalid,
}

/// The server name of the ClientHello at the start of `bytes` (rustls parses it; nothing is answered).
fn server_name(bytes: &[u8]) -> Hello {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Hello::Invalid,
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return Hello::Name(accepted.client_hello().server_name().map(crate::policy::normalize));
            }
            Ok(None) => {}
            Err(_) => return Hello::Invalid,
        }
    }
    Hello::Partial
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_hosts() {
        let head = b"GET / HTTP/1.1\r\nHost: Web.Test:8080\r\nAccept: */*\r\n\r\nbody";
        assert_eq!(head_length(head), Some(head.len() - 4));
        assert_eq!(host_header(&head[..head.len() - 4]).as_deref(), Some("web.test"));
        assert_eq!(head_length(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert!(looks_like_http(b"GET / HT"));
        assert!(!looks_like_http(b"SSH-2.0-OpenSSH\r\n"));
        assert_eq!(host_header(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n").as_deref(), Some("::1"));
        assert_eq!(host_header(b"GET / HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn not_a_client_hello() {
        assert!(matches!(server_name(b"\x16\x03\x01\x00\x05hello"), Hello::Invalid));
        assert!(matches!(server_name(b"\x16\x03\x01\x02\x00\x01"), Hello::Partial));
    }
}
