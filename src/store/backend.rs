//! Choosing and opening the stores from settings: the embedded filesystem
//! stores with the local keyring, or S3 with KMS.
//!
//! Credentials always come from the AWS SDK's standard chain (environment,
//! web identity / IRSA, ECS and instance roles, profiles), never from
//! compactd's config. `AWS_ENDPOINT_URL` and `AWS_REGION` work as for any
//! SDK; with a custom endpoint (MinIO, moto, LocalStack) path-style
//! addressing is chosen unless `artifacts.s3.force_path_style` says otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_s3::config::Credentials;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::envelope::{KeyService, LocalKeyring};
use super::kms::{DataKeyCache, KmsKeys};
use super::s3::{S3ArtifactStore, S3Location, S3PlanStore};
use super::{ArtifactStore, FsArtifactStore, FsPlanStore, PlanStore, StoreError, KEYRING_FILE};

/// Where something is stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Files under `data_dir` (one replica).
    #[default]
    Fs,
    /// An S3 bucket (shared by replicas).
    S3,
}

/// Where plans are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanBackend {
    /// Wherever artifacts are: S3 artifacts mean S3 plans, so replicas on
    /// one bucket share plans without further settings.
    #[default]
    Auto,
    /// Files under `data_dir`.
    Fs,
    /// The artifacts' bucket (`artifacts.s3`).
    S3,
}

/// `plans:` settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlansSettings {
    /// `auto` (default), `fs` or `s3`.
    pub backend: PlanBackend,
}

/// `artifacts.s3:` settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Settings {
    /// The bucket (required for the S3 backend).
    pub bucket: String,
    /// Key prefix inside the bucket, e.g. `compactd/` (a `/` is added if missing).
    pub prefix: String,
    /// Region; `None`: the SDK's (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// Endpoint; `None`: the SDK's (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    /// Path-style addressing; `None`: on exactly when a custom endpoint is set.
    pub force_path_style: Option<bool>,
}

/// `artifacts.kms:` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KmsSettings {
    /// Default KMS key (id, ARN or alias) that wraps data keys. Set: KMS is
    /// the key service, whatever the backend. Unset: the local keyring.
    pub key_id: Option<String>,
    /// Tenant → key, for tenants that bring their own key.
    pub tenant_keys: BTreeMap<String, String>,
    /// Region; `None`: the S3 settings', then the SDK's.
    pub region: Option<String>,
    /// Endpoint; `None`: the SDK's (`AWS_ENDPOINT_URL_KMS`, `AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    /// Seconds an unwrapped data key may be reused for reads of the same
    /// artifact (0: never cached).
    pub data_key_cache_seconds: u64,
    /// Reads one unwrapped data key may serve before KMS is asked again.
    pub data_key_cache_uses: u32,
    /// Unwrapped data keys held at most.
    pub data_key_cache_entries: usize,
}

impl Default for KmsSettings {
    fn default() -> Self {
        KmsSettings {
            key_id: None,
            tenant_keys: BTreeMap::new(),
            region: None,
            endpoint_url: None,
            data_key_cache_seconds: 300,
            data_key_cache_uses: 100,
            data_key_cache_entries: 10_000,
        }
    }
}

/// `artifacts:` settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArtifactsSettings {
    /// `fs` (default) or `s3`.
    pub backend: Backend,
    /// The bucket, for `backend: s3` (and S3 plans).
    pub s3: S3Settings,
    /// KMS keys; without `key_id` the local keyring wraps data keys.
    pub kms: KmsSettings,
}

/// Why the stores could not be opened.
#[derive(Debug, Error)]
pub enum OpenError {
    /// A setting is missing or wrong.
    #[error("{field}: {message}")]
    Invalid {
        /// The setting's path.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A store or key service did not answer the start-up probe.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(field: &'static str, message: impl Into<String>) -> OpenError {
    OpenError::Invalid {
        field,
        message: message.into(),
    }
}

/// What [`open`] needs besides the `artifacts` and `plans` sections.
#[derive(Debug, Clone)]
pub struct Local<'a> {
    /// The filesystem stores' directory.
    pub data_dir: &'a Path,
    /// The local keyring; `None`: `{data_dir}/keys/keyring.json`.
    pub keyring_file: Option<&'a Path>,
}

impl Local<'_> {
    /// The keyring file in use.
    pub fn keyring_path(&self) -> PathBuf {
        self.keyring_file
            .map_or_else(|| self.data_dir.join(KEYRING_FILE), Path::to_path_buf)
    }
}

