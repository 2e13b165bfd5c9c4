//! The catalogue's part of the conformance suite (see the parent module): sealed-object
//! commits and their fences, lookups, the epoch cut, wide commits, compaction's swap.

use super::*;

pub(super) async fn catalog_fencing_and_lookup(store: &dyn MetadataStore) {
    let t = store.create_topic(spec("cat", 2), 1).await.expect("create");
    let tp0 = TopicPartition::new(t.topic_id, 0);
    let tp1 = TopicPartition::new(t.topic_id, 1);
    let fences = vec![
        EpochFence {
            topic_partition: tp0,
            leader_epoch: 0,
        },
        EpochFence {
            topic_partition: tp1,
            leader_epoch: 0,
        },
    ];
    let first = CatalogCommit {
        entries: vec![entry(tp0, 0, 9, 100, 0), entry(tp1, 0, 4, 50, 0)],
        fences: fences.clone(),
        writer: None,
    };
    store.commit_catalog(first.clone()).await.expect("commit");
    // Retrying a commit that already landed is a no-op.
    store.commit_catalog(first).await.expect("idempotent retry");
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 10, 19, 200, 0)],
            fences: fences.clone(),
            writer: None,
        })
        .await
        .expect("second");
    // A gap or overlap is refused.
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 25, 30, 300, 0)],
            fences: fences.clone(),
            writer: None,
        })
        .await
        .expect_err("gap");
    assert_eq!(err.kind(), ErrorKind::Conflict);

    let found = store
        .catalog_entries(t.topic_id, 0, 12, 10)
        .await
        .expect("lookup");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].base_offset, 10);
    let all = store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("all");
    assert_eq!(all.len(), 2);
    let limited = store
        .catalog_entries(t.topic_id, 0, 0, 1)
        .await
        .expect("limit");
    assert_eq!(limited.len(), 1);
    assert!(store
        .catalog_entries(t.topic_id, 0, 20, 10)
        .await
        .expect("past")
        .is_empty());
    let last = store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(last.last_offset, 19);
    let by_ts = store
        .catalog_find_timestamp(t.topic_id, 0, 150)
        .await
        .expect("ts")
        .expect("some");
    assert_eq!(by_ts.base_offset, 10);
    assert!(store
        .catalog_find_timestamp(t.topic_id, 0, 201)
        .await
        .expect("ts")
        .is_none());

    // A new leader bumps the epoch: the old leader's commit is fenced, all-or-nothing.
    let mut p0 = t.partitions[0].clone();
    p0.leader_epoch = 1;
    store
        .update_partition(t.topic_id, 0, p0)
        .await
        .expect("bump");
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 20, 29, 300, 0), entry(tp1, 5, 9, 300, 0)],
            fences,
            writer: None,
        })
        .await
        .expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let p1 = store
        .catalog_last(t.topic_id, 1)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(p1.last_offset, 4, "a fenced commit wrote nothing");

    // Deleting the topic drops its catalog.
    store.delete_topic("cat").await.expect("delete");
    assert!(store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .is_none());
}

pub(super) async fn wide_catalog_commit(store: &dyn MetadataStore) {
    // One object holding 100 partitions: one commit, all or nothing, and a retry is a no-op.
    let t = store
        .create_topic(spec("wide", 100), 1)
        .await
        .expect("create");
    let tps: Vec<TopicPartition> = (0..100)
        .map(|p| TopicPartition::new(t.topic_id, p))
        .collect();
    let commit = CatalogCommit {
        entries: tps
            .iter()
            .map(|tp| CatalogEntry {
                object_key: "wide-object".into(),
                byte_start: 10 * tp.partition as u64,
                ..entry(*tp, 0, 9, 5, 0)
            })
            .collect(),
        fences: tps
            .iter()
            .map(|tp| EpochFence {
                topic_partition: *tp,
                leader_epoch: 0,
            })
            .collect(),
        writer: None,
    };
    store.commit_catalog(commit.clone()).await.expect("commit");
    store.commit_catalog(commit).await.expect("retry");
    for p in [0, 57, 99] {
        let last = store
            .catalog_last(t.topic_id, p)
            .await
            .expect("last")
            .expect("some");
        assert_eq!(last.last_offset, 9);
    }
    store.delete_topic("wide").await.expect("cleanup");
}

