//! Shared helpers for the gRPC integration tests: an in-process server on
//! 127.0.0.1:0 with a temporary data directory, HS256 test tokens, clients
//! and thread builders.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use compactd::proto::pb;
use compactd::proto::pb::compaction_service_client::CompactionServiceClient;
use compactd::proto::status::ErrorDescription;
use compactd::security::AuthConfig;
use compactd::settings::Settings;
use compactd::startup::ServeError;
use compactd::store::{ArtifactEntry, ArtifactMeta, ArtifactStore, PlanStore, Removed, StoreError};

pub const ISSUER: &str = "https://issuer.test";
pub const AUDIENCE: &str = "compactd";
pub const SECRET: &str = "test-secret-that-is-long-enough-for-hs256-0123456789";

/// Every permission a well-behaved agent platform token carries.
pub const ALL: &[&str] = &[
    "compact",
    "render",
    "rehydrate",
    "artifact:read:public",
    "artifact:read:internal",
];

/// A running server; dropping it stops the server.
pub struct TestServer {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    _dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), ServeError>>>,
}

/// Settings with HS256 JWT auth (secret in a file under `dir`).
pub fn settings(dir: &std::path::Path) -> Settings {
    let secret_file = dir.join("hs256.secret");
    std::fs::write(&secret_file, SECRET).expect("write secret");
    let auth: AuthConfig = serde_json::from_value(json!({
        "jwt": {
            "issuer": ISSUER,
            "audience": AUDIENCE,
            "hs256_secret_file": secret_file,
            "leeway_seconds": 0,
        }
    }))
    .expect("auth config");
    Settings {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.join("data"),
        health_probe_interval_ms: 50,
        // Tests that read the access log point it at a file.
        access_log: compactd::server::access::AccessLogSink::Off,
        auth,
        ..Settings::default()
    }
}

impl TestServer {
    /// Starts a server with the default test settings.
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// Starts a server after `tweak` adjusted the settings.
    pub async fn start_with(tweak: impl FnOnce(&mut Settings)) -> TestServer {
        TestServer::launch(tweak, |s, listener, stop| {
            tokio::spawn(compactd::startup::serve(s, listener, stop))
        })
        .await
    }

    /// Starts a server over the given stores.
    pub async fn start_with_stores(
        plans: Arc<dyn PlanStore>,
        artifacts: Arc<dyn ArtifactStore>,
    ) -> TestServer {
        TestServer::start_with_stores_and(plans, artifacts, |_| {}).await
    }

    /// Starts a server over the given stores after `tweak` adjusted the settings.
    pub async fn start_with_stores_and(
        plans: Arc<dyn PlanStore>,
        artifacts: Arc<dyn ArtifactStore>,
        tweak: impl FnOnce(&mut Settings),
    ) -> TestServer {
        TestServer::launch(tweak, |s, listener, stop| {
            tokio::spawn(compactd::startup::serve_with_stores(
                s, plans, artifacts, listener, stop,
            ))
        })
        .await
    }

    /// Starts a server over opened stores (append sessions included).
    pub async fn start_on(stores: compactd::store::backend::Stores) -> TestServer {
        TestServer::launch(
            |_| {},
            |s, listener, stop| {
                tokio::spawn(compactd::startup::serve_stores(s, stores, listener, stop))
            },
        )
        .await
    }

    /// Binds first (the port accepts connections before `serve` runs, so
    /// clients need no readiness wait), then spawns `serve` with the test
    /// settings `tweak` adjusted and a shutdown signal.
    async fn launch(
        tweak: impl FnOnce(&mut Settings),
        serve: impl FnOnce(
            Settings,
            tokio::net::TcpListener,
            std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        ) -> JoinHandle<Result<(), ServeError>>,
    ) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = settings(dir.path());
        tweak(&mut s);
        let listener = tokio::net::TcpListener::bind(s.listen).await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let data_dir = s.data_dir.clone();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = serve(
            s,
            listener,
            Box::pin(async {
                let _ = rx.await;
            }),
        );
        TestServer {
            addr,
            data_dir,
            _dir: dir,
            shutdown: Some(tx),
            handle: Some(handle),
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    pub async fn client(&self) -> CompactionServiceClient<Channel> {
        CompactionServiceClient::new(self.channel().await)
            .max_decoding_message_size(256 * 1024 * 1024)
            .max_encoding_message_size(256 * 1024 * 1024)
    }

    /// Stops the server and returns how `serve` ended.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.handle.take() {
            Some(h) => h.await.expect("server task"),
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// An HS256 token for `tenant` with `perms`, valid for an hour.
pub fn token(tenant: &str, perms: &[&str]) -> String {
    token_with(json!({
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": format!("agent@{tenant}"),
        "tenant": tenant,
        "permissions": perms,
        "iat": now(),
        "exp": now() + 3600,
    }))
}

/// An HS256 token with exactly these claims.
pub fn token_with(claims: serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("encode token")
}

/// An unsigned `alg: none` token with otherwise valid claims.
pub fn alg_none_token(tenant: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let claims = b64.encode(
        json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "tenant": tenant,
            "permissions": ALL, "exp": now() + 3600,
        })
        .to_string(),
    );
    format!("{header}.{claims}.")
}

