/// jemalloc, tuned to hand freed memory back (see `isobar::allocator`).
#[global_allocator]
static GLOBAL: isobar::allocator::Allocator = isobar::allocator::Allocator;

fn main() -> std::process::ExitCode {
    isobar::allocator::tune();
    isobar::cli::main()
}