pub(super) async fn catalog_writer_fence_and_epoch_cut(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("fenced", 1), 7)
        .await
        .expect("create");
    let tp = TopicPartition::new(t.topic_id, 0);
    let lease = store
        .register_broker(registration(7), Duration::from_secs(60))
        .await
        .expect("register");
    let writer = Some(WriterFence {
        broker_id: 7,
        lease_id: lease.id,
    });
    let fences = vec![EpochFence {
        topic_partition: tp,
        leader_epoch: 0,
    }];
    // Epoch 0 writes 0..=9, then 10..=19.
    for (base, last) in [(0, 9), (10, 19)] {
        store
            .commit_catalog(CatalogCommit {
                entries: vec![entry(tp, base, last, base, 0)],
                fences: fences.clone(),
                writer,
            })
            .await
            .expect("commit under the lease");
    }
    // A writer holding another lease (a previous registration) commits nothing.
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 20, 29, 20, 0)],
            fences: fences.clone(),
            writer: Some(WriterFence {
                broker_id: 7,
                lease_id: lease.id + 1,
            }),
        })
        .await
        .expect_err("stale lease");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");

    // A new leader at epoch 1 recovered up to 15 and starts there: what epoch 0 holds past
    // 14 is a deposed leader's tail and is never served, however it was committed.
    let mut p = t.partitions[0].clone();
    p.leader = 8;
    p.leader_epoch = 1;
    p.leader_epochs = LeaderEpochHistory::from_entries(vec![
        EpochStart {
            epoch: 0,
            start_offset: 0,
        },
        EpochStart {
            epoch: 1,
            start_offset: 15,
        },
    ]);
    store
        .update_partition(t.topic_id, 0, p)
        .await
        .expect("new leader");
    let served = store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("read");
    assert_eq!(
        served
            .iter()
            .map(|e| (e.base_offset, e.last_offset, e.leader_epoch))
            .collect::<Vec<_>>(),
        vec![(0, 9, 0), (10, 14, 0)],
        "the second entry is clipped at epoch 1's start"
    );
    // The old leader's late commit is refused (its epoch is known to have moved) ...
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 20, 29, 20, 0)],
            fences: fences.clone(),
            writer,
        })
        .await
        .expect_err("deposed");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    // ... and the new leader's data continues at 15, served after the clipped entry.
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 15, 24, 15, 1)],
            fences: vec![EpochFence {
                topic_partition: tp,
                leader_epoch: 1,
            }],
            writer: None,
        })
        .await
        .expect("new leader commits");
    let last = store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(
        (last.base_offset, last.last_offset, last.leader_epoch),
        (15, 24, 1)
    );
    // Once the lease is gone, so is the broker's right to commit.
    store.revoke_lease(lease.id).await.expect("revoke");
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp, 25, 29, 25, 1)],
            fences: vec![EpochFence {
                topic_partition: tp,
                leader_epoch: 1,
            }],
            writer,
        })
        .await
        .expect_err("lease gone");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    store.delete_topic("fenced").await.expect("cleanup");
}

