//! Consumer lag: a group's committed offsets against its partitions' high watermarks
//! (`/v3/…/consumer-groups/{g}/lags`, `…/lag-summary`, the console), and [`LagHistory`], a
//! bounded ring of each group's recent total lag for the console's chart.
//!
//! Sources, the same as `/metrics` reads: committed offsets from the coordinator's cache
//! (groups coordinated here; the metadata service, uncached, for the others, so a read here
//! never leaves a stale cache behind for a group another broker commits to), and high
//! watermarks from the partitions led here, and for partitions led elsewhere as their
//! leaders answered the sampler every 5 s (`remote_high_watermarks`: only partitions a
//! group coordinated here committed). A partition whose leader did not answer lately has
//! no high watermark here: its lag is `None` rather than a guess from the catalog (which
//! trails the leader by a flush interval).
//!
//! Lifecycle: [`LagHistory`] lives in the broker (`Broker::samples`); `crate::samples`
//! appends one sample per group per tick. Nothing is stored anywhere else.

use crate::broker::Broker;
use oxbow_metadata::group::CommittedOffset;
use oxbow_metadata::{Offset, TopicPartition};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

/// One partition's lag in a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset (the next record it will read).
    pub committed_offset: Offset,
    /// The partition's high watermark; `None` when it is not led here (or gone).
    pub log_end_offset: Option<Offset>,
    /// `log_end_offset - committed_offset`, never negative (a commit may run ahead of a
    /// freshly elected leader's high watermark for a moment).
    pub lag: Option<i64>,
}

/// The high watermark of `topic`-`partition`: from memory if this broker leads it, else as
/// its leader last answered the sampler (`remote_high_watermarks`, at most 15 s old).
pub fn high_watermark(broker: &Broker, topic: &str, partition: i32) -> Option<Offset> {
    let t = broker.topic(topic)?;
    let tp = TopicPartition::new(t.topic_id, partition);
    match broker.log.get(&tp) {
        Some(p) => p.offsets().ok().map(|(_, hw, _)| hw),
        None => broker.samples.remote.get(&tp),
    }
}

