//! `jobset`: the single binary. `jobset up` runs the embedded control plane.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod bench;
mod node;
mod up;

#[derive(Parser)]
#[command(name = "jobset", version, about = "Fault-tolerant JobSet orchestration, on a cluster or on one machine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded Kubernetes-compatible API server (HTTPS on loopback, bearer token).
    Up(up::UpArgs),
    /// Failure injection on local nodes.
    Node {
        #[command(subcommand)]
        what: node::NodeCommand,
    },
    /// Print performance figures.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("JOBSET_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the Tokio runtime")?;
    match cli.command {
        Command::Up(args) => rt.block_on(up::run(args)),
        Command::Node { what } => rt.block_on(node::run(what)),
        Command::Bench { what } => rt.block_on(bench::run(what)),
    }
}

/// Parses `500ms`, `5s`, `2m` style durations for flags.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len()));
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 5s, 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration {s:?}: unit must be ms, s, m or h")),
    };
    Ok(Duration::from_secs_f64(secs))
}

pub fn default_state_dir() -> PathBuf {
    std::env::temp_dir().join(format!("jobset-{}", std::process::id()))
}
