//! The few netlink (rtnetlink) requests the gateway and the links need, with errors that say which step failed.
//!
//! A [`Netlink`] is a socket of the network namespace its thread was in when [`Netlink::open`] made it, whatever
//! the thread enters afterwards; so one thread can hold one for the sandbox's namespace and one for the
//! gateway's. rtnetlink is async: each thread runs its requests on a current-thread tokio runtime of its own
//! ([`block_on`]).

use futures_util::TryStreamExt;
use ipnet::Ipv4Net;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::packet_route::route::RouteMessage;
use rtnetlink::{Handle, LinkUnspec};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(1);

/// Runs `work` to completion on a new current-thread runtime in the calling thread (so every socket it opens is
/// in the calling thread's namespace).
pub(super) fn block_on<T>(work: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|error| io::Error::new(error.kind(), format!("start a runtime for netlink: {error}")))?;
    runtime.block_on(work)
}

/// A route netlink socket of one network namespace.
pub(super) struct Netlink {
    handle: Handle,
    /// Which namespace, for the errors ("the gateway", "the sandbox's namespace").
    namespace: &'static str,
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace. Only inside [`block_on`].
    pub(super) fn open(namespace: &'static str) -> io::Result<Netlink> {
        let (connection, handle, _) = rtnetlink::new_connection()
            .map_err(|error| io::Error::new(error.kind(), format!("open netlink in {namespace}: {error}")))?;
        tokio::spawn(connection);
        Ok(Netlink { handle, namespace })
    }

    /// The index of the interface `name`.
    pub(super) async fn index(&self, name: &str) -> io::Result<u32> {
        let what = || format!("find {name} in {}", self.namespace);
        let mut links = self.handle.link().get().match_name(name.to_string()).execute();
        match links.try_next().await.map_err(failed(what()))? {
            Some(link) => Ok(link.header.index),
            None => Err(io::Error::new(io::ErrorKind::NotFound, format!("{}: no such interface", what()))),
        }
    }

    /// The names of every interface.
    pub(super) async fn interfaces(&self) -> io::Result<Vec<String>> {
        let links: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(failed(format!("list the interfaces of {}", self.namespace)))?;
        Ok(links
            .iter()
            .filter_map(|link| {
                link.attributes.iter().find_map(|attribute| match attribute {
                    LinkAttribute::IfName(name) => Some(name.clone()),
                    _ => None,
                })
            })
            .collect())
    }

    /// Sets the interface `index` (called `name` in errors) up.
    pub(super) async fn set_up(&self, index: u32, name: &str) -> io::Result<()> {
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(failed(format!("set {name} up in {}", self.namespace)))
    }

    /// Adds `address/prefix` to the interface `index` (called `name` in errors).
    pub(super) async fn add_address(&self, index: u32, name: &str, address: Ipv4Addr, prefix: u8) -> io::Result<()> {
        self.handle
            .address()
            .add(index, IpAddr::V4(address), prefix)
            .execute()
            .await
            .map_err(failed(format!("give {name} the address {address}/{prefix} in {}", self.namespace)))
    }

    /// Whether the interface `index` carries packets: up, with carrier, and with its queueing discipline attached.
    ///
    /// Until the kernel's link watcher has run for a new veth (at once, or up to a second later on a busy host),
    /// its queueing discipline is `noop`, which drops every packet: an ARP request lost then delays a sandbox's
    /// first connection by ARP's one-second retry.
    pub(super) async fn carries(&self, index: u32, name: &str) -> io::Result<bool> {
        let mut links = self.handle.link().get().match_index(index).execute();
        let link = links.try_next().await.map_err(failed(format!("look at {name} in {}", self.namespace)))?;
        Ok(link.is_some_and(|link| {
            let running = link.header.flags.contains(LinkFlags::Up | LinkFlags::LowerUp | LinkFlags::Running);
            let queue = link.attributes.iter().find_map(|attribute| match attribute {
                LinkAttribute::Qdisc(queue) => Some(queue.as_str()),
                _ => None,
            });
            running && queue.is_some_and(|queue| queue != "noop")
        }))
    }

    /// Waits until the interface `index` [carries](Self::carries) packets, for up to `limit`.
    pub(super) async fn wait_until_it_carries(&self, index: u32, name: &str, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        while !self.carries(index, name).await? {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("wait for {name} to carry packets in {}: not after {limit:?}", self.namespace),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// Adds `link` (a new interface, or a pair).
    pub(super) async fn add_link(&self, link: LinkMessage, what: &str) -> io::Result<()> {
        self.handle.link().add(link).execute().await.map_err(failed(format!("{what} in {}", self.namespace)))
    }

    /// Deletes the interface `name` (and its peer, for a veth); false when there is none.
    pub(super) async fn delete_link(&self, name: &str) -> io::Result<bool> {
        match self.handle.link().del_with_message(LinkUnspec::new_with_name(name).build()).execute().await {
            Ok(()) => Ok(true),
            Err(rtnetlink::Error::NetlinkError(message)) if message.raw_code() == -libc_enodev() => Ok(false),
            Err(error) => Err(failed(format!("delete {name} in {}", self.namespace))(error)),
        }
    }

    /// Adds (or replaces) the route `route` to `destination`.
    pub(super) async fn add_route(&self, route: RouteMessage, destination: Ipv4Net, what: &str) -> io::Result<()> {
        self.handle
            .route()
            .add(route)
            .replace()
            .execute()
            .await
            .map_err(failed(format!("add the route to {destination} ({what}) in {}", self.namespace)))
    }
}

fn libc_enodev() -> i32 {
    nix::errno::Errno::ENODEV as i32
}

/// An error of the step `what`, of the kind of the kernel's answer when there is one.
fn failed(what: String) -> impl FnOnce(rtnetlink::Error) -> io::Error {
    move |error| match error {
        rtnetlink::Error::NetlinkError(message) => {
            let error = message.to_io();
            io::Error::new(error.kind(), format!("{what}: {error}"))
        }
        error => io::Error::other(format!("{what}: {error}")),
    }
}