/// Each committed offset's lag against `high_watermark`, in (topic, partition) order.
pub fn lags(
    committed: impl IntoIterator<Item = (String, i32, Offset)>,
    high_watermark: impl Fn(&str, i32) -> Option<Offset>,
) -> Vec<PartitionLag> {
    let mut out: Vec<PartitionLag> = committed
        .into_iter()
        .map(|(topic, partition, committed_offset)| {
            let log_end_offset = high_watermark(&topic, partition);
            PartitionLag {
                lag: log_end_offset.map(|hw| (hw - committed_offset).max(0)),
                topic,
                partition,
                committed_offset,
                log_end_offset,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    out
}

/// A group's committed offsets, wherever it is coordinated (see the module docs).
pub async fn group_offsets(
    broker: &Broker,
    group: &str,
) -> Result<BTreeMap<(String, i32), CommittedOffset>, oxbow_metadata::Error> {
    if broker.coordinates(group) {
        return broker.coordinator.fetch_offsets(group).await;
    }
    Ok(broker
        .metadata
        .fetch_offsets(group)
        .await?
        .into_iter()
        .map(|o| ((o.topic.clone(), o.partition), o))
        .collect())
}

/// A group's lag per partition (committed offsets only: a partition the group never
/// committed has no lag to report, as in Kafka's tools).
pub async fn group_lags(
    broker: &Broker,
    group: &str,
) -> Result<Vec<PartitionLag>, oxbow_metadata::Error> {
    let offsets = group_offsets(broker, group).await?;
    Ok(lags(
        offsets
            .into_values()
            .map(|o| (o.topic, o.partition, o.offset)),
        |t, p| high_watermark(broker, t, p),
    ))
}

/// One point of a group's lag history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LagSample {
    /// Wall-clock time of the sample, ms since the Unix epoch (the chart's x axis).
    pub time_ms: i64,
    /// Sum of the lags of the partitions the group committed whose high watermark is known
    /// here (led here, or answered by their leader lately).
    pub total_lag: i64,
}

/// The recent total lag of each group, bounded in both directions: at most
/// `samples_per_group` samples per group (the oldest go first) and `groups_max` groups (a
/// group not sampled for longest goes first). Held in memory only: a restart starts the
/// chart afresh, which is what a "since when" chart on one broker can honestly show.
pub struct LagHistory {
    samples_per_group: usize,
    groups_max: usize,
    groups: Mutex<HashMap<String, VecDeque<LagSample>>>,
}

impl LagHistory {
    pub fn new(samples_per_group: usize, groups_max: usize) -> Self {
        LagHistory {
            samples_per_group: samples_per_group.max(1),
            groups_max: groups_max.max(1),
            groups: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<LagSample>>> {
        // A panic mid-update leaves at worst one sample missing: keep going.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one sample per group in `totals`, taken at `time_ms`.
    pub fn record(&self, time_ms: i64, totals: impl IntoIterator<Item = (String, i64)>) {
        let mut groups = self.lock();
        for (group, total_lag) in totals {
            if !groups.contains_key(&group) && groups.len() >= self.groups_max {
                let stalest = groups
                    .iter()
                    .min_by_key(|(_, s)| s.back().map_or(i64::MIN, |x| x.time_ms))
                    .map(|(g, _)| g.clone());
                if let Some(g) = stalest {
                    groups.remove(&g);
                }
            }
            let ring = groups.entry(group).or_default();
            if ring.len() >= self.samples_per_group {
                ring.pop_front();
            }
            ring.push_back(LagSample { time_ms, total_lag });
        }
    }

    /// A group's samples, oldest first (empty if none were taken).
    pub fn samples(&self, group: &str) -> Vec<LagSample> {
        self.lock()
            .get(group)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// Each group's total lag over its committed partitions that have a lag here.
pub fn totals(committed: &[(String, String, i32, Offset)], broker: &Broker) -> Vec<(String, i64)> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for (group, topic, partition, offset) in committed {
        let total = out.entry(group.clone()).or_default();
        if let Some(hw) = high_watermark(broker, topic, *partition) {
            *total = total.saturating_add((hw - offset).max(0));
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_high_watermark_minus_the_commit_never_negative() {
        let hw = |t: &str, p: i32| match (t, p) {
            ("a", 0) => Some(10),
            ("a", 1) => Some(3),
            _ => None,
        };
        let got = lags(
            vec![
                ("b".to_string(), 0, 4),
                ("a".to_string(), 1, 5),
                ("a".to_string(), 0, 7),
            ],
            hw,
        );
        let view: Vec<_> = got
            .iter()
            .map(|l| (l.topic.as_str(), l.partition, l.log_end_offset, l.lag))
            .collect();
        assert_eq!(
            view,
            vec![
                ("a", 0, Some(10), Some(3)),
                ("a", 1, Some(3), Some(0)),
                ("b", 0, None, None),
            ]
        );
    }

    #[test]
    fn history_is_bounded_per_group_and_in_groups() {
        let h = LagHistory::new(3, 2);
        for t in 0..5 {
            h.record(t, [("g".to_string(), t * 10)]);
        }
        let s: Vec<_> = h
            .samples("g")
            .iter()
            .map(|s| (s.time_ms, s.total_lag))
            .collect();
        assert_eq!(s, vec![(2, 20), (3, 30), (4, 40)]);
        h.record(5, [("h".to_string(), 1)]);
        h.record(6, [("h".to_string(), 2)]);
        // A third group evicts the one sampled longest ago ("g", last at 4).
        h.record(7, [("i".to_string(), 3)]);
        assert!(h.samples("g").is_empty());
        assert_eq!(h.samples("h").len(), 2);
        assert_eq!(h.samples("i").len(), 1);
        assert!(h.samples("nope").is_empty());
    }
}
