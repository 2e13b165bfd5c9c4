use super::*;
use crate::client::GroupMember;
use clap::Parser;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    groups: GroupsArgs,
}

fn parse(args: &[&str]) -> Result<GroupsCommand, clap::Error> {
    Cli::try_parse_from(std::iter::once("groups").chain(args.iter().copied()))
        .map(|c| c.groups.command)
}

#[test]
fn reset_needs_exactly_one_target() {
    let Ok(GroupsCommand::ResetOffsets(r)) =
        parse(&["reset-offsets", "g", "--topic", "t:0,2", "--to-offset", "5"])
    else {
        panic!("expected reset-offsets");
    };
    assert_eq!(r.to.target(), ResetTarget::Offset(5));
    assert_eq!(r.topics[0].partitions, Some(vec![0, 2]));
    let Ok(GroupsCommand::ResetOffsets(r)) =
        parse(&["reset-offsets", "g", "--all-topics", "--shift-by", "-3"])
    else {
        panic!("expected reset-offsets");
    };
    assert_eq!(r.to.target(), ResetTarget::ShiftBy(-3));
    assert!(r.all_topics && r.topics.is_empty());
    assert!(!r.execute);
    let Ok(GroupsCommand::ResetOffsets(r)) = parse(&[
        "reset-offsets",
        "g",
        "--topic",
        "t",
        "--to-datetime",
        "2026-11-29T10:00:00Z",
        "--execute",
    ]) else {
        panic!("expected reset-offsets");
    };
    assert_eq!(r.to.target(), ResetTarget::Datetime(1_795_946_400_000));
    assert!(r.execute);
    for bad in [
        &["reset-offsets", "g", "--topic", "t"][..],
        &[
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--to-latest",
        ],
        &["reset-offsets", "g", "--to-earliest"],
        &[
            "reset-offsets",
            "g",
            "--all-topics",
            "--topic",
            "t",
            "--to-earliest",
        ],
        &["reset-offsets", "g", "--topic", "t", "--to-offset", "-1"],
        &[
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-latest",
            "--execute",
            "--dry-run",
        ],
        &[
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-datetime",
            "yesterday",
        ],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} should be rejected");
    }
    assert!(matches!(
        parse(&["list", "--state"]),
        Ok(GroupsCommand::List(ListArgs { state: true }))
    ));
}

