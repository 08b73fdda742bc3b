//! The per-container supervisor (a "shim", after containerd-shim).
//!
//! The process runtime does not fork containers from the agent. It starts this supervisor: the
//! same executable run again (`/proc/self/exe` with [`SHIM_ENV`] set, caught by a constructor
//! before `main`, as runc's `init` and Docker's `reexec` do), spawned without a copy of the
//! agent's memory (`posix_spawn`). The supervisor reads its [`ShimSpec`] on stdin, forks the
//! container (the process tree in [`super::sandbox`]), reports a [`ShimReport`] line on stdout,
//! then holds the container's log pipe (CRI lines, rotated) and, when the container ends,
//! writes its exit status to [`ShimSpec::exit_file`] and exits.
//!
//! Why a process of its own:
//! - the container's intermediate processes fork a small process, not the agent: with 64
//!   process pods restarting, page-table copies and copy-on-write faults from forks of the
//!   agent (which lived as long as the containers) were a third of its CPU;
//! - with [`ShimSpec::detach`] it outlives the agent: a `kill -9` or an upgrade of `jobset up`
//!   leaves the container running, and the next agent on the same state directory adopts it
//!   and reads the real exit status of one that ended meanwhile
//!   ([`ProcessConfig::outlive_agent`](super::process::ProcessConfig::outlive_agent)).
//!
//! Kills do not go through the supervisor: the agent signals the container's process group.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::libc;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::ExitStatus;
use super::process::{LOG_DRAIN, Plan, Rotation, command, exit_status, read_lines, signal_group, write_log};
use super::sandbox::{self, SandboxPlan};

/// Set in the supervisor's environment: the process is a container's supervisor.
pub(super) const SHIM_ENV: &str = "JOBSET_CONTAINER_SHIM";

/// What the supervisor runs and where it reports (sent as JSON on its stdin).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ShimSpec {
    pub sandbox: SandboxPlan,
    pub log: Option<LogSpec>,
    /// Written (atomically) with the container's [`ExitStatus`] when it ends.
    pub exit_file: PathBuf,
    /// What the agent knows of the run; the supervisor completes it into a [`ContainerRecord`]
    /// written to `record_file` before it reports, so that an agent killed at any instant
    /// leaves a record for the next one to adopt or sweep the container by.
    pub record: RunRecord,
    pub record_file: PathBuf,
    /// Outlive the agent. Otherwise the supervisor dies with the agent's spawning thread (a
    /// parent-death signal), and the container with it.
    pub detach: bool,
    /// The agent's pid: without `detach`, a supervisor whose parent is already another process
    /// gives up.
    pub parent: i32,
}

/// The agent's part of a [`ContainerRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunRecord {
    /// The run's number in its state directory (the `<n>` of the ID and the file names).
    pub n: u64,
    pub node: String,
    pub pod_uid: String,
    pub container: String,
    pub restart_count: u32,
    /// What the container runs (for commands run in it after an adoption).
    pub plan: Plan,
}

/// What one container run leaves in the state directory (`<state_dir>/containers/<pod>/<n>.json`,
/// beside the supervisor's `<n>.exit`): how a later agent finds, checks and adopts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ContainerRecord {
    pub id: String,
    #[serde(flatten)]
    pub run: RunRecord,
    pub started_at: jiff::Timestamp,
    pub shim_pid: u32,
    /// The supervisor's start time ([`process_start`]): a process with a reused pid is not it.
    pub shim_start: u64,
    pub pgid: u32,
    pub pid: u32,
}

/// The container ID of run `n` whose command has host pid `pid`.
pub(super) fn container_id(pid: u32, n: u64) -> String {
    format!("process://{pid}-{n}")
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub(super) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Writes a file only this user reads (a record holds the container's environment), whole or
/// not at all.
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(body)?;
    std::fs::rename(&tmp, path)
}

/// Where the container's log goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LogSpec {
    pub path: PathBuf,
    pub max_bytes: u64,
    pub max_files: usize,
}

