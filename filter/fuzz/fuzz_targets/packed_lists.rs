//! libFuzzer entry for `checks::packed_lists` (see `../checks.rs` for what it checks), and the
//! decoder's allocation bound, which only a global allocator can see: whatever the input, the
//! decoder's peak allocation stays under a ceiling set by the format's limits (the inflated
//! body, the prefixes' vector), not by what the input declares or inflates to.
#![no_main]

#[allow(dead_code)] // each target calls one of the checks
#[path = "../checks.rs"]
mod checks;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use pow_core::packed;

/// The system allocator, counting the bytes held now and the most held since the last reset.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn add(size: usize) {
    let now = HELD.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to System unchanged; only the counters are ours.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as the new block before the old one goes: what realloc may hold at once.
        add(new_size);
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most a decode may hold: the base64-decoded input, the inflated body (at most the limit;
/// its last growth holds old and new at once), the inflater's state, and the prefixes.
fn ceiling(input: usize) -> usize {
    input
        + 2 * packed::MAX_BODY_BYTES
        + (64 << 10)
        + packed::MAX_PREFIXES * size_of::<pow_core::lists::Net>()
}

/// The peak allocation of `f` above what was held before it.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (_, text_peak) = peak_of(|| packed::decode(&text, packed::MAX_PREFIXES).map(|n| n.len()));
    let (_, raw_peak) =
        peak_of(|| packed::decode_bytes(data, packed::MAX_PREFIXES).map(|n| n.len()));
    for peak in [text_peak, raw_peak] {
        assert!(peak <= ceiling(data.len()), "the decoder held {peak} bytes");
    }
    checks::packed_lists(data);
});
