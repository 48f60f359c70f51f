//! Independent per-message work on every core: the scans of a long
//! thread's outputs do not depend on each other, and a cold call on a
//! 36 MB thread should not run on one core of several. Pure CPU, scoped
//! threads (no pool, no runtime); small inputs stay on the caller's thread,
//! where spawning would cost more than it saves.

/// Bytes of input below which the work stays on the calling thread.
pub const PARALLEL_FROM_BYTES: usize = 64 * 1024;

/// `f` over `items` in order, split into contiguous chunks of about equal
/// `weight` run on scoped threads when the total weight reaches
/// [`PARALLEL_FROM_BYTES`] and the machine has more than one core.
pub fn map<T, R, F, W>(items: &[T], weight: W, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> R + Sync,
    W: Fn(&T) -> usize,
{
    // Inside another split every core is busy already: more threads would
    // only add spawns and switches.
    if items.len() < 2 || cores() < 2 || SPLIT.get() {
        return items.iter().map(f).collect();
    }
    let weights: Vec<usize> = items.iter().map(weight).collect();
    let total: usize = weights.iter().sum();
    if total < PARALLEL_FROM_BYTES {
        return items.iter().map(f).collect();
    }
    let cores = cores();
    // Contiguous chunks of about total / cores weight each.
    let share = total.div_ceil(cores).max(1);
    let mut bounds = vec![0];
    let mut acc = 0;
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        if acc >= share && i + 1 < items.len() && bounds.len() < cores {
            bounds.push(i + 1);
            acc = 0;
        }
    }
    bounds.push(items.len());
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = bounds
            .windows(2)
            .skip(1)
            .map(|w| {
                let chunk = &items[w[0]..w[1]];
                scope.spawn(move || {
                    SPLIT.set(true);
                    chunk.iter().map(f).collect::<Vec<R>>()
                })
            })
            .collect();
        // The first chunk runs here while the others run on their threads.
        let mut out: Vec<R> = in_split(|| items[bounds[0]..bounds[1]].iter().map(f).collect());
        for h in handles {
            match h.join() {
                Ok(part) => out.extend(part),
                // A panic in `f` is the caller's panic, as if run inline.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

thread_local! {
    /// This thread is running one part of a split.
    static SPLIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` marked as part of a split (restored after, also on panic).
fn in_split<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SPLIT.set(self.0);
        }
    }
    let _restore = Restore(SPLIT.replace(true));
    f()
}

/// The cores this process may use, asked once (the answer reads cgroup
/// files on Linux, which a per-turn call should not).
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_whether_split_or_not() {
        let small: Vec<usize> = (0..100).collect();
        assert_eq!(
            map(&small, |_| 1, |x| x * 2),
            (0..100).map(|x| x * 2).collect::<Vec<_>>()
        );
        // Weighted so the split happens on any machine with two cores.
        let big: Vec<usize> = (0..10_000).collect();
        let out = map(&big, |&x| if x % 7 == 0 { 4096 } else { 1 }, |x| x + 1);
        assert_eq!(out, (1..=10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_split_inside_a_split_runs_inline_in_order() {
        let outer: Vec<usize> = (0..64).collect();
        let out = map(
            &outer,
            |_| 4096,
            |&x| {
                let inner: Vec<usize> = (0..50).collect();
                map(&inner, |_| 4096, |&y| x * 100 + y)
            },
        );
        let want: Vec<Vec<usize>> = (0..64)
            .map(|x| (0..50).map(|y| x * 100 + y).collect())
            .collect();
        assert_eq!(out, want);
        // The caller's thread is no longer marked once the split is over.
        assert!(!SPLIT.get());
    }
}
