//! The S3 backends: artifacts and plans in one bucket, so several replicas
//! share state without another database.
//!
//! ```text
//! {prefix}tenants/{tenant}/threads/{thread_dir}/artifacts/{artifact_id}
//! {prefix}tenants/{tenant}/threads/{thread_dir}/plan.json
//! ```
//!
//! The tenant is a key segment as is (an IAM policy can scope a principal to
//! `tenants/{tenant}/*`); it must be `[A-Za-z0-9._-]`. The thread directory
//! is the same hex name as on the filesystem.
//!
//! Artifact objects have the filesystem store's v2 format (envelope
//! encrypted, metadata as associated data), so an object read through the
//! wrong key fails the header's tenant check, and one read in the wrong
//! tenant's context fails to unwrap at the key service.
//!
//! Plans use S3 conditional writes for compare-and-swap: `If-None-Match: *`
//! creates version 1, `If-Match: <etag of the version read>` replaces it.
//! Two replicas committing the same version: one gets 412 and answers
//! `Conflict`. Plans are written with SSE-KMS under the default key when KMS
//! is configured.

use async_trait::async_trait;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier, ServerSideEncryption};
use std::sync::Arc;

use super::artifact::{object_header_meta, object_meta, open_object, seal_object, MAGIC_V2};
use super::envelope::KeyService;
use super::fs::thread_dir_name;
use super::plan::{open_plan, seal_plan, stored_version};
use super::{
    validate_artifact_id, validate_path_segment, ArtifactEntry, ArtifactMeta, ArtifactStore,
    PlanStore, Removed, StoreError, StoredPlan,
};
use crate::model::CompactionPlan;

const PLAN_OBJECT: &str = "plan.json";
/// Bytes fetched to read an artifact's header without its content.
const HEADER_RANGE: u64 = 64 * 1024;
/// Keys per DeleteObjects request (the S3 maximum).
const DELETE_BATCH: usize = 1000;

/// A bucket and key prefix.
#[derive(Clone)]
pub struct S3Location {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
}

impl std::fmt::Debug for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Location")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The HTTP status of a failed call, if the service answered.
fn status<E>(e: &SdkError<E>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

/// S3 errors in store terms: 404 is `NotFound`, everything else (network,
/// timeouts, 5xx, access denied) means the store cannot serve: `Unavailable`.
fn s3_error<E>(op: &str, e: SdkError<E>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if status(&e) == Some(404) {
        return StoreError::NotFound;
    }
    StoreError::Unavailable(format!("S3 {op}: {}", DisplayErrorContext(&e)))
}

/// Tenants become key segments as is, so only characters that mean nothing
/// to S3, IAM or a shell are accepted.
fn check_tenant(tenant: &str) -> Result<(), StoreError> {
    validate_path_segment("tenant", tenant)?;
    if tenant
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Ok(())
    } else {
        Err(StoreError::InvalidId(
            "tenant must contain only [A-Za-z0-9._-] on the S3 store".into(),
        ))
    }
}

