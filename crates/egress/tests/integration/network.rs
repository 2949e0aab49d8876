//! The gateway namespace and the sandboxes' links (`sandlot_egress::network`), as root: what a sandbox's
//! namespace can reach (the gateway's listeners, through synthetic and captured addresses) and what it cannot
//! (anything else, at once; another sandbox; the host's loopback), and that links come and go cleanly.
//!
//! "At once" is checked by the kind of the error (refused or unreachable, never a time-out) with a connect
//! time-out of 10 s, far above what either answer takes even on 2 busy cores and far below nothing-answers-ever.

use ipnet::IpNet;
use nix::sched::{CloneFlags, setns};
use sandlot_egress::network::{Gateway, LINKS, Link, SYNTHETIC};
use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// A connect that gets no answer would give up after this; every answer the tests expect comes long before.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `work` in a thread inside the network namespace `netns` (a socket made there stays there).
fn in_netns<T: Send>(netns: &OwnedFd, work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                setns(netns.as_fd(), CloneFlags::CLONE_NEWNET).expect("enter the namespace");
                work()
            })
            .join()
            .expect("the thread in the namespace")
    })
}

/// Connects from inside `netns` to `address`; the error's kind when it fails.
fn connect_from(netns: &OwnedFd, address: SocketAddr) -> Result<TcpStream, ErrorKind> {
    in_netns(netns, || TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).map_err(|error| error.kind()))
}

/// A gateway listener on every address, at a free port, made blocking for the test.
fn gateway_listener(gateway: &Gateway) -> (TcpListener, u16) {
    let listener = gateway.tcp_listener("0.0.0.0:0".parse().unwrap()).unwrap();
    listener.set_nonblocking(false).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

fn synthetic(host: u8) -> IpAddr {
    let net: ipnet::Ipv4Net = SYNTHETIC.parse().unwrap();
    IpAddr::V4(Ipv4Addr::from(u32::from(net.network()) + 256 + u32::from(host)))
}

#[test]
fn a_sandbox_reaches_a_gateway_listener_through_a_synthetic_address_and_is_known_by_its_link_address() {
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let (listener, port) = gateway_listener(&gateway);
    let target = SocketAddr::new(synthetic(7), port);

    let mut client = connect_from(link.netns(), target).unwrap();
    let (mut accepted, peer) = listener.accept().unwrap();
    assert_eq!(peer.ip(), IpAddr::V4(link.sandbox));
    assert_eq!(accepted.local_addr().unwrap(), target);
    assert_eq!(client.peer_addr().unwrap(), target);

    accepted.write_all(b"hello").unwrap();
    let mut greeting = [0u8; 5];
    client.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"hello");
}

#[tokio::test]
async fn the_gateways_sockets_serve_tokio_and_links_come_and_go_inside_a_runtime() {
    // As the server uses them: made and dropped on a runtime's thread, the listener handed to tokio.
    let gateway = Gateway::create(&[]).unwrap();
    let listener =
        tokio::net::TcpListener::from_std(gateway.tcp_listener("0.0.0.0:3128".parse().unwrap()).unwrap()).unwrap();
    let link = gateway.link(&[]).unwrap();
    let proxy = SocketAddr::new(IpAddr::V4(link.gateway), 3128);
    let netns = link.netns().try_clone().unwrap();
    let client = tokio::task::spawn_blocking(move || connect_from(&netns, proxy).map(|_| ()));
    let (_, peer) = listener.accept().await.unwrap();
    assert_eq!((peer.ip(), client.await.unwrap()), (IpAddr::V4(link.sandbox), Ok(())));
    drop(link);
    assert_eq!(gateway.interfaces().unwrap(), vec!["lo".to_string()]);
}