/// A seal of thousands of partitions is one metadata revision (issue 13): the commit's
/// cost does not grow with the partitions it catalogues.
pub(super) async fn wide_commit_is_one_revision<K: Kv>(store: &KvStore<K>, partitions: i32) {
    let t = store
        .create_topic(spec("huge", partitions), 1)
        .await
        .expect("create");
    let entries: Vec<CatalogEntry> = (0..partitions)
        .map(|p| CatalogEntry {
            object_key: "data/b1/huge.oxb".into(),
            byte_start: 100 * p as u64,
            byte_len: 100,
            ..entry(TopicPartition::new(t.topic_id, p), 0, 4, 1, 0)
        })
        .collect();
    let fences = entries
        .iter()
        .map(|e| EpochFence {
            topic_partition: e.topic_partition(),
            leader_epoch: 0,
        })
        .collect();
    let revision = |resp: oxbow_metadata::kv::RangeResponse| resp.revision;
    let before = revision(store.kv().range(Get::key("/")).await.expect("rev"));
    store
        .commit_catalog(CatalogCommit {
            entries,
            fences,
            writer: None,
        })
        .await
        .expect("one commit of every partition");
    let after = revision(store.kv().range(Get::key("/")).await.expect("rev"));
    assert_eq!(after - before, 1, "{partitions} partitions in one revision");
    let footprint = store
        .catalog_footprint()
        .expect("the store keeps a catalogue");
    assert!(footprint.partitions >= partitions as usize, "{footprint:?}");
    assert!(
        footprint.objects >= 1 && footprint.entries >= partitions as usize,
        "{footprint:?}"
    );
    assert!(
        footprint.approx_bytes >= footprint.entries * std::mem::size_of::<CatalogEntry>(),
        "{footprint:?}"
    );
    for p in [0, partitions / 2, partitions - 1] {
        let last = store
            .catalog_last(t.topic_id, p)
            .await
            .expect("last")
            .expect("catalogued");
        assert_eq!(last.last_offset, 4);
    }
    store.delete_topic("huge").await.expect("cleanup");
}

// ---- catalog replace (compaction) ----

fn segment_entry(tp: TopicPartition, base: i64, last: i64, ts: i64) -> CatalogEntry {
    CatalogEntry {
        object_key: format!("segments/{base}-{last}.oxs"),
        byte_start: 1000,
        byte_len: 80,
        crc32c: 9,
        layout: oxbow_metadata::EntryLayout::SegmentIndex,
        txn: None,
        ..entry(tp, base, last, ts, 0)
    }
}

