//! Consumer instances and their registry: what one REST Proxy consumer is (format, reset
//! policy, auto-commit, subscription or manual assignment, fetch positions) and how long it
//! lives.
//!
//! # Lifecycle
//! An instance is created by `POST /consumers/{group}`, and ends on `DELETE`, after
//! [`IDLE_TIMEOUT`] without a request (the sweeper, like the REST Proxy's
//! `consumer.instance.timeout.ms`), or when the HTTP API is dropped. Each end cancels the
//! instance's token, which stops its membership task (see [`super::member`]); that task
//! leaves the group on its way out. All tasks run on the registry's `TaskTracker`, under a
//! token the registry cancels when it is dropped.
//!
//! # Concurrency
//! `state` is a plain mutex, never held across an `.await`. Requests that read or move
//! positions (poll, seek, commit-all) take `io`, so they apply one at a time, as a Kafka
//! consumer is used by one thread. The membership task never takes `io`: it swaps the
//! assignment under `state`, and a poll that raced with it keeps only the positions of
//! partitions still assigned.

use super::super::body::EmbeddedFormat;
use super::super::error::ApiError;
use crate::broker::Broker;
use axum::http::StatusCode;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most instances at once: each holds a group membership and a heartbeat task, so the
/// bound caps the memory and timers a client (or a leak of one) can pin.
pub const INSTANCES_MAX: usize = 1000;
/// An instance without a request for this long is deleted (REST Proxy default: 5 min).
/// Longer keeps an abandoned instance's partitions unconsumed for longer.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How often idle instances are looked for; bounds how late past [`IDLE_TIMEOUT`] one goes.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// Where a partition without a committed offset starts (`auto.offset.reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
}

impl OffsetReset {
    /// The ListOffsets timestamp sentinel for this policy.
    pub fn timestamp(self) -> i64 {
        match self {
            OffsetReset::Earliest => crate::broker::EARLIEST_TIMESTAMP,
            OffsetReset::Latest => crate::broker::LATEST_TIMESTAMP,
        }
    }
}

/// What a client chose when it created the instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceConfig {
    pub format: EmbeddedFormat,
    pub reset: OffsetReset,
    /// Commit the positions after every poll (Kafka's `enable.auto.commit`, default on).
    pub auto_commit: bool,
}

/// How the instance gets its partitions; the two ways exclude each other, as in Kafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    None,
    /// Group-managed: these topics, partitions from the group's assignment.
    Subscribed(Vec<String>),
    /// Group-managed: every topic whose whole name matches this pattern, re-evaluated while
    /// subscribed (a topic created later that matches joins the subscription).
    SubscribedPattern(super::member::Subscription),
    /// Manual: the partitions in `State::assigned`, no group membership.
    Assigned,
}

/// A topic partition.
pub type Tp = (String, i32);

/// A group membership: (member id, generation).
pub type Membership = (String, i32);

/// The mutable part of an instance.
#[derive(Debug)]
pub struct State {
    pub mode: Mode,
    /// Bumped on every subscribe and unsubscribe: a membership task only touches the state
    /// while its epoch is current, so a replaced task cannot undo its successor's work.
    pub epoch: u64,
    /// Group membership once synced: (member id, generation); used to commit.
    pub member: Option<Membership>,
    /// Partitions this instance reads.
    pub assigned: BTreeSet<Tp>,
    /// Next offset to read per assigned partition; missing until first needed, then from
    /// the committed offset or the reset policy.
    pub positions: HashMap<Tp, i64>,
    /// Which assigned partition a poll reads first; advanced by every poll so a partition
    /// with a steady backlog cannot starve the others of the byte budget.
    pub first_read: usize,
    /// Why the group keeps refusing this member (e.g. `INCONSISTENT_GROUP_PROTOCOL`: the
    /// group's members use only assignors other than range); polls report it.
    pub membership_error: Option<String>,
    /// Token of the running membership task, if subscribed.
    membership: Option<CancellationToken>,
}

