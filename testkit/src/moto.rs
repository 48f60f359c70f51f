//! A real local AWS for the S3 and KMS tests: moto in server mode, started
//! on a free loopback port and killed when dropped, plus a TCP proxy in
//! front of it that can simulate an outage (connections refused, or every
//! request answered with HTTP 500) and recover without losing moto's state.
//!
//! moto is installed into the test venv by `scripts/test.sh`. A missing
//! moto panics with what to do; the tests that need it fail, never skip.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where `moto_server` is: `COMPACTD_MOTO_SERVER`, else the test venv's
/// (`COMPACTD_VENV`, else `.venv` at the workspace root).
pub fn moto_server_path() -> PathBuf {
    if let Some(p) = std::env::var_os("COMPACTD_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let venv = std::env::var_os("COMPACTD_VENV")
        .map(PathBuf::from)
        .map(|v| if v.is_absolute() { v } else { root.join(v) })
        .unwrap_or_else(|| root.join(".venv"));
    venv.join("bin").join("moto_server")
}

/// Runs moto's server with its S3 writes made atomic. S3 decides a
/// conditional write (`If-Match`, `If-None-Match`) atomically, and
/// compactd's compare-and-swap rests on that; moto 5 checks the condition
/// and then writes, unlocked, on a thread per request, so two racing
/// conditional PUTs could both succeed there and never on S3.
const ATOMIC_WRITES: &str = r#"
import sys, threading
from moto.s3.responses import S3Response
from moto.server import main
lock = threading.RLock()
def atomic(f):
    def run(*args, **kwargs):
        with lock:
            return f(*args, **kwargs)
    return run
# A moto that renames these fails to start, rather than racing silently.
for name in ("put_object", "delete_object"):
    setattr(S3Response, name, atomic(getattr(S3Response, name)))
sys.argv[0] = "moto_server"
sys.exit(main(sys.argv[1:]))
"#;

/// The interpreter `moto_server` runs on: its `#!` line, else the `python`
/// beside it (a venv's `bin/`).
fn interpreter(moto_server: &std::path::Path) -> PathBuf {
    let shebang = std::fs::read(moto_server).ok().and_then(|b| {
        let line = b
            .split(|&c| c == b'\n')
            .next()?
            .strip_prefix(b"#!")?
            .to_vec();
        let line = String::from_utf8(line).ok()?;
        let path = line.split_whitespace().next()?.to_string();
        Some(PathBuf::from(path)).filter(|p| p.is_absolute() && p.exists())
    });
    shebang.unwrap_or_else(|| moto_server.with_file_name("python"))
}

/// A running moto server.
pub struct Moto {
    child: Child,
    addr: SocketAddr,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Answers an HTTP request at all (any status).
fn answers_http(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.")
}

impl Moto {
    /// Starts moto on a free loopback port and waits until it answers.
    ///
    /// # Panics
    /// When `moto_server` is missing or does not come up: the S3/KMS tests
    /// cannot run without it, and say so.
    pub fn start() -> Moto {
        let bin = moto_server_path();
        assert!(
            bin.exists(),
            "moto is required for the S3/KMS tests but {} does not exist. \
             Run ./scripts/test.sh (it installs moto[server] into the test venv), or \
             `python3 -m venv .venv && .venv/bin/pip install -r tests/python/requirements.txt`, \
             or point COMPACTD_MOTO_SERVER at a moto_server executable.",
            bin.display()
        );
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut child = Command::new(interpreter(&bin))
            .args([
                "-c",
                ATOMIC_WRITES,
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !answers_http(addr) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("moto_server exited at start-up ({status}); run it by hand to see why");
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer on {addr} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Moto { child, addr }
    }

    /// `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// S3 (path-style) and KMS clients pointed straight at this server, for
    /// setting up buckets and keys and inspecting what was stored.
    pub async fn clients(&self) -> (aws_sdk_s3::Client, aws_sdk_kms::Client) {
        let sdk = compactd::store::backend::sdk_config(Some(REGION), Some(credentials())).await;
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .endpoint_url(self.endpoint())
                .force_path_style(true)
                .build(),
        );
        let kms = aws_sdk_kms::Client::from_conf(
            aws_sdk_kms::config::Builder::from(&sdk)
                .endpoint_url(self.endpoint())
                .build(),
        );
        (s3, kms)
    }
}

/// The region the tests and benches use against moto.
pub const REGION: &str = "us-east-1";

/// Static credentials moto accepts (it checks none).
pub fn credentials() -> aws_sdk_s3::config::Credentials {
    aws_sdk_s3::config::Credentials::new("testing", "testing", None, None, "moto")
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward to the upstream.
    None,
    /// Close every connection at once (the store is down).
    Refuse,
    /// Answer every request with `500 Internal Server Error`.
    Http500,
}

/// A loopback TCP proxy that forwards to an upstream until told to fail.
pub struct FaultProxy {
    addr: SocketAddr,
    fault: Arc<AtomicU8>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

fn fault_code(f: Fault) -> u8 {
    match f {
        Fault::None => 0,
        Fault::Refuse => 1,
        Fault::Http500 => 2,
    }
}

const HTTP_500: &[u8] =
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

impl FaultProxy {
    /// Starts forwarding a free loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let fault = Arc::new(AtomicU8::new(0));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, o, st) = (Arc::clone(&fault), Arc::clone(&open), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut client) = conn else { continue };
                match f.load(Ordering::SeqCst) {
                    1 => {
                        let _ = client.shutdown(Shutdown::Both);
                    }
                    2 => {
                        std::thread::spawn(move || {
                            let _ = client.set_read_timeout(Some(Duration::from_millis(200)));
                            let mut buf = [0u8; 64 * 1024];
                            let _ = client.read(&mut buf);
                            let _ = client.write_all(HTTP_500);
                            let _ = client.shutdown(Shutdown::Both);
                        });
                    }
                    _ => {
                        let Ok(server) = TcpStream::connect(upstream) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        if let (Ok(c2), Ok(s2), Ok(mut list)) =
                            (client.try_clone(), server.try_clone(), o.lock())
                        {
                            list.push(c2);
                            list.push(s2);
                        }
                        pipe(client, server);
                    }
                }
            }
        });
        FaultProxy {
            addr,
            fault,
            open,
            stop,
        }
    }

    /// `http://127.0.0.1:{port}`: point the client here instead of upstream.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes what the proxy does; any fault also cuts the connections
    /// already open (pooled keep-alive connections would bypass it).
    pub fn set(&self, fault: Fault) {
        self.fault.store(fault_code(fault), Ordering::SeqCst);
        if fault != Fault::None {
            if let Ok(mut list) = self.open.lock() {
                for s in list.drain(..) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.set(Fault::Refuse);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies both ways until either side closes.
fn pipe(client: TcpStream, server: TcpStream) {
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    };
    if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
        copy(client, s2);
        copy(server, c2);
    }
}