pub(super) async fn catalog_replace(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("compact", 2), 1)
        .await
        .expect("create");
    let tp0 = TopicPartition::new(t.topic_id, 0);
    let tp1 = TopicPartition::new(t.topic_id, 1);
    let fence = |tp, leader_epoch| EpochFence {
        topic_partition: tp,
        leader_epoch,
    };
    // Partition 0: 200 entries of 10 offsets (more than etcd's 128 operations per
    // transaction), committed 50 at a time; partition 1: one entry.
    let all: Vec<i64> = (0..200).collect();
    for chunk in all.chunks(50) {
        store
            .commit_catalog(CatalogCommit {
                entries: chunk
                    .iter()
                    .map(|i| entry(tp0, i * 10, i * 10 + 9, *i, 0))
                    .collect(),
                fences: vec![fence(tp0, 0)],
                writer: None,
            })
            .await
            .expect("commit");
    }
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp1, 0, 9, 5, 0)],
            fences: vec![fence(tp1, 0)],
            writer: None,
        })
        .await
        .expect("commit p1");
    let stored = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(stored.len(), 200);

    // The first 150 entries become two segments, in one step.
    let segments = vec![
        segment_entry(tp0, 0, 999, 99),
        segment_entry(tp0, 1000, 1499, 149),
    ];
    let replace = CatalogReplace {
        fence: fence(tp0, 0),
        old: stored[..150].to_vec(),
        new: segments.clone(),
    };
    store
        .replace_catalog_entries(replace.clone())
        .await
        .expect("replace");
    let after = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(after.len(), 52);
    assert_eq!(after[..2], segments[..]);
    assert_eq!(after[2], stored[150]);
    let inside = store
        .catalog_entries(t.topic_id, 0, 1234, 1)
        .await
        .expect("lookup");
    assert_eq!(inside, vec![segments[1].clone()]);
    let by_ts = store
        .catalog_find_timestamp(t.topic_id, 0, 120)
        .await
        .expect("ts")
        .expect("some");
    assert_eq!(by_ts, segments[1]);
    // A retry whose first attempt landed is a no-op.
    store
        .replace_catalog_entries(replace)
        .await
        .expect("idempotent retry");

    // The old run is gone: replacing it some other way is a conflict.
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[..150].to_vec(),
            new: vec![segment_entry(tp0, 0, 1499, 149)],
        })
        .await
        .expect_err("stale run");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    // Entries that differ from the stored ones (another compactor's view): a conflict.
    let mut changed = stored[150].clone();
    changed.crc32c += 1;
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: vec![changed, stored[151].clone()],
            new: vec![segment_entry(tp0, 1500, 1519, 151)],
        })
        .await
        .expect_err("different entry");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    // A run missing a stored entry in its middle: not contiguous, so invalid.
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: vec![stored[150].clone(), stored[152].clone()],
            new: vec![segment_entry(tp0, 1500, 1529, 152)],
        })
        .await
        .expect_err("gap");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    // New entries that do not cover exactly the old offsets: invalid.
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[150..152].to_vec(),
            new: vec![segment_entry(tp0, 1500, 1518, 151)],
        })
        .await
        .expect_err("short");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    // More new entries than one etcd transaction can put: invalid on every backend.
    let mut many: Vec<CatalogEntry> = (1500..1564).map(|o| entry(tp0, o, o, 0, 0)).collect();
    many.push(entry(tp0, 1564, 1569, 0, 0));
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[150..157].to_vec(),
            new: many,
        })
        .await
        .expect_err("too many");
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    let unchanged = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(unchanged, after, "failed replaces wrote nothing");

    // The tail, including the partition's last entry: appends continue after it.
    let tail = segment_entry(tp0, 1500, 1999, 199);
    store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: stored[150..].to_vec(),
            new: vec![tail.clone()],
        })
        .await
        .expect("replace tail");
    let last = store
        .catalog_last(t.topic_id, 0)
        .await
        .expect("last")
        .expect("some");
    assert_eq!(last, tail);
    store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 2000, 2009, 300, 0)],
            fences: vec![fence(tp0, 0)],
            writer: None,
        })
        .await
        .expect("append after a segment");
    let err = store
        .commit_catalog(CatalogCommit {
            entries: vec![entry(tp0, 1990, 2019, 300, 0)],
            fences: vec![fence(tp0, 0)],
            writer: None,
        })
        .await
        .expect_err("overlap with the segment");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert_eq!(
        store
            .catalog_entries(t.topic_id, 1, 0, 10)
            .await
            .expect("p1"),
        vec![entry(tp1, 0, 9, 5, 0)],
        "another partition is untouched"
    );

    // A compactor whose epoch moved is fenced and changes nothing.
    let mut p0 = t.partitions[0].clone();
    p0.leader_epoch = 1;
    store
        .update_partition(t.topic_id, p0.version, p0)
        .await
        .expect("bump");
    let before = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(before.len(), 4);
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 0),
            old: before[..2].to_vec(),
            new: vec![segment_entry(tp0, 0, 1499, 149)],
        })
        .await
        .expect_err("fenced");
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
    assert_eq!(
        store
            .catalog_entries(t.topic_id, 0, 0, 1000)
            .await
            .expect("read"),
        before
    );

    // Two compactors racing over overlapping runs: exactly one wins.
    let r1 = CatalogReplace {
        fence: fence(tp0, 1),
        old: before[..2].to_vec(),
        new: vec![segment_entry(tp0, 0, 1499, 149)],
    };
    let r2 = CatalogReplace {
        fence: fence(tp0, 1),
        old: before[1..3].to_vec(),
        new: vec![segment_entry(tp0, 1000, 1999, 199)],
    };
    let (a, b) = futures::join!(
        store.replace_catalog_entries(r1),
        store.replace_catalog_entries(r2)
    );
    assert!(a.is_ok() != b.is_ok(), "exactly one wins: {a:?} {b:?}");
    let loser = a.err().or(b.err()).expect("one lost");
    assert_eq!(loser.kind(), ErrorKind::Conflict, "{loser}");
    let raced = store
        .catalog_entries(t.topic_id, 0, 0, 1000)
        .await
        .expect("read");
    assert_eq!(raced.len(), 3);
    let mut next = 0;
    for e in &raced {
        assert_eq!(e.base_offset, next, "still contiguous: {raced:?}");
        next = e.last_offset + 1;
    }
    assert_eq!(next, 2010);

    store.delete_topic("compact").await.expect("cleanup");
    let err = store
        .replace_catalog_entries(CatalogReplace {
            fence: fence(tp0, 1),
            old: raced.clone(),
            new: vec![segment_entry(tp0, 0, 2009, 300)],
        })
        .await
        .expect_err("topic gone");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

