//! Server TLS without client certificates: JWT callers over TLS from a real
//! client, the certificate rotated without a restart (file change and
//! SIGHUP), and bearer secrets refused on a plaintext non-loopback listener.

use crate::server_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use compactd::server::tls::TlsSettings;
use compactd::settings::Settings;
use compactd::startup::ServeError;
use server_common::*;
use tokio_rustls::rustls;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/auth")
        .join(name)
}

/// Copies the key pair `name` to `dir/tls.{crt,key}`, as a Secret mount
/// would present it, and returns the settings pointing there.
fn install(dir: &Path, name: &str, reload_interval_seconds: u64) -> TlsSettings {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    // Write then rename, like a kubelet's atomic Secret update.
    for (from, to) in [
        (format!("{name}.pem"), &cert),
        (format!("{name}.key"), &key),
    ] {
        let tmp = to.with_extension("tmp");
        std::fs::copy(fixture(&from), &tmp).expect("copy fixture");
        std::fs::rename(&tmp, to).expect("rename");
    }
    TlsSettings {
        cert_file: cert,
        key_file: key,
        reload_interval_seconds,
    }
}

async fn tls_channel(server: &TestServer) -> Channel {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(
            std::fs::read(fixture("ca.pem")).expect("ca"),
        ))
        .domain_name("localhost");
    Channel::from_shared(format!("https://localhost:{}", server.addr.port()))
        .expect("uri")
        .tls_config(tls)
        .expect("tls config")
        .connect()
        .await
        .expect("connect over TLS")
}

/// The leaf certificate the server presents in a fresh handshake.
async fn served_leaf(server: &TestServer) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(fixture("ca.pem")).expect("ca");
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: rustls::pki_types::CertificateDer<'static> = c.expect("ca pem");
        roots.add(c).expect("ca cert");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("tcp");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let tls = connector.connect(name, tcp).await.expect("handshake");
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a server certificate")
        .as_ref()
        .to_vec()
}

fn leaf_der(name: &str) -> Vec<u8> {
    let pem = std::fs::read(fixture(&format!("{name}.pem"))).expect("pem");
    let der: rustls::pki_types::CertificateDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(&pem).expect("leaf");
    der.as_ref().to_vec()
}

async fn wait_for_leaf(server: &TestServer, want: &[u8]) {
    for _ in 0..100 {
        if served_leaf(server).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server never presented the rotated certificate");
}

#[tokio::test]
async fn jwt_callers_work_over_tls_from_a_real_client() {
    let certs = tempfile::tempdir().expect("tempdir");
    let tls = install(certs.path(), "server", 30);
    let server = TestServer::start_with(|s| s.tls = Some(tls)).await;
    let mut client = compactd::proto::pb::compaction_service_client::CompactionServiceClient::new(
        tls_channel(&server).await,
    );
    let out = within(client.compact(authed(
        compact_req(small_thread("tls-1"), 100_000),
        &token("acme", ALL),
    )))
    .await
    .expect("compact over TLS with a JWT")
    .into_inner();
    assert_eq!(out.version, 1);
    // Without a credential, TLS alone is not authentication.
    let e = within(client.compact(compact_req(small_thread("tls-2"), 100_000)))
        .await
        .expect_err("no credential");
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    // A plaintext client gets no service from the TLS port.
    let plain = Channel::from_shared(format!("http://127.0.0.1:{}", server.addr.port()))
        .expect("uri")
        .connect()
        .await;
    if let Ok(channel) = plain {
        let mut c =
            compactd::proto::pb::compaction_service_client::CompactionServiceClient::new(channel);
        within(c.compact(authed(
            compact_req(small_thread("tls-3"), 100_000),
            &token("acme", ALL),
        )))
        .await
        .expect_err("plaintext on a TLS port");
    }
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let certs = tempfile::tempdir().expect("tempdir");
    let tls = install(certs.path(), "server", 1);
    let server = TestServer::start_with(|s| s.tls = Some(tls)).await;
    assert_eq!(served_leaf(&server).await, leaf_der("server"));
    // The mtime must move even on coarse-grained file systems.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    install(certs.path(), "server_rotated", 1);
    wait_for_leaf(&server, &leaf_der("server_rotated")).await;
    // Calls keep working on the new certificate.
    let mut client = compactd::proto::pb::compaction_service_client::CompactionServiceClient::new(
        tls_channel(&server).await,
    );
    within(client.compact(authed(
        compact_req(small_thread("tls-rot"), 100_000),
        &token("acme", ALL),
    )))
    .await
    .expect("compact after rotation");
    // A broken pair (key of another certificate) is not taken; the server
    // keeps presenting the last good one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::copy(fixture("server.key"), certs.path().join("tls.key")).expect("break");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(served_leaf(&server).await, leaf_der("server_rotated"));
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_certificate_at_once() {
    let certs = tempfile::tempdir().expect("tempdir");
    // An hour between file checks: only the signal can explain a reload.
    let tls = install(certs.path(), "server", 3600);
    let server = TestServer::start_with(|s| s.tls = Some(tls)).await;
    assert_eq!(served_leaf(&server).await, leaf_der("server"));
    install(certs.path(), "server_rotated", 3600);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    wait_for_leaf(&server, &leaf_der("server_rotated")).await;
}

fn api_key_settings(listen: &str) -> Settings {
    let mut s = Settings {
        listen: listen.parse().expect("addr"),
        ..Settings::default()
    };
    s.auth.api_keys = vec![compactd::security::ApiKeyEntry {
        sha256: compactd::security::hash_api_key("k-123"),
        tenant: "acme".into(),
        requester: "ci".into(),
        permissions: vec!["compact".into()],
    }];
    s
}

#[test]
fn bearer_secrets_on_a_plaintext_non_loopback_listener_refuse_to_start() {
    match api_key_settings("0.0.0.0:50051").validate() {
        Err(e @ ServeError::PlaintextCredentials(_)) => {
            let m = e.to_string();
            assert!(
                m.contains("tls.cert_file") && m.contains("allow_plaintext_behind_tls_terminator"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Loopback plaintext is fine (a local sidecar), and so is an explicit
    // statement that TLS ends in front of the service…
    api_key_settings("127.0.0.1:50051")
        .validate()
        .expect("loopback");
    let mut behind = api_key_settings("0.0.0.0:50051");
    behind.allow_plaintext_behind_tls_terminator = true;
    behind.validate().expect("TLS terminated in front");
    // …or TLS itself.
    let certs = tempfile::tempdir().expect("tempdir");
    let mut tls = api_key_settings("0.0.0.0:50051");
    tls.tls = Some(install(certs.path(), "server", 30));
    tls.validate().expect("TLS listener");
    // Unreadable or mismatched files are named at start-up.
    let mut bad = api_key_settings("127.0.0.1:50051");
    let mut settings = install(certs.path(), "server", 30);
    settings.key_file = fixture("server_rotated.key");
    bad.tls = Some(settings);
    let e = bad.validate().expect_err("key of another certificate");
    assert!(e.to_string().contains("key_file"), "{e}");
}