/// `msg` with `authorization: Bearer <token>`.
pub fn authed<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    let v: MetadataValue<_> = format!("Bearer {token}").parse().expect("header");
    r.metadata_mut().insert("authorization", v);
    r
}

/// Asserts the status code and, when given, the field the details name.
pub fn assert_status(s: &Status, code: Code, field: Option<&str>) {
    assert_eq!(s.code(), code, "unexpected status: {s:?}");
    if let Some(field) = field {
        let d = ErrorDescription::of(s);
        assert_eq!(d.field, field, "{s:?}");
        assert!(
            s.message().contains(field),
            "message names the field: {s:?}"
        );
    }
}

// ───────────────────────── thread builders ─────────────────────────

pub fn text(id: &str, role: pb::Role, turn: u32, text: &str) -> pb::Message {
    pb::Message {
        id: id.into(),
        role: role as i32,
        text: text.into(),
        turn,
        ..Default::default()
    }
}

pub fn call(id: &str, turn: u32, call_id: &str, tool: &str) -> pb::Message {
    pb::Message {
        id: id.into(),
        role: pb::Role::Assistant as i32,
        turn,
        tool_calls: vec![pb::ToolCall {
            wire: None,
            id: call_id.into(),
            name: tool.into(),
            arguments_json: r#"{"path":"/srv/app/log.txt"}"#.into(),
        }],
        ..Default::default()
    }
}

pub fn result(id: &str, turn: u32, call_id: &str, tool: &str, content: String) -> pb::Message {
    pb::Message {
        id: id.into(),
        role: pb::Role::Tool as i32,
        turn,
        tool_result: Some(pb::ToolResultEnvelope {
            tool_name: tool.into(),
            tool_call_id: call_id.into(),
            outcome: pb::Outcome::Success as i32,
            content: Some(pb::tool_result_envelope::Content::ContentText(content)),
            key_fields: [("order_id".to_string(), "\"A-17\"".to_string())].into(),
            durability: pb::Durability::NonReplayable as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A short dialogue with one small tool call.
pub fn small_thread(id: &str) -> pb::Thread {
    pb::Thread {
        id: id.into(),
        messages: vec![
            text(
                "m0",
                pb::Role::User,
                1,
                "I prefer Python. The budget is $1000.",
            ),
            call("m1", 1, "c1", "read_file"),
            result("m2", 1, "c1", "read_file", "hello world".into()),
            text("m3", pb::Role::Assistant, 1, "The file says hello world."),
            text("m4", pb::Role::User, 2, "Great, now summarize it."),
        ],
    }
}

/// Agent turn `n`: a request, a call, its result (`lines` log lines, each
/// with `phrase`) and an answer.
pub fn agent_turn(n: u32, lines: u32, phrase: &str) -> Vec<pb::Message> {
    let body: String = (0..lines)
        .map(|i| format!("turn {n} line {i}: {phrase} {}\n", n * 100 + i))
        .collect();
    vec![
        text(
            &format!("u{n}"),
            pb::Role::User,
            n,
            &format!("Step {n}: check the batches of shard {n}."),
        ),
        call(&format!("a{n}"), n, &format!("c{n}"), "read_file"),
        result(&format!("t{n}"), n, &format!("c{n}"), "read_file", body),
        text(
            &format!("b{n}"),
            pb::Role::Assistant,
            n,
            &format!("Shard {n} is fine."),
        ),
    ]
}

/// Varied text of roughly `lines` lines (~12 tokens each).
pub fn big_output(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "{i:05} INFO worker-{} processed batch {} in {} ms status=ok\n",
                i % 7,
                i * 31 % 997,
                i * 17 % 113
            )
        })
        .collect()
}

/// A thread whose early tool output is huge, followed by a few small turns.
pub fn big_thread(id: &str, lines: usize) -> pb::Thread {
    let mut messages = vec![
        text(
            "u1",
            pb::Role::User,
            1,
            "Please read the log. Never delete production data.",
        ),
        call("a1", 1, "c1", "read_file"),
        result("t1", 1, "c1", "read_file", big_output(lines)),
        text(
            "a1b",
            pb::Role::Assistant,
            1,
            "I read the log; all batches succeeded.",
        ),
    ];
    for turn in 2..=4u32 {
        messages.push(text(
            &format!("u{turn}"),
            pb::Role::User,
            turn,
            &format!("Question number {turn} about the log?"),
        ));
        messages.push(text(
            &format!("a{turn}"),
            pb::Role::Assistant,
            turn,
            &format!("Answer number {turn}: everything is fine."),
        ));
    }
    pb::Thread {
        id: id.into(),
        messages,
    }
}

/// Overrides that make externalization the reducer that fires on `big_thread`.
pub fn externalize_policy() -> pb::PolicyOverrides {
    pb::PolicyOverrides {
        keep_recent_turns: Some(1),
        keep_tool_io_pairs: Some(0),
        enable_compress: Some(false),
        enable_clear: Some(false),
        enable_retention: Some(false),
        externalize_threshold_tokens: Some(500),
        ..Default::default()
    }
}

pub fn compact_req(thread: pb::Thread, max_input_tokens: u32) -> pb::CompactRequest {
    pb::CompactRequest {
        thread: Some(thread),
        model: "gpt-4o".into(),
        max_input_tokens,
        system_prompt: Some("You are a careful agent.".into()),
        ..Default::default()
    }
}

/// A deadline for anything that could hang.
pub async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("timed out")
}

