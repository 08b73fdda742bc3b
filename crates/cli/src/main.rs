//! `jobset`: the single binary. `jobset up` runs the embedded control plane; `jobset run`
//! applies manifests and waits for their Jobs; `get`, `describe`, `logs`, `delete`, `events`,
//! `apply` work against any API server, as kubectl does. Log lines go to stderr (`logging`);
//! `completion` and `version` print what clap and the build know.
//!
//! Exit codes: 0 success; 1 failure (a Job failed, an error from the server); 2 `run --timeout`
//! expired; 3 usage or input errors (bad flags, bad YAML, objects the server rejects in `run`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use jobset_api::manifest;

// The control plane allocates and frees small JSON values at a high rate from many threads; glibc's
// allocator spent ~40% of a 5,000-pod restart's CPU in malloc and free (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The index of `mi_option_purge_delay` in mimalloc.h's `mi_option_t` (v3, the `mimalloc` crate's
// default), which libmimalloc-sys names no constant for.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// How long (ms) mimalloc keeps freed memory before it returns it to the OS: 0 re-faulted memory
/// on every allocation after a free (create throughput 0.56× of this), a long delay kept a
/// burst's garbage resident (docs/benchmarks.md, "Allocator: a purge delay with a purging
/// thread"); `MIMALLOC_PURGE_DELAY` still wins.
const PURGE_DELAY_MS: std::ffi::c_long = 2;
/// mimalloc purges only when it is called: memory freed by a burst would stay resident for as
/// long as the process then idles. A thread asks it to purge what has expired this often.
const PURGE_EVERY: Duration = Duration::from_millis(100);

