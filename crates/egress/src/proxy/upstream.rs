//! From a destination the sandbox named to addresses the proxy may connect to, and the connection: the policy
//! is asked before a name is resolved (a refused name is never looked up on the host) and again for each address
//! it resolves to (so an allowed name that resolves into a private range is refused unless an address rule opens
//! it).

use super::Proxy;
use super::tracker::Tracker;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one upstream connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection is not made: refused by the policy, or the host could not be reached.
#[derive(Debug)]
pub enum Failure {
    Refused(String),
    Unreachable(String),
}

/// The destination as the sandbox named it: a name (`host`), or an address only.
#[derive(Clone, Debug)]
pub enum Destination {
    Name(String),
    Address(IpAddr),
}

impl Destination {
    /// A host as written in `CONNECT` or a URL: an address (IPv6 in brackets or not) or a name. A synthetic
    /// address stands for its name.
    pub fn parse(host: &str, proxy: &Proxy) -> Destination {
        let bare = host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(address) => match proxy.synthetic.name(address) {
                Some(name) => Destination::Name(name),
                None => Destination::Address(address.to_canonical()),
            },
            Err(_) => Destination::Name(crate::policy::normalize(host)),
        }
    }

    pub fn to_host(&self) -> String {
        match self {
            Destination::Name(name) => name.clone(),
            Destination::Address(address) => address.to_string(),
        }
    }
}

/// The addresses of `destination` on `port` that the sandbox's leash allows; the tracker gets the verdict.
pub async fn addresses(
    proxy: &Proxy,
    tracker: &mut Tracker,
    destination: &Destination,
    port: u16,
) -> Result<Vec<SocketAddr>, Failure> {
    let leashed = tracker.leashed().clone();
    let leash = &leashed.leash;
    let (name, addresses) = match destination {
        Destination::Address(address) => (None, vec![*address]),
        Destination::Name(name) => {
            let verdict = leash.check(Some(name), None, port);
            if !verdict.allowed {
                tracker.refuse(verdict.reason.clone());
                return Err(Failure::Refused(verdict.reason));
            }
            let addresses = proxy.resolver.lookup(name).await.map_err(|error| {
                tracker.allow(verdict.reason.clone());
                tracker.failed(&error.to_string());
                Failure::Unreachable(error.to_string())
            })?;
            (Some(name.as_str()), addresses)
        }
    };
    let mut allowed = Vec::new();
    let mut refusal = None;
    for address in addresses {
        let verdict = leash.check(name, Some(address), port);
        if verdict.allowed {
            if allowed.is_empty() {
                tracker.allow(verdict.reason);
            }
            allowed.push(SocketAddr::new(address, port));
        } else if refusal.is_none() {
            refusal = Some(verdict.reason);
        }
    }
    if allowed.is_empty() {
        let reason = refusal.unwrap_or_else(|| "no address".to_owned());
        tracker.refuse(reason.clone());
        return Err(Failure::Refused(reason));
    }
    Ok(allowed)
}

/// A connection to the first of `addresses` that answers.
pub async fn connect(tracker: &mut Tracker, addresses: &[SocketAddr]) -> Result<TcpStream, Failure> {
    let mut last = String::from("no address");
    for address in addresses {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(error)) => last = format!("connecting to {address}: {error}"),
            Err(_) => last = format!("connecting to {address}: timed out"),
        }
    }
    tracker.failed(&last);
    Err(Failure::Unreachable(last))
}