#[test]
fn a_closed_port_is_refused_and_every_other_address_is_unreachable_at_once() {
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let (_listener, port) = gateway_listener(&gateway);
    // A port of the gateway that nobody listens on any more.
    let closed = {
        let (listener, port) = gateway_listener(&gateway);
        drop(listener);
        port
    };

    assert_eq!(
        connect_from(link.netns(), SocketAddr::new(synthetic(9), closed)).err(),
        Some(ErrorKind::ConnectionRefused)
    );
    assert_eq!(
        connect_from(link.netns(), SocketAddr::new(IpAddr::V4(link.gateway), closed)).err(),
        Some(ErrorKind::ConnectionRefused)
    );

    let mut elsewhere: Vec<IpAddr> = vec![
        "1.1.1.1".parse().unwrap(),
        "10.0.0.1".parse().unwrap(),
        "192.168.1.1".parse().unwrap(),
        "100.127.255.254".parse().unwrap(),
    ];
    elsewhere.extend(host_addresses());
    assert!(elsewhere.len() > 4, "the host has an address besides loopback: {elsewhere:?}");
    for address in elsewhere {
        assert_eq!(
            connect_from(link.netns(), SocketAddr::new(address, port)).err(),
            Some(ErrorKind::NetworkUnreachable),
            "{address}"
        );
    }
}

#[test]
fn the_sandbox_cannot_reach_the_hosts_loopback() {
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    // The sandbox's 127.0.0.1 is its own loopback, where nothing listens.
    assert_eq!(
        connect_from(link.netns(), SocketAddr::new("127.0.0.1".parse().unwrap(), port)).err(),
        Some(ErrorKind::ConnectionRefused)
    );
    host.set_nonblocking(true).unwrap();
    assert_eq!(host.accept().err().map(|error| error.kind()), Some(ErrorKind::WouldBlock));
}

#[test]
fn udp_to_the_gateways_end_reaches_a_gateway_socket_which_can_reply() {
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let server = gateway.udp_socket("0.0.0.0:0".parse().unwrap()).unwrap();
    server.set_nonblocking(false).unwrap();
    server.set_read_timeout(Some(CONNECT_TIMEOUT)).unwrap();
    let to = SocketAddr::new(IpAddr::V4(link.gateway), server.local_addr().unwrap().port());

    let client = in_netns(link.netns(), || UdpSocket::bind("0.0.0.0:0").unwrap());
    client.set_read_timeout(Some(CONNECT_TIMEOUT)).unwrap();
    client.send_to(b"question", to).unwrap();
    let mut buffer = [0u8; 64];
    let (length, from) = server.recv_from(&mut buffer).unwrap();
    assert_eq!((&buffer[..length], from.ip()), (&b"question"[..], IpAddr::V4(link.sandbox)));
    server.send_to(b"answer", from).unwrap();
    let (length, replier) = client.recv_from(&mut buffer).unwrap();
    assert_eq!((&buffer[..length], replier), (&b"answer"[..], to));
}

#[test]
fn a_sandbox_reaches_nothing_of_another_sandbox() {
    let gateway = Gateway::create(&[]).unwrap();
    let (first, second) = (gateway.link(&[]).unwrap(), gateway.link(&[]).unwrap());
    assert_ne!(first.sandbox, second.sandbox);
    // A listener on every address of the first sandbox's namespace.
    let inside_first = in_netns(first.netns(), || TcpListener::bind("0.0.0.0:0").unwrap());
    let port = inside_first.local_addr().unwrap().port();

    for address in [first.sandbox, first.gateway] {
        assert_eq!(
            connect_from(second.netns(), SocketAddr::new(IpAddr::V4(address), port)).err(),
            Some(ErrorKind::NetworkUnreachable),
            "{address}"
        );
    }
    // Through the gateway, the same port is the gateway's own, where nothing listens: it forwards nothing.
    for address in [IpAddr::V4(second.gateway), synthetic(1)] {
        assert_eq!(
            connect_from(second.netns(), SocketAddr::new(address, port)).err(),
            Some(ErrorKind::ConnectionRefused),
            "{address}"
        );
    }
    inside_first.set_nonblocking(true).unwrap();
    assert_eq!(inside_first.accept().err().map(|error| error.kind()), Some(ErrorKind::WouldBlock));
}

