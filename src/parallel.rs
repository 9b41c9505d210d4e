//! Work split over the machine's two cores where there is enough of it.

/// `f` over `items`: on two threads when there are at least `from` of them (the first
/// half on this thread, the second on a scoped one), else on this thread alone. The
/// results come in the order of `items`; a panic on the other thread is raised here.
pub fn in_halves<T: Sync, R: Send>(
    items: &[T],
    from: usize,
    f: impl Fn(&[T]) -> Vec<R> + Sync,
) -> Vec<R> {
    if items.len() < from.max(2) {
        return f(items);
    }
    let (first, second) = items.split_at(items.len() / 2);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| f(second));
        let mut out = f(first);
        out.extend(
            other
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        );
        out
    })
}

#[cfg(test)]
mod tests {
    use super::in_halves;

    #[test]
    fn halves_keep_the_order_of_the_items() {
        let items: Vec<u32> = (0..1001).collect();
        let doubled = |part: &[u32]| part.iter().map(|i| i * 2).collect::<Vec<_>>();
        let expected: Vec<u32> = items.iter().map(|i| i * 2).collect();
        assert_eq!(in_halves(&items, 10, doubled), expected);
        assert_eq!(in_halves(&items, 5000, doubled), expected);
        assert_eq!(in_halves(&[] as &[u32], 0, doubled), Vec::<u32>::new());
    }
}
