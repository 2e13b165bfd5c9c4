//! One conformance suite, run against both disks; then what only the simulated disk
//! does (crashes, torn writes, loss, injected failures).
use super::*;

fn conformance(disk: &dyn WalDisk) {
    disk.create_dir().expect("mkdir");
    assert!(disk.list().expect("ls").is_empty());
    assert_eq!(
        disk.read("a.wal").expect_err("absent").kind(),
        io::ErrorKind::NotFound
    );
    let mut f = disk.open_append("a.wal").expect("open");
    f.write_all(b"hello ").expect("write");
    f.write_all(b"world").expect("write");
    f.sync().expect("sync");
    assert_eq!(disk.read("a.wal").expect("read"), b"hello world");
    // Reopening appends after what is there.
    let mut g = disk.open_append("a.wal").expect("reopen");
    g.write_all(b"!").expect("write");
    g.sync().expect("sync");
    assert_eq!(disk.read("a.wal").expect("read"), b"hello world!");
    f.set_len(5).expect("set_len");
    assert_eq!(disk.read("a.wal").expect("read"), b"hello");
    disk.truncate("a.wal", 2).expect("truncate");
    assert_eq!(disk.read("a.wal").expect("read"), b"he");
    disk.write_atomic("incarnation", b"1\n").expect("atomic");
    disk.write_atomic("incarnation", b"2\n")
        .expect("atomic again");
    assert_eq!(disk.read("incarnation").expect("read"), b"2\n");
    let mut names = disk.list().expect("ls");
    names.sort();
    assert_eq!(names, vec!["a.wal".to_string(), "incarnation".to_string()]);
    disk.remove("a.wal").expect("rm");
    assert_eq!(disk.list().expect("ls"), vec!["incarnation".to_string()]);
    assert!(disk.remove("a.wal").is_err(), "removing twice fails");
    assert!(!disk.location().is_empty());

    // Directories: files inside them are not this directory's, and go with them.
    assert!(disk.list_dirs().expect("ls -d").is_empty());
    let sub = disk.subdir("b2");
    assert!(sub.list_dirs().expect("absent dir").is_empty());
    let inner = sub.subdir("0001");
    inner.create_dir().expect("mkdir -p");
    let mut h = inner.open_append("1.wal").expect("open inside");
    h.write_all(b"copy").expect("write");
    h.sync().expect("sync");
    // An empty directory is listed too.
    sub.subdir("0002").create_dir().expect("mkdir");
    assert_eq!(inner.read("1.wal").expect("read"), b"copy");
    assert_eq!(inner.list().expect("ls"), vec!["1.wal".to_string()]);
    assert_eq!(disk.list().expect("ls"), vec!["incarnation".to_string()]);
    assert_eq!(disk.list_dirs().expect("ls -d"), vec!["b2".to_string()]);
    assert!(sub.list().expect("ls").is_empty());
    let mut incs = sub.list_dirs().expect("ls -d");
    incs.sort();
    assert_eq!(incs, vec!["0001".to_string(), "0002".to_string()]);
    sub.remove_dir("0001").expect("rm -r");
    sub.remove_dir("0001").expect("rm -r of nothing");
    assert_eq!(sub.list_dirs().expect("ls -d"), vec!["0002".to_string()]);
    assert!(inner.read("1.wal").is_err());
    disk.remove_dir("b2").expect("rm -r");
    assert!(disk.list_dirs().expect("ls -d").is_empty());
    assert_eq!(disk.read("incarnation").expect("kept"), b"2\n");

    // Recycling: a file's blocks go to the pool (not listed), up to `keep`, and come
    // back under a new name with their old bytes after what is written.
    for name in ["r1.wal", "r2.wal"] {
        let mut f = disk.open_append(name).expect("open");
        f.write_all(b"hello world").expect("write");
        f.sync().expect("sync");
    }
    disk.recycle("r1.wal", 1).expect("recycle");
    disk.recycle("r2.wal", 1)
        .expect("recycle past keep deletes");
    assert_eq!(disk.pooled().expect("pool"), 1);
    assert_eq!(disk.list().expect("ls"), vec!["incarnation".to_string()]);
    assert!(disk.read("r1.wal").is_err());
    let (mut f, reused) = disk.open_recycled("r3.wal").expect("open recycled");
    assert!(reused);
    assert_eq!(disk.pooled().expect("pool"), 0);
    f.write_all(b"HE").expect("write");
    f.sync().expect("sync");
    assert_eq!(disk.read("r3.wal").expect("read"), b"HEllo world");
    f.write_all(b"LLO").expect("write");
    f.sync().expect("sync");
    assert_eq!(disk.read("r3.wal").expect("read"), b"HELLO world");
    f.set_len(4).expect("cut back");
    assert_eq!(disk.read("r3.wal").expect("read"), b"HELL");
    let (mut g, reused) = disk.open_recycled("r4.wal").expect("open, pool empty");
    assert!(!reused);
    g.write_all(b"new").expect("write");
    g.sync().expect("sync");
    assert_eq!(disk.read("r4.wal").expect("read"), b"new");
    disk.preallocate(10).expect("zero-fill");
    assert_eq!(disk.pooled().expect("pool"), 1);
    disk.drain_pool().expect("drain");
    disk.preallocate(10).expect("zero-fill");
    disk.drain_pool().expect("drain");
    assert_eq!(disk.pooled().expect("pool"), 0);
    disk.preallocate(10).expect("zero-fill");
    let (mut h, reused) = disk.open_recycled("r5.wal").expect("open zero-filled");
    assert!(reused);
    h.write_all(b"ab").expect("write");
    h.sync().expect("sync");
    assert_eq!(disk.read("r5.wal").expect("read"), b"ab\0\0\0\0\0\0\0\0");
    let mut names = disk.list().expect("ls");
    names.sort();
    assert_eq!(names, vec!["incarnation", "r3.wal", "r4.wal", "r5.wal"]);
    for name in ["r3.wal", "r4.wal", "r5.wal"] {
        disk.remove(name).expect("rm");
    }
}