#[test]
fn captured_ranges_are_local_in_the_gateway_and_routed_from_the_sandbox() {
    let captured: IpNet = "203.0.113.0/24".parse().unwrap();
    let gateway = Gateway::create(&[captured]).unwrap();
    let link = gateway.link(&[captured]).unwrap();
    let unrouted = gateway.link(&[]).unwrap();
    let (listener, port) = gateway_listener(&gateway);
    let target: SocketAddr = SocketAddr::new("203.0.113.80".parse().unwrap(), port);

    let _client = connect_from(link.netns(), target).unwrap();
    let (accepted, peer) = listener.accept().unwrap();
    assert_eq!((peer.ip(), accepted.local_addr().unwrap()), (IpAddr::V4(link.sandbox), target));
    // A link made without the route does not reach it.
    assert_eq!(connect_from(unrouted.netns(), target).err(), Some(ErrorKind::NetworkUnreachable));
    // A route the gateway does not capture is refused (the gateway would drop what it carries).
    for route in ["203.0.0.0/16", "192.0.2.0/24"] {
        let route: IpNet = route.parse().unwrap();
        assert_eq!(gateway.link(&[route]).err().map(|error| error.kind()), Some(ErrorKind::InvalidInput), "{route}");
    }
    let narrower: IpNet = "203.0.113.64/26".parse().unwrap();
    let _narrow = gateway.link(&[narrower]).unwrap();
}

#[test]
fn ipv6_ranges_and_ranges_over_the_links_are_refused() {
    for range in ["2001:db8::/32", "0.0.0.0/0", LINKS, "100.127.3.0/24"] {
        let range: IpNet = range.parse().unwrap();
        assert_eq!(Gateway::create(&[range]).err().map(|error| error.kind()), Some(ErrorKind::InvalidInput), "{range}");
    }
    let gateway = Gateway::create(&[]).unwrap();
    let range: IpNet = "2001:db8::/32".parse().unwrap();
    assert_eq!(gateway.link(&[range]).err().map(|error| error.kind()), Some(ErrorKind::InvalidInput));
    // The refused link left nothing behind.
    assert_eq!(gateway.interfaces().unwrap(), vec!["lo".to_string()]);
}

#[test]
fn the_gateway_forwards_nothing_and_the_link_has_no_ipv6() {
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let read = |key: &str| std::fs::read_to_string(format!("/proc/sys/{key}")).unwrap().trim().to_string();
    assert_eq!(in_netns(gateway.netns(), || read("net/ipv4/ip_forward")), "0");
    if std::path::Path::new("/proc/sys/net/ipv6").exists() {
        let name = format!("net/ipv6/conf/{}/disable_ipv6", link.interface());
        assert_eq!(
            in_netns(gateway.netns(), || (read("net/ipv6/conf/all/disable_ipv6"), read(&name))),
            ("1".into(), "1".into())
        );
        assert_eq!(in_netns(link.netns(), || read("net/ipv6/conf/eth0/disable_ipv6")), "1");
    }
}

#[test]
fn a_new_links_first_datagram_is_not_held_back() {
    // Until the kernel attaches a new veth's queueing discipline (`noop` before, which drops every packet), an ARP
    // request is lost and the sandbox's first packet waits for ARP's retry, a second later: without `link`
    // waiting for both ends to carry, about one new link in 30 did (1029 ms, against 17 ms at most in 300 with
    // it; `examples/link_times.rs`). 60 links: such a regression shows in most runs. The bound is far above the
    // few milliseconds a thread and a datagram take on 2 busy cores, and below the second of the fault.
    let gateway = Gateway::create(&[]).unwrap();
    let server = gateway.udp_socket("0.0.0.0:0".parse().unwrap()).unwrap();
    server.set_nonblocking(false).unwrap();
    server.set_read_timeout(Some(CONNECT_TIMEOUT)).unwrap();
    let port = server.local_addr().unwrap().port();
    for _ in 0..60 {
        let link = gateway.link(&[]).unwrap();
        let start = Instant::now();
        in_netns(link.netns(), || {
            UdpSocket::bind("0.0.0.0:0").unwrap().send_to(b"first", (link.gateway, port)).unwrap();
        });
        let (_, from) = server.recv_from(&mut [0u8; 8]).unwrap();
        let took = start.elapsed();
        assert_eq!(from.ip(), IpAddr::V4(link.sandbox));
        assert!(took < Duration::from_millis(750), "{}: the first datagram took {took:?}", link.interface());
    }
}

