//! A test-only global allocator for the protocol fuzzer: it refuses any single allocation
//! larger than its bound (the standard library then aborts the process with "memory
//! allocation of N bytes failed", after this crate names the execution that caused it),
//! so a reservation sized by a claimed count fails the test instead of passing silently on
//! a machine with memory to spare. It also counts the bytes each thread holds, so a test
//! can measure how much one decode held at once ([`peak_bytes_of`]).
//!
//! Install it in a test binary:
//! `#[global_allocator] static GUARD: alloc_guard::Guard = alloc_guard::Guard::new(256 << 20);`

#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write as _;

/// Refuses single allocations over `max` bytes; otherwise forwards to [`System`].
pub struct Guard {
    max: usize,
}

impl Guard {
    pub const fn new(max: usize) -> Self {
        Self { max }
    }

    fn refuse(&self, size: usize) -> bool {
        if size <= self.max {
            return false;
        }
        // No allocation here: the process is about to abort on this very failure.
        let mut buf = [0u8; 200];
        let mut w = &mut buf[..];
        let (name, n) = EXECUTION.try_with(|e| e.get()).unwrap_or(("?", 0));
        let _ = write!(
            w,
            "\nalloc-guard: REFUSED one allocation of {size} bytes (limit {}) in {name} \
             execution {n}\n",
            self.max
        );
        let left = w.len();
        let _ = std::io::stderr().write_all(&buf[..buf.len() - left]);
        true
    }
}

thread_local! {
    /// Bytes this thread holds through the allocator, and the most since the last reset.
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    /// The caller's (target, execution number) on this thread, reported with a refusal.
    static EXECUTION: Cell<(&'static str, u64)> = const { Cell::new(("?", 0)) };
}

/// Records which execution this thread is running, for the refusal report.
pub fn set_execution(target: &'static str, n: u64) {
    let _ = EXECUTION.try_with(|e| e.set((target, n)));
}

fn track_alloc(size: usize) {
    let _ = LIVE.try_with(|l| {
        let live = l.get().wrapping_add(size);
        l.set(live);
        let _ = PEAK.try_with(|p| p.set(p.get().max(live)));
    });
}

fn track_free(size: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get().wrapping_sub(size)));
}

/// Runs `f` and returns the most bytes it held at once, on this thread, above what the
/// thread held before (memory freed on another thread is not seen).
pub fn peak_bytes_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, PEAK.with(|p| p.get()).saturating_sub(base))
}

// SAFETY: every call forwards to `System` with the caller's layout and pointer unchanged;
// the guard only returns null instead (which callers must handle, as for any allocator)
// or updates thread-local counters, which never allocate.
unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.refuse(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track_free(layout.size());
        // SAFETY: `ptr` came from `System` with this layout (every allocation here does).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.refuse(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track_free(layout.size());
            track_alloc(new_size);
        }
        p
    }
}
