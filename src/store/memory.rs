//! In-memory stores: the offline CLI runs the same use cases as the service
//! without touching disk, and tests get stores with no directory to manage.
//! Same contracts as the embedded stores: compare-and-swap commits, tenant
//! and thread scoping, validated ids, TTL expiry.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::model::CompactionPlan;
use crate::runtime::now_unix_ms;

use super::{
    validate_artifact_id, validate_path_segment, ArtifactEntry, ArtifactMeta, ArtifactStore,
    PlanStore, Removed, StoreError, StoredPlan,
};

type Key = (String, String);
/// An artifact's metadata and content, keyed by (tenant, thread) and id.
type Artifacts = HashMap<(Key, String), (ArtifactMeta, Vec<u8>)>;

fn key(tenant: &str, thread_id: &str) -> Result<Key, StoreError> {
    validate_path_segment("tenant", tenant)?;
    validate_path_segment("thread_id", thread_id)?;
    Ok((tenant.to_string(), thread_id.to_string()))
}

use crate::runtime::lock;

/// Versioned plans in memory.
#[derive(Debug, Default)]
pub struct MemoryPlanStore {
    plans: Mutex<HashMap<Key, StoredPlan>>,
}

#[async_trait]
impl PlanStore for MemoryPlanStore {
    async fn get(&self, tenant: &str, thread_id: &str) -> Result<Option<StoredPlan>, StoreError> {
        let k = key(tenant, thread_id)?;
        Ok(lock(&self.plans).get(&k).cloned())
    }

    async fn commit(
        &self,
        tenant: &str,
        thread_id: &str,
        plan: &CompactionPlan,
        expected_version: u64,
    ) -> Result<u64, StoreError> {
        let k = key(tenant, thread_id)?;
        let version = super::next_version(plan, thread_id, expected_version)?;
        let mut plans = lock(&self.plans);
        let current = plans.get(&k).map_or(0, |p| p.version);
        if current != expected_version {
            return Err(StoreError::Conflict {
                expected: expected_version,
                current,
            });
        }
        let mut plan = plan.clone();
        plan.version = version;
        plans.insert(
            k,
            StoredPlan {
                version,
                plan: plan.into(),
                committed_at_unix_ms: now_unix_ms(),
            },
        );
        Ok(version)
    }

    async fn health(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn delete(&self, tenant: &str, thread_id: &str) -> Result<bool, StoreError> {
        let k = key(tenant, thread_id)?;
        Ok(lock(&self.plans).remove(&k).is_some())
    }

    async fn count(&self, tenant: &str) -> Result<u64, StoreError> {
        validate_path_segment("tenant", tenant)?;
        Ok(lock(&self.plans).keys().filter(|k| k.0 == tenant).count() as u64)
    }
}

/// How an in-memory artifact store names what it stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// Random 128-bit ids, like every persistent store.
    Random,
    /// Ids derived from the thread and the content, so the same input always
    /// gives the same ids (offline runs print reproducible output).
    ContentAddressed,
}

/// Artifacts in memory.
#[derive(Debug)]
pub struct MemoryArtifactStore {
    naming: Naming,
    artifacts: Mutex<Artifacts>,
}

impl Default for MemoryArtifactStore {
    fn default() -> Self {
        MemoryArtifactStore {
            naming: Naming::Random,
            artifacts: Mutex::default(),
        }
    }
}

impl MemoryArtifactStore {
    /// A store whose ids derive from the thread id and the content hash.
    pub fn content_addressed() -> Self {
        MemoryArtifactStore {
            naming: Naming::ContentAddressed,
            artifacts: Mutex::default(),
        }
    }

    fn id(&self, thread_id: &str, hash: &str) -> String {
        match self.naming {
            Naming::Random => format!("art_{:032x}", rand::random::<u128>()),
            Naming::ContentAddressed => {
                let digest = super::content_hash(format!("{thread_id}\0{hash}").as_bytes());
                format!("art_{}", &digest[..32])
            }
        }
    }

    fn lookup(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
        let k = key(tenant, thread_id)?;
        validate_artifact_id(artifact_id)?;
        let found = lock(&self.artifacts)
            .get(&(k, artifact_id.to_string()))
            .cloned()
            .ok_or(StoreError::NotFound)?;
        if found.0.is_expired(now_unix_ms()) {
            return Err(StoreError::NotFound);
        }
        Ok(found)
    }
}

#[async_trait]
impl ArtifactStore for MemoryArtifactStore {
    async fn put(&self, meta: &ArtifactMeta, content: &[u8]) -> Result<String, StoreError> {
        let k = key(&meta.tenant, &meta.thread_id)?;
        let meta = meta.for_content(content)?;
        let id = self.id(&meta.thread_id, &meta.content_hash);
        lock(&self.artifacts).insert((k, id.clone()), (meta, content.to_vec()));
        Ok(id)
    }

