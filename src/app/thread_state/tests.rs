//! What a deletion leaves of a thread in memory: nothing, checked against
//! the one home, so a part added to [`ThreadState`] is covered here without
//! this file changing.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::inflight::Running;
use super::*;
use crate::app::compact::tests::long_result_command;
use crate::app::sent::SentThread;
use crate::app::{App, CompactCommand, Defaults, RenderCommand};
use crate::model::{Message, Role};
use crate::provider::Format;
use crate::security::SecurityContext;

const TENANTS: [&str; 2] = ["acme", "globex"];
const THREADS: [&str; 2] = ["long", "other"];

/// One step of a client, a deletion, or a call that keeps running.
#[derive(Debug, Clone)]
enum Step {
    /// Compact the thread, grown by `grow` user messages.
    Compact { who: usize, grow: usize },
    /// Render it (compacting first, recall on, in `format`).
    Render { who: usize, format: usize },
    /// Keep it as the thread the client last sent in full.
    Sent { who: usize },
    /// Delete it.
    Delete { who: usize },
    /// A call begins that runs on across the next steps.
    Begin,
    /// The oldest such call ends.
    End,
}

fn step() -> impl Strategy<Value = Step> {
    let who = 0..TENANTS.len() * THREADS.len();
    prop_oneof![
        (who.clone(), 0..3usize).prop_map(|(who, grow)| Step::Compact { who, grow }),
        (who.clone(), 0..3usize).prop_map(|(who, format)| Step::Render { who, format }),
        who.clone().prop_map(|who| Step::Sent { who }),
        who.prop_map(|who| Step::Delete { who }),
        Just(Step::Begin),
        Just(Step::End),
    ]
}

fn thread_of(who: usize) -> (&'static str, &'static str) {
    (TENANTS[who / THREADS.len()], THREADS[who % THREADS.len()])
}

fn ctx_of(tenant: &str) -> SecurityContext {
    SecurityContext {
        tenant_id: tenant.into(),
        ..SecurityContext::dev()
    }
}

fn command(thread_id: &str, grow: usize) -> CompactCommand {
    let mut cmd = long_result_command();
    let t = Arc::make_mut(&mut cmd.thread);
    t.id = thread_id.into();
    for i in 0..grow {
        let mut m = Message::clone(t.messages.last().expect("a message"));
        m.id = format!("grown-{i}");
        m.role = Role::User;
        m.content = crate::model::Content::Text(format!("And worker {i}?"));
        m.turn += 1;
        t.messages.push(Arc::new(m));
    }
    cmd
}

fn render_of(request: CompactCommand, format: usize) -> RenderCommand {
    RenderCommand {
        request,
        compact_first: true,
        plan_version: 0,
        format: [
            Format::OpenAiChat,
            Format::OpenAiResponses,
            Format::AnthropicMessages,
        ][format],
        max_output_tokens: None,
        prompt_cache: Default::default(),
        rehydrate_artifact_ids: Vec::new(),
        omit_pending_calls: false,
        auto_rehydrate: None,
        read_artifact_tool: false,
        search_context_tool: false,
        recall: Some(true),
        injections: Vec::new(),
    }
}

/// Whether anything of the thread is remembered: its state, or the content
/// caches' scope of it.
fn remembered(app: &App, tenant: &str, thread_id: &str) -> bool {
    app.inner.threads.holds(tenant, thread_id) || app.inner.memo.holds(&[tenant, thread_id])
}

/// Runs the steps; returns the threads whose deletion nothing has touched
/// since it took effect (so nothing of them may be remembered), and those
/// a step used since (so what it kept must still be there).
async fn run(app: &App, steps: &[Step]) -> (Vec<usize>, Vec<usize>) {
    let mut used = std::collections::BTreeSet::new();
    let mut running: Vec<(u64, Running)> = Vec::new();
    let mut begun = 0u64;
    // Per thread deleted: the calls from before its (latest) deletion that
    // still run, and whether a step touched it since it took effect.
    let mut deleted: BTreeMap<usize, (Vec<u64>, bool)> = BTreeMap::new();
    for s in steps {
        match *s {
            Step::Compact { who, grow } => {
                let (tenant, id) = thread_of(who);
                let out = app.compact(&ctx_of(tenant), command(id, grow)).await;
                out.expect("compacts");
                used.insert(who);
                quiet(app, running.len()).await;
                touch(&mut deleted, who);
            }
            Step::Render { who, format } => {
                let (tenant, id) = thread_of(who);
                let cmd = render_of(command(id, 0), format);
                app.render(&ctx_of(tenant), cmd).await.expect("renders");
                used.insert(who);
                quiet(app, running.len()).await;
                touch(&mut deleted, who);
            }
            Step::Sent { who } => {
                let (tenant, id) = thread_of(who);
                let (_, before) = app.sent_thread(tenant, id);
                let thread = command(id, 0).thread;
                let sent = Arc::new(SentThread {
                    messages_weight: crate::model::memory_weight(&thread.messages),
                    digests: vec![0; thread.messages.len()],
                    thread,
                });
                app.keep_sent(tenant, sent, before);
                used.insert(who);
                quiet(app, running.len()).await;
                touch(&mut deleted, who);
            }
            Step::Delete { who } => {
                let (tenant, id) = thread_of(who);
                app.delete_thread(&ctx_of(tenant), id)
                    .await
                    .expect("deletes");
                assert!(!remembered(app, tenant, id), "{tenant}/{id} right after");
                let before = running.iter().map(|(n, _)| *n).collect();
                deleted.insert(who, (before, false));
            }
            Step::Begin => {
                running.push((begun, app.running()));
                begun += 1;
            }
            Step::End => {
                if running.is_empty() {
                    continue;
                }
                let (n, call) = running.remove(0);
                drop(call);
                settle(&mut deleted, n);
            }
        }
    }
    while !running.is_empty() {
        let (n, call) = running.remove(0);
        drop(call);
        settle(&mut deleted, n);
    }
    let gone: Vec<usize> = deleted
        .into_iter()
        .filter(|(_, (_, touched))| !touched)
        .map(|(who, _)| who)
        .collect();
    let live = used.into_iter().filter(|w| !gone.contains(w)).collect();
    (gone, live)
}

