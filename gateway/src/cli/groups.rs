//! `oxbow groups list|describe|delete|reset-offsets`, after Kafka's
//! `kafka-consumer-groups.sh`.
//!
//! - `list`: one group id per line (`--state` adds the state after a space).
//! - `describe GROUP`: a header line with the group's state and member count, then a
//!   column-aligned table `GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
//!   CONSUMER-ID HOST CLIENT-ID`, one row per partition that has a committed offset or is
//!   assigned to a member; `-` where there is no value (no commit, no owner).
//! - `delete GROUP`: only a group without active members.
//! - `reset-offsets GROUP (--topic T[:P,P...]... | --all-topics) (--to-earliest |
//!   --to-latest | --to-datetime TIME | --to-offset N | --shift-by N) [--execute]`: prints
//!   the plan `GROUP TOPIC PARTITION NEW-OFFSET`;
//!   only with `--execute` are the offsets committed. Refused while the group has members,
//!   as Kafka's tool does, because a live consumer would overwrite the reset with its
//!   next commit (and the coordinator rejects a standalone commit anyway).
//!
//! The pure parts (timestamp parsing, the plan, the describe rows, table layout) are
//! functions here with unit tests; `run` only gathers data from the broker.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::UNIX_EPOCH;

use anyhow::{bail, Context};

use super::ConnectArgs;
use crate::client::{
    Client, ClientError, GroupDescription, GroupOffset, ResponseError, EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
};

/// `oxbow groups ...`
#[derive(Debug, clap::Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,

    #[command(subcommand)]
    pub command: GroupsCommand,
}

/// What to do with consumer groups.
#[derive(Debug, clap::Subcommand)]
pub enum GroupsCommand {
    /// List group ids, one per line.
    List(ListArgs),
    /// Show a group's state, members, assignment, committed offsets and lag.
    Describe(GroupArg),
    /// Delete a group that has no active members, with its committed offsets.
    Delete(GroupArg),
    /// Move a group's committed offsets (dry run unless --execute).
    ResetOffsets(ResetArgs),
}

/// `oxbow groups list`
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print each group's state after its id.
    #[arg(long)]
    pub state: bool,
}

/// A subcommand that takes one group id.
#[derive(Debug, clap::Args)]
pub struct GroupArg {
    /// The consumer group id.
    pub group: String,
}

/// `oxbow groups reset-offsets GROUP --topic T ...`
#[derive(Debug, clap::Args)]
pub struct ResetArgs {
    /// The consumer group id.
    pub group: String,

    /// Topic to reset, optionally with partitions: `orders` or `orders:0,2`; repeatable.
    #[arg(
        long = "topic",
        value_name = "TOPIC[:P,P...]",
        value_parser = parse_topic_spec,
        required_unless_present = "all_topics",
        conflicts_with = "all_topics"
    )]
    pub topics: Vec<TopicSpec>,

    /// Every partition the group has a committed offset for.
    #[arg(long)]
    pub all_topics: bool,

    #[command(flatten)]
    pub to: ResetTo,

    /// Commit the new offsets; without it the plan is only printed.
    #[arg(long, conflicts_with = "dry_run")]
    pub execute: bool,

    /// Only print the plan (the default; accepted for kafka-consumer-groups.sh habits).
    #[arg(long)]
    pub dry_run: bool,
}

/// Where to move the offsets; exactly one is required.
#[derive(Debug, Clone, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ResetTo {
    /// The first offset still in the log.
    #[arg(long)]
    pub to_earliest: bool,
    /// The log end offset (skip everything not yet consumed).
    #[arg(long)]
    pub to_latest: bool,
    /// The first offset whose timestamp is at or after TIME (RFC 3339, e.g.
    /// `2026-11-29T10:00:00Z`, or milliseconds since the epoch); the log end if none.
    #[arg(long, value_name = "TIME", value_parser = parse_datetime_ms)]
    pub to_datetime: Option<i64>,
    /// This offset, clamped to the partition's earliest and log end offsets.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub to_offset: Option<i64>,
    /// The committed offset moved by N (negative: back), clamped like --to-offset.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub shift_by: Option<i64>,
}

/// A topic and optionally some of its partitions (all when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    pub partitions: Option<Vec<i32>>,
}

/// The reset target, resolved from the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTarget {
    Earliest,
    Latest,
    /// Milliseconds since the epoch.
    Datetime(i64),
    Offset(i64),
    /// Relative to the committed offset.
    ShiftBy(i64),
}

