//! The explicit proxy's port (`HTTP_PROXY`, `HTTPS_PROXY`): `CONNECT host:port` (answered `200 Connection
//! established`, then spliced, or handed to the interceptor), and plain HTTP with an absolute URL, rewritten to
//! origin form for the host. One request per connection for the latter: it goes out with `Connection: close`,
//! and the client opens a new connection for the next one (every HTTP client handles that).

use super::reply;
use super::sniff;
use super::splice::splice;
use super::tracker::Tracker;
use super::upstream::{self, Destination, Failure};
use super::{CAPPED, Proxy};
use crate::audit::Route;
use crate::registry::Leashed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a client may take to send its request head.
const HEAD_WITHIN: Duration = Duration::from_secs(10);

/// Hop-by-hop headers, not forwarded to the host (RFC 9110, 7.6.1), and the proxy's own.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

pub async fn serve(proxy: Arc<Proxy>, mut client: TcpStream, leashed: Arc<Leashed>) {
    let proxy_port = client.local_addr().map(|address| address.port()).unwrap_or(0);
    let mut tracker = Tracker::new(leashed.clone(), Route::Connect, "proxy".to_owned(), proxy_port);
    let Ok(_permit) = leashed.connections.clone().try_acquire_owned() else {
        tracker.refuse(CAPPED.to_owned());
        reply::error(&mut client, 403, "proxy", proxy_port, CAPPED).await;
        return;
    };
    let Some(head) = sniff::request_head(&client, HEAD_WITHIN).await else {
        tracker.refuse("no complete request head".to_owned());
        return;
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let (method, target) = match request.parse(&head) {
        Ok(_) => (request.method.unwrap_or_default().to_owned(), request.path.unwrap_or_default().to_owned()),
        Err(_) => (String::new(), String::new()),
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = authority(&target) else {
            tracker.refuse(format!("bad CONNECT target {target:?}"));
            reply::error(&mut client, 400, &target, 0, "CONNECT wants host:port").await;
            return;
        };
        let destination = Destination::parse(&host, &proxy);
        tracker.set_destination(destination.to_host(), port);
        // The head is consumed; what follows (a ClientHello) stays unread for the splice or the interceptor.
        if client.read_exact(&mut vec![0u8; head.len()]).await.is_err() {
            return;
        }
        connect(&proxy, client, tracker, destination, port).await;
        return;
    }
    tracker.set_route(Route::HttpProxy);
    let Some((host, port, path)) = absolute_http(&target) else {
        let reason = "only CONNECT or an absolute http:// URL (https goes through CONNECT)";
        tracker.refuse(format!("{reason}; got {method} {target:?}"));
        reply::error(&mut client, 400, "proxy", proxy_port, reason).await;
        return;
    };
    let destination = Destination::parse(&host, &proxy);
    tracker.set_destination(destination.to_host(), port);
    let addresses = match upstream::addresses(&proxy, &mut tracker, &destination, port).await {
        Ok(addresses) => addresses,
        Err(failure) => return fail(&mut client, &tracker, failure).await,
    };
    let mut upstream = match upstream::connect(&mut tracker, &addresses).await {
        Ok(upstream) => upstream,
        Err(failure) => return fail(&mut client, &tracker, failure).await,
    };
    let rewritten = origin_form(&method, &path, &request, &host, port);
    if client.read_exact(&mut vec![0u8; head.len()]).await.is_err() || upstream.write_all(&rewritten).await.is_err() {
        return;
    }
    let mut carried = splice(client, upstream, &leashed.bandwidth).await;
    carried.sent += rewritten.len() as u64;
    tracker.carried(carried);
}

/// `CONNECT`: checked, resolved, then the interceptor's or a splice.
async fn connect(proxy: &Proxy, mut client: TcpStream, mut tracker: Tracker, destination: Destination, port: u16) {
    let addresses = match upstream::addresses(proxy, &mut tracker, &destination, port).await {
        Ok(addresses) => addresses,
        Err(failure) => return fail(&mut client, &tracker, failure).await,
    };
    const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if let (Destination::Name(name), Some(intercept)) = (&destination, &proxy.intercept)
        && intercept.wants(name, port)
    {
        if client.write_all(ESTABLISHED).await.is_err() {
            return;
        }
        tracker.intercepted(intercept.serve(client, name, port, &addresses).await);
        return;
    }
    let upstream = match upstream::connect(&mut tracker, &addresses).await {
        Ok(upstream) => upstream,
        Err(failure) => return fail(&mut client, &tracker, failure).await,
    };
    if client.write_all(ESTABLISHED).await.is_err() {
        return;
    }
    let carried = splice(client, upstream, &tracker.leashed().bandwidth).await;
    tracker.carried(carried);
}

async fn fail(client: &mut TcpStream, tracker: &Tracker, failure: Failure) {
    let (status, reason) = match &failure {
        Failure::Refused(reason) => (403, reason),
        Failure::Unreachable(reason) => (502, reason),
    };
    reply::error(client, status, tracker.host(), tracker.port(), reason).await;
}

/// `host:port` of a `CONNECT` (IPv6 in brackets).
fn authority(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|port| *port != 0)?;
    if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
        return None;
    }
    Some((host.to_owned(), port))
}

