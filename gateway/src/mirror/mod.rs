//! Mirror topics and cluster links on a broker (issue 20, ARCHITECTURE decision 34).
//!
//! - [`Mirrors`] (this file): the broker's watched copy of the `mirror/` keyspace (links and
//!   mirror topics, [`oxbow_metadata::mirror`]) plus which partition mirror tasks run here,
//!   under one lock, so "may this partition be produced to" is decided race-free: only a
//!   promoted topic whose task here has stopped and been waited for (see
//!   [`Mirrors::check_writable`]).
//! - [`supervisor`]: the loop that starts a partition's mirror task where this broker leads
//!   it and stops it when leadership, the link or the topic's state says so; on the
//!   controller, also the link reconciler (mirror topics created for matching source
//!   topics, grown with their source, failed when their source is gone).
//! - [`task`]: one partition's mirror task: fetch raw batches from the source at the
//!   mirror's log end, append them at their offsets (`LogManager::enqueue_mirrored`).
//! - [`offsets`]: copying the selected groups' committed offsets.
//! - [`admin`]: link and promotion operations shared by the HTTP API (and so the CLI).
//!
//! Lifecycle: [`Mirrors`] is loaded when the broker starts and followed by
//! [`run_mirror_follower`]; the supervisor runs until shutdown, then stops and awaits every
//! task.

pub mod admin;
pub mod offsets;
pub mod supervisor;
pub mod task;

