/// mimalloc: a build allocates and frees many small strings and maps; the system
/// allocator spends a third of a large build in malloc/free (see BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    isobar::cli::main()
}