/// The opened stores.
pub struct Stores {
    /// Plans.
    pub plans: Arc<dyn PlanStore>,
    /// Artifacts.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Append sessions, next to the plans.
    pub threads: Arc<super::ThreadStore>,
    /// One line for the start-up log: which backends and key service.
    pub description: String,
}

/// The SDK configuration: the standard chain for credentials and region
/// (or the given static credentials, for tests), rustls on ring, and
/// timeouts so an unreachable endpoint fails a call in seconds, not minutes.
pub async fn sdk_config(region: Option<&str>, credentials: Option<Credentials>) -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(10))
                .operation_timeout(Duration::from_secs(30))
                .build(),
        )
        .retry_config(RetryConfig::standard().with_max_attempts(3));
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_string()));
    }
    if let Some(c) = credentials {
        loader = loader.credentials_provider(c);
    }
    loader.load().await
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Where plans go: `auto` follows the artifacts.
fn plan_backend(artifacts: &ArtifactsSettings, plans: &PlansSettings) -> Backend {
    match plans.backend {
        PlanBackend::Auto => artifacts.backend,
        PlanBackend::Fs => Backend::Fs,
        PlanBackend::S3 => Backend::S3,
    }
}

/// What can be checked of the store settings without reaching AWS (`config
/// check` runs it; [`open`] runs it first): a bucket for S3, a key id that
/// is not empty, per-tenant keys only with a default key.
pub fn check(artifacts: &ArtifactsSettings, plans: &PlansSettings) -> Result<(), OpenError> {
    let wants_s3 =
        artifacts.backend == Backend::S3 || plan_backend(artifacts, plans) == Backend::S3;
    if wants_s3 && artifacts.s3.bucket.trim().is_empty() {
        return Err(invalid(
            "artifacts.s3.bucket",
            "is required for the s3 backend (COMPACTD__ARTIFACTS__S3__BUCKET)",
        ));
    }
    if artifacts.kms.key_id.as_deref().is_some_and(str::is_empty) {
        return Err(invalid("artifacts.kms.key_id", "must not be empty"));
    }
    if !artifacts.kms.tenant_keys.is_empty() && artifacts.kms.key_id.is_none() {
        return Err(invalid(
            "artifacts.kms.tenant_keys",
            "needs artifacts.kms.key_id (the key of every other tenant)",
        ));
    }
    Ok(())
}

/// The key service: KMS when a key is named (probed: every key must be
/// usable), else the local keyring (shared keys only when replicas share
/// S3). Says which in `description`.
async fn open_keys(
    local: &Local<'_>,
    artifacts: &ArtifactsSettings,
    sdk: Option<&SdkConfig>,
    wants_s3: bool,
    description: &mut Vec<String>,
) -> Result<Arc<dyn KeyService>, OpenError> {
    Ok(match (&artifacts.kms.key_id, sdk) {
        (Some(key_id), Some(sdk)) => {
            let mut conf = aws_sdk_kms::config::Builder::from(sdk);
            if let Some(r) = &artifacts.kms.region {
                conf = conf.region(Region::new(r.clone()));
            }
            if let Some(e) = &artifacts.kms.endpoint_url {
                conf = conf.endpoint_url(e);
            }
            let k = &artifacts.kms;
            let kms = KmsKeys::new(
                aws_sdk_kms::Client::from_conf(conf.build()),
                key_id.clone(),
                k.tenant_keys.clone(),
                DataKeyCache {
                    max_age: Duration::from_secs(k.data_key_cache_seconds),
                    max_uses: k.data_key_cache_uses,
                    max_entries: k.data_key_cache_entries,
                },
            );
            kms.probe()
                .await
                .map_err(super::artifact::crypto_error)
                .map_err(OpenError::Store)?;
            description.push(format!(
                "keys=kms({key_id}, {} tenant keys)",
                k.tenant_keys.len()
            ));
            Arc::new(kms)
        }
        _ => {
            let path = local.keyring_path();
            if path.starts_with(local.data_dir) {
                tracing::warn!(
                    keyring = %path.display(),
                    "the artifact keyring is inside data_dir: a backup of the data is also a copy of the key; set keyring_file elsewhere"
                );
            }
            if artifacts.backend == Backend::S3 {
                tracing::warn!(
                    "artifacts on S3 are encrypted with the local keyring: every replica needs the same keyring_file; set artifacts.kms.key_id to use KMS"
                );
            }
            let mut ring = LocalKeyring::open_or_create(&path)
                .map_err(|e| invalid("keyring_file", e.to_string()))?;
            if wants_s3 {
                // Replicas each hold a copy of the keyring: keys made by one
                // would be unknown to the others.
                ring = ring.shared_only();
            }
            description.push("keys=local-keyring".to_string());
            Arc::new(ring)
        }
    })
}