/// What [`HookedArtifacts`] runs before each write: given the write's
/// number (from 1), it may fail it, hold it or just watch.
pub type PutHook = Box<
    dyn Fn(
            usize,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send>>
        + Send
        + Sync,
>;

/// A real artifact store with a hook before every write and a count of
/// deletes: fault injection and timing control for the gRPC tests.
pub struct HookedArtifacts {
    pub inner: compactd::store::FsArtifactStore,
    pub before_put: PutHook,
    pub puts: std::sync::atomic::AtomicUsize,
    pub deleted: std::sync::atomic::AtomicUsize,
}

impl HookedArtifacts {
    pub fn new(dir: &std::path::Path, before_put: PutHook) -> Self {
        HookedArtifacts {
            inner: compactd::store::FsArtifactStore::open(dir).expect("artifacts"),
            before_put,
            puts: Default::default(),
            deleted: Default::default(),
        }
    }
}

#[async_trait::async_trait]
impl ArtifactStore for HookedArtifacts {
    async fn put(&self, meta: &ArtifactMeta, content: &[u8]) -> Result<String, StoreError> {
        let n = self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        (self.before_put)(n).await?;
        self.inner.put(meta, content).await
    }
    async fn put_keyed(
        &self,
        meta: &ArtifactMeta,
        id: &str,
        content: &[u8],
    ) -> Result<(), StoreError> {
        let n = self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        (self.before_put)(n).await?;
        self.inner.put_keyed(meta, id, content).await
    }
    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
        self.inner.get(tenant, thread_id, artifact_id).await
    }
    async fn get_metadata(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<ArtifactMeta, StoreError> {
        self.inner
            .get_metadata(tenant, thread_id, artifact_id)
            .await
    }
    async fn delete(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(), StoreError> {
        self.deleted
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.delete(tenant, thread_id, artifact_id).await
    }
    async fn scan(&self, tenant: Option<&str>) -> Result<Vec<ArtifactEntry>, StoreError> {
        self.inner.scan(tenant).await
    }
    async fn delete_thread(&self, tenant: &str, thread_id: &str) -> Result<Removed, StoreError> {
        self.inner.delete_thread(tenant, thread_id).await
    }
}

// ───────────────────────── planted secrets ─────────────────────────

/// One secret of each detector class, and the text it is planted in.
pub const PLANTED: &[(&str, &str)] = &[
    ("AKIAIOSFODNN7EXAMPLE", "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"),
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("Pa55w0rd-db9", "mysql://root:Pa55w0rd-db9@10.0.0.5:3306/app"),
    ("ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U", "git clone https://x:ghp_R2x9aQ7wLm4Kz8Vt1Yc6Nb3Hd5Fg0Js2Pe7U@github.com/o/r"),
    ("glpat-a1B2c3D4e5F6g7H8i9J0", "PRIVATE-TOKEN: glpat-a1B2c3D4e5F6g7H8i9J0"),
    ("xoxb-2048-1024-AbCdEfGhIjKlMnOp", "slack bot xoxb-2048-1024-AbCdEfGhIjKlMnOp posted"),
    ("sk_live_51H8zQ2eZvKYlo2C0a1b2c3d4", "stripe key sk_live_51H8zQ2eZvKYlo2C0a1b2c3d4"),
    ("sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1", "ANTHROPIC_API_KEY=sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1"),
    ("eyJzdWIiOiIxMjM0NTY3ODkwIn0", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"),
    ("4111 1111 1111 1111", "card on file: 4111 1111 1111 1111, exp 12/29"),
    ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq", "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq==;EndpointSuffix=core.windows.net"),
    ("1f2e3d4c5b6a79880f1e2d3c4b5a69788f7e6d5c", r#"{"type": "service_account", "private_key_id": "1f2e3d4c5b6a79880f1e2d3c4b5a69788f7e6d5c", "client_email": "x@p.iam.gserviceaccount.com"}"#),
];

/// Personal data of every class, as it turns up: (the value, the text
/// around it). Redacted by default like the secrets.
pub const PERSONAL: &[(&str, &str)] = &[
    (
        "jeanne.martin@example.fr",
        "mail jeanne.martin@example.fr the receipt",
    ),
    ("+33 6 12 34 56 78", "her mobile is +33 6 12 34 56 78"),
    ("(415) 555-0132", "call (415) 555-0132 after five"),
    ("203.0.113.77", "login from 203.0.113.77 flagged"),
    (
        "2001:db8:85a3::8a2e:370:7334",
        "ipv6 2001:db8:85a3::8a2e:370:7334 seen",
    ),
    (
        "GB82 WEST 1234 5698 7654 32",
        "refund to IBAN GB82 WEST 1234 5698 7654 32",
    ),
    ("078-05-1120", "SSN on the form: 078-05-1120"),
];

/// Values that only their JSON key marks as secret.
pub const KEYED: &[&str] = &["tiny9", "zq-77-secretish", "h0rse-staple"];

/// A thread carrying every planted secret in every place a secret turns
/// up: user text, call arguments (by value and by key), tool results (text
/// across line breaks, nested JSON under secret-named keys, key fields),
/// among enough ordinary output that the service compacts it.
pub fn planted_thread(id: &str) -> pb::Thread {
    let (half, rest) = PLANTED.split_at(PLANTED.len() / 2);
    let texts = |p: &[(&str, &str)]| p.iter().map(|(_, t)| *t).collect::<Vec<_>>().join("\n");
    let mut t = big_thread(id, 1500);
    let (mine, theirs) = PERSONAL.split_at(PERSONAL.len() / 2);
    t.messages[0].text = format!(
        "Please read the log. Never delete production data. My notes:\n{}\n{}",
        texts(half),
        texts(mine)
    );
    t.messages[1].tool_calls[0].arguments_json = serde_json::json!({
        "path": "/srv/app/log.txt",
        "db_password": KEYED[0],
        "auth": {"client_secret": KEYED[1]},
        "note": rest[0].1,
        "contact": {"last_login_ip": theirs[0].0, "notes": [theirs[1].1]},
    })
    .to_string();
    let nested = serde_json::json!({"service": {"name": "billing", "credentials": {"token": KEYED[2], "user": "svc"}}});
    t.messages[2] = result(
        "t1",
        1,
        "c1",
        "read_file",
        format!(
            "{}\n{nested}\n{}\n{}",
            texts(rest),
            texts(theirs),
            big_output(1500)
        ),
    );
    if let Some(env) = t.messages[2].tool_result.as_mut() {
        env.key_fields
            .insert("api_key".into(), format!("\"{}\"", KEYED[0]));
        env.key_fields
            .insert("customer".into(), format!("\"{}\"", theirs[2].0));
    }
    t
}

/// Renders a Claude thread of `turns` agent turns, whole, on `client`,
/// reporting `report` (the provider's usage on the body rendered before).
pub async fn claude_render(
    client: &mut pb::compaction_service_client::CompactionServiceClient<tonic::transport::Channel>,
    token: &str,
    (thread_id, turns): (&str, u32),
    report: Option<pb::ProviderUsage>,
) -> pb::RenderResponse {
    let messages = (1..=turns)
        .flat_map(|n| agent_turn(n, 30, "shard ok"))
        .collect();
    let req = pb::RenderRequest {
        compact_first: true,
        format: pb::OutputFormat::AnthropicMessages as i32,
        model: "claude-sonnet-4-5".into(),
        max_input_tokens: 200_000,
        thread: Some(pb::Thread {
            id: thread_id.into(),
            messages,
        }),
        usage: report.into_iter().collect(),
        ..Default::default()
    };
    within(client.render(authed(req, token)))
        .await
        .expect("render")
        .into_inner()
}

/// A provider's report on `out`'s body: `ratio` of compactd's count.
pub fn report_on(out: &pb::RenderResponse, ratio: f64) -> pb::ProviderUsage {
    let counted = out.tokens.as_ref().map_or(0, |t| t.total);
    pb::ProviderUsage {
        body_digest: out.body_digest.clone(),
        input_tokens: (f64::from(counted) * ratio) as u32,
        ..Default::default()
    }
}

/// How `out` was counted: (basis, scale).
pub fn counting(out: &pb::RenderResponse) -> (pb::counting::Basis, f64) {
    let c = out.counting.as_ref().expect("counting");
    (c.basis(), c.scale)
}

/// The words of a user message as rendered (default options delimit
/// them); other text as it is.
pub fn said(text: &str) -> &str {
    compactd::render::undelimit_user_text(text).unwrap_or(text)
}