/// mimalloc's options, before any thread but this one allocates.
fn tune_allocator() {
    // SAFETY: sets one option of the allocator linked in as the global one; it reads options on
    // use, and an option set from the environment is left as it is.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

/// The thread that lets mimalloc purge while the process idles.
fn spawn_purger() {
    let _ = std::thread::Builder::new().name("mimalloc-purge".into()).spawn(|| {
        loop {
            std::thread::sleep(PURGE_EVERY);
            // SAFETY: mimalloc's collection is thread-safe; not forced, it purges only memory
            // unused for longer than the purge delay.
            unsafe { libmimalloc_sys::mi_collect(false) };
        }
    });
}

mod agent;
mod apply;
// bench.rs is maintained separately; it trips this lint on newer clippy.
mod bench;
mod chaos;
mod client;
mod cluster;
mod delete;
mod describe;
mod events;
mod exec;
mod get;
mod kinds;
mod kubeconfig;
mod lifecycle;
mod logging;
mod logs;
mod manifests;
mod node;
mod progress;
mod run;
mod timeline;
mod up;

/// `0.1.0 (commit abc1234)`: what `jobset version` and `jobset --version` print after the name;
/// the commit is build.rs's ("unknown" when built outside a git checkout).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("JOBSET_GIT_COMMIT"), ")");

/// Exit code for usage and input errors.
pub const USAGE: i32 = 3;

/// An error that ends the command with an exit code and a message shown as is.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

#[derive(Parser)]
#[command(name = "jobset", version = VERSION, about = "Fault-tolerant JobSet orchestration, on a cluster or on one machine")]
struct Cli {
    /// Log lines on stderr: `text` (coloured only on a terminal, never with NO_COLOR) or `json`
    /// (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded Kubernetes-compatible API server (HTTPS on loopback, bearer token).
    Up(up::UpArgs),
    /// List the local clusters (data directories under ~/.local/share/jobset): endpoint, pid,
    /// health.
    Status(lifecycle::StatusArgs),
    /// Stop a local cluster (SIGTERM, pods terminated gracefully) and remove its kubeconfig
    /// context; its data stays for the next `jobset up`.
    Down(lifecycle::DownArgs),
    /// Failure injection on local nodes.
    Node {
        #[command(subcommand)]
        what: node::NodeCommand,
    },
    /// Apply manifests, then show progress until every Job has finished (embedded cluster by default).
    Run(run::RunArgs),
    /// Server-side apply manifests (`-f FILE`, repeatable; `-` for stdin).
    Apply(apply::ApplyArgs),
    /// List resources as a table (or one object), like kubectl get.
    Get(get::GetArgs),
    /// Show an object in detail, with its conditions and events.
    Describe(describe::DescribeArgs),
    /// Print a pod's (or `job/NAME`'s first pod's) container logs.
    Logs(logs::LogsArgs),
    /// Delete objects by name, or all of a kind with --all.
    Delete(delete::DeleteArgs),
    /// List events, like kubectl events.
    Events(events::EventsArgs),
    /// Run a command in a running container of a local (process runtime) pod.
    Exec(exec::ExecArgs),
    /// Write a JobSet's restart timeline: a self-contained HTML Gantt chart of its pods and
    /// restarts (`NAME-timeline.html`), or JSON with `--format json`.
    Timeline(timeline::TimelineArgs),
    /// Run the JobSet and AppWrapper controllers against a cluster (a kubeconfig, or in-cluster),
    /// as upstream's controller manager: leader election, health probes, metrics.
    Manager(jobset_manager::ManagerArgs),
    /// Run the JobSet in-place restart agent in a pod (configured by environment variables,
    /// see docs/in-place-restart.md); exits with the code that restarts the pod in place.
    Agent(agent::AgentArgs),
    /// Write the deployment files generated from the code (the CRDs).
    Manifests {
        #[command(subcommand)]
        what: manifests::ManifestsCommand,
    },
    /// Print performance figures.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
    /// Run a restart-heavy scenario many times under injected faults (kill -9 of `jobset up`,
    /// lost nodes, a full disk) and compare each end state with the fault-free one (docs/chaos.md).
    Chaos(chaos::ChaosArgs),
    /// Print a shell completion script to stdout, e.g. `source <(jobset completion bash)`.
    Completion {
        /// The shell the script is for.
        shell: clap_complete::Shell,
    },
    /// Print the version and the git commit it was built from.
    Version,
}

fn main() {
    tune_allocator();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            std::process::exit(if usage { USAGE } else { 0 });
        }
    };
    // Commands that only print what the server says end quietly when their reader does (`jobset
    // get pods | head`), as kubectl does, instead of panicking on the broken pipe. Not those that
    // run pods: a write to a child's closed pipe must not end the cluster.
    if matches!(
        cli.command,
        Command::Get(_)
            | Command::Describe(_)
            | Command::Logs(_)
            | Command::Events(_)
            | Command::Timeline(_)
            | Command::Apply(_)
            | Command::Delete(_)
            | Command::Completion { .. }
            | Command::Version
    ) {
        // SAFETY: no other thread exists yet, and SIG_DFL installs no handler code.
        let _ = unsafe {
            nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl)
        };
    }
    // An agent lives for one in-place restart attempt, with a heap of a few MB: mimalloc asks for
    // transparent huge pages, and zeroing a fresh 2 MiB page per arena touch was the largest CPU
    // cost of 64 agents restarting at once (docs/benchmarks.md). Disabling THP is per process.
    if matches!(cli.command, Command::Agent(_)) {
        let _ = nix::sys::prctl::set_thp_disable(true);
    }
    // The client commands keep the embedded cluster's logs (run) and kube's quiet by default.
    // Benchmarks run thousands of in-process agents: only their warnings.
    let default_filter = match cli.command {
        Command::Bench { .. } => "info,jobset_agent=warn",
        Command::Up(_) | Command::Node { .. } | Command::Agent(_) => "info",
        // kube's request tracing logs every failed request as an error: the manager reports
        // failures itself, once, with their cause.
        Command::Manager(_) => "info,kube_client::client::builder=off",
        // The chaos driver's requests fail by design while `jobset up` is down.
        Command::Chaos(_) => "warn,kube_client=error,kube_client::client::builder=off",
        _ => "warn",
    };
    logging::init(cli.log_format, default_filter);
    // Not for an agent: it lives for one attempt with a heap of a few MB.
    if !matches!(cli.command, Command::Agent(_)) {
        spawn_purger();
    }
    let code = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => {
            let result = rt.block_on(dispatch(cli.command));
            rt.shutdown_timeout(Duration::from_secs(1));
            match result {
                Ok(code) => code,
                Err(e) => match e.downcast_ref::<Failure>() {
                    Some(f) => {
                        eprintln!("{}", f.message);
                        f.code
                    }
                    None => {
                        eprintln!("error: {e:#}");
                        1
                    }
                },
            }
        }
        Err(e) => {
            eprintln!("error: starting the Tokio runtime: {e}");
            1
        }
    };
    std::process::exit(code);
}

async fn dispatch(command: Command) -> anyhow::Result<i32> {
    let ok = |r: anyhow::Result<()>| r.map(|()| 0);
    match command {
        Command::Up(args) => ok(up::run(args).await),
        Command::Status(args) => ok(lifecycle::status(args).await),
        Command::Down(args) => ok(lifecycle::down(args).await),
        Command::Node { what } => ok(node::run(what).await),
        Command::Bench { what } => ok(bench::run(what).await),
        Command::Chaos(args) => chaos::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Apply(args) => apply::run(args).await,
        Command::Get(args) => get::run(args).await,
        Command::Describe(args) => describe::run(args).await,
        Command::Logs(args) => logs::run(args).await,
        Command::Delete(args) => delete::run(args).await,
        Command::Events(args) => events::run(args).await,
        Command::Exec(args) => exec::run(args).await,
        Command::Timeline(args) => timeline::run(args).await,
        Command::Agent(args) => agent::run(args).await,
        Command::Manager(args) => ok(jobset_manager::run(args).await),
        Command::Manifests { what } => ok(manifests::run(what)),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "jobset", &mut std::io::stdout());
            Ok(0)
        }
        Command::Version => {
            println!("jobset {VERSION}");
            Ok(0)
        }
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