/// The supervisor's one line on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum ShimReport {
    /// The container runs: its process group (the intermediate process's pid) and the host pid
    /// of its command.
    Started { pgid: u32, pid: u32 },
    /// It could not start; the message names the step.
    Failed { message: String },
}

// SAFETY: runs before `main` in every binary that links this crate; it returns at once unless
// the process was started as a supervisor, and then never returns to `main`.
#[ctor::ctor(unsafe)]
fn shim_entry() {
    if std::env::var_os(SHIM_ENV).is_none() {
        return;
    }
    let code = match serve() {
        Ok(()) => 0,
        Err(e) => {
            note(format_args!("{e}"));
            1
        }
    };
    std::process::exit(code);
}

fn serve() -> Result<(), String> {
    // A session of its own: signals for the agent's terminal or group (Ctrl-C) are the agent's,
    // which stops its containers itself when it shuts down.
    let _ = nix::unistd::setsid();
    // SAFETY: prctl(2) with plain integer arguments. Fresh huge pages would only be zeroed for
    // this small process (as for `jobset agent`).
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).map_err(|e| format!("reading the spec: {e}"))?;
    let spec: ShimSpec = serde_json::from_slice(&input).map_err(|e| format!("parsing the spec: {e}"))?;
    if !spec.detach {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("arming the death signal: {e}"))?;
        if nix::unistd::getppid().as_raw() != spec.parent {
            return Err("the agent ended before the container started".into());
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(supervise(spec))
}

fn report(r: &ShimReport) -> Result<(), String> {
    let mut line = serde_json::to_vec(r).map_err(|e| e.to_string())?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line).and_then(|()| out.flush()).map_err(|e| format!("reporting to the agent: {e}"))?;
    // Nothing more goes to the agent: its reader sees the end of the stream.
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("opening /dev/null: {e}"))?;
    nix::unistd::dup2_stdout(&null).map_err(|e| format!("closing the report stream: {e}"))?;
    Ok(())
}

/// Forks the container: `(child, process group)`, or what failed.
fn start(spec: &ShimSpec) -> Result<(tokio::process::Child, u32, u32), String> {
    let setup = Arc::new(spec.sandbox.child_setup(Pid::this().as_raw())?);
    let (report_r, report_w) = sandbox::report_pipe().map_err(|e| format!("creating a pipe: {e}"))?;
    let plan = &spec.record.plan;
    let mut cmd = command(&plan.argv, &plan.env, spec.log.is_some());
    let child_setup = setup.clone();
    // SAFETY: `ChildSetup::run` only makes system calls on memory prepared before the fork (see
    // its docs); the closure owns the pipe's write end until it is dropped.
    unsafe {
        cmd.pre_exec(move || child_setup.run(report_w.as_raw_fd()));
    }
    let spawned = cmd.spawn();
    // Closes our write end of the report pipe (held by the pre_exec closure).
    drop(cmd);
    let (reported_pid, failed_step) = setup.read_report(&sandbox::read_report(report_r));
    let child = spawned.map_err(|e| match &failed_step {
        Some(step) => format!("{step}: {e}"),
        None => format!("starting {:?}: {e}", plan.argv[0]),
    })?;
    let pgid = child.id().ok_or("the container ended before it was seen")?;
    Ok((child, pgid, reported_pid.unwrap_or(pgid)))
}

/// A line in the supervisor's log (its stderr, in the state directory). The disk may be full:
/// a line that cannot be written is dropped (`eprintln!` would panic, killing the supervisor).
fn note(line: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr(), "jobset container supervisor: {line}");
}