// ---- end of catalog replace ----

/// Many partitions' replaces at once: each settles on its own (an invalid, a fenced and a
/// stale one fail alone), the rest land, and they cost a few revisions, not one each.
pub(super) async fn catalog_replace_many<K: Kv>(store: &KvStore<K>) {
    let partitions = 60;
    let t = store
        .create_topic(spec("compact-many", partitions), 1)
        .await
        .expect("create");
    let tp = |p| TopicPartition::new(t.topic_id, p);
    let fence = |p, leader_epoch| EpochFence {
        topic_partition: tp(p),
        leader_epoch,
    };
    for round in 0..3i64 {
        store
            .commit_catalog(CatalogCommit {
                entries: (0..partitions)
                    .map(|p| CatalogEntry {
                        object_key: format!("data/b1/{round}.oxb"),
                        byte_start: 100 * p as u64,
                        byte_len: 100,
                        ..entry(tp(p), round * 10, round * 10 + 9, round, 0)
                    })
                    .collect(),
                fences: (0..partitions).map(|p| fence(p, 0)).collect(),
                writer: None,
            })
            .await
            .expect("commit");
    }
    let mut replaces = Vec::new();
    for p in 0..partitions {
        let old = store
            .catalog_entries(t.topic_id, p, 0, 10)
            .await
            .expect("read");
        assert_eq!(old.len(), 3);
        replaces.push(CatalogReplace {
            fence: fence(p, 0),
            old,
            new: vec![segment_entry(tp(p), 0, 29, 2)],
        });
    }
    replaces[7].old.clear(); // invalid
    replaces[20].fence.leader_epoch = 3; // fenced
    replaces[41].old[0].crc32c ^= 1; // not the stored run
    let revision = |resp: oxbow_metadata::kv::RangeResponse| resp.revision;
    let before = revision(store.kv().range(Get::key("/")).await.expect("rev"));
    let outcomes = store.replace_catalog_entries_many(replaces.clone()).await;
    let after = revision(store.kv().range(Get::key("/")).await.expect("rev"));
    assert_eq!(outcomes.len(), replaces.len());
    for (p, outcome) in outcomes.iter().enumerate() {
        let p = p as i32;
        let served = store
            .catalog_entries(t.topic_id, p, 0, 10)
            .await
            .expect("read");
        match p {
            7 => assert_eq!(
                outcome.as_ref().map_err(|e| e.kind()),
                Err(ErrorKind::Invalid)
            ),
            20 => assert!(
                matches!(outcome, Err(oxbow_metadata::Error::Fenced { .. })),
                "{outcome:?}"
            ),
            41 => assert_eq!(
                outcome.as_ref().map_err(|e| e.kind()),
                Err(ErrorKind::Conflict)
            ),
            _ => {
                outcome.as_ref().expect("replaced");
                assert_eq!(
                    served,
                    vec![segment_entry(tp(p), 0, 29, 2)],
                    "partition {p}"
                );
                continue;
            }
        }
        assert_eq!(served.len(), 3, "partition {p} keeps its entries");
    }
    // 57 replaces of one new entry each: 21 per transaction, so 3 writes.
    assert!(
        after - before <= 3,
        "{} revisions for 57 replaces",
        after - before
    );
    // Retried whole (an unknown outcome): the landed ones are no-ops, the rest fail again.
    let again = store.replace_catalog_entries_many(replaces).await;
    assert_eq!(again.iter().filter(|r| r.is_ok()).count(), 57);
    store.delete_topic("compact-many").await.expect("cleanup");
}