/// Host, port and origin-form path of an absolute `http://` URL.
fn absolute_http(target: &str) -> Option<(String, u16, String)> {
    let scheme = target.get(..7)?;
    if !scheme.eq_ignore_ascii_case("http://") {
        return None;
    }
    let rest = &target[7..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse::<u16>().ok().filter(|port| *port != 0)?),
        _ => (authority, 80),
    };
    if host.is_empty() {
        return None;
    }
    let path = match path.split('#').next() {
        Some("") | None => "/".to_owned(),
        Some(path) if path.starts_with('?') => format!("/{path}"),
        Some(path) => path.to_owned(),
    };
    Some((host.to_owned(), port, path))
}

/// The request head as the host gets it: origin form, the hop-by-hop headers dropped, `Host` as the URL says
/// when the client sent none, `Connection: close`.
fn origin_form(method: &str, path: &str, request: &httparse::Request<'_, '_>, host: &str, port: u16) -> Vec<u8> {
    let version = request.version.unwrap_or(1);
    let mut head = format!("{method} {path} HTTP/1.{version}\r\n").into_bytes();
    let mut has_host = false;
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        has_host |= name == "host";
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    if !has_host {
        let host = if port == 80 { host.to_owned() } else { format!("{host}:{port}") };
        head.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(authority("pypi.org:443"), Some(("pypi.org".into(), 443)));
        assert_eq!(authority("[2001:db8::1]:443"), Some(("[2001:db8::1]".into(), 443)));
        assert_eq!(authority("2001:db8::1:443"), None);
        assert_eq!(authority("pypi.org"), None);
        assert_eq!(authority("pypi.org:0"), None);
        assert_eq!(absolute_http("http://Web.test:8080/a?b#c"), Some(("Web.test".into(), 8080, "/a?b".into())));
        assert_eq!(absolute_http("HTTP://web.test"), Some(("web.test".into(), 80, "/".into())));
        assert_eq!(absolute_http("http://web.test?x=1"), Some(("web.test".into(), 80, "/?x=1".into())));
        assert_eq!(absolute_http("http://u:p@[::1]:81/"), Some(("[::1]".into(), 81, "/".into())));
        assert_eq!(absolute_http("http://[::1]/"), Some(("[::1]".into(), 80, "/".into())));
        assert_eq!(absolute_http("https://web.test/"), None);
        assert_eq!(absolute_http("/index.html"), None);
    }

    #[test]
    fn rewritten_head() {
        let raw = b"GET http://web.test/x HTTP/1.1\r\nHost: web.test\r\nProxy-Connection: keep-alive\r\n\
                    Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut request = httparse::Request::new(&mut headers);
        request.parse(raw).unwrap();
        let head = origin_form("GET", "/x", &request, "web.test", 80);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /x HTTP/1.1\r\nHost: web.test\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }
}