#[test]
fn pings_get_no_answer_from_the_gateway() {
    // From a raw ICMP socket in the sandbox's namespace (the test is root; a sandbox's processes cannot even open
    // one): an echo request to a synthetic address and to the gateway's end, then a UDP datagram to a closed port
    // of the gateway. The gateway handles them in order, so the first ICMP message back is the port's
    // "unreachable": an echo reply would have come before it.
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let closed = {
        let socket = gateway.udp_socket("0.0.0.0:0".parse().unwrap()).unwrap();
        socket.local_addr().unwrap().port()
    };
    for target in [synthetic(5), IpAddr::V4(link.gateway)] {
        let first_icmp_type = in_netns(link.netns(), || {
            use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType};
            let raw =
                nix::sys::socket::socket(AddressFamily::Inet, SockType::Raw, SockFlag::empty(), SockProtocol::Icmp)
                    .unwrap();
            // std's datagram calls (sendto, recv) are the raw socket's too; its port is ignored.
            let raw = UdpSocket::from(raw);
            raw.send_to(&echo_request(), (target, 0)).unwrap();
            UdpSocket::bind("0.0.0.0:0").unwrap().send_to(b"closed?", (target, closed)).unwrap();
            raw.set_read_timeout(Some(CONNECT_TIMEOUT)).unwrap();
            let mut packet = [0u8; 1500];
            let length = raw.recv(&mut packet).unwrap();
            let header = usize::from(packet[0] & 0x0f) * 4;
            assert!(length > header);
            packet[header]
        });
        assert_eq!(first_icmp_type, 3, "{target}: the first ICMP message back is a destination unreachable");
    }
}

#[test]
fn a_dropped_link_leaves_no_interface_and_its_address_is_reused() {
    let gateway = Gateway::create(&[]).unwrap();
    let link = gateway.link(&[]).unwrap();
    let (name, address) = (link.interface(), link.sandbox);
    assert_eq!(gateway.interfaces().unwrap(), vec!["lo".to_string(), name.clone()]);
    drop(link);
    assert_eq!(gateway.interfaces().unwrap(), vec!["lo".to_string()]);

    let again = gateway.link(&[]).unwrap();
    assert_eq!((again.interface(), again.sandbox), (name, address));
    // The new link works.
    let (listener, port) = gateway_listener(&gateway);
    let _client = connect_from(again.netns(), SocketAddr::new(synthetic(3), port)).unwrap();
    assert_eq!(listener.accept().unwrap().1.ip(), IpAddr::V4(address));
}

#[test]
fn fifty_links_made_at_once_get_distinct_addresses_and_all_go_away() {
    let gateway = Gateway::create(&[]).unwrap();
    let links: Vec<Link> = std::thread::scope(|scope| {
        let makers: Vec<_> = (0..50).map(|_| scope.spawn(|| gateway.link(&[]).unwrap())).collect();
        makers.into_iter().map(|maker| maker.join().unwrap()).collect()
    });
    let sandboxes: HashSet<Ipv4Addr> = links.iter().map(|link| link.sandbox).collect();
    let gateways: HashSet<Ipv4Addr> = links.iter().map(|link| link.gateway).collect();
    assert_eq!((sandboxes.len(), gateways.len()), (50, 50));
    assert!(sandboxes.is_disjoint(&gateways));
    assert_eq!(gateway.interfaces().unwrap().len(), 51);

    std::thread::scope(|scope| {
        for link in links {
            scope.spawn(move || drop(link));
        }
    });
    assert_eq!(gateway.interfaces().unwrap(), vec!["lo".to_string()]);
}

/// The host's own IPv4 addresses, loopback's excepted (read with netlink in the host's namespace).
fn host_addresses() -> Vec<IpAddr> {
    use futures_util::TryStreamExt;
    use rtnetlink::packet_route::address::AddressAttribute;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    runtime.block_on(async {
        let (connection, handle, _) = rtnetlink::new_connection().unwrap();
        tokio::spawn(connection);
        let addresses: Vec<_> = handle.address().get().execute().try_collect().await.unwrap();
        addresses
            .iter()
            .flat_map(|message| message.attributes.iter())
            .filter_map(|attribute| match attribute {
                AddressAttribute::Local(address @ IpAddr::V4(v4)) if !v4.is_loopback() => Some(*address),
                _ => None,
            })
            .collect()
    })
}

/// An ICMP echo request (type 8), with its checksum.
fn echo_request() -> [u8; 16] {
    let mut packet = [8, 0, 0, 0, 0x51, 0x07, 0, 1, b's', b'a', b'n', b'd', b'l', b'o', b't', b'!'];
    let sum: u32 = packet.chunks(2).map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]]))).sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let checksum = !(((folded & 0xffff) + (folded >> 16)) as u16);
    packet[2..4].copy_from_slice(&checksum.to_be_bytes());
    packet
}