/// One consumer instance.
pub struct Instance {
    pub group: String,
    pub id: String,
    pub config: InstanceConfig,
    /// Cancelled when the instance ends.
    token: CancellationToken,
    last_used: Mutex<Instant>,
    state: Mutex<State>,
    /// Held by requests that read or move positions (see the module docs).
    pub io: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        // Every critical section leaves the state consistent between statements that
        // cannot panic; carrying on beats wedging the instance.
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Instance {
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn touch(&self, now: Instant) {
        *lock(&self.last_used) = now;
    }

    fn idle_since(&self) -> Instant {
        *lock(&self.last_used)
    }

    /// Installs the partitions a group sync gave membership `epoch`. Positions of
    /// partitions kept are kept (nobody else read them meanwhile); the rest start afresh.
    pub fn install_assignment(&self, epoch: u64, member_id: &str, generation: i32, tps: Vec<Tp>) {
        let mut s = self.state();
        if s.epoch != epoch {
            return;
        }
        s.member = Some((member_id.to_string(), generation));
        s.membership_error = None;
        s.assigned = tps.into_iter().collect();
        let assigned = s.assigned.clone();
        s.positions.retain(|tp, _| assigned.contains(tp));
    }

    /// Records why membership `epoch` cannot join its group.
    pub fn refused(&self, epoch: u64, why: String) {
        let mut s = self.state();
        if s.epoch == epoch {
            s.membership_error = Some(why);
        }
    }

    /// Takes away the group's partitions of membership `epoch` (a rebalance began or the
    /// membership ended), returning the member and the positions to commit, if any.
    pub fn revoke(&self, epoch: u64) -> Option<(Membership, Vec<(Tp, i64)>)> {
        let mut s = self.state();
        if s.epoch != epoch {
            return None;
        }
        let member = s.member.take();
        s.assigned.clear();
        let positions: Vec<(Tp, i64)> = s.positions.drain().collect();
        member.map(|m| (m, positions))
    }
}

/// Every consumer instance of this HTTP API.
pub struct Registry {
    pub broker: Arc<Broker>,
    instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
    tasks: TaskTracker,
    /// Cancelled when the registry is dropped (the HTTP API is gone): ends every task.
    shutdown: CancellationToken,
    sweeper: OnceLock<()>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.tasks.close();
    }
}

impl Registry {
    pub fn new(broker: Arc<Broker>) -> Self {
        Registry {
            broker,
            instances: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            sweeper: OnceLock::new(),
        }
    }

    /// Creates an instance; `name` defaults to a fresh unique id.
    pub fn create(
        self: &Arc<Self>,
        group: &str,
        name: Option<String>,
        config: InstanceConfig,
    ) -> Result<Arc<Instance>, ApiError> {
        self.start_sweeper();
        let id = name.unwrap_or_else(|| format!("rest-consumer-{}", uuid::Uuid::new_v4()));
        let mut instances = lock(&self.instances);
        let key = (group.to_string(), id.clone());
        if instances.contains_key(&key) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                40902,
                format!("consumer instance '{id}' already exists in group '{group}'"),
            ));
        }
        if instances.len() >= INSTANCES_MAX {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                42901,
                format!(
                    "{INSTANCES_MAX} consumer instances exist: delete one (or let it expire) first"
                ),
            ));
        }
        let instance = Arc::new(Instance {
            group: group.to_string(),
            id,
            config,
            token: self.shutdown.child_token(),
            last_used: Mutex::new(Instant::now()),
            state: Mutex::new(State {
                mode: Mode::None,
                epoch: 0,
                member: None,
                assigned: BTreeSet::new(),
                positions: HashMap::new(),
                first_read: 0,
                membership_error: None,
                membership: None,
            }),
            io: tokio::sync::Mutex::new(()),
        });
        instances.insert(key, instance.clone());
        Ok(instance)
    }

    /// The instance, marked as used now; 404/40403 if there is none.
    pub fn get(&self, group: &str, id: &str) -> Result<Arc<Instance>, ApiError> {
        let instance = lock(&self.instances)
            .get(&(group.to_string(), id.to_string()))
            .cloned()
            .ok_or_else(|| not_found(group, id))?;
        instance.touch(Instant::now());
        Ok(instance)
    }

    /// Ends an instance: its membership task leaves the group.
    pub fn remove(&self, group: &str, id: &str) -> Result<(), ApiError> {
        let instance = lock(&self.instances)
            .remove(&(group.to_string(), id.to_string()))
            .ok_or_else(|| not_found(group, id))?;
        instance.token.cancel();
        Ok(())
    }

    /// Subscribes to `topics`, replacing any earlier subscription (the old membership
    /// leaves the group, a new one joins). 409/40903 if partitions were assigned manually.
    pub fn subscribe(
        &self,
        instance: &Arc<Instance>,
        subscription: super::member::Subscription,
    ) -> Result<(), ApiError> {
        let (epoch, token) = {
            let mut s = instance.state();
            if s.mode == Mode::Assigned {
                return Err(exclusive());
            }
            if let Some(old) = s.membership.take() {
                old.cancel();
            }
            s.epoch += 1;
            s.mode = match &subscription {
                super::member::Subscription::Topics(topics) => Mode::Subscribed(topics.clone()),
                pattern @ super::member::Subscription::Pattern(_) => {
                    Mode::SubscribedPattern(pattern.clone())
                }
            };
            s.membership_error = None;
            s.member = None;
            s.assigned.clear();
            s.positions.clear();
            let token = instance.token.child_token();
            s.membership = Some(token.clone());
            (s.epoch, token)
        };
        self.tasks.spawn(super::member::run(
            self.broker.clone(),
            instance.clone(),
            epoch,
            subscription,
            token,
        ));
        Ok(())
    }

    /// Drops the subscription or manual assignment.
    pub fn unsubscribe(&self, instance: &Instance) {
        let mut s = instance.state();
        if let Some(old) = s.membership.take() {
            old.cancel();
        }
        s.epoch += 1;
        s.mode = Mode::None;
        s.membership_error = None;
        s.member = None;
        s.assigned.clear();
        s.positions.clear();
    }

    /// Assigns partitions manually. 409/40903 if the instance is subscribed.
    pub fn assign(&self, instance: &Instance, tps: Vec<Tp>) -> Result<(), ApiError> {
        let mut s = instance.state();
        if matches!(s.mode, Mode::Subscribed(_) | Mode::SubscribedPattern(_)) {
            return Err(exclusive());
        }
        s.mode = if tps.is_empty() {
            Mode::None
        } else {
            Mode::Assigned
        };
        s.assigned = tps.into_iter().collect();
        let assigned = s.assigned.clone();
        s.positions.retain(|tp, _| assigned.contains(tp));
        Ok(())
    }

    fn start_sweeper(self: &Arc<Self>) {
        self.sweeper.get_or_init(|| {
            self.tasks
                .spawn(sweep(Arc::downgrade(self), self.shutdown.clone()));
        });
    }

    /// Ends every instance idle since before `cutoff`; returns how many.
    fn expire(&self, cutoff: Instant) -> usize {
        let expired: Vec<Arc<Instance>> = {
            let mut instances = lock(&self.instances);
            let keys: Vec<(String, String)> = instances
                .iter()
                .filter(|(_, i)| i.idle_since() < cutoff)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| instances.remove(k)).collect()
        };
        for instance in &expired {
            tracing::info!(group = %instance.group, instance = %instance.id, "consumer instance expired");
            instance.token.cancel();
        }
        expired.len()
    }
}