/// Whether a sealed object's key is stored, as the sealer asks before deleting the object
/// of a commit that failed.
pub(super) async fn sealed_object_lookup(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("sealed-lookup", 1), 1)
        .await
        .expect("create");
    let tp = TopicPartition::new(t.topic_id, 0);
    let e = CatalogEntry {
        object_key: "data/b0/looked-up.oxb".into(),
        ..entry(tp, 0, 4, 1, 0)
    };
    assert!(!store
        .sealed_object_catalogued(0, &e.object_key)
        .await
        .expect("lookup"));
    store
        .commit_catalog(CatalogCommit {
            entries: vec![e.clone()],
            fences: vec![EpochFence {
                topic_partition: tp,
                leader_epoch: 0,
            }],
            writer: None,
        })
        .await
        .expect("commit");
    assert!(store
        .sealed_object_catalogued(0, &e.object_key)
        .await
        .expect("lookup"));
    assert!(
        !store
            .sealed_object_catalogued(7, &e.object_key)
            .await
            .expect("lookup"),
        "filed under the writer's broker id"
    );
    assert!(!store
        .sealed_object_catalogued(0, "data/b0/never.oxb")
        .await
        .expect("lookup"));
    store.delete_topic("sealed-lookup").await.expect("cleanup");
}

/// The log start offset (retention, DeleteRecords) cuts what every lookup serves: entries
/// wholly below it are gone from lookups at once, one holding it is served whole, and a
/// later state with a lower log start does not bring anything back.
pub(super) async fn catalog_log_start(store: &dyn MetadataStore) {
    let t = store
        .create_topic(spec("retained", 1), 1)
        .await
        .expect("create");
    let tp = TopicPartition::new(t.topic_id, 0);
    let fence = EpochFence {
        topic_partition: tp,
        leader_epoch: 0,
    };
    for i in 0..3 {
        store
            .commit_catalog(CatalogCommit {
                entries: vec![entry(tp, i * 10, i * 10 + 9, 100 * (i + 1), 0)],
                fences: vec![fence],
                writer: None,
            })
            .await
            .expect("commit");
    }
    // The first entry compacted into a segment (a per-partition key).
    let stored = store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("read");
    store
        .replace_catalog_entries(CatalogReplace {
            fence,
            old: stored[..1].to_vec(),
            new: vec![segment_entry(tp, 0, 9, 100)],
        })
        .await
        .expect("replace");
    let bases = |v: Vec<CatalogEntry>| v.iter().map(|e| e.base_offset).collect::<Vec<_>>();
    let advance = |to: i64| async move {
        let (_, state) = store
            .partition_state(t.topic_id, 0)
            .await
            .expect("state")
            .expect("some");
        let mut next = state.clone();
        next.log_start_offset = to;
        store
            .update_partition(t.topic_id, state.version, next)
            .await
            .expect("advance")
    };
    advance(15).await;
    let served = store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("read");
    assert_eq!(
        bases(served),
        vec![10, 20],
        "below the log start nothing is served"
    );
    let by_ts = store
        .catalog_find_timestamp(t.topic_id, 0, 0)
        .await
        .expect("ts")
        .expect("some");
    assert_eq!(by_ts.base_offset, 10);
    assert_eq!(
        store
            .catalog_last(t.topic_id, 0)
            .await
            .expect("last")
            .map(|e| e.last_offset),
        Some(29)
    );
    advance(30).await;
    assert!(store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("read")
        .is_empty());
    // A state written with a lower log start (a stale writer) keeps the higher one.
    let kept = advance(5).await;
    assert_eq!(kept.log_start_offset, 30);
    assert!(store
        .catalog_entries(t.topic_id, 0, 0, 10)
        .await
        .expect("read")
        .is_empty());
    store.delete_topic("retained").await.expect("cleanup");
}
