//! The proxy's cost on loopback, in the host namespace (no gateway, no sandbox): time to first byte of a small
//! HTTP response, direct against through the proxy's three paths (CONNECT, absolute-URL HTTP, a caught
//! connection), and a large download's throughput, direct against CONNECT. Each request on a new connection, as a
//! sandbox's clients mostly make them. Destinations are addresses (allowed by a CIDR rule), so the host's
//! resolver is not measured. Run by `scripts/bench-egress.sh`; prints a table with ratios to direct.
//!
//! Usage: bench_proxy [REQUESTS] [MEGABYTES]

use sandlot_egress::proxy::Proxy;
use sandlot_egress::resolver::Resolver;
use sandlot_egress::synthetic::Synthetic;
use sandlot_egress::{Leash, Leashed, Owner, Policy, PolicySpec, Registry};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const SANDBOX: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> Result<()> {
    let mut arguments = std::env::args().skip(1);
    let requests: usize = arguments.next().map_or(Ok(1000), |text| text.parse())?;
    let megabytes: usize = arguments.next().map_or(Ok(256), |text| text.parse())?;

    let server = http_server().await?;
    let spec = PolicySpec { allow: vec!["127.0.0.0/8:1-65535".to_owned()], deny: vec![] };
    let leash = Leash::new(Arc::new(Policy::parse(&spec)?));
    let registry = Arc::new(Registry::default());
    registry.insert(IpAddr::V4(SANDBOX), Arc::new(Leashed::new(leash, Owner::new("bench", "bench"), 1024, 0)));
    let resolver = Resolver::new(Some(&[]))?;
    let proxy = Proxy::new(registry, Arc::new(Synthetic::new()), resolver, None);
    let explicit = TcpListener::bind("127.0.0.1:0").await?;
    let explicit_address = explicit.local_addr()?;
    tokio::spawn(proxy.clone().serve_explicit(explicit));
    // The gateway's catch, standing in: every connection handed to the proxy as made to the server.
    let capture = TcpListener::bind("127.0.0.1:0").await?;
    let capture_address = capture.local_addr()?;
    let catcher = proxy.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = capture.accept().await {
            tokio::spawn(catcher.clone().transparent(stream, server));
        }
    });

    let small = format!("GET /small HTTP/1.1\r\nHost: {server}\r\n\r\n");
    let absolute = format!("GET http://{server}/small HTTP/1.1\r\nHost: {server}\r\n\r\n");
    let tunnel = format!("CONNECT {server} HTTP/1.1\r\nHost: {server}\r\n\r\n");
    let paths: [(&str, SocketAddr, Option<&str>, &str); 4] = [
        ("direct", server, None, &small),
        ("CONNECT (HTTPS_PROXY)", explicit_address, Some(&tunnel), &small),
        ("absolute URL (HTTP_PROXY)", explicit_address, None, &absolute),
        ("caught (transparent)", capture_address, None, &small),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(requests); paths.len()];
    for _ in 0..20 {
        for (_, to, preface, request) in &paths {
            first_byte(*to, *preface, request).await?;
        }
    }
    // Round-robin, so a busy moment of the machine falls on every path alike.
    for _ in 0..requests {
        for (index, (_, to, preface, request)) in paths.iter().enumerate() {
            samples[index].push(first_byte(*to, *preface, request).await?);
        }
    }
    println!("time to first byte, {requests} requests each, a new connection each (loopback)");
    println!("{:<28} {:>8} {:>8} {:>8} {:>10} {:>10}", "path", "p50 ms", "p99 ms", "mean ms", "p50/direct", "+ms p50");
    let direct = percentile(&mut samples[0].clone(), 0.5);
    for ((name, ..), samples) in paths.iter().zip(&mut samples) {
        let p50 = percentile(samples, 0.5);
        let p99 = percentile(samples, 0.99);
        let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
        println!(
            "{name:<28} {:>8.3} {:>8.3} {:>8.3} {:>10.2} {:>10.3}",
            millis(p50),
            millis(p99),
            millis(mean),
            p50.as_secs_f64() / direct.as_secs_f64(),
            millis(p50) - millis(direct)
        );
    }

    let big = format!("GET /big/{} HTTP/1.1\r\nHost: {server}\r\n\r\n", megabytes << 20);
    let direct = download(server, None, &big).await?;
    let through = download(explicit_address, Some(&tunnel), &big).await?;
    println!();
    println!("download of {megabytes} MiB, one connection");
    println!("{:<28} {:>10} {:>10}", "path", "MiB/s", "/direct");
    for (name, rate) in [("direct", direct), ("CONNECT (HTTPS_PROXY)", through)] {
        println!("{name:<28} {rate:>10.0} {:>10.2}", rate / direct);
    }
    Ok(())
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn percentile(samples: &mut [Duration], at: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() - 1) as f64 * at).round() as usize]
}

async fn connect(to: SocketAddr, preface: Option<&str>) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(SANDBOX), 0))?;
    let mut stream = socket.connect(to).await?;
    stream.set_nodelay(true)?;
    if let Some(preface) = preface {
        stream.write_all(preface.as_bytes()).await?;
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await? == 0 {
                return Err("the proxy closed".into());
            }
            head.push(byte[0]);
        }
    }
    Ok(stream)
}

/// From opening the connection to the response's first byte; the rest is read to the end.
async fn first_byte(to: SocketAddr, preface: Option<&str>, request: &str) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = connect(to, preface).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut buffer = vec![0u8; 4096];
    if stream.read(&mut buffer).await? == 0 {
        return Err("no response".into());
    }
    let elapsed = started.elapsed();
    while stream.read(&mut buffer).await? > 0 {}
    Ok(elapsed)
}

/// MiB per second of a whole response.
async fn download(to: SocketAddr, preface: Option<&str>, request: &str) -> Result<f64> {
    let started = Instant::now();
    let mut stream = connect(to, preface).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0usize;
    loop {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        total += read;
    }
    Ok(total as f64 / f64::from(1 << 20) / started.elapsed().as_secs_f64())
}

/// A server on 127.0.0.1: `/big/N` answers N bytes, anything else a few.
async fn http_server() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16384 {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => head.extend_from_slice(&buffer[..read]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let size = head
                    .split(' ')
                    .nth(1)
                    .and_then(|path| path.strip_prefix("/big/"))
                    .and_then(|size| size.parse::<usize>().ok())
                    .unwrap_or(5);
                let _ = stream
                    .write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n").as_bytes(),
                    )
                    .await;
                let chunk = vec![b'x'; 256 * 1024];
                let mut left = size;
                while left > 0 {
                    let part = left.min(chunk.len());
                    if stream.write_all(&chunk[..part]).await.is_err() {
                        return;
                    }
                    left -= part;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(address)
}