impl ResetTo {
    fn target(&self) -> ResetTarget {
        match (self.to_datetime, self.to_offset, self.shift_by) {
            (Some(ms), _, _) => ResetTarget::Datetime(ms),
            (None, Some(n), _) => ResetTarget::Offset(n),
            (None, None, Some(n)) => ResetTarget::ShiftBy(n),
            (None, None, None) if self.to_latest => ResetTarget::Latest,
            // clap requires exactly one of the flags.
            (None, None, None) => ResetTarget::Earliest,
        }
    }
}

/// Parses `--topic`: `name` or `name:0,1,2`.
pub fn parse_topic_spec(s: &str) -> Result<TopicSpec, String> {
    let (topic, partitions) = match s.split_once(':') {
        None => (s, None),
        Some((topic, list)) => {
            let parts = list
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|p| *p >= 0)
                        .ok_or_else(|| {
                            format!("invalid partition \"{p}\" in \"{s}\": expected topic or topic:0,1,...")
                        })
                })
                .collect::<Result<Vec<i32>, String>>()?;
            (topic, Some(parts))
        }
    };
    if topic.trim().is_empty() {
        return Err(format!(
            "invalid topic \"{s}\": expected topic or topic:0,1,..."
        ));
    }
    Ok(TopicSpec {
        topic: topic.to_string(),
        partitions,
    })
}

/// Parses an RFC 3339 timestamp (`2026-11-29T10:00:00Z`, `2026-11-29T10:00:00.5+01:00`; no
/// zone means UTC) or plain milliseconds since the epoch, into epoch milliseconds.
pub fn parse_datetime_ms(s: &str) -> Result<i64, String> {
    let invalid = || {
        format!(
            "invalid time \"{s}\": expected RFC 3339 such as 2026-11-29T10:00:00Z, or epoch milliseconds"
        )
    };
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return if ms >= 0 { Ok(ms) } else { Err(invalid()) };
    }
    // Byte slicing below is safe only on ASCII.
    if !s.is_ascii() {
        return Err(invalid());
    }
    let (base, offset_minutes) = if let Some(base) = s.strip_suffix(['Z', 'z']) {
        (base, 0i64)
    } else if s.len() > 19 && matches!(s.as_bytes()[s.len() - 6], b'+' | b'-') {
        let (base, zone) = s.split_at(s.len() - 6);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = zone[1..].split_once(':').ok_or_else(invalid)?;
        let hours: i64 = hours.parse().map_err(|_| invalid())?;
        let minutes: i64 = minutes.parse().map_err(|_| invalid())?;
        if hours > 23 || minutes > 59 {
            return Err(invalid());
        }
        (base, sign * (hours * 60 + minutes))
    } else {
        (s, 0)
    };
    let time = humantime::parse_rfc3339_weak(base).map_err(|_| invalid())?;
    let ms = time
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .ok_or_else(invalid)?;
    // 10:00+01:00 is 09:00 UTC.
    let ms = ms - offset_minutes * 60_000;
    if ms < 0 {
        return Err(invalid());
    }
    Ok(ms)
}

/// A partition's offsets as the broker reports them, for planning a reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub earliest: i64,
    pub latest: i64,
    /// ListOffsets by timestamp for `--to-datetime`; `-1` when no record is that new.
    pub by_time: Option<i64>,
    /// The group's committed offset, if any.
    pub committed: Option<i64>,
}

/// The offset a partition is reset to, always within `[earliest, latest]` (Kafka's tool
/// clamps an out-of-range `--to-offset` and `--shift-by` the same way). `None` only for
/// `--shift-by` on a partition without a committed offset: there is nothing to shift.
pub fn new_offset(target: ResetTarget, offsets: PartitionOffsets) -> Option<i64> {
    let PartitionOffsets {
        earliest,
        latest,
        by_time,
        committed,
    } = offsets;
    let wanted = match target {
        ResetTarget::Earliest => earliest,
        ResetTarget::Latest => latest,
        // -1 from the broker: every record is older than the time, so start at the end.
        ResetTarget::Datetime(_) => by_time.filter(|o| *o >= 0).unwrap_or(latest),
        ResetTarget::Offset(n) => n,
        ResetTarget::ShiftBy(n) => committed?.saturating_add(n),
    };
    Some(wanted.clamp(earliest.min(latest), latest))
}