#[test]
fn topic_specs() {
    assert_eq!(
        parse_topic_spec("orders"),
        Ok(TopicSpec {
            topic: "orders".into(),
            partitions: None
        })
    );
    assert_eq!(
        parse_topic_spec("orders:1, 3").map(|s| s.partitions),
        Ok(Some(vec![1, 3]))
    );
    for bad in ["", ":1", "t:", "t:x", "t:-1"] {
        assert!(parse_topic_spec(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn datetimes_parse_as_rfc3339_or_epoch_millis() {
    assert_eq!(parse_datetime_ms("1970-01-01T00:00:01Z"), Ok(1000));
    assert_eq!(
        parse_datetime_ms("2026-11-29T10:00:00Z"),
        Ok(1_795_946_400_000)
    );
    assert_eq!(
        parse_datetime_ms("2026-11-29T10:00:00.250Z"),
        Ok(1_795_946_400_250)
    );
    // No zone: UTC.
    assert_eq!(
        parse_datetime_ms("2026-11-29T10:00:00"),
        Ok(1_795_946_400_000)
    );
    assert_eq!(
        parse_datetime_ms("2026-11-29T11:30:00+01:30"),
        Ok(1_795_946_400_000)
    );
    assert_eq!(
        parse_datetime_ms("2026-11-29T08:00:00.000-02:00"),
        Ok(1_795_946_400_000)
    );
    assert_eq!(parse_datetime_ms("1795946400000"), Ok(1_795_946_400_000));
    for bad in [
        "",
        "-5",
        "yesterday",
        "2026-13-01T00:00:00Z",
        "2026-11-29T10:00:00+25:00",
        "2026-11-29T10:00",
        "2026-11-29T10:00:00ü",
        "1970-01-01T00:00:00+01:00",
    ] {
        assert!(
            parse_datetime_ms(bad).is_err(),
            "{bad:?} should be rejected"
        );
    }
}

#[test]
fn plan_picks_and_clamps_offsets() {
    let o = PartitionOffsets {
        earliest: 10,
        latest: 50,
        by_time: None,
        committed: Some(20),
    };
    assert_eq!(new_offset(ResetTarget::Earliest, o), Some(10));
    assert_eq!(new_offset(ResetTarget::Latest, o), Some(50));
    assert_eq!(new_offset(ResetTarget::Offset(30), o), Some(30));
    assert_eq!(new_offset(ResetTarget::Offset(5), o), Some(10));
    assert_eq!(new_offset(ResetTarget::Offset(99), o), Some(50));
    let at = |by_time| PartitionOffsets {
        by_time: Some(by_time),
        ..o
    };
    assert_eq!(new_offset(ResetTarget::Datetime(1), at(20)), Some(20));
    // -1: nothing that new, so the log end.
    assert_eq!(new_offset(ResetTarget::Datetime(1), at(-1)), Some(50));
    assert_eq!(new_offset(ResetTarget::ShiftBy(-5), o), Some(15));
    assert_eq!(new_offset(ResetTarget::ShiftBy(-50), o), Some(10));
    assert_eq!(new_offset(ResetTarget::ShiftBy(i64::MAX), o), Some(50));
    let uncommitted = PartitionOffsets {
        committed: None,
        ..o
    };
    assert_eq!(new_offset(ResetTarget::ShiftBy(1), uncommitted), None);
    assert_eq!(new_offset(ResetTarget::Latest, uncommitted), Some(50));
    let empty = PartitionOffsets {
        earliest: 0,
        latest: 0,
        by_time: None,
        committed: None,
    };
    assert_eq!(new_offset(ResetTarget::Offset(7), empty), Some(0));
}

fn member(id: &str, assignment: &[(&str, i32)]) -> GroupMember {
    GroupMember {
        member_id: id.into(),
        group_instance_id: None,
        client_id: format!("client-{id}"),
        client_host: "/127.0.0.1".into(),
        assignment: assignment
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect(),
    }
}

#[test]
fn describe_rows_join_offsets_log_ends_and_owners() {
    let description = GroupDescription {
        group_id: "g".into(),
        state: "Stable".into(),
        protocol_type: "consumer".into(),
        protocol: "range".into(),
        members: vec![member("m1", &[("t", 0)]), member("m2", &[("t", 1)])],
    };
    let offsets = vec![
        GroupOffset {
            topic: "t".into(),
            partition: 0,
            offset: 3,
        },
        GroupOffset {
            topic: "gone".into(),
            partition: 0,
            offset: 9,
        },
    ];
    let log_ends: BTreeMap<(String, i32), i64> =
        [(("t".to_string(), 0), 10), (("t".to_string(), 1), 4)]
            .into_iter()
            .collect();
    let rows = describe_rows(&description, &offsets, &log_ends);
    assert_eq!(
        rows,
        vec![
            vec!["g", "gone", "0", "9", "-", "-", "-", "-", "-"],
            vec![
                "g",
                "t",
                "0",
                "3",
                "10",
                "7",
                "m1",
                "/127.0.0.1",
                "client-m1"
            ],
            vec![
                "g",
                "t",
                "1",
                "-",
                "4",
                "-",
                "m2",
                "/127.0.0.1",
                "client-m2"
            ],
        ]
    );
    assert_eq!(
        describe_header(&description),
        "Consumer group 'g' (state: Stable, members: 2)"
    );
}

#[test]
fn tables_align_columns_without_trailing_spaces() {
    let rows = vec![
        vec!["g".to_string(), "orders".to_string(), "0".to_string()],
        vec!["g".to_string(), "t".to_string(), "12".to_string()],
    ];
    assert_eq!(
        format_table(&["GROUP", "TOPIC", "PARTITION"], &rows),
        "GROUP TOPIC  PARTITION\n\
         g     orders 0\n\
         g     t      12\n"
    );
    assert_eq!(format_table(&["A", "B"], &[]), "A B\n");
}

#[test]
fn partitions_come_from_topics_or_committed_offsets() {
    let counts: BTreeMap<String, BTreeSet<i32>> = [
        ("a".to_string(), [0, 1, 2].into_iter().collect()),
        ("b".to_string(), [0].into_iter().collect()),
    ]
    .into_iter()
    .collect();
    let spec = |s: &str| parse_topic_spec(s).expect("valid spec");
    let chosen = partitions_to_reset(
        &[spec("a:2,0"), spec("b"), spec("a:0")],
        false,
        &[],
        &counts,
    )
    .expect("valid");
    assert_eq!(
        chosen,
        [
            ("a".to_string(), [0, 2].into_iter().collect()),
            ("b".to_string(), [0].into_iter().collect()),
        ]
        .into_iter()
        .collect()
    );
    assert!(partitions_to_reset(&[spec("a:3")], false, &[], &counts)
        .expect_err("no partition 3")
        .contains("no partition 3"));
    assert!(partitions_to_reset(&[spec("c")], false, &[], &counts).is_err());
    let committed = vec![GroupOffset {
        topic: "z".into(),
        partition: 4,
        offset: 1,
    }];
    let all = partitions_to_reset(&[], true, &committed, &counts).expect("valid");
    assert_eq!(all.len(), 1);
    assert!(all["z"].contains(&4));
    assert!(partitions_to_reset(&[], true, &[], &counts).is_err());
}

#[test]
fn only_memberless_groups_may_be_reset() {
    assert!(is_inactive("Empty"));
    assert!(is_inactive("Dead"));
    for state in ["Stable", "PreparingRebalance", "CompletingRebalance"] {
        assert!(!is_inactive(state), "{state}");
    }
}