impl S3Location {
    /// `prefix` is used as given; a non-empty one should end with `/`.
    pub fn new(client: aws_sdk_s3::Client, bucket: String, prefix: String) -> S3Location {
        S3Location {
            client,
            bucket,
            prefix,
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    fn tenant_prefix(&self, tenant: &str) -> Result<String, StoreError> {
        check_tenant(tenant)?;
        Ok(format!("{}tenants/{tenant}/threads/", self.prefix))
    }

    fn thread_prefix(&self, tenant: &str, thread_id: &str) -> Result<String, StoreError> {
        validate_path_segment("thread_id", thread_id)?;
        Ok(format!(
            "{}{}/",
            self.tenant_prefix(tenant)?,
            thread_dir_name(thread_id)
        ))
    }

    fn artifact_key(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<String, StoreError> {
        validate_artifact_id(artifact_id)?;
        Ok(format!(
            "{}artifacts/{artifact_id}",
            self.thread_prefix(tenant, thread_id)?
        ))
    }

    /// Every key under `prefix` (all pages).
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send();
            let out = super::aws_call("S3", "ListObjectsV2", out)
                .await
                .map_err(|e| s3_error("ListObjectsV2", e))?;
            keys.extend(
                out.contents()
                    .iter()
                    .filter_map(|o| o.key().map(String::from)),
            );
            match out.next_continuation_token {
                Some(t) if out.is_truncated == Some(true) => token = Some(t),
                _ => return Ok(keys),
            }
        }
    }

    /// The object's bytes (or the first `range` bytes); `None` if absent.
    async fn read(&self, key: &str, range: Option<u64>) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.read_tagged(key, range).await?.map(|(bytes, _)| bytes))
    }

    /// [`S3Location::read`] with the object's ETag (what a conditional
    /// replacement must match).
    async fn read_tagged(
        &self,
        key: &str,
        range: Option<u64>,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        let req = self.client.get_object().bucket(&self.bucket).key(key);
        let req = match range {
            Some(n) => req.range(format!("bytes=0-{}", n - 1)),
            None => req,
        };
        let out = match super::aws_call("S3", "GetObject", req.send()).await {
            Ok(out) => out,
            Err(e) => {
                return match s3_error("GetObject", e) {
                    StoreError::NotFound => Ok(None),
                    other => Err(other),
                }
            }
        };
        let etag = out.e_tag.clone().unwrap_or_default();
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::Unavailable(format!("S3 GetObject body: {e}")))?;
        Ok(Some((body.into_bytes().to_vec(), etag)))
    }

    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        for batch in keys.chunks(DELETE_BATCH) {
            let objects = batch
                .iter()
                .map(|k| ObjectIdentifier::builder().key(k).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::Unavailable(format!("S3 DeleteObjects: {e}")))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| StoreError::Unavailable(format!("S3 DeleteObjects: {e}")))?;
            let out = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send();
            let out = super::aws_call("S3", "DeleteObjects", out)
                .await
                .map_err(|e| s3_error("DeleteObjects", e))?;
            if let Some(err) = out.errors().first() {
                return Err(StoreError::Unavailable(format!(
                    "S3 DeleteObjects: {} failed: {}",
                    out.errors().len(),
                    err.code().unwrap_or("error")
                )));
            }
        }
        Ok(())
    }

    /// Deletes `key`; `false` when there was nothing to delete (S3's
    /// DeleteObject succeeds either way, so existence is checked first).
    async fn delete_if_exists(&self, key: &str) -> Result<bool, StoreError> {
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send();
        match super::aws_call("S3", "HeadObject", head).await {
            Ok(_) => {}
            Err(e) => {
                return match s3_error("HeadObject", e) {
                    StoreError::NotFound => Ok(false),
                    other => Err(other),
                }
            }
        }
        let delete = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send();
        super::aws_call("S3", "DeleteObject", delete)
            .await
            .map_err(|e| s3_error("DeleteObject", e))?;
        Ok(true)
    }

    /// Checks the bucket answers (start-up and the health probe).
    pub async fn head_bucket(&self) -> Result<(), StoreError> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| match s3_error("HeadBucket", e) {
                StoreError::NotFound => {
                    StoreError::Unavailable(format!("S3 bucket {:?} does not exist", self.bucket))
                }
                other => other,
            })
    }
}

/// Artifacts on S3, envelope encrypted by `keys`.
pub struct S3ArtifactStore {
    at: S3Location,
    keys: Arc<dyn KeyService>,
}