/// The bucket both S3 stores use, checked to answer. Path-style
/// addressing by default when an endpoint is set (a local server).
async fn open_location(sdk: &SdkConfig, s: &S3Settings) -> Result<S3Location, OpenError> {
    let mut conf = aws_sdk_s3::config::Builder::from(sdk);
    if let Some(e) = &s.endpoint_url {
        conf = conf.endpoint_url(e);
    }
    let custom_endpoint = s.endpoint_url.is_some()
        || sdk.endpoint_url().is_some()
        || env_set("AWS_ENDPOINT_URL")
        || env_set("AWS_ENDPOINT_URL_S3");
    let path_style = s.force_path_style.unwrap_or(custom_endpoint);
    conf = conf.force_path_style(path_style);
    let mut prefix = s.prefix.trim_start_matches('/').to_string();
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    let at = S3Location::new(
        aws_sdk_s3::Client::from_conf(conf.build()),
        s.bucket.clone(),
        prefix,
    );
    // Once for both stores: the bucket answers.
    at.head_bucket().await?;
    Ok(at)
}

/// Opens the stores the settings name, probing remote ones (bucket reachable,
/// every KMS key usable) so a wrong bucket, key or permission stops start-up
/// instead of failing the first call. `credentials`: static credentials
/// instead of the standard chain (tests against a local server).
pub async fn open(
    local: Local<'_>,
    artifacts: &ArtifactsSettings,
    plans: &PlansSettings,
    credentials: Option<Credentials>,
) -> Result<Stores, OpenError> {
    check(artifacts, plans)?;
    let plans_on = plan_backend(artifacts, plans);
    let wants_s3 = artifacts.backend == Backend::S3 || plans_on == Backend::S3;
    let sdk = if wants_s3 || artifacts.kms.key_id.is_some() {
        let region = artifacts
            .s3
            .region
            .as_deref()
            .or(artifacts.kms.region.as_deref());
        let sdk = sdk_config(region, credentials).await;
        if sdk.region().is_none() {
            return Err(invalid(
                "artifacts.s3.region",
                "no AWS region: set it here, or AWS_REGION",
            ));
        }
        Some(sdk)
    } else {
        None
    };

    let mut description = Vec::new();
    let keys = open_keys(&local, artifacts, sdk.as_ref(), wants_s3, &mut description).await?;
    let location = match &sdk {
        Some(sdk) if wants_s3 => Some(open_location(sdk, &artifacts.s3).await?),
        _ => None,
    };

    let artifact_store: Arc<dyn ArtifactStore> = match (&location, artifacts.backend) {
        (Some(at), Backend::S3) => {
            let store = S3ArtifactStore::new(at.clone(), Arc::clone(&keys));
            description.push(format!("artifacts=s3://{}", at.bucket()));
            Arc::new(store)
        }
        _ => {
            description.push(format!("artifacts={}", local.data_dir.display()));
            Arc::new(FsArtifactStore::open_with_keys(
                local.data_dir,
                Arc::clone(&keys),
            )?)
        }
    };
    let (plan_store, threads): (Arc<dyn PlanStore>, _) = match (&location, plans_on) {
        (Some(at), Backend::S3) => {
            let sse = artifacts.kms.key_id.clone();
            let threads = super::ThreadStore::new(
                Arc::new(super::s3::S3SessionBlobs::new(at.clone(), sse.clone())),
                Arc::clone(&keys),
            );
            let store = S3PlanStore::new(at.clone(), keys, sse);
            description.push(format!("plans=s3://{}", at.bucket()));
            (Arc::new(store), threads)
        }
        _ => {
            description.push(format!("plans={}", local.data_dir.display()));
            let threads = super::ThreadStore::fs(local.data_dir, Arc::clone(&keys))?;
            (
                Arc::new(FsPlanStore::open_with_keys(local.data_dir, keys)?),
                threads,
            )
        }
    };
    Ok(Stores {
        plans: plan_store,
        threads: Arc::new(threads),
        artifacts: artifact_store,
        description: description.join(" "),
    })
}
