//! Connections the gateway caught on their way to a synthetic address (or a captured range): the programs that
//! ignore `HTTP_PROXY`. The destination is the address the sandbox connected to, which the synthetic table turns
//! back into the name it resolved. A TLS ClientHello's SNI or an HTTP `Host` header must then be that name (a
//! client cannot ask for one allowed name's address and talk to another host); a connection that names nothing
//! (no SNI, no `Host`, or a protocol where the server speaks first) goes to the name it resolved. Only the first
//! bytes are read: later requests on a kept-alive connection go to the same host whatever they say, so they can
//! reach no other destination.

use super::reply;
use super::sniff::{self, First};
use super::splice::splice;
use super::tracker::Tracker;
use super::upstream::{self, Destination, Failure};
use super::{CAPPED, Proxy};
use crate::audit::Route;
use crate::registry::Leashed;
use crate::synthetic::Synthetic;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long to wait for a client's first bytes before taking it for a protocol where the server speaks first.
const FIRST_WITHIN: Duration = Duration::from_secs(1);

/// How long the rest of a ClientHello or a request head may take.
const REST_WITHIN: Duration = Duration::from_secs(10);

pub async fn serve(proxy: Arc<Proxy>, mut client: TcpStream, leashed: Arc<Leashed>, destination: SocketAddr) {
    let port = destination.port();
    let address = destination.ip().to_canonical();
    let named = proxy.synthetic.name(address);
    let target = match &named {
        Some(name) => Destination::Name(name.clone()),
        None => Destination::Address(address),
    };
    let mut tracker = Tracker::new(leashed.clone(), Route::Transparent, target.to_host(), port);
    if named.is_none() && Synthetic::contains(address) {
        // An answer older than the table's memory: the name it stood for is gone.
        tracker.refuse(format!("{address} stands for no name now (ask the name server again)"));
        return;
    }
    let Ok(_permit) = leashed.connections.clone().try_acquire_owned() else {
        tracker.refuse(CAPPED.to_owned());
        return;
    };
    let first = sniff::first(&client, FIRST_WITHIN, REST_WITHIN).await;
    let (said, http) = match &first {
        First::Tls(name) => (name.clone(), false),
        First::Http { host, .. } => (host.clone(), true),
        First::Other => (None, false),
    };
    if let (Some(name), Some(said)) = (&named, &said)
        && said != name
    {
        let reason = format!("the connection names {said}, not {name} whose address it was sent to");
        tracker.refuse(reason.clone());
        if http {
            reply::error(&mut client, 403, name, port, &reason).await;
        }
        return;
    }
    let addresses = match upstream::addresses(&proxy, &mut tracker, &target, port).await {
        Ok(addresses) => addresses,
        Err(failure) => {
            if http {
                let (status, reason) = match &failure {
                    Failure::Refused(reason) => (403, reason),
                    Failure::Unreachable(reason) => (502, reason),
                };
                reply::error(&mut client, status, &target.to_host(), port, reason).await;
            }
            return;
        }
    };
    if let (Some(name), Some(intercept), First::Tls(_)) = (&named, &proxy.intercept, &first)
        && intercept.wants(name, port)
    {
        tracker.intercepted(intercept.serve(client, name, port, &addresses).await);
        return;
    }
    let upstream = match upstream::connect(&mut tracker, &addresses).await {
        Ok(upstream) => upstream,
        Err(Failure::Refused(reason) | Failure::Unreachable(reason)) => {
            if http {
                reply::error(&mut client, 502, &target.to_host(), port, &reason).await;
            }
            return;
        }
    };
    let carried = splice(client, upstream, &leashed.bandwidth).await;
    tracker.carried(carried);
}