async fn supervise(spec: ShimSpec) -> Result<(), String> {
    // Without room for its exit status or its record the container does not start (a full
    // disk): the agent tries again later, rather than losing the status or the container.
    if let Err(e) = reserve_exit(&spec.exit_file) {
        let message = format!("reserving the exit status file {}: {e}", spec.exit_file.display());
        let _ = std::fs::remove_file(&spec.exit_file);
        return report(&ShimReport::Failed { message });
    }
    let (mut child, pgid, pid) = match start(&spec) {
        Ok(started) => started,
        Err(message) => return report(&ShimReport::Failed { message }),
    };
    let me = std::process::id();
    let record = ContainerRecord {
        id: container_id(pid, spec.record.n),
        run: spec.record.clone(),
        started_at: jiff::Timestamp::now(),
        shim_pid: me,
        shim_start: process_start(me).unwrap_or_default(),
        pgid,
        pid,
    };
    let written = serde_json::to_vec(&record).map_err(std::io::Error::other);
    if let Err(e) = written.and_then(|body| write_private(&spec.record_file, &body)) {
        // A later agent could neither adopt nor sweep the container.
        signal_group(Pid::from_raw(pgid as i32), Signal::SIGKILL);
        let _ = child.wait().await;
        let _ = std::fs::remove_file(&spec.exit_file);
        let message = format!("writing the container's record {}: {e}", spec.record_file.display());
        return report(&ShimReport::Failed { message });
    }
    report(&ShimReport::Started { pgid, pid })?;
    let log = spec.log.as_ref().map(|l| {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(out) = child.stdout.take() {
            tokio::spawn(read_lines(out, "stdout", tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(read_lines(err, "stderr", tx));
        }
        tokio::spawn(write_log(l.path.clone(), rx, Rotation { max_bytes: l.max_bytes, max_files: l.max_files }))
    });
    let status = child.wait().await;
    let finished_at = jiff::Timestamp::now();
    // The container ends with its main process: the rest of its group goes too.
    let pgid = Pid::from_raw(pgid as i32);
    signal_group(pgid, Signal::SIGKILL);
    if let Some(log) = log
        && tokio::time::timeout(LOG_DRAIN, log).await.is_err()
    {
        note(format_args!("the log did not drain after the container exited"));
    }
    write_exit(&spec.exit_file, &exit_status(status, finished_at))
}

/// The room reserved for the exit status when the container starts (blanks, which read as no
/// status), so that it can be written over in place even if the disk has filled up since.
const EXIT_RESERVE: usize = 4096;

fn reserve_exit(path: &Path) -> std::io::Result<()> {
    std::fs::write(path, [b' '; EXIT_RESERVE])
}

/// Writes the exit status where the agent (this one or the next) reads it, over the reserved
/// blanks (JSON may end in blanks). Nobody reads it before the supervisor has exited.
fn write_exit(path: &Path, exit: &ExitStatus) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let mut body = serde_json::to_vec(exit).map_err(|e| e.to_string())?;
    if body.len() < EXIT_RESERVE {
        body.resize(EXIT_RESERVE, b' ');
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .and_then(|f| f.write_all_at(&body, 0))
        .map_err(|e| format!("writing the exit status to {}: {e}", path.display()))
}

/// Reads what [`write_exit`] wrote; `None` when there is nothing (the supervisor was killed).
pub(super) fn read_exit(path: &Path) -> Option<ExitStatus> {
    let body = std::fs::read(path).ok()?;
    serde_json::from_slice(&body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_status_written_over_its_reserved_room_is_read_back_and_none_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("7.exit");
        assert_eq!(read_exit(&path), None, "missing");
        reserve_exit(&path).unwrap();
        assert_eq!(read_exit(&path), None, "reserved, not written");
        let exit =
            ExitStatus { exit_code: 3, reason: None, message: Some("m".into()), finished_at: jiff::Timestamp::now() };
        write_exit(&path, &exit).unwrap();
        assert_eq!(read_exit(&path), Some(exit));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), EXIT_RESERVE as u64, "written in place");
    }

    #[test]
    fn reports_are_one_json_line_each() {
        let started = ShimReport::Started { pgid: 10, pid: 12 };
        let text = serde_json::to_string(&started).unwrap();
        assert_eq!(text, r#"{"started":{"pgid":10,"pid":12}}"#);
        assert_eq!(serde_json::from_str::<ShimReport>(&text).unwrap(), started);
    }
}