impl std::fmt::Debug for S3ArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3ArtifactStore")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl S3ArtifactStore {
    /// A store in `at`, sealing with `keys`.
    pub fn new(at: S3Location, keys: Arc<dyn KeyService>) -> S3ArtifactStore {
        S3ArtifactStore { at, keys }
    }

    /// The object's bytes up to the end of its header at least: a prefix
    /// of it, or all of it when the header is larger than the prefix.
    async fn header_bytes(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        let head = self
            .at
            .read(key, Some(HEADER_RANGE))
            .await?
            .ok_or(StoreError::NotFound)?;
        let complete = head.len() > MAGIC_V2.len() && head[MAGIC_V2.len()..].contains(&b'\n');
        if complete {
            return Ok(head);
        }
        self.at.read(key, None).await?.ok_or(StoreError::NotFound)
    }

    /// Artifacts under a tenant's or thread's key prefix, read as their
    /// owner (the tenant and thread come from each key).
    async fn scan_prefix(
        &self,
        prefix: &str,
    ) -> Result<(Vec<ArtifactEntry>, Vec<String>), StoreError> {
        let keys = self.at.list(prefix).await?;
        let mut entries = Vec::new();
        let mut all = Vec::new();
        for key in keys {
            let Some((owner, artifact_id)) = self.parse_artifact_key(&key) else {
                continue;
            };
            all.push(key.clone());
            match self.read_meta_unchecked(&key, &owner).await {
                Ok(meta) => entries.push(ArtifactEntry {
                    artifact_id: artifact_id.to_string(),
                    meta,
                }),
                Err(StoreError::NotFound) => {}
                Err(e @ StoreError::Unavailable(_)) => return Err(e),
                Err(e) => {
                    tracing::warn!(artifact_id, error = %e, "skipping an unreadable artifact")
                }
            }
        }
        Ok((entries, all))
    }

    /// `(tenant, artifact id)` of an artifact key under this store's prefix.
    fn parse_artifact_key<'k>(&self, key: &'k str) -> Option<(String, &'k str)> {
        let rest = key
            .strip_prefix(&self.at.prefix)?
            .strip_prefix("tenants/")?;
        let mut parts = rest.split('/');
        let tenant = parts.next()?;
        let (threads, _thread, artifacts, id) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if threads != "threads" || artifacts != "artifacts" || parts.next().is_some() {
            return None;
        }
        validate_artifact_id(id).ok()?;
        Some((tenant.to_string(), id))
    }

    /// Header metadata for listing: the tenant is checked against the key,
    /// the thread against the key's thread directory (a listing knows only
    /// the directory name, not the thread id).
    async fn read_meta_unchecked(
        &self,
        key: &str,
        tenant: &str,
    ) -> Result<ArtifactMeta, StoreError> {
        let meta = object_header_meta(&self.header_bytes(key).await?)?;
        let dir = format!("/{}/artifacts/", thread_dir_name(&meta.thread_id));
        if meta.tenant != tenant || !key.contains(&dir) {
            return Err(StoreError::Corrupt(
                "artifact belongs to a different tenant or thread".into(),
            ));
        }
        Ok(meta)
    }
}

impl S3ArtifactStore {
    /// Seals and writes an object that must not exist yet, under `id` or a
    /// new random one. `Ok(None)` when the caller's `id` is taken already
    /// (or being written): keyed content is the same whoever wrote it.
    async fn write_new(
        &self,
        meta: &ArtifactMeta,
        content: &[u8],
        id: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        // Validate the key before asking the key service for anything.
        self.at.thread_prefix(&meta.tenant, &meta.thread_id)?;
        let sealed = seal_object(self.keys.as_ref(), meta, content, id).await?;
        let key = self
            .at
            .artifact_key(&meta.tenant, &meta.thread_id, &sealed.id)?;
        let sent = self
            .at
            .client
            .put_object()
            .bucket(&self.at.bucket)
            .key(&key)
            .if_none_match("*")
            .content_type("application/octet-stream")
            .body(ByteStream::from(sealed.bytes))
            .send();
        let sent = super::aws_call("S3", "PutObject", sent).await;
        match sent {
            Ok(_) => Ok(Some(sealed.id)),
            Err(e) if id.is_some() && matches!(status(&e), Some(412 | 409)) => Ok(None),
            Err(e) => Err(s3_error("PutObject", e)),
        }
    }
}

#[async_trait]
impl ArtifactStore for S3ArtifactStore {
    async fn put(&self, meta: &ArtifactMeta, content: &[u8]) -> Result<String, StoreError> {
        self.write_new(meta, content, None).await?.ok_or_else(|| {
            StoreError::Unavailable("PutObject: a new random id already exists".into())
        })
    }

