fn main() -> std::process::ExitCode {
    isobar::cli::main()
}
