//! How long a link takes to make and to drop, and a sandbox's first packet through it: the figures of
//! docs/benchmarks.md. As root: `cargo run --release -p sandlot-egress --example link_times [COUNT]` (50 by
//! default). Prints a table in milliseconds; asserts nothing.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use nix::sched::{CloneFlags, setns};
use sandlot_egress::network::Gateway;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

fn main() {
    let count: usize = std::env::args().nth(1).map_or(50, |count| count.parse().expect("a count"));
    let gateway = Gateway::create(&[]).unwrap();
    let server = gateway.udp_socket("0.0.0.0:0".parse().unwrap()).unwrap();
    server.set_nonblocking(false).unwrap();
    server.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let port = server.local_addr().unwrap().port();

    let (mut make, mut first, mut drop) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..count {
        let start = Instant::now();
        let link = gateway.link(&[]).unwrap();
        make.push(start.elapsed());

        // The sandbox's first datagram to the gateway, from a thread in its namespace, until the gateway has it.
        let to = SocketAddr::new(IpAddr::V4(link.gateway), port);
        let start = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                setns(link.netns().as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
                UdpSocket::bind("0.0.0.0:0").unwrap().send_to(b"first", to).unwrap();
            });
        });
        server.recv_from(&mut [0u8; 8]).unwrap();
        first.push(start.elapsed());

        let start = Instant::now();
        std::mem::drop(link);
        drop.push(start.elapsed());
    }

    println!("{count} links, one at a time (ms)");
    println!("{:<36} {:>8} {:>8} {:>8}", "step", "median", "p90", "max");
    for (step, times) in
        [("make a link", &mut make), ("first datagram to the gateway", &mut first), ("drop a link", &mut drop)]
    {
        times.sort();
        let at = |quantile: f64| times[((times.len() - 1) as f64 * quantile).round() as usize].as_secs_f64() * 1e3;
        println!("{step:<36} {:>8.2} {:>8.2} {:>8.2}", at(0.5), at(0.9), at(1.0));
    }
}
