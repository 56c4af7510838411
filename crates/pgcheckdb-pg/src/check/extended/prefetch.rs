//! A hint to the processor to start loading a cache line that will be read soon. The fact
//! engine's gathers (sorted records scattered over an arena, Bloom filter blocks chosen by a
//! hash) miss the cache on nearly every access; issuing the loads a few steps ahead lets the
//! misses overlap instead of waiting for one after another. A hint only: it never faults and
//! changes no result.

/// Asks for the cache line holding `bytes[at]` (nothing when `at` is out of range).
#[inline(always)]
pub fn prefetch(bytes: &[u8], at: usize) {
    if let Some(p) = bytes.get(at) {
        prefetch_ptr(p as *const u8);
    }
}

/// Asks for the cache line at `p`.
#[inline(always)]
pub fn prefetch_ptr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never dereferences in a way that can fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
