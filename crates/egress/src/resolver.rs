//! Name resolution on the host, for the proxy's upstream connections: hickory's resolver over the host's own
//! configuration (`/etc/resolv.conf`), or over the name servers the operator (or a test) gives.
//!
//! Only names a sandbox's leash already allows are ever resolved (the proxy checks first), so a sandbox cannot
//! use the host's resolver to send data out by lookup. IPv4 and IPv6 answers both count.

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The proxy's resolver.
pub struct Resolver {
    inner: TokioResolver,
}

impl Resolver {
    /// Over `nameservers` (each asked over UDP, then TCP), or the host's configuration when `None`.
    pub fn new(nameservers: Option<&[SocketAddr]>) -> io::Result<Resolver> {
        let failed = |error: hickory_resolver::net::NetError| io::Error::other(format!("resolver: {error}"));
        let mut builder = match nameservers {
            None => TokioResolver::builder_tokio().map_err(failed)?,
            Some(servers) => {
                let servers = servers.iter().map(|server| name_server(*server)).collect();
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(servers),
                    TokioRuntimeProvider::default(),
                )
            }
        };
        let options = builder.options_mut();
        // The proxy is given names as the sandbox wrote them, always meant as absolute: no search domains.
        options.ndots = 0;
        options.timeout = Duration::from_secs(5);
        options.attempts = 2;
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        Ok(Resolver { inner: builder.build().map_err(failed)? })
    }

    /// The addresses of `host` (an address is its own answer).
    pub async fn lookup(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        if let Ok(address) = host.parse::<IpAddr>() {
            return Ok(vec![address]);
        }
        let absolute = format!("{}.", host.trim_end_matches('.'));
        let lookup = self
            .inner
            .lookup_ip(absolute.as_str())
            .await
            .map_err(|error| io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve {host}: {error}")))?;
        let addresses: Vec<IpAddr> = lookup.iter().collect();
        if addresses.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address")));
        }
        Ok(addresses)
    }
}

fn name_server(server: SocketAddr) -> NameServerConfig {
    let mut config = NameServerConfig::udp_and_tcp(server.ip());
    for connection in &mut config.connections {
        connection.port = server.port();
    }
    config
}
