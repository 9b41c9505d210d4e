//! The global allocator's settings: jemalloc, handing freed memory back to the system
//! within about a second.
//!
//! A full build at 10k allocates as much again as it keeps, in small blocks between the
//! long-lived ones; what stays resident afterwards is every page still holding anything.
//! jemalloc packs small blocks in runs of a few pages (mimalloc, used before, in 64 KiB
//! pages, more of which stayed partly filled: 176–186 MiB steady against 157 MiB), and its
//! background thread returns free pages while Isobar is idle (without it, decay only
//! advances while something allocates, and a controller at rest kept its cold-start peak).
//! See BENCHMARKS.md ("Memory at 10k"; the measurements of each step are in its git history).

/// The allocator the `isobar` binary (and the bench binary) installs.
pub use tikv_jemallocator::Jemalloc as Allocator;

/// How long freed pages stay mapped for reuse before they go back to the system.
const DECAY_MS: isize = 1000;

/// Settings jemalloc refused, with why (logged by `serve` once tracing is up).
static REFUSED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Applies the settings; call first thing in `main`, before other threads start. A
/// refused setting is never fatal: Isobar runs on jemalloc's defaults (see [`refused`]).
pub fn tune() {
    use tikv_jemalloc_ctl::{Access as _, AsName as _};
    let mut refused = Vec::new();
    let mut set = |key: &'static [u8], value: isize| {
        if let Err(error) = key.name().write(value) {
            refused.push(format!(
                "{}: {error}",
                String::from_utf8_lossy(&key[..key.len() - 1])
            ));
        }
    };
    // Arenas made from now on, and the one already serving this thread.
    set(b"arenas.dirty_decay_ms\0", DECAY_MS);
    set(b"arenas.muzzy_decay_ms\0", 0);
    set(b"arena.0.dirty_decay_ms\0", DECAY_MS);
    set(b"arena.0.muzzy_decay_ms\0", 0);
    if let Err(error) = tikv_jemalloc_ctl::background_thread::write(true) {
        refused.push(format!("background_thread: {error}"));
    }
    let _ = REFUSED.set(refused);
}

/// Moves the calling thread's allocations to jemalloc's first arena. By default each
/// thread gets an arena of its own (up to four per core), each with its own part-filled
/// runs of every size; Isobar's threads (a handful, most of them idle) sharing one keep
/// fewer (kube profile at 10k: 2 MiB less steady RSS, measured with `narenas:1`). The
/// runtime calls it as each of its threads starts.
pub fn share_arena() {
    use tikv_jemalloc_ctl::{Access as _, AsName as _};
    let _ = b"thread.arena\0".name().write(0u32);
}

/// The settings [`tune`] could not apply.
pub fn refused() -> &'static [String] {
    REFUSED.get().map_or(&[], Vec::as_slice)
}
