//! mTLS end to end: the tenant comes from the client certificate's SPIFFE
//! URI; a certificate from another trust domain, or no credential at all, is
//! refused; JWT callers share the same TLS listener without a certificate.

use crate::server_common;

use std::path::PathBuf;

use compactd::proto::pb;
use compactd::proto::pb::compaction_service_client::CompactionServiceClient;
use compactd::security::MtlsConfig;
use server_common::*;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/auth")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("fixture")
}

async fn start() -> TestServer {
    TestServer::start_with(|s| {
        s.auth.mtls = Some(MtlsConfig {
            ca_file: fixture("ca.pem"),
            cert_file: fixture("server.pem"),
            key_file: fixture("server.key"),
            trust_domain: "compactd.test".into(),
            permissions: vec!["compact".into(), "render".into()],
        });
    })
    .await
}

/// A TLS client, with the client certificate `cert` (fixture base name) if any.
async fn client(server: &TestServer, cert: Option<&str>) -> CompactionServiceClient<Channel> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .domain_name("localhost");
    if let Some(c) = cert {
        tls = tls.identity(Identity::from_pem(
            read(&format!("{c}.pem")),
            read(&format!("{c}.key")),
        ));
    }
    let channel = Channel::from_shared(format!("https://localhost:{}", server.addr.port()))
        .expect("uri")
        .tls_config(tls)
        .expect("tls config")
        .connect()
        .await
        .expect("connect");
    CompactionServiceClient::new(channel)
}

#[tokio::test]
async fn the_tenant_comes_from_the_client_certificate() {
    let server = start().await;
    let mut acme = client(&server, Some("client_acme")).await;
    let out = within(acme.compact(compact_req(small_thread("mtls-1"), 100_000)))
        .await
        .expect("compact with a SPIFFE client certificate")
        .into_inner();
    assert_eq!(out.version, 1);

    // A JWT caller of tenant acme, over TLS without a certificate, sees acme's plan…
    let mut plain = client(&server, None).await;
    let render = pb::RenderRequest {
        thread: Some(small_thread("mtls-1")),
        ..Default::default()
    };
    let seen = within(plain.render(authed(render.clone(), &token("acme", ALL))))
        .await
        .expect("render as acme")
        .into_inner();
    assert_eq!(seen.plan_version, 1);
    // …another tenant does not.
    let err = within(plain.render(authed(render, &token("globex", ALL))))
        .await
        .expect_err("other tenant");
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn foreign_trust_domains_and_missing_credentials_are_refused() {
    let server = start().await;
    let mut foreign = client(&server, Some("client_other_domain")).await;
    let err = within(foreign.compact(compact_req(small_thread("mtls-2"), 100_000)))
        .await
        .expect_err("foreign trust domain");
    assert_eq!(err.code(), Code::Unauthenticated);

    let mut anonymous = client(&server, None).await;
    let err = within(anonymous.compact(compact_req(small_thread("mtls-2"), 100_000)))
        .await
        .expect_err("no credential");
    assert_eq!(err.code(), Code::Unauthenticated);
}

#[tokio::test]
async fn certificate_permissions_are_enforced() {
    let server = start().await;
    let mut acme = client(&server, Some("client_acme")).await;
    // The mTLS identity holds compact and render only.
    let err = within(acme.rehydrate(pb::RehydrateRequest {
        thread_id: "mtls-3".into(),
        artifact_id: "art_00000000000000000000000000000000".into(),
        ..Default::default()
    }))
    .await
    .expect_err("no rehydrate permission");
    assert_eq!(err.code(), Code::PermissionDenied);
}