/// The partitions to reset, by topic: each `--topic` (all partitions of the topic unless
/// it names some), or with `--all-topics` every partition with a committed offset.
/// `partition_counts` holds each named topic's partitions. Errors name the bad input.
pub fn partitions_to_reset(
    specs: &[TopicSpec],
    all_topics: bool,
    committed: &[GroupOffset],
    partition_counts: &BTreeMap<String, BTreeSet<i32>>,
) -> Result<BTreeMap<String, BTreeSet<i32>>, String> {
    let mut chosen: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    if all_topics {
        for o in committed {
            chosen
                .entry(o.topic.clone())
                .or_default()
                .insert(o.partition);
        }
        if chosen.is_empty() {
            return Err(
                "the group has no committed offsets, so --all-topics selects nothing; name topics with --topic"
                    .to_string(),
            );
        }
        return Ok(chosen);
    }
    for spec in specs {
        let existing = partition_counts
            .get(&spec.topic)
            .ok_or_else(|| format!("unknown topic \"{}\"", spec.topic))?;
        let entry = chosen.entry(spec.topic.clone()).or_default();
        match &spec.partitions {
            None => entry.extend(existing.iter().copied()),
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|p| !existing.contains(p)) {
                    return Err(format!(
                        "topic \"{}\" has no partition {missing} (it has {} partitions)",
                        spec.topic,
                        existing.len()
                    ));
                }
                entry.extend(wanted.iter().copied());
            }
        }
    }
    Ok(chosen)
}