/// The sweeper: ends idle instances until the registry is dropped.
async fn sweep(registry: Weak<Registry>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(registry) = registry.upgrade() else {
            return;
        };
        if let Some(cutoff) = Instant::now().checked_sub(IDLE_TIMEOUT) {
            registry.expire(cutoff);
        }
    }
}

pub fn not_found(group: &str, id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        40403,
        format!("consumer instance '{id}' of group '{group}' does not exist"),
    )
}

fn exclusive() -> ApiError {
    illegal_state(
        "subscription to topics and manual assignment of partitions are mutually exclusive",
    )
}

/// A request that the instance's current state does not allow.
pub fn illegal_state(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, 40903, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker over a temp dir (embedded metadata, local objects), as `oxbow serve` runs.
    async fn test_broker(dir: &std::path::Path) -> Arc<Broker> {
        crate::broker::testing::temp_broker(dir, Default::default()).await
    }

    #[tokio::test]
    async fn idle_instances_expire_and_active_ones_stay() {
        let dir = tempfile::tempdir().expect("tmp");
        let registry = Arc::new(Registry::new(test_broker(dir.path()).await));
        let config = InstanceConfig {
            format: EmbeddedFormat::Json,
            reset: OffsetReset::Earliest,
            auto_commit: false,
        };
        let a = registry.create("g", Some("a".into()), config).expect("a");
        let _b = registry.create("g", Some("b".into()), config).expect("b");
        let e = registry
            .create("g", Some("a".into()), config)
            .err()
            .expect("duplicate");
        assert_eq!((e.status(), e.error_code()), (StatusCode::CONFLICT, 40902));
        let later = Instant::now() + Duration::from_secs(1);
        a.touch(later + Duration::from_secs(1));
        assert_eq!(registry.expire(later), 1);
        assert!(registry.get("g", "a").is_ok());
        let e = registry.get("g", "b").err().expect("expired");
        assert_eq!(e.error_code(), 40403);
        assert!(!a.token.is_cancelled());
        registry.remove("g", "a").expect("remove");
        assert!(a.token.is_cancelled());
        assert!(lock(&registry.instances).is_empty());
    }

    #[test]
    fn revoke_and_install_respect_the_epoch() {
        let token = CancellationToken::new();
        let instance = Instance {
            group: "g".into(),
            id: "i".into(),
            config: InstanceConfig {
                format: EmbeddedFormat::Binary,
                reset: OffsetReset::Latest,
                auto_commit: true,
            },
            token,
            last_used: Mutex::new(Instant::now()),
            state: Mutex::new(State {
                mode: Mode::Subscribed(vec!["t".into()]),
                epoch: 2,
                member: None,
                assigned: BTreeSet::new(),
                positions: HashMap::new(),
                first_read: 0,
                membership_error: None,
                membership: None,
            }),
            io: tokio::sync::Mutex::new(()),
        };
        instance.install_assignment(1, "stale", 1, vec![("t".into(), 0)]);
        assert!(instance.state().assigned.is_empty());
        instance.install_assignment(2, "m", 3, vec![("t".into(), 0), ("t".into(), 1)]);
        instance.state().positions.insert(("t".into(), 1), 7);
        instance.install_assignment(2, "m", 4, vec![("t".into(), 1)]);
        assert_eq!(instance.state().positions.get(&("t".into(), 1)), Some(&7));
        assert!(instance.revoke(1).is_none());
        let (member, positions) = instance.revoke(2).expect("revoked");
        assert_eq!(member, ("m".to_string(), 4));
        assert_eq!(positions, vec![(("t".to_string(), 1), 7)]);
        assert!(instance.state().assigned.is_empty());
    }
}