    async fn put_keyed(
        &self,
        meta: &ArtifactMeta,
        id: &str,
        content: &[u8],
    ) -> Result<(), StoreError> {
        let k = key(&meta.tenant, &meta.thread_id)?;
        validate_artifact_id(id)?;
        let meta = meta.for_content(content)?;
        lock(&self.artifacts)
            .entry((k, id.to_string()))
            .or_insert_with(|| (meta, content.to_vec()));
        Ok(())
    }

    async fn get(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(ArtifactMeta, Vec<u8>), StoreError> {
        self.lookup(tenant, thread_id, artifact_id)
    }

    async fn get_metadata(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<ArtifactMeta, StoreError> {
        self.lookup(tenant, thread_id, artifact_id).map(|(m, _)| m)
    }

    async fn delete(
        &self,
        tenant: &str,
        thread_id: &str,
        artifact_id: &str,
    ) -> Result<(), StoreError> {
        let k = key(tenant, thread_id)?;
        validate_artifact_id(artifact_id)?;
        lock(&self.artifacts)
            .remove(&(k, artifact_id.to_string()))
            .map(|_| ())
            .ok_or(StoreError::NotFound)
    }

    async fn scan(&self, tenant: Option<&str>) -> Result<Vec<ArtifactEntry>, StoreError> {
        if let Some(t) = tenant {
            validate_path_segment("tenant", t)?;
        }
        Ok(lock(&self.artifacts)
            .iter()
            .filter(|(((t, _), _), _)| tenant.is_none_or(|want| want == t))
            .map(|((_, id), (meta, _))| ArtifactEntry {
                artifact_id: id.clone(),
                meta: meta.clone(),
            })
            .collect())
    }

    async fn delete_thread(&self, tenant: &str, thread_id: &str) -> Result<Removed, StoreError> {
        let k = key(tenant, thread_id)?;
        let mut removed = Removed::default();
        lock(&self.artifacts).retain(|(key, _), (meta, _)| {
            if *key == k {
                removed.artifacts += 1;
                removed.bytes += meta.size_bytes;
                false
            } else {
                true
            }
        });
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Sensitivity;
    use crate::store::content_hash;

    fn meta(tenant: &str, thread: &str, content: &[u8]) -> ArtifactMeta {
        ArtifactMeta {
            tenant: tenant.into(),
            thread_id: thread.into(),
            created_at_unix_ms: now_unix_ms(),
            ttl_seconds: None,
            sensitivity: Sensitivity::Internal,
            key_id: None,
            content_hash: content_hash(content),
            size_bytes: content.len() as u64,
            message_ids: vec!["m1".into()],
        }
    }

    #[tokio::test]
    async fn plans_compare_and_swap() {
        let s = MemoryPlanStore::default();
        let plan = CompactionPlan::new("t");
        assert_eq!(s.commit("a", "t", &plan, 0).await.unwrap(), 1);
        assert!(matches!(
            s.commit("a", "t", &plan, 0).await,
            Err(StoreError::Conflict {
                expected: 0,
                current: 1
            })
        ));
        assert_eq!(s.commit("a", "t", &plan, 1).await.unwrap(), 2);
        assert_eq!(s.get("a", "t").await.unwrap().unwrap().plan.version, 2);
        assert!(
            s.get("b", "t").await.unwrap().is_none(),
            "tenants are separate"
        );
        assert!(matches!(
            s.commit("a", "other", &plan, 0).await,
            Err(StoreError::InvalidId(_))
        ));
    }

    #[tokio::test]
    async fn artifacts_are_scoped_and_content_addressed_ids_are_stable() {
        let s = MemoryArtifactStore::content_addressed();
        let id = s.put(&meta("a", "t", b"hello"), b"hello").await.unwrap();
        assert!(validate_artifact_id(&id).is_ok());
        assert_eq!(
            s.put(&meta("a", "t", b"hello"), b"hello").await.unwrap(),
            id
        );
        assert_ne!(
            s.put(&meta("a", "u", b"hello"), b"hello").await.unwrap(),
            id
        );
        assert_eq!(s.get("a", "t", &id).await.unwrap().1, b"hello");
        assert!(matches!(
            s.get("b", "t", &id).await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            s.get("a", "t", "../x").await,
            Err(StoreError::InvalidId(_))
        ));
        s.delete("a", "t", &id).await.unwrap();
        assert!(matches!(
            s.get("a", "t", &id).await,
            Err(StoreError::NotFound)
        ));

        let random = MemoryArtifactStore::default();
        let a = random.put(&meta("a", "t", b"x"), b"x").await.unwrap();
        let b = random.put(&meta("a", "t", b"x"), b"x").await.unwrap();
        assert_ne!(a, b);

        let mut expired = meta("a", "t", b"old");
        expired.created_at_unix_ms -= 10_000;
        expired.ttl_seconds = Some(1);
        let id = random.put(&expired, b"old").await.unwrap();
        assert!(matches!(
            random.get("a", "t", &id).await,
            Err(StoreError::NotFound)
        ));
    }
}