#[test]
fn fs_disk_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = FsDisk::new(dir.path().join("wal"));
    conformance(&*disk);
    assert!(disk.blocking());
}

#[test]
fn mem_disk_conforms() {
    let disk = MemDisk::new("test");
    conformance(&disk);
    assert!(!disk.blocking());
}

#[test]
fn a_crash_keeps_what_was_fsynced_and_a_torn_prefix_of_the_rest() {
    let disk = MemDisk::new("crash");
    let mut f = disk.open_append("a").expect("open");
    f.write_all(b"durable").expect("write");
    f.sync().expect("sync");
    f.write_all(b"pending").expect("write");
    disk.crash(|name, pending| {
        assert_eq!((name, pending), ("a", 7));
        3
    });
    assert_eq!(disk.read("a").expect("read"), b"durablepen");
    // The crashed process's handle is dead.
    assert!(f.write_all(b"x").is_err());
    assert!(f.sync().is_err());
    // A directory is on the same disk: the crash tears its files too, a loss takes them.
    let sub = disk.subdir("replicas");
    let mut g = sub.open_append("c").expect("open");
    g.write_all(b"copy").expect("write");
    disk.crash(|_, pending| pending / 2);
    assert_eq!(sub.read("c").expect("read"), b"co");
    disk.lose();
    assert!(disk.list().expect("ls").is_empty());
    assert!(sub.read("c").is_err());
}

#[test]
fn injected_failures_fail_writes_and_fsyncs() {
    let disk = MemDisk::new("faults");
    let mut f = disk.open_append("a").expect("open");
    disk.set_faults(DiskFaults {
        full: true,
        sync_fails: false,
    });
    let e = f.write_all(b"abcd").expect_err("full");
    assert_eq!(e.raw_os_error(), Some(28));
    assert!(disk.write_atomic("b", b"x").is_err());
    disk.set_faults(DiskFaults {
        full: false,
        sync_fails: true,
    });
    f.write_all(b"ef").expect("write");
    assert_eq!(f.sync().expect_err("eio").raw_os_error(), Some(5));
    // Unsynced: a crash may drop it all.
    disk.crash(|_, _| 0);
    assert!(disk.read("a").expect("read").is_empty());
}
