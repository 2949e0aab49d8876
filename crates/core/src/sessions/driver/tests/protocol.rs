//! The wire on its own: requests as bytes, and DriverOutput over in-memory streams (markers split across reads,
//! another nonce's marker, bytes after an end, a stream closed early).

use std::time::Duration;

use tokio::io::{AsyncWriteExt, DuplexStream, duplex};

use super::super::{CellEnd, DriverGone, DriverOutput, driver_language, encode_request, new_nonce, spawn_for};
use crate::{Language, Stream};

const NONCE: &str = "0123456789abcdef0123456789abcdef";
const OTHER: &str = "fedcba9876543210fedcba9876543210";

fn output() -> (DriverOutput, DuplexStream, DuplexStream) {
    let (stdout_writer, stdout) = duplex(4096);
    let (stderr_writer, stderr) = duplex(4096);
    (DriverOutput::new(Box::pin(stdout), Box::pin(stderr)), stdout_writer, stderr_writer)
}

/// What a read_cell forwarded: each stream's bytes, and the pieces in the order they came.
#[derive(Default, Debug)]
struct Forwarded {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

async fn read_cell(output: &mut DriverOutput, nonce: &str) -> (Forwarded, Result<CellEnd, DriverGone>) {
    let mut forwarded = Forwarded::default();
    let mut sink = |stream: Stream, bytes: &[u8]| {
        assert!(!bytes.is_empty(), "an empty piece forwarded");
        match stream {
            Stream::Stdout => forwarded.stdout.extend_from_slice(bytes),
            Stream::Stderr => forwarded.stderr.extend_from_slice(bytes),
        }
    };
    // Generous: everything is in memory; a read_cell that waits for bytes that never come fails here.
    let end = tokio::time::timeout(Duration::from_secs(10), output.read_cell(nonce, &mut sink)).await.expect("ended");
    (forwarded, end)
}

fn stdout_marker(nonce: &str, json: &str) -> Vec<u8> {
    format!("\0SANDLOT-END:{nonce}:{json}\n").into_bytes()
}

fn stderr_marker(nonce: &str) -> Vec<u8> {
    format!("\0SANDLOT-END:{nonce}\n").into_bytes()
}

#[test]
fn a_request_is_its_header_line_then_the_code_bytes() {
    assert_eq!(encode_request(NONCE, Language::TypeScript, "é\n"), format!("{NONCE} 3 typescript\né\n").into_bytes());
    assert_eq!(encode_request(NONCE, Language::Bash, ""), format!("{NONCE} 0 bash\n").into_bytes());
}

#[test]
fn nonces_are_32_lowercase_hex_digits_and_differ() {
    let (a, b) = (new_nonce(), new_nonce());
    assert!(a.len() == 32 && a.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{a}");
    assert_ne!(a, b);
}

#[test]
fn javascript_and_typescript_share_one_node_driver() {
    let keys: Vec<Language> = Language::ALL.iter().map(|&language| driver_language(language)).collect();
    assert_eq!(keys, [Language::Python, Language::JavaScript, Language::JavaScript, Language::Bash]);
    assert_eq!(spawn_for(Language::TypeScript).args, spawn_for(Language::JavaScript).args);
    assert_eq!(spawn_for(Language::TypeScript).language, Language::TypeScript);
    assert_eq!(spawn_for(Language::Python).args[..2], ["-u", "-c"]);
}

#[tokio::test]
async fn markers_split_across_reads_are_stripped_and_what_follows_waits_for_the_next_cell() {
    let (mut output, mut stdout, mut stderr) = output();
    let mut out = b"one\0two".to_vec();
    out.extend(stdout_marker(NONCE, r#"{"exit_code": 3, "interrupted": false}"#));
    out.extend(b"next cell's");
    let mut err = b"warn\0".to_vec();
    err.extend(stderr_marker(NONCE));
    err.extend(b"late");
    // One byte per write: every marker arrives in pieces, on both streams at once.
    let writer = tokio::spawn(async move {
        for i in 0..out.len().max(err.len()) {
            if let Some(byte) = out.get(i) {
                stdout.write_all(&[*byte]).await.expect("write");
            }
            if let Some(byte) = err.get(i) {
                stderr.write_all(&[*byte]).await.expect("write");
            }
            tokio::task::yield_now().await;
        }
        (stdout, stderr)
    });
    let (forwarded, end) = read_cell(&mut output, NONCE).await;
    assert_eq!(end.expect("an end"), CellEnd { exit_code: 3, interrupted: false, exiting: false });
    assert_eq!((forwarded.stdout, forwarded.stderr), (b"one\0two".to_vec(), b"warn\0".to_vec()));

    let (mut stdout, mut stderr) = writer.await.expect("writer");
    stdout.write_all(&stdout_marker(OTHER, r#"{"exit_code": 0, "interrupted": true}"#)).await.expect("write");
    stderr.write_all(&stderr_marker(OTHER)).await.expect("write");
    let (forwarded, end) = read_cell(&mut output, OTHER).await;
    assert_eq!(end.expect("an end"), CellEnd { exit_code: 0, interrupted: true, exiting: false });
    assert_eq!((forwarded.stdout, forwarded.stderr), (b"next cell's".to_vec(), b"late".to_vec()));
}

#[tokio::test]
async fn another_nonces_marker_and_near_misses_are_output() {
    let (mut output, mut stdout, mut stderr) = output();
    let fake_out = [
        stdout_marker(OTHER, r#"{"exit_code": 0, "interrupted": false}"#),
        format!("\0SANDLOT-END:{NONCE}:not json\n").into_bytes(),
        format!("\0SANDLOT-END:{NONCE}\n").into_bytes(),
    ]
    .concat();
    let fake_err = [stderr_marker(OTHER), format!("\0SANDLOT-END:{NONCE}:x\n").into_bytes()].concat();
    let writer = tokio::spawn({
        let (fake_out, fake_err) = (fake_out.clone(), fake_err.clone());
        async move {
            stdout.write_all(&fake_out).await.expect("write");
            stdout.write_all(&stdout_marker(NONCE, r#"{"exit_code": 1, "interrupted": false}"#)).await.expect("write");
            stderr.write_all(&fake_err).await.expect("write");
            stderr.write_all(&stderr_marker(NONCE)).await.expect("write");
            (stdout, stderr)
        }
    });
    let (forwarded, end) = read_cell(&mut output, NONCE).await;
    assert_eq!(end.expect("an end"), CellEnd { exit_code: 1, interrupted: false, exiting: false });
    assert_eq!((forwarded.stdout, forwarded.stderr), (fake_out, fake_err));
    drop(writer.await);
}

#[tokio::test]
async fn a_stream_closed_before_its_marker_is_the_driver_gone() {
    let (mut output, mut stdout, stderr) = output();
    stdout.write_all(b"partial \0SANDLOT").await.expect("write");
    drop(stdout);
    let (forwarded, end) = read_cell(&mut output, NONCE).await;
    assert!(matches!(end, Err(DriverGone::Closed(Stream::Stdout))), "{end:?}");
    assert_eq!(forwarded.stdout, b"partial ");
    drop(stderr);
}

#[tokio::test]
async fn a_cell_ends_at_both_markers_and_a_dropped_read_goes_on_where_it_stopped() {
    let (mut output, mut stdout, mut stderr) = output();
    stdout.write_all(b"out").await.expect("write");
    stdout.write_all(&stdout_marker(NONCE, r#"{"exit_code": 2, "interrupted": false}"#)).await.expect("write");
    stderr.write_all(b"err").await.expect("write");
    let mut forwarded = Vec::new();
    let mut sink = |stream: Stream, bytes: &[u8]| forwarded.push((stream, bytes.to_vec()));
    // Only stdout's marker is there: the read waits (for as long as we give it) and is dropped.
    let waited = tokio::time::timeout(Duration::from_millis(200), output.read_cell(NONCE, &mut sink)).await;
    assert!(waited.is_err(), "{waited:?}");
    stderr.write_all(&stderr_marker(NONCE)).await.expect("write");
    let end = tokio::time::timeout(Duration::from_secs(10), output.read_cell(NONCE, &mut sink)).await.expect("ended");
    assert_eq!(end.expect("an end"), CellEnd { exit_code: 2, interrupted: false, exiting: false });
    // (Which stream is read first is select!'s choice.)
    let of = |stream| forwarded.iter().filter(|(s, _)| *s == stream).map(|(_, b)| b.clone()).collect::<Vec<_>>();
    assert_eq!((of(Stream::Stdout), of(Stream::Stderr)), (vec![b"out".to_vec()], vec![b"err".to_vec()]));
}