    async fn put_keyed(
        &self,
        meta: &ArtifactMeta,
        id: &str,
        content: &[u8],
    ) -> Result<(), StoreError> {
        self.write_new(meta, content, Some(id)).await.map(|_| ())
    }

    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
        let key = self.at.artifact_key(tenant, thread_id, artifact_id)?;
        let bytes = self
            .at
            .read(&key, None)
            .await?
            .ok_or(StoreError::NotFound)?;
        open_object(self.keys.as_ref(), tenant, thread_id, artifact_id, bytes).await
    }

    async fn get_metadata(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<ArtifactMeta, StoreError> {
        let key = self.at.artifact_key(tenant, thread_id, artifact_id)?;
        object_meta(&self.header_bytes(&key).await?, tenant, thread_id)
    }

    async fn delete(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(), StoreError> {
        let key = self.at.artifact_key(tenant, thread_id, artifact_id)?;
        if self.at.delete_if_exists(&key).await? {
            Ok(())
        } else {
            Err(StoreError::NotFound)
        }
    }

    async fn scan(&self, tenant: Option<&str>) -> Result<Vec<ArtifactEntry>, StoreError> {
        let prefix = match tenant {
            Some(t) => self.at.tenant_prefix(t)?,
            None => format!("{}tenants/", self.at.prefix),
        };
        Ok(self.scan_prefix(&prefix).await?.0)
    }

    async fn delete_thread(&self, tenant: &str, thread_id: &str) -> Result<Removed, StoreError> {
        let prefix = format!("{}artifacts/", self.at.thread_prefix(tenant, thread_id)?);
        let (entries, keys) = self.scan_prefix(&prefix).await?;
        // Every artifact key goes, readable or not: erasure is complete.
        self.at.delete_keys(&keys).await?;
        Ok(Removed {
            artifacts: keys.len() as u64,
            bytes: entries.iter().map(|e| e.meta.size_bytes).sum(),
        })
    }
}

/// Plans on S3 with conditional writes as compare-and-swap.
pub struct S3PlanStore {
    at: S3Location,
    /// Seals every plan object (see [`super::plan`]).
    keys: Arc<dyn KeyService>,
    /// SSE-KMS key for plan objects, if any.
    sse_kms_key: Option<String>,
}

impl std::fmt::Debug for S3PlanStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3PlanStore")
            .field("at", &self.at)
            .field("sse_kms_key", &self.sse_kms_key)
            .finish()
    }
}

impl S3PlanStore {
    /// Plans in `at`, sealed with `keys` per tenant; with `sse_kms_key`, S3
    /// also encrypts the objects under that key.
    pub fn new(
        at: S3Location,
        keys: Arc<dyn KeyService>,
        sse_kms_key: Option<String>,
    ) -> S3PlanStore {
        S3PlanStore {
            at,
            keys,
            sse_kms_key,
        }
    }

    fn plan_key(&self, tenant: &str, thread_id: &str) -> Result<String, StoreError> {
        Ok(format!(
            "{}{PLAN_OBJECT}",
            self.at.thread_prefix(tenant, thread_id)?
        ))
    }

    /// The stored plan's version (from its header: no key needed) and the
    /// ETag a replacement must match.
    async fn read_version(
        &self,
        key: &str,
        tenant: &str,
        thread_id: &str,
    ) -> Result<Option<(u64, String)>, StoreError> {
        match self.at.read_tagged(key, None).await? {
            Some((bytes, etag)) => Ok(Some((stored_version(&bytes, tenant, thread_id)?, etag))),
            None => Ok(None),
        }
    }

    fn history_prefix(&self, tenant: &str, thread_id: &str) -> Result<String, StoreError> {
        Ok(format!(
            "{}{}/",
            self.at.thread_prefix(tenant, thread_id)?,
            super::PLAN_HISTORY_DIR
        ))
    }

    /// Writes version `version` among the kept ones (unconditionally: the
    /// commit that produced it won its compare-and-swap) and removes the one
    /// that falls out of the last [`super::PLAN_HISTORY`].
    async fn keep_version(
        &self,
        tenant: &str,
        thread_id: &str,
        version: u64,
        bytes: Vec<u8>,
    ) -> Result<(), StoreError> {
        let prefix = self.history_prefix(tenant, thread_id)?;
        let mut put = self
            .at
            .client
            .put_object()
            .bucket(&self.at.bucket)
            .key(format!("{prefix}{}", super::plan_history_name(version)))
            .content_type("application/octet-stream");
        if let Some(k) = &self.sse_kms_key {
            put = put
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(k);
        }
        super::aws_call("S3", "PutObject", put.body(ByteStream::from(bytes)).send())
            .await
            .map_err(|e| s3_error("PutObject", e))?;
        if version > super::PLAN_HISTORY {
            let old = format!(
                "{prefix}{}",
                super::plan_history_name(version - super::PLAN_HISTORY)
            );
            self.at.delete_keys(&[old]).await?;
        }
        Ok(())
    }

