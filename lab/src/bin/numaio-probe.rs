//! Guest-side probe for lab tests; see `numaio_lab::probe`.

fn main() -> std::process::ExitCode {
    numaio_lab::probe::main()
}
