fn main() -> std::process::ExitCode {
    cudafuzz::cli::main()
}
