//! `jobset bench`: benchmarks that print figures (recorded in docs/benchmarks.md).

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// API server: create throughput, watch fan-out latency, memory, durable writes.
    Apiserver,
}

pub async fn run(what: BenchCommand) -> anyhow::Result<()> {
    match what {
        BenchCommand::Apiserver => anyhow::bail!("not built yet"),
    }
}
