//! The allocator of every program of the project (the binary, the benchmark server, the
//! benches): jemalloc, configured to hand freed memory back to the system.
//!
//! glibc malloc slowed request parsing 2-3x next to a large cached cluster view (BENCHMARKS.md,
//! "Allocator"). jemalloc's defaults keep freed pages resident until later allocations
//! happen to purge them, so the memory a `--state` load or an initial list passes through
//! stayed in the resident size of an idle server; a background thread now returns pages a
//! second after they were freed (`muzzy_decay_ms:0`: released outright, not lazily). One
//! arena (`narenas:1`, where the default is four per CPU): the view's long-lived objects and
//! a list's short-lived ones then share pages that are freed whole, instead of fragmenting
//! eight arenas; at 50,000 claims it cut the peak by 16 MiB (BENCHMARKS.md, "Ready in seconds").

/// The options string jemalloc reads at start (`malloc_conf`, prefixed as tikv-jemalloc-sys
/// builds it); `_RJEM_MALLOC_CONF` in the environment still overrides it.
pub const OPTIONS: &std::ffi::CStr =
    c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1";

/// A pointer to [`OPTIONS`], laid out as the C `const char *malloc_conf` jemalloc declares.
#[repr(transparent)]
pub struct Options(pub *const std::ffi::c_char);

// SAFETY: it points to an immutable, 'static C string.
unsafe impl Sync for Options {}

#[cfg(not(target_env = "msvc"))]
pub use tikv_jemallocator::Jemalloc;

/// Installs jemalloc as the global allocator with [`OPTIONS`]; call once, at the root of a
/// binary, example or bench.
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[cfg(not(target_env = "msvc"))]
        #[global_allocator]
        static ALLOCATOR: $crate::allocator::Jemalloc = $crate::allocator::Jemalloc;

        #[cfg(not(target_env = "msvc"))]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        #[used]
        static MALLOC_CONF: $crate::allocator::Options =
            $crate::allocator::Options($crate::allocator::OPTIONS.as_ptr());
    };
}