/// Waits until the calls running are only the `held` ones the steps
/// began: a step's own background work has ended.
async fn quiet(app: &App, held: usize) {
    for _ in 0..5_000 {
        if app.inner.in_flight.holders() == held {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("background work still runs after 5 s");
}

/// A step used the thread: what it kept stays, unless calls from before
/// the deletion still run (their end forgets the thread again).
fn touch(deleted: &mut BTreeMap<usize, (Vec<u64>, bool)>, who: usize) {
    if let Some((before, touched)) = deleted.get_mut(&who) {
        *touched = before.is_empty();
    }
}

/// Call `n` ended: a deletion with no call from before it left is
/// forgotten again, whatever was kept meanwhile.
fn settle(deleted: &mut BTreeMap<usize, (Vec<u64>, bool)>, n: u64) {
    for (before, touched) in deleted.values_mut() {
        let was = before.len();
        before.retain(|b| *b != n);
        if was > 0 && before.is_empty() {
            *touched = false;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// After a DeleteThread, and once every call from before it has ended,
    /// nothing of the thread is remembered, including what those calls put
    /// back; other threads and tenants keep theirs.
    #[test]
    fn a_deleted_thread_leaves_nothing_in_memory(
        steps in proptest::collection::vec(step(), 1..14),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let app = App::offline(Defaults::default());
        let (gone, live) = rt.block_on(run(&app, &steps));
        for who in gone {
            let (tenant, id) = thread_of(who);
            prop_assert!(!remembered(&app, tenant, id), "{}/{} deleted", tenant, id);
        }
        // Forgetting more than the deleted thread would pass the above.
        for who in live {
            let (tenant, id) = thread_of(who);
            prop_assert!(app.inner.threads.holds(tenant, id), "{}/{} in use", tenant, id);
        }
        prop_assert!(app.inner.in_flight.idle());
    }
}

/// Every part is dropped with its thread, whichever parts it has.
#[tokio::test]
async fn each_step_fills_the_state_and_a_deletion_empties_it() {
    let app = App::offline(Defaults::default());
    let ctx = ctx_of("acme");
    app.render(&ctx, render_of(command("long", 0), 0))
        .await
        .expect("renders");
    let parts = |s: &ThreadState| {
        Some([
            s.carry.is_some(),
            s.stable.is_some(),
            s.recall.is_some(),
            s.trace.is_some(),
            s.validated.is_some(),
        ])
    };
    let held = app.inner.threads.read("acme", "long", parts);
    assert_eq!(
        held,
        Some([true; 5]),
        "carry, stable, recall, trace, validated"
    );
    assert!(app.inner.memo.holds(&["acme", "long"]));
    app.delete_thread(&ctx, "long").await.expect("deletes");
    assert!(!remembered(&app, "acme", "long"));
}

/// A tenant's keys shredded while the service runs (as `compactd keys
/// shred` does, from another process): the next call drops every thread's
/// state and the content caches, so nothing a deleted key protected is
/// served from memory.
#[tokio::test]
async fn a_shredded_tenant_leaves_nothing_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plans = crate::store::FsPlanStore::open(dir.path()).expect("plans");
    let artifacts = crate::store::FsArtifactStore::open(dir.path()).expect("artifacts");
    let app = App::new(
        Defaults::default(),
        Arc::new(plans),
        Arc::new(artifacts),
        crate::tokens::DEFAULT_MAX_ENTRIES,
        crate::app::Lifecycle::default(),
        Arc::new(crate::redact::Redactor::standard().clone()),
        crate::app::Extensions::default(),
    );
    for tenant in TENANTS {
        let cmd = render_of(command("long", 0), 0);
        app.render(&ctx_of(tenant), cmd).await.expect("renders");
        assert!(remembered(&app, tenant, "long"));
    }
    let ring = crate::store::envelope::LocalKeyring::open_or_create(
        &dir.path().join(crate::store::KEYRING_FILE),
    )
    .expect("keyring");
    assert!(ring.shred("acme").expect("shred") > 0);
    // Any call notices, here one of another tenant and thread.
    let globex = ctx_of("globex");
    app.compact(&globex, command("other", 0))
        .await
        .expect("compacts");
    for tenant in TENANTS {
        assert!(!app.inner.threads.holds(tenant, "long"), "{tenant}");
    }
    assert!(!app.inner.memo.holds(&["acme", "long"]));
}
