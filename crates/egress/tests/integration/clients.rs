//! Real clients through the explicit proxy, as a sandbox's programs use it: curl (`-x`, as with `HTTPS_PROXY` and
//! `HTTP_PROXY`) and Python's `http.client` tunnel (what `urllib` does with `HTTPS_PROXY`). Each binds the
//! sandbox's address (127.0.0.2) so the proxy knows it.

use crate::common;

use common::*;
use sandlot_egress::Route;
use std::io::Write;
use tokio::process::Command;

const OPEN: &[&str] = &["web.test:1-65535", "tls.test:1-65535", "127.0.0.0/8:1-65535"];

/// curl's exit code and standard output.
async fn curl(harness: &Harness, internet: &Internet, url: &str) -> (i32, String) {
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(internet.tls_root_pem.as_bytes()).unwrap();
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--interface", "127.0.0.2", "--cacert"])
        .arg(ca.path())
        .arg("-x")
        .arg(format!("http://{}", harness.explicit))
        .arg(url)
        .output()
        .await
        .unwrap();
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[tokio::test]
async fn curl_https_and_http_through_the_proxy() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;

    let (code, body) = curl(&harness, &internet, &format!("https://tls.test:{}/curl-tls", internet.tls.port())).await;
    assert_eq!((code, body.as_str()), (0, "hello from /curl-tls"));
    let (code, body) = curl(&harness, &internet, &format!("http://web.test:{}/curl", internet.http.port())).await;
    assert_eq!((code, body.as_str()), (0, "hello from /curl"));

    // Refused: curl fails the tunnel (56: CONNECT answered 403) and shows the 403 of plain HTTP.
    let (code, _) = curl(&harness, &internet, &format!("https://other.test:{}/", internet.tls.port())).await;
    assert_eq!(code, 56);
    let (code, body) = curl(&harness, &internet, &format!("http://other.test:{}/", internet.http.port())).await;
    assert_eq!(code, 0);
    assert!(body.starts_with("sandlot egress refused other.test:"), "{body}");

    let records = harness.records(4).await;
    let summary: Vec<_> = records.iter().map(|record| (record.host.as_str(), record.route, record.allowed)).collect();
    assert_eq!(
        summary,
        vec![
            ("tls.test", Route::Connect, true),
            ("web.test", Route::HttpProxy, true),
            ("other.test", Route::Connect, false),
            ("other.test", Route::HttpProxy, false),
        ]
    );
    assert_eq!(internet.asked(), ["tls.test", "web.test"], "resolved on the host; other.test never");
}

#[tokio::test]
async fn python_http_client_tunnel() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    ca.write_all(internet.tls_root_pem.as_bytes()).unwrap();
    let script = r#"
import http.client, ssl, sys
proxy_host, proxy_port, cafile, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
context = ssl.create_default_context(cafile=cafile)
for host in ["tls.test", "other.test"]:
    connection = http.client.HTTPSConnection(proxy_host, proxy_port, context=context, source_address=("127.0.0.2", 0))
    connection.set_tunnel(host, port)
    try:
        connection.request("GET", "/python")
        print(host, connection.getresponse().read().decode())
    except OSError as error:
        print(host, "refused:", error)
"#;
    let output = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(harness.explicit.ip().to_string())
        .arg(harness.explicit.port().to_string())
        .arg(ca.path())
        .arg(internet.tls.port().to_string())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "tls.test hello from /python");
    assert!(lines[1].starts_with("other.test refused: Tunnel connection failed: 403"), "{}", lines[1]);
}