    async fn current_version(
        &self,
        key: &str,
        tenant: &str,
        thread_id: &str,
    ) -> Result<u64, StoreError> {
        Ok(self
            .read_version(key, tenant, thread_id)
            .await?
            .map_or(0, |(v, _)| v))
    }
}

#[async_trait]
impl PlanStore for S3PlanStore {
    fn key_generation(&self) -> u64 {
        self.keys.generation()
    }

    async fn get(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError> {
        let key = self.plan_key(tenant, thread_id)?;
        match self.at.read_tagged(&key, None).await? {
            Some((bytes, _)) => Ok(Some(
                open_plan(&*self.keys, bytes, tenant, thread_id).await?,
            )),
            None => Ok(None),
        }
    }

    async fn commit(
        &self,
        tenant: &str,
        thread_id: &str,
        plan: &CompactionPlan,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let key = self.plan_key(tenant, thread_id)?;
        let version = super::next_version(plan, thread_id, expected_version)?;
        let conflict = |current| StoreError::Conflict {
            expected: expected_version,
            current,
        };
        let mut put = self
            .at
            .client
            .put_object()
            .bucket(&self.at.bucket)
            .key(&key)
            .content_type("application/octet-stream");
        if expected_version == 0 {
            put = put.if_none_match("*");
        } else {
            let Some((current, etag)) = self.read_version(&key, tenant, thread_id).await? else {
                return Err(conflict(0));
            };
            if current != expected_version {
                return Err(conflict(current));
            }
            put = put.if_match(etag);
        }
        if let Some(k) = &self.sse_kms_key {
            put = put
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(k);
        }
        let (bytes, _) = seal_plan(&*self.keys, tenant, thread_id, plan, version).await?;
        let body = ByteStream::from(bytes.clone());
        match super::aws_call("S3", "PutObject", put.body(body).send()).await {
            Ok(_) => {
                // Committed; keeping a copy for Explain is best effort.
                if let Err(e) = self.keep_version(tenant, thread_id, version, bytes).await {
                    tracing::warn!(error = %e, version, "a committed plan version could not be kept for Explain");
                }
                Ok(version)
            }
            // 412: someone else's write came first. 409: a concurrent
            // conditional write to the same key is still in progress.
            Err(e) if matches!(status(&e), Some(412 | 409)) => Err(conflict(
                self.current_version(&key, tenant, thread_id).await?,
            )),
            Err(e) => Err(s3_error("PutObject", e)),
        }
    }

    async fn health(&self) -> Result<(), StoreError> {
        self.at.head_bucket().await
    }

    async fn kept_version(
        &self,
        tenant: &str,
        thread_id: &str,
        version: u64,
    ) -> Result<Option<StoredPlan>, StoreError> {
        let key = format!(
            "{}{}",
            self.history_prefix(tenant, thread_id)?,
            super::plan_history_name(version)
        );
        match self.at.read(&key, None).await? {
            Some(bytes) => Ok(
                Some(open_plan(&*self.keys, bytes, tenant, thread_id).await?)
                    .filter(|p| p.version == version),
            ),
            None => Ok(None),
        }
    }

    async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        let key = self.plan_key(tenant, thread_id)?;
        let kept = self
            .at
            .list(&self.history_prefix(tenant, thread_id)?)
            .await?;
        self.at.delete_keys(&kept).await?;
        self.at.delete_if_exists(&key).await
    }

    async fn count(&self, tenant: &str) -> Result<u64, StoreError> {
        let prefix = self.at.tenant_prefix(tenant)?;
        let keys = self.at.list(&prefix).await?;
        Ok(keys
            .iter()
            .filter(|k| {
                k.strip_prefix(&prefix)
                    .is_some_and(|rest| rest.split('/').nth(1) == Some(PLAN_OBJECT))
            })
            .count() as u64)
    }
}

/// Sessions on S3 (`{thread}/session/…`): conditional writes (If-Match on
/// the head's ETag, If-None-Match for a new one) give the compare-and-swap
/// that replicas sharing the bucket need.
pub(crate) struct S3SessionBlobs {
    at: S3Location,
    sse_kms_key: Option<String>,
}

