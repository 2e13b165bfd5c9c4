//! The WAL on the simulation's disk: its writer runs as a task, and what a crash or a
//! failed fsync leaves is what replay finds.
use super::tests::append_result as append;
use super::*;
use crate::wal_disk::{DiskFaults, MemDisk};
use oxbow_metadata::clock::SeededRng;

fn settings() -> WalSettings {
    WalSettings {
        dir: PathBuf::from("/sim/wal"),
        file_bytes_max: 256,
        budget_bytes: 1 << 30,
        direct_writes: true,
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_crash_keeps_every_acknowledged_entry_and_drops_the_torn_one() {
    let disk = MemDisk::new("wal");
    let rng = SeededRng::new(1);
    let (wal, found) = Wal::open_on(settings(), Arc::new(disk.clone()), &*rng).expect("open");
    assert!(found.is_empty() && wal.is_new_incarnation());
    let incarnation = wal.incarnation();
    let mut acked = Vec::new();
    for i in 0..20u8 {
        acked.push(append(&wal, &[i; 40]).await.expect("durable"));
    }
    // Several files (256 bytes each): the WAL rolled on the simulated disk too.
    assert!(disk.list().expect("ls").len() > 3);
    // An entry written but never fsynced, then a crash that keeps half of it.
    disk.set_faults(DiskFaults {
        full: false,
        sync_fails: true,
    });
    assert!(
        append(&wal, &[99; 40]).await.is_err(),
        "a failed fsync is no ack"
    );
    drop(wal);
    disk.set_faults(DiskFaults::default());
    disk.crash(|_, pending| pending / 2);
    let (wal, found) = Wal::open_on(settings(), Arc::new(disk.clone()), &*rng).expect("reopen");
    assert_eq!(wal.incarnation(), incarnation);
    let sequences: Vec<u64> = found.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, acked, "every acknowledged entry, nothing else");
    // A lost disk is a new incarnation with nothing in it.
    drop(wal);
    disk.lose();
    let (wal, found) = Wal::open_on(settings(), Arc::new(disk), &*rng).expect("reopen lost");
    assert!(found.is_empty());
    assert_ne!(wal.incarnation(), incarnation);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_crash_in_a_reused_file_keeps_what_was_fsynced_and_none_of_its_old_entries() {
    let disk = MemDisk::new("wal");
    let rng = SeededRng::new(2);
    let (wal, _) = Wal::open_on(settings(), Arc::new(disk.clone()), &*rng).expect("open");
    let mut acked = Vec::new();
    for i in 0..12u8 {
        acked.push(append(&wal, &[i; 40]).await.expect("durable"));
    }
    // Everything before the newest file is uploaded: trimmed files go to the pool, and the
    // WAL's first file (nothing to reuse then) zero-filled one once half full.
    let keep_from = *acked.last().expect("acked");
    wal.trim(keep_from).expect("trim");
    assert!(disk.pooled().expect("pool") > 0);
    for i in 12..20u8 {
        acked.push(append(&wal, &[i; 40]).await.expect("durable"));
    }
    disk.set_faults(DiskFaults {
        full: false,
        sync_fails: true,
    });
    assert!(append(&wal, &[99; 40]).await.is_err());
    drop(wal);
    disk.set_faults(DiskFaults::default());
    disk.crash(|_, pending| pending / 2);
    let (_, found) = Wal::open_on(settings(), Arc::new(disk.clone()), &*rng).expect("reopen");
    let sequences: Vec<u64> = found.iter().map(|e| e.sequence).collect();
    let first_kept = sequences.first().copied().expect("some kept");
    assert!(first_kept <= keep_from, "nothing not uploaded was trimmed");
    acked.retain(|s| *s >= first_kept);
    assert_eq!(
        sequences, acked,
        "every acknowledged entry kept, no old one replayed"
    );
    assert!(found.iter().all(|e| e.batch[0] != 99));
}
