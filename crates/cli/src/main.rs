use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() {
    // Before any thread starts: chunk-sized buffers are reused, not
    // faulted in anew (quarry_cli::tune_allocator says why).
    quarry_cli::tune_allocator();
    let cli = quarry_cli::Cli::parse();
    // Node logs go to stderr (a node's log file under `quarry up`); client
    // commands only log warnings unless RUST_LOG says otherwise.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Err(error) = quarry_cli::run(cli) {
        // grep's "nothing matched" is an exit status, not an error.
        if let Some(status) = error.downcast_ref::<quarry_cli::ExitStatus>() {
            std::process::exit(status.0);
        }
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}