use crate::cluster::watch_loop::{follow, Followed};
use oxbow_metadata::{
    Link, LinkState, MetadataStore, MirrorEvent, MirrorKind, MirrorRecord, MirrorState,
    MirrorTopic, Watch,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Most bytes of source data one link's tasks hold on one broker at once (fetched and not
/// yet appended), whatever its partition count: each fetch takes its
/// [`task::FETCH_BYTES`] from this budget first. Its trade-off: a link mirroring more than
/// 16 partitions per broker fetches at most 16 at a time.
pub const LINK_INFLIGHT_BYTES: usize = 64 << 20;

/// A link or mirror topic with the version it was read at.
#[derive(Clone, Debug)]
pub struct Versioned<T> {
    pub value: T,
    pub version: i64,
}

/// Per-partition figures of a running mirror task, for `/metrics` and `describe`.
#[derive(Debug, Default)]
pub struct PartitionLag {
    /// Source high watermark when it answered the last fetch, minus the mirror's log end
    /// when that fetch was sent (0 only when fully caught up).
    pub records: AtomicI64,
    /// How old (by the source's timestamps) the oldest record the last fetch brought was
    /// when it was mirrored, in ms (0 when it brought nothing).
    pub ms: AtomicI64,
    /// Source high watermark at the last fetch.
    pub source_high_watermark: AtomicI64,
}

#[derive(Default)]
struct Inner {
    links: BTreeMap<String, Versioned<Link>>,
    topics: BTreeMap<String, Versioned<MirrorTopic>>,
    /// (topic, partition) whose mirror task runs on this broker, with its lag figures.
    running: BTreeMap<(String, i32), Arc<PartitionLag>>,
    /// The last error each link's tasks hit (cleared by a successful fetch).
    link_errors: BTreeMap<String, String>,
}

/// See the module docs.
pub struct Mirrors {
    inner: Mutex<Inner>,
    /// Woken on every change of the copy, so the supervisor reacts at once.
    pub changed: Notify,
    /// Bytes appended by mirror tasks, per link.
    bytes: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    /// Each link's fetch budget on this broker ([`LINK_INFLIGHT_BYTES`]).
    budgets: Mutex<BTreeMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Mirror topics seen turning promoted (a generation: [`Self::promotions`]).
    promotions: AtomicU64,
    /// The largest producer id of a batch mirrored here, once the cluster's producer-id
    /// allocator has been moved past it ([`Self::reserve_producer_ids_through`]): -1 none.
    producer_id_floor: AtomicI64,
}

impl Default for Mirrors {
    fn default() -> Self {
        Mirrors {
            inner: Mutex::default(),
            changed: Notify::new(),
            bytes: Mutex::default(),
            budgets: Mutex::default(),
            promotions: AtomicU64::new(0),
            producer_id_floor: AtomicI64::new(-1),
        }
    }
}

impl Mirrors {
    /// Mirrored batches carry the source cluster's producer ids, and the partition
    /// remembers their sequences (so that, once promoted, those producers continue). A
    /// producer this cluster hands the same id would then be refused as out of sequence:
    /// so before a mirrored id is relied on, the cluster's allocator is moved past it, and
    /// this broker never hands out an id at or below the floor from a block it reserved
    /// earlier ([`crate::broker::Broker::next_producer_id`]).
    pub async fn reserve_producer_ids_through(
        &self,
        metadata: &dyn MetadataStore,
        max_id: i64,
    ) -> oxbow_metadata::Result<()> {
        if max_id <= self.producer_id_floor.load(Ordering::Acquire) {
            return Ok(());
        }
        // Bounded: each round reserves everything up to `max_id` in one block.
        for _ in 0..4 {
            let start = metadata.allocate_producer_ids(1).await?;
            if start > max_id {
                break;
            }
            let gap = u32::try_from(max_id - start).unwrap_or(u32::MAX);
            if gap > 0 {
                metadata.allocate_producer_ids(gap).await?;
            }
        }
        self.producer_id_floor.fetch_max(max_id, Ordering::AcqRel);
        Ok(())
    }

    /// Counts a promotion if a topic read-only in `before` is no longer (promoted, or its
    /// record gone).
    fn note_released(&self, before: &BTreeSet<String>, now: &Inner) {
        let still = read_only_topics(now);
        if before.iter().any(|t| !still.contains(t)) {
            self.promotions.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// How many times this broker saw a mirror topic become promoted (or a mirror record
    /// go), which is when a producer-id block reserved earlier must be dropped
    /// ([`crate::broker::Broker::next_producer_id`]).
    pub fn promotions(&self) -> u64 {
        self.promotions.load(Ordering::Acquire)
    }

    /// Producer ids at or below this came from a mirrored source (-1: none).
    pub fn producer_id_floor(&self) -> i64 {
        self.producer_id_floor.load(Ordering::Acquire)
    }

    /// A copy loaded from the store now.
    pub async fn load(metadata: &dyn MetadataStore) -> oxbow_metadata::Result<Mirrors> {
        let m = Mirrors::default();
        m.replace(list_all(metadata).await?);
        Ok(m)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it leaves plain maps behind: still consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes the copy exactly `records`.
    pub fn replace(&self, records: Vec<MirrorRecord>) {
        {
            let mut inner = self.lock();
            let before = read_only_topics(&inner);
            inner.links.clear();
            inner.topics.clear();
            for r in records {
                insert(&mut inner, r);
            }
            self.note_released(&before, &inner);
        }
        self.changed.notify_one();
    }

    /// Applies one change (from the watch, or a write made through this broker).
    pub fn apply(&self, event: MirrorEvent) {
        {
            let mut inner = self.lock();
            match event {
                MirrorEvent::Put(r) => {
                    let stale = match r.kind {
                        MirrorKind::Link => inner.links.get(&r.name).map(|v| v.version),
                        MirrorKind::Topic => inner.topics.get(&r.name).map(|v| v.version),
                    }
                    .is_some_and(|held| held > r.version);
                    if !stale {
                        let before = read_only_topics(&inner);
                        insert(&mut inner, r);
                        self.note_released(&before, &inner);
                    }
                }
                MirrorEvent::Deleted { kind, name } => match kind {
                    MirrorKind::Link => {
                        inner.links.remove(&name);
                    }
                    MirrorKind::Topic => {
                        let before = read_only_topics(&inner);
                        inner.topics.remove(&name);
                        self.note_released(&before, &inner);
                    }
                },
            }
        }
        self.changed.notify_one();
    }

    pub fn links(&self) -> Vec<Versioned<Link>> {
        self.lock().links.values().cloned().collect()
    }

    pub fn link(&self, name: &str) -> Option<Versioned<Link>> {
        self.lock().links.get(name).cloned()
    }

    pub fn topics(&self) -> Vec<Versioned<MirrorTopic>> {
        self.lock().topics.values().cloned().collect()
    }

    pub fn topic(&self, name: &str) -> Option<Versioned<MirrorTopic>> {
        self.lock().topics.get(name).cloned()
    }

    /// `Err(why)` if `topic`'s partition must not take producer writes here: a mirror
    /// topic not yet promoted, or promoted but with its mirror task here not yet stopped
    /// and waited for. Once this says `Ok` for a promoted topic no task can start for it
    /// again (the supervisor starts tasks under the same lock, only for topics mirroring).
    pub fn check_writable(&self, topic: &str, partition: i32) -> Result<(), String> {
        let inner = self.lock();
        // The produce path of a cluster without mirrors: no allocation, no lookup.
        if inner.topics.is_empty() && inner.running.is_empty() {
            return Ok(());
        }
        let running = !inner.running.is_empty()
            && inner.running.contains_key(&(topic.to_string(), partition));
        let Some(m) = inner.topics.get(topic) else {
            if running {
                return Err(format!(
                    "topic '{topic}' is no longer mirrored; partition {partition}'s mirror task is still stopping"
                ));
            }
            return Ok(());
        };
        if m.value.read_only() {
            return Err(format!(
                "topic '{topic}' is a mirror of '{}' through link '{}' ({}): read-only until promoted",
                m.value.source_topic,
                m.value.link,
                state_name(m.value.state)
            ));
        }
        if running {
            return Err(format!(
                "topic '{topic}' was promoted; partition {partition}'s mirror task is still stopping"
            ));
        }
        Ok(())
    }

    /// Whether (`topic`, `partition`) should be mirrored now: its topic mirroring and its
    /// link active. Returns the link and the source topic.
    fn wanted(inner: &Inner, topic: &str) -> Option<(Link, String)> {
        let m = inner.topics.get(topic)?;
        if m.value.state != MirrorState::Mirroring {
            return None;
        }
        let link = inner.links.get(&m.value.link)?;
        (link.value.state == LinkState::Active)
            .then(|| (link.value.clone(), m.value.source_topic.clone()))
    }

    /// Marks (`topic`, `partition`) running if it should be mirrored (see
    /// [`Self::check_writable`] for why under the lock); returns what the task needs.
    pub(crate) fn try_start(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<(Link, String, Arc<PartitionLag>)> {
        let mut inner = self.lock();
        let key = (topic.to_string(), partition);
        if inner.running.contains_key(&key) {
            return None;
        }
        let (link, source) = Self::wanted(&inner, topic)?;
        let lag = Arc::new(PartitionLag::default());
        inner.running.insert(key, lag.clone());
        Some((link, source, lag))
    }

    /// Whether a running task should keep going (same rule as starting it).
    pub(crate) fn still_wanted(&self, topic: &str, link: &Link) -> bool {
        let inner = self.lock();
        Self::wanted(&inner, topic).is_some_and(|(l, _)| l == *link)
    }

    /// The task of (`topic`, `partition`) has ended and been waited for.
    pub(crate) fn stopped(&self, topic: &str, partition: i32) {
        self.lock().running.remove(&(topic.to_string(), partition));
    }

    /// Running tasks with their lag, for `/metrics` and `describe`.
    pub fn running(&self) -> Vec<((String, i32), Arc<PartitionLag>)> {
        self.lock()
            .running
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub(crate) fn set_link_error(&self, link: &str, error: Option<String>) {
        let mut inner = self.lock();
        match error {
            Some(e) => {
                inner.link_errors.insert(link.to_string(), e);
            }
            None => {
                inner.link_errors.remove(link);
            }
        }
    }

    /// The last error this broker's tasks of `link` hit, if any since their last success.
    pub fn link_error(&self, link: &str) -> Option<String> {
        self.lock().link_errors.get(link).cloned()
    }

    /// The byte counter of `link`'s tasks here.
    pub fn bytes_counter(&self, link: &str) -> Arc<AtomicU64> {
        let mut m = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.entry(link.to_string()).or_default().clone()
    }

    /// The fetch budget of `link`'s tasks here, in KiB permits ([`LINK_INFLIGHT_BYTES`]).
    pub fn link_budget(&self, link: &str) -> Arc<tokio::sync::Semaphore> {
        let mut m = self
            .budgets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.entry(link.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(LINK_INFLIGHT_BYTES >> 10)))
            .clone()
    }

    /// Bytes mirrored per link since this broker started.
    pub fn bytes_by_link(&self) -> Vec<(String, u64)> {
        let m = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
            .collect()
    }

    /// Names of the mirror topics of `link` (any state).
    pub fn topics_of(&self, link: &str) -> BTreeSet<String> {
        self.lock()
            .topics
            .values()
            .filter(|t| t.value.link == link)
            .map(|t| t.value.topic.clone())
            .collect()
    }
}

/// The state's name as the API and metrics spell it.
pub fn state_name(s: MirrorState) -> &'static str {
    match s {
        MirrorState::Mirroring => "mirroring",
        MirrorState::Promoted => "promoted",
        MirrorState::Failed => "failed",
    }
}

/// The mirror topics producers may not write to yet.
fn read_only_topics(inner: &Inner) -> BTreeSet<String> {
    inner
        .topics
        .values()
        .filter(|t| t.value.read_only())
        .map(|t| t.value.topic.clone())
        .collect()
}

fn insert(inner: &mut Inner, r: MirrorRecord) {
    match r.kind {
        MirrorKind::Link => match Link::decode(&r.value) {
            Ok(value) => {
                inner.links.insert(
                    r.name,
                    Versioned {
                        value,
                        version: r.version,
                    },
                );
            }
            Err(e) => tracing::error!(link = %r.name, error = %e, "undecodable link record"),
        },
        MirrorKind::Topic => match MirrorTopic::decode(&r.value) {
            Ok(value) => {
                inner.topics.insert(
                    r.name,
                    Versioned {
                        value,
                        version: r.version,
                    },
                );
            }
            Err(e) => tracing::error!(topic = %r.name, error = %e, "undecodable mirror topic"),
        },
    }
}

async fn list_all(metadata: &dyn MetadataStore) -> oxbow_metadata::Result<Vec<MirrorRecord>> {
    let mut all = metadata.mirror_records(MirrorKind::Link).await?;
    all.extend(metadata.mirror_records(MirrorKind::Topic).await?);
    Ok(all)
}

/// Keeps `mirrors` current until `shutdown` (see [`crate::cluster::watch_loop`]).
pub async fn run_mirror_follower(
    metadata: Arc<dyn MetadataStore>,
    mirrors: Arc<Mirrors>,
    cluster: Arc<crate::cluster::ClusterView>,
    shutdown: CancellationToken,
) {
    follow(
        &Follower {
            metadata,
            mirrors,
            cluster,
        },
        &shutdown,
    )
    .await
}

struct Follower {
    metadata: Arc<dyn MetadataStore>,
    mirrors: Arc<Mirrors>,
    /// Where its watch's queue is reported (`oxbow_metadata_watch_*{watch="mirror"}`).
    cluster: Arc<crate::cluster::ClusterView>,
}

impl Followed for Follower {
    type Event = MirrorEvent;
    const WHAT: &'static str = "mirror records";
    const METRIC: &'static str = "mirror";

    fn metrics(&self) -> &crate::cluster::watch_metrics::WatchMetrics {
        &self.cluster.watch_metrics
    }

    async fn subscribe(&self) -> oxbow_metadata::Result<Watch<MirrorEvent>> {
        self.metadata.watch_mirror().await
    }

    async fn relist(&self) -> oxbow_metadata::Result<()> {
        self.mirrors
            .replace(list_all(self.metadata.as_ref()).await?);
        Ok(())
    }

    fn apply(&self, first: MirrorEvent, _watch: &mut Watch<MirrorEvent>) {
        self.mirrors.apply(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxbow_metadata::LinkSecurity;

    fn link(state: LinkState) -> MirrorRecord {
        let l = Link {
            name: "l".into(),
            bootstrap: "a:1".into(),
            security: LinkSecurity::default(),
            topics: vec!["t".into()],
            groups: vec![],
            state,
        };
        MirrorRecord {
            kind: MirrorKind::Link,
            name: "l".into(),
            value: l.encode().expect("enc"),
            version: 1,
        }
    }

    fn topic(state: MirrorState, version: i64) -> MirrorRecord {
        let t = MirrorTopic {
            topic: "t".into(),
            link: "l".into(),
            source_topic: "t".into(),
            state,
            error: None,
        };
        MirrorRecord {
            kind: MirrorKind::Topic,
            name: "t".into(),
            value: t.encode().expect("enc"),
            version,
        }
    }

    #[test]
    fn promoted_topics_are_writable_only_once_their_task_stopped() {
        let m = Mirrors::default();
        m.replace(vec![
            link(LinkState::Active),
            topic(MirrorState::Mirroring, 2),
        ]);
        assert!(m.check_writable("other", 0).is_ok());
        assert!(m.check_writable("t", 0).is_err());
        assert!(m.try_start("t", 0).is_some());
        assert!(m.try_start("t", 0).is_none(), "one task per partition");
        m.apply(MirrorEvent::Put(topic(MirrorState::Promoted, 3)));
        assert!(!m.still_wanted("t", &m.link("l").expect("link").value));
        let e = m.check_writable("t", 0).expect_err("task still running");
        assert!(e.contains("still stopping"), "{e}");
        assert!(m.check_writable("t", 1).is_ok());
        m.stopped("t", 0);
        assert!(m.check_writable("t", 0).is_ok());
        assert_eq!(
            m.promotions(),
            1,
            "producer-id blocks reserved before are dropped"
        );
        assert!(m.try_start("t", 0).is_none(), "never mirrored again");
        // A late event of the older state does not undo the promotion.
        m.apply(MirrorEvent::Put(topic(MirrorState::Mirroring, 2)));
        assert!(m.check_writable("t", 0).is_ok());
        m.replace(vec![
            link(LinkState::Active),
            topic(MirrorState::Promoted, 3),
        ]);
        assert_eq!(
            m.promotions(),
            1,
            "a relist that changes nothing is no promotion"
        );
    }

    #[test]
    fn a_paused_link_starts_nothing() {
        let m = Mirrors::default();
        m.replace(vec![
            link(LinkState::Paused),
            topic(MirrorState::Mirroring, 2),
        ]);
        assert!(m.try_start("t", 0).is_none());
        assert!(m.check_writable("t", 0).is_err(), "still read-only");
    }
}