impl S3SessionBlobs {
    /// Sessions in `at`; with `sse_kms_key`, S3 also encrypts the objects
    /// under that key.
    pub(crate) fn new(at: S3Location, sse_kms_key: Option<String>) -> Self {
        S3SessionBlobs { at, sse_kms_key }
    }

    fn folder(&self, tenant: &str, thread_id: &str) -> Result<String, StoreError> {
        Ok(format!(
            "{}{}/",
            self.at.thread_prefix(tenant, thread_id)?,
            super::session::SESSION_DIR
        ))
    }

    /// `{tenant}/shared/{name}`, beside the tenant's threads.
    fn shared_key(&self, tenant: &str, name: &str) -> Result<String, StoreError> {
        validate_path_segment("name", name)?;
        let threads = self.at.tenant_prefix(tenant)?;
        let tenant_dir = threads.strip_suffix("threads/").unwrap_or(&threads);
        Ok(format!("{tenant_dir}{}/{name}", super::session::SHARED_DIR))
    }

    /// Writes `key` when `expect` holds (S3's conditional writes).
    async fn put_key(
        &self,
        key: String,
        bytes: Vec<u8>,
        expect: super::session::Expect,
    ) -> Result<Option<String>, StoreError> {
        use super::session::Expect;
        let mut put = self
            .at
            .client
            .put_object()
            .bucket(&self.at.bucket)
            .key(&key)
            .content_type("application/octet-stream");
        put = match expect {
            Expect::Absent => put.if_none_match("*"),
            Expect::Tag(etag) => put.if_match(etag),
            Expect::Any => put,
        };
        if let Some(k) = &self.sse_kms_key {
            put = put
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(k);
        }
        match super::aws_call("S3", "PutObject", put.body(ByteStream::from(bytes)).send()).await {
            Ok(out) => Ok(out.e_tag().map(str::to_owned)),
            Err(e) if matches!(status(&e), Some(412 | 409)) => Err(super::session::lost_race()),
            Err(e) => Err(s3_error("PutObject", e)),
        }
    }
}

#[async_trait]
impl super::session::Blobs for S3SessionBlobs {
    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        let key = format!("{}{name}", self.folder(tenant, thread_id)?);
        self.at.read_tagged(&key, None).await
    }

    async fn put(
        &self,
        tenant: &str,
        thread_id: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: super::session::Expect,
        _flush: super::fs::Flush,
    ) -> Result<Option<String>, StoreError> {
        let key = format!("{}{name}", self.folder(tenant, thread_id)?);
        self.put_key(key, bytes, expect).await
    }

    async fn get_shared(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<(Vec<u8>, String)>, StoreError> {
        let key = self.shared_key(tenant, name)?;
        self.at.read_tagged(&key, None).await
    }

    async fn put_shared(
        &self,
        tenant: &str,
        name: &str,
        bytes: Vec<u8>,
        expect: super::session::Expect,
    ) -> Result<Option<String>, StoreError> {
        let key = self.shared_key(tenant, name)?;
        self.put_key(key, bytes, expect).await
    }

    async fn remove(
        &self,
        tenant: &str,
        thread_id: &str,
        names: &[String],
    ) -> Result<(), StoreError> {
        let folder = self.folder(tenant, thread_id)?;
        let keys: Vec<String> = names.iter().map(|n| format!("{folder}{n}")).collect();
        self.at.delete_keys(&keys).await
    }

    async fn remove_all(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        let folder = self.folder(tenant, thread_id)?;
        let keys = self.at.list(&folder).await?;
        let had_head = keys.iter().any(|k| k.ends_with("/head"));
        self.at.delete_keys(&keys).await?;
        Ok(had_head)
    }

    async fn heads(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let suffix = format!("/{}/head", super::session::SESSION_DIR);
        let keys = self.at.list(&format!("{}tenants/", self.at.prefix)).await?;
        let mut out = Vec::new();
        for key in keys.iter().filter(|k| k.ends_with(&suffix)) {
            if let Some(bytes) = self.at.read(key, None).await? {
                out.push(bytes);
            }
        }
        Ok(out)
    }
}