/// Lays rows out in left-aligned columns separated by a space, like the Kafka tools.
pub fn format_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            let width = widths.get(i).copied().unwrap_or(0);
            line.push_str(&format!("{cell:<width$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Column headers of `groups describe`.
pub const DESCRIBE_HEADERS: [&str; 9] = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
];

/// Column headers of the `groups reset-offsets` plan.
pub const RESET_HEADERS: [&str; 4] = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"];

/// The (topic, partition) pairs `describe` shows: committed or assigned, sorted.
pub fn describe_partitions(
    description: &GroupDescription,
    offsets: &[GroupOffset],
) -> Vec<(String, i32)> {
    let mut partitions: BTreeSet<(String, i32)> = offsets
        .iter()
        .map(|o| (o.topic.clone(), o.partition))
        .collect();
    for member in &description.members {
        partitions.extend(member.assignment.iter().cloned());
    }
    partitions.into_iter().collect()
}

/// The `describe` rows. `log_ends` holds each partition's log end offset (missing when
/// it could not be read, e.g. a deleted topic).
pub fn describe_rows(
    description: &GroupDescription,
    offsets: &[GroupOffset],
    log_ends: &BTreeMap<(String, i32), i64>,
) -> Vec<Vec<String>> {
    let committed: BTreeMap<(String, i32), i64> = offsets
        .iter()
        .map(|o| ((o.topic.clone(), o.partition), o.offset))
        .collect();
    let mut owners = BTreeMap::new();
    for member in &description.members {
        for tp in &member.assignment {
            owners.insert(tp.clone(), member);
        }
    }
    let dash = || "-".to_string();
    describe_partitions(description, offsets)
        .into_iter()
        .map(|tp| {
            let current = committed.get(&tp).copied();
            let end = log_ends.get(&tp).copied();
            let lag = match (current, end) {
                (Some(c), Some(e)) => (e - c).max(0).to_string(),
                _ => dash(),
            };
            let owner = owners.get(&tp);
            vec![
                description.group_id.clone(),
                tp.0.clone(),
                tp.1.to_string(),
                current.map_or_else(dash, |c| c.to_string()),
                end.map_or_else(dash, |e| e.to_string()),
                lag,
                owner.map_or_else(dash, |m| m.member_id.clone()),
                owner.map_or_else(dash, |m| m.client_host.clone()),
                owner.map_or_else(dash, |m| m.client_id.clone()),
            ]
        })
        .collect()
}

/// "1 member", "2 members".
fn members(count: usize) -> String {
    if count == 1 {
        "1 member".to_string()
    } else {
        format!("{count} members")
    }
}

/// The header line of `describe`.
pub fn describe_header(description: &GroupDescription) -> String {
    let count = description.members.len();
    format!(
        "Consumer group '{}' (state: {}, members: {count})",
        description.group_id, description.state
    )
}

/// Whether a group in `state` has no active members, so its offsets may be reset.
fn is_inactive(state: &str) -> bool {
    matches!(state, "Empty" | "Dead")
}

/// Runs `oxbow groups ...`.
pub async fn run(args: GroupsArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    let mut out = std::io::stdout();
    match args.command {
        GroupsCommand::List(list) => {
            for g in client.list_groups().await? {
                if list.state {
                    let state = g.state.as_deref().unwrap_or("Unknown");
                    writeln!(out, "{} {state}", g.group_id)?;
                } else {
                    writeln!(out, "{}", g.group_id)?;
                }
            }
        }
        GroupsCommand::Describe(GroupArg { group }) => {
            let description = client.describe_group(&group).await?;
            let offsets = client.fetch_offsets(&group).await?;
            if description.state == "Dead" && offsets.is_empty() {
                bail!("consumer group \"{group}\" does not exist");
            }
            let mut log_ends = BTreeMap::new();
            for (topic, partition) in describe_partitions(&description, &offsets) {
                match client
                    .list_offsets(&topic, partition, LATEST_TIMESTAMP)
                    .await
                {
                    Ok(end) => {
                        log_ends.insert((topic, partition), end);
                    }
                    // A committed offset can outlive its topic or partition: show `-`.
                    Err(ClientError::UnknownTopic(_) | ClientError::UnknownPartition { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
            }
            writeln!(out, "{}", describe_header(&description))?;
            let rows = describe_rows(&description, &offsets, &log_ends);
            if rows.is_empty() {
                writeln!(out, "(no committed offsets and no assigned partitions)")?;
            } else {
                writeln!(out)?;
                out.write_all(format_table(&DESCRIBE_HEADERS, &rows).as_bytes())?;
            }
        }
        GroupsCommand::Delete(GroupArg { group }) => {
            match client.delete_group(&group).await {
                Ok(()) => writeln!(out, "Deleted consumer group '{group}'.")?,
                Err(err) => match err.kafka_error() {
                    Some(ResponseError::NonEmptyGroup) => bail!(
                        "cannot delete consumer group \"{group}\": group has active members; stop them first"
                    ),
                    Some(ResponseError::GroupIdNotFound) => {
                        bail!("consumer group \"{group}\" does not exist")
                    }
                    _ => return Err(err.into()),
                },
            }
        }
        GroupsCommand::ResetOffsets(reset) => {
            let plan = reset_plan(&mut client, &reset).await?;
            let rows: Vec<Vec<String>> = plan
                .iter()
                .map(|o| {
                    vec![
                        reset.group.clone(),
                        o.topic.clone(),
                        o.partition.to_string(),
                        o.offset.to_string(),
                    ]
                })
                .collect();
            out.write_all(format_table(&RESET_HEADERS, &rows).as_bytes())?;
            if reset.execute {
                client
                    .commit_offsets(&reset.group, &plan)
                    .await
                    .map_err(|err| match err.kafka_error() {
                        Some(
                            ResponseError::UnknownMemberId
                            | ResponseError::IllegalGeneration
                            | ResponseError::RebalanceInProgress,
                        ) => anyhow::anyhow!(
                            "cannot reset offsets of consumer group \"{}\": a member joined meanwhile; stop its consumers first",
                            reset.group
                        ),
                        _ => err.into(),
                    })?;
            } else {
                out.flush()?;
                eprintln!("Dry run: no offsets changed. Add --execute to commit them.");
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Checks the group is inactive and computes the new offset of each chosen partition.
async fn reset_plan(client: &mut Client, reset: &ResetArgs) -> anyhow::Result<Vec<GroupOffset>> {
    let group = &reset.group;
    let description = client.describe_group(group).await?;
    if !is_inactive(&description.state) {
        bail!(
            "cannot reset offsets of consumer group \"{group}\": it has active members (state {}, {}); stop them first",
            description.state,
            members(description.members.len())
        );
    }
    let committed = client.fetch_offsets(group).await?;
    let mut partition_counts = BTreeMap::new();
    for spec in &reset.topics {
        let metadata = client.topic_metadata(&spec.topic).await?;
        let partitions: BTreeSet<i32> = metadata.partitions.iter().map(|p| p.partition).collect();
        partition_counts.insert(spec.topic.clone(), partitions);
    }
    let chosen = partitions_to_reset(
        &reset.topics,
        reset.all_topics,
        &committed,
        &partition_counts,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let committed: BTreeMap<(&str, i32), i64> = committed
        .iter()
        .map(|o| ((o.topic.as_str(), o.partition), o.offset))
        .collect();
    let target = reset.to.target();
    let mut plan = Vec::new();
    for (topic, partitions) in &chosen {
        for &partition in partitions {
            let context = || format!("reading offsets of {topic}-{partition}");
            let earliest = client
                .list_offsets(topic, partition, EARLIEST_TIMESTAMP)
                .await
                .with_context(context)?;
            let latest = client
                .list_offsets(topic, partition, LATEST_TIMESTAMP)
                .await
                .with_context(context)?;
            let by_time = match target {
                ResetTarget::Datetime(ms) => Some(
                    client
                        .list_offsets(topic, partition, ms)
                        .await
                        .with_context(context)?,
                ),
                _ => None,
            };
            let offsets = PartitionOffsets {
                earliest,
                latest,
                by_time,
                committed: committed.get(&(topic.as_str(), partition)).copied(),
            };
            let Some(offset) = new_offset(target, offsets) else {
                bail!(
                    "cannot shift the offset of {topic}-{partition}: group \"{group}\" has no committed offset there"
                );
            };
            plan.push(GroupOffset {
                topic: topic.clone(),
                partition,
                offset,
            });
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests;
