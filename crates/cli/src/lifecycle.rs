//! Clusters that outlive the command that started them: `jobset up --detach` starts one in the
//! background and returns once it is ready, `jobset status` lists them, `jobset down` stops one.
//!
//! A cluster is its data directory, by default `$XDG_DATA_HOME/jobset/NAME` (else
//! `~/.local/share/jobset/NAME`): the objects, the PKI, the standalone `kubeconfig`, the
//! background process's log `jobset.log` and, while a `jobset up` serves it, `jobset.pid`. That
//! `jobset up` holds an exclusive lock on `jobset.lock` for its life: a second one on the same
//! directory is refused.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use clap::Args;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Failure;
use crate::up::UpArgs;

/// The cluster `jobset up` runs without `--name`; its context is `jobset`.
pub const DEFAULT_NAME: &str = "default";
/// The pid file of the `jobset up` serving a data directory.
pub const PID_FILE: &str = "jobset.pid";
/// The file a `jobset up` holds an exclusive lock (flock) on while it serves a data directory.
pub const LOCK_FILE: &str = "jobset.lock";
/// Where a background `jobset up` writes its stdout and stderr.
pub const LOG_FILE: &str = "jobset.log";
/// The standalone kubeconfig `jobset up` writes into its data directory.
pub const KUBECONFIG_FILE: &str = "kubeconfig";
/// How often `--detach` and `down` look at the process they wait for.
const POLL: Duration = Duration::from_millis(100);
/// Log lines shown when a background start fails.
const LOG_TAIL_LINES: usize = 30;

/// `--name`: a DNS label, as it names a directory and kubeconfig entries.
pub fn parse_name(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "invalid cluster name {name:?}: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
        ))
    }
}

/// The kubeconfig context (and cluster and user) of the cluster `name`: `jobset` for the
/// default one, `jobset-NAME` otherwise, as kind names its `kind-NAME`.
pub fn context_name(name: &str) -> String {
    if name == DEFAULT_NAME { "jobset".to_string() } else { format!("jobset-{name}") }
}

/// Where clusters' data directories go: `$XDG_DATA_HOME/jobset` (an absolute path; the XDG
/// specification says to ignore a relative one), else `$HOME/.local/share/jobset`.
pub fn data_root(xdg_data_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    if let Some(xdg) = xdg_data_home.map(Path::new).filter(|p| p.is_absolute()) {
        return Some(xdg.join("jobset"));
    }
    home.filter(|h| !h.is_empty()).map(|h| Path::new(h).join(".local/share/jobset"))
}

fn user_data_root() -> anyhow::Result<PathBuf> {
    data_root(std::env::var_os("XDG_DATA_HOME").as_deref(), std::env::var_os("HOME").as_deref()).ok_or_else(|| {
        Failure::new(crate::USAGE, "error: neither XDG_DATA_HOME nor HOME is set: pass --data-dir").into()
    })
}

/// The data directory of the cluster `name`: `explicit`, else its directory under the user's
/// data directory.
pub fn data_dir(explicit: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    match explicit {
        Some(dir) => Ok(dir.to_path_buf()),
        None => Ok(user_data_root()?.join(name)),
    }
}

// ---------------------------------------------------------------------------
// Pid file
// ---------------------------------------------------------------------------

/// Whether `pid` is a live process (a zombie is not: it has exited, its parent has not reaped it).
fn alive(pid: i32) -> bool {
    if pid <= 0 || matches!(kill(Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH)) {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last ')'.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) != Some('Z'),
        Err(_) => true,
    }
}

/// The `jobset up` running on `dir`: the process holding its lock, as the kernel lists it
/// (`/proc/locks`). A pid file a killed `up` left behind may name another process by now, which
/// `down` must never signal. Where the kernel's list cannot be read, the pid file if it names a
/// live process.
pub fn running(dir: &Path) -> Option<i32> {
    match lock_holder(dir) {
        Ok(holder) => holder,
        Err(()) => {
            let pid: i32 = fs::read_to_string(dir.join(PID_FILE)).ok()?.trim().parse().ok()?;
            alive(pid).then_some(pid)
        }
    }
}

/// The process holding the `flock` on `dir`'s lock file (none when nobody does, or the file does
/// not exist); `Err` when `/proc/locks` cannot be read.
fn lock_holder(dir: &Path) -> Result<Option<i32>, ()> {
    use std::os::unix::fs::MetadataExt;
    let locks = procfs::locks().map_err(|_| ())?;
    let Ok(meta) = fs::metadata(dir.join(LOCK_FILE)) else { return Ok(None) };
    let dev = meta.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    Ok(locks
        .into_iter()
        .find(|l| {
            l.lock_type == procfs::LockType::FLock
                && l.inode == meta.ino()
                && u64::from(l.devmaj) == major
                && u64::from(l.devmin) == minor
        })
        .and_then(|l| l.pid)
        .filter(|&p| alive(p)))
}

/// This process's claim on a data directory: an exclusive lock on its `jobset.lock`, and the pid
/// file `status` and `down` read (removed when dropped). The lock, not the pid file, decides: the
/// kernel releases it when the process ends, however it ends (a `kill -9` leaves no stale claim),
/// and two `jobset up` starting at once cannot both take it.
pub struct PidFile {
    path: PathBuf,
    /// Held for the claim's life. Opened close-on-exec (std's default), so the container
    /// supervisors this process spawns, which may outlive it, never hold it.
    _lock: fs::File,
}

impl PidFile {
    /// Locks `dir` (creating it, mode 0700) for this process and writes its pid file; refuses
    /// (naming the holder's pid when known, and how to stop it) while another process holds it.
    /// A data dir left readable to others by an older version is made private first.
    pub fn claim(dir: &Path, name: &str) -> anyhow::Result<PidFile> {
        use std::io::Write;
        create_private_dir(dir)?;
        let mut lock = lock(dir, name)?;
        tighten(dir);
        let own = std::process::id() as i32;
        // For the message of the next one refused.
        let lock_path = dir.join(LOCK_FILE);
        lock.set_len(0)
            .and_then(|()| lock.write_all(format!("{own}\n").as_bytes()))
            .with_context(|| format!("writing {}", lock_path.display()))?;
        let path = dir.join(PID_FILE);
        let tmp = dir.join(format!(".{PID_FILE}.{own}"));
        fs::write(&tmp, format!("{own}\n"))
            .and_then(|()| fs::rename(&tmp, &path))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(PidFile { path, _lock: lock })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = fs::read_to_string(&self.path).is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Takes the exclusive lock on `dir`'s lock file, or says who holds it.
fn lock(dir: &Path, name: &str) -> anyhow::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening the data dir's lock {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            // The holder writes its pid right after locking; until then (or from an older
            // version) the kernel's lock list names it.
            let holder = fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .filter(|&p| alive(p))
                .or_else(|| running(dir));
            return Err(already_running(name, holder, dir).into());
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(anyhow::Error::new(e).context(format!("locking the data dir's lock {}", path.display())));
        }
    }
    Ok(file)
}

/// Creates `dir` (and missing parents) with mode 0700, as the data dir holds the cluster's keys.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating the data dir {}", dir.display()))
}

/// `mode` without its group and other bits, if it has any.
pub fn private_mode(mode: u32) -> Option<u32> {
    (mode & 0o077 != 0).then_some(mode & !0o077)
}

/// Makes a data dir that an older version left readable to others private: the directory 0700,
/// which alone closes everything below it to group and others, and the files that hold secrets
/// in the clear, the store (Secrets) and the background log, 0600. Each change is logged; one
/// that fails (a directory of another user) is logged and left.
fn tighten(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let paths = [dir.to_path_buf(), dir.join(jobset_apiserver::persist::Redb::FILE), dir.join(LOG_FILE)];
    for path in paths {
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let mode = meta.mode() & 0o7777;
        let Some(private) = private_mode(mode) else { continue };
        match fs::set_permissions(&path, fs::Permissions::from_mode(private)) {
            Ok(()) => tracing::warn!(
                "{} was mode {mode:04o}, readable to others: made it {private:04o} (the data dir holds the cluster's keys and Secrets)",
                path.display()
            ),
            Err(e) => tracing::warn!("{} is mode {mode:04o}, readable to others, and stays so: {e}", path.display()),
        }
    }
}

/// The command that stops the cluster `name` on `dir`: by name when `dir` is the name's own data
/// dir (`default_dir`), else by data dir.
pub fn down_command(name: &str, dir: &Path, default_dir: Option<&Path>) -> String {
    let by_name = if name == DEFAULT_NAME { String::new() } else { format!(" --name {name}") };
    if default_dir == Some(dir) {
        format!("jobset down{by_name}")
    } else {
        format!("jobset down{by_name} --data-dir {}", dir.display())
    }
}

fn already_running(name: &str, pid: Option<i32>, dir: &Path) -> Failure {
    let down = down_command(name, dir, data_dir(None, name).ok().as_deref());
    let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
    Failure::new(
        1,
        format!(
            "error: cluster {name:?} is already running{pid}: its data dir {} is in use by another `jobset up`; `{down}` stops it",
            dir.display()
        ),
    )
}

// ---------------------------------------------------------------------------
// Health
// ---------------------------------------------------------------------------

/// The server of a standalone kubeconfig's current context.
fn endpoint(kubeconfig: &Path) -> Option<String> {
    let config = crate::kubeconfig::Kubeconfig::parse(&fs::read_to_string(kubeconfig).ok()?).ok()?;
    let entries = crate::kubeconfig::Entries::from_standalone(&config, "x").ok()?;
    entries.cluster.rest.get("cluster")?.get("server")?.as_str().map(str::to_string)
}

/// `GET /readyz` through the kubeconfig at `path`: Ok when the server answers `ok` within `timeout`.
async fn readyz(path: &Path, timeout: Duration) -> anyhow::Result<()> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    let client = kube::Client::try_from(config)?;
    let request = http::Request::get("/readyz").body(Vec::new())?;
    let body = tokio::time::timeout(timeout, client.request_text(request))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {timeout:?}"))??;
    anyhow::ensure!(body.trim() == "ok", "/readyz answered {body:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// jobset up --detach
// ---------------------------------------------------------------------------

/// The arguments of the background `jobset up`: this command's, without `--detach` and with
/// `--background` (its stdout is a log), plus the data directory and the standalone kubeconfig
/// when they were not given (the parent merges the context once the cluster is ready).
pub fn background_args(args: &[OsString], data_dir: Option<&Path>, kubeconfig: Option<&Path>) -> Vec<OsString> {
    let mut out: Vec<OsString> = args.iter().filter(|a| a.as_os_str() != "--detach").cloned().collect();
    out.push("--background".into());
    if let Some(dir) = data_dir {
        out.extend(["--data-dir".into(), dir.into()]);
    }
    if let Some(file) = kubeconfig {
        out.extend(["--kubeconfig".into(), file.into()]);
    }
    out
}

/// A file's identity and modification time, to tell a file written since from the one before.
fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    fs::metadata(path).ok().map(|m| (m.ino(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
}

/// The last `lines` lines of `log` from byte `from` on.
fn log_tail(log: &Path, from: u64, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(log) {
        let _ = f.seek(SeekFrom::Start(from));
        let _ = f.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `jobset up --detach`: starts `jobset up` in a session of its own (stdout and stderr to
/// `DATA_DIR/jobset.log`), waits until its `/readyz` answers, merges its kubeconfig context
/// (unless `--kubeconfig` was given), and returns. A start that fails or does not become ready
/// within `--ready-timeout` is reported with the log's tail (and the process is stopped).
pub async fn detach(args: &UpArgs) -> anyhow::Result<()> {
    let name = args.name.as_str();
    let dir = data_dir(args.data_dir.as_deref(), name)?;
    create_private_dir(&dir)?;
    // Refused early while another `jobset up` holds the dir; the background one claims it.
    drop(lock(&dir, name)?);
    let own_kubeconfig = dir.join(KUBECONFIG_FILE);
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| own_kubeconfig.clone());
    let before = stamp(&kubeconfig);
    let log_path = dir.join(LOG_FILE);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let child_args = background_args(
        &argv,
        args.data_dir.is_none().then_some(dir.as_path()),
        args.kubeconfig.is_none().then_some(own_kubeconfig.as_path()),
    );
    let exe = std::env::current_exe().context("locating the jobset binary")?;
    let mut command = std::process::Command::new(exe);
    command.args(&child_args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
    let mut child = command.spawn().context("starting the background jobset up")?;
    let pid = child.id() as i32;
    let deadline = Instant::now() + args.ready_timeout;
    let mut last_error = String::from("its kubeconfig was not written");
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(Failure::new(
                1,
                format!(
                    "error: the background jobset up exited ({status}) before it was ready; {}:\n{}",
                    log_path.display(),
                    log_tail(&log_path, log_start, LOG_TAIL_LINES)
                ),
            )
            .into());
        }
        if stamp(&kubeconfig) != before {
            match readyz(&kubeconfig, POLL.max(Duration::from_secs(1))).await {
                Ok(()) => break,
                Err(e) => last_error = format!("{e:#}"),
            }
        }
        if Instant::now() >= deadline {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            return Err(Failure::new(
                1,
                format!(
                    "error: the background jobset up (pid {pid}) was not ready within {:?} ({last_error}); stopped it; {}:\n{}",
                    args.ready_timeout,
                    log_path.display(),
                    log_tail(&log_path, log_start, LOG_TAIL_LINES)
                ),
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
    let url = endpoint(&kubeconfig).unwrap_or_default();
    println!("jobset cluster {name:?} is running in the background (pid {pid}) at {url}");
    if let Ok(token) = fs::read_to_string(dir.join(jobset_apiserver::tls::TOKEN_FILE)) {
        println!("web UI: {}", crate::cluster::ui_login_url(&url, token.trim()));
    }
    if args.kubeconfig.is_none() {
        let context = context_name(name);
        let merged = tokio::task::block_in_place(|| {
            crate::kubeconfig::merge_standalone(&kubeconfig, &context, !args.no_switch)
        })?;
        let switched = if args.no_switch { "" } else { ", now current" };
        println!("kubectl context {context:?} in {}{switched}", merged.display());
    } else {
        println!("export KUBECONFIG={}", kubeconfig.display());
    }
    let down = if name == DEFAULT_NAME { "jobset down".to_string() } else { format!("jobset down --name {name}") };
    println!("data dir {}, log {}; `{down}` stops it", dir.display(), log_path.display());
    Ok(())
}

// ---------------------------------------------------------------------------
// jobset down
// ---------------------------------------------------------------------------

/// Which cluster: the flags of `down` and `status`.
#[derive(Args, Debug, Clone)]
pub struct WhichArgs {
    /// The cluster's name, as given to `jobset up --name` (context `jobset-NAME`).
    #[arg(long, value_parser = parse_name)]
    pub name: Option<String>,
    /// The cluster's data directory (default: the name's directory under
    /// $XDG_DATA_HOME/jobset, else ~/.local/share/jobset).
    #[arg(long, env = "JOBSET_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// `jobset down`.
#[derive(Args, Debug)]
pub struct DownArgs {
    #[command(flatten)]
    pub which: WhichArgs,
    /// How long to wait for the cluster to stop after SIGTERM (its pods get their termination
    /// grace period).
    #[arg(long, default_value = "2m", value_parser = crate::parse_duration)]
    pub timeout: Duration,
}

/// Stops the cluster (SIGTERM to the `jobset up` of its pid file, then waits for it to exit)
/// and removes its context from the user's kubeconfig; its data stays for the next `jobset up`.
pub async fn down(args: DownArgs) -> anyhow::Result<()> {
    let name = args.which.name.clone().unwrap_or_else(|| DEFAULT_NAME.to_string());
    let dir = data_dir(args.which.data_dir.as_deref(), &name)?;
    match running(&dir) {
        Some(pid) => {
            kill(Pid::from_raw(pid), Signal::SIGTERM).with_context(|| format!("sending SIGTERM to pid {pid}"))?;
            let deadline = Instant::now() + args.timeout;
            while alive(pid) {
                if Instant::now() >= deadline {
                    return Err(Failure::new(
                        1,
                        format!(
                            "error: cluster {name:?} (pid {pid}) did not stop within {:?} of SIGTERM; see {}",
                            args.timeout,
                            dir.join(LOG_FILE).display()
                        ),
                    )
                    .into());
                }
                tokio::time::sleep(POLL).await;
            }
            println!("jobset cluster {name:?} stopped (pid {pid}); its data stays in {}", dir.display());
        }
        None => {
            println!("jobset cluster {name:?} is not running");
            // A killed `jobset up` leaves its process containers running under their
            // supervisors, for the next `up` to adopt; `down` stops them.
            let stopped = jobset_kubelet::runtime::process::stop_kept_containers(&dir.join(jobset_local::RUNTIME_DIR));
            if stopped > 0 {
                println!("stopped {stopped} container(s) left running by a killed jobset up");
            }
        }
    }
    let context = context_name(&name);
    for path in tokio::task::block_in_place(|| crate::kubeconfig::remove_from_user(&context))? {
        println!("kubectl context {context:?} removed from {}", path.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// jobset status
// ---------------------------------------------------------------------------

/// `jobset status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub which: WhichArgs,
    /// How long each cluster's `/readyz` may take to answer.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    pub timeout: Duration,
}

/// One line of `jobset status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub endpoint: Option<String>,
    pub pid: Option<i32>,
    /// `Ready`, `NotReady: why`, or `Stopped`.
    pub status: String,
    pub data_dir: PathBuf,
}

/// The status table, kubectl-style: upper-case headers, columns padded to their widest cell
/// plus three spaces, `<none>` for what is unknown.
pub fn table(rows: &[Row]) -> String {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                context_name(&r.name),
                r.endpoint.clone().unwrap_or_else(|| "<none>".into()),
                r.pid.map_or_else(|| "<none>".into(), |p| p.to_string()),
                r.status.clone(),
                r.data_dir.display().to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "CONTEXT", "ENDPOINT", "PID", "STATUS", "DATA DIR"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&cells) {
        let line: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

async fn row(name: String, dir: PathBuf, timeout: Duration) -> Row {
    let kubeconfig = dir.join(KUBECONFIG_FILE);
    let pid = running(&dir);
    let status = match pid {
        None => "Stopped".to_string(),
        Some(_) => match readyz(&kubeconfig, timeout).await {
            Ok(()) => "Ready".to_string(),
            Err(e) => format!("NotReady: {e:#}"),
        },
    };
    Row { name, endpoint: endpoint(&kubeconfig), pid, status, data_dir: dir }
}

/// Lists the clusters: every data directory under the user's data directory (or the one of
/// `--name`/`--data-dir`), with its endpoint, pid and health.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let mut dirs: Vec<(String, PathBuf)> = Vec::new();
    if args.which.name.is_some() || args.which.data_dir.is_some() {
        let name = args.which.name.clone().unwrap_or_else(|| DEFAULT_NAME.to_string());
        dirs.push((name.clone(), data_dir(args.which.data_dir.as_deref(), &name)?));
    } else {
        let root = user_data_root()?;
        if let Ok(entries) = fs::read_dir(&root) {
            for entry in entries.flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if path.is_dir() && parse_name(&name).is_ok() {
                    dirs.push((name, path));
                }
            }
        }
        dirs.sort();
        if dirs.is_empty() {
            eprintln!("No clusters found in {}.", root.display());
            return Ok(());
        }
    }
    let mut rows = Vec::new();
    for (name, dir) in dirs {
        rows.push(row(name, dir, args.timeout).await);
    }
    print!("{}", table(&rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for ok in ["default", "dev", "a", "gpu-2"] {
            assert_eq!(parse_name(ok).as_deref(), Ok(ok));
        }
        for bad in ["", "Dev", "-a", "a-", "a_b", "a/b", "..", &"x".repeat(64)] {
            assert!(parse_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_default_cluster_is_context_jobset_others_jobset_name() {
        assert_eq!(context_name(DEFAULT_NAME), "jobset");
        assert_eq!(context_name("dev"), "jobset-dev");
    }

    #[test]
    fn data_root_cases() {
        let cases: [(Option<&str>, Option<&str>, Option<&str>); 5] = [
            (Some("/xdg"), Some("/home/u"), Some("/xdg/jobset")),
            (None, Some("/home/u"), Some("/home/u/.local/share/jobset")),
            (Some("relative"), Some("/home/u"), Some("/home/u/.local/share/jobset")),
            (Some(""), Some("/home/u"), Some("/home/u/.local/share/jobset")),
            (None, None, None),
        ];
        for (xdg, home, want) in cases {
            assert_eq!(
                data_root(xdg.map(OsStr::new), home.map(OsStr::new)),
                want.map(PathBuf::from),
                "{xdg:?} {home:?}"
            );
        }
    }

    #[test]
    fn background_args_drop_detach_mark_the_background_and_add_what_was_defaulted() {
        let args: Vec<OsString> = ["up", "--detach", "--port", "0"].map(OsString::from).to_vec();
        let got = background_args(&args, Some(Path::new("/d")), Some(Path::new("/d/kubeconfig")));
        let want = ["up", "--port", "0", "--background", "--data-dir", "/d", "--kubeconfig", "/d/kubeconfig"];
        assert_eq!(got, want.map(OsString::from));
        let given: Vec<OsString> = ["up", "--data-dir", "/e", "--detach"].map(OsString::from).to_vec();
        assert_eq!(background_args(&given, None, None), ["up", "--data-dir", "/e", "--background"].map(OsString::from));
    }

    #[test]
    fn pid_file_claims_the_directory_and_is_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running(dir.path()), None);
        let claim = PidFile::claim(dir.path(), "x").unwrap();
        assert_eq!(running(dir.path()), Some(std::process::id() as i32));
        drop(claim);
        assert!(!dir.path().join(PID_FILE).exists());
    }

    #[test]
    fn a_locked_data_dir_is_refused_naming_the_holder_and_free_again_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let claim = PidFile::claim(dir.path(), "dev").unwrap();
        let own = std::process::id();
        assert_eq!(fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap(), format!("{own}\n"));
        // A lock is per open file: a second claim, even from this process, is refused.
        let err = PidFile::claim(dir.path(), "dev").err().unwrap().to_string();
        let want = format!(
            "error: cluster \"dev\" is already running (pid {own}): its data dir {0} is in use by another `jobset up`; `jobset down --name dev --data-dir {0}` stops it",
            dir.path().display()
        );
        assert_eq!(err, want);
        drop(claim);
        // What a dead holder left (its pid in both files) does not count: only the lock does.
        fs::write(dir.path().join(PID_FILE), format!("{own}\n")).unwrap();
        let again = PidFile::claim(dir.path(), "dev").unwrap();
        drop(again);
    }

    #[test]
    fn a_refusal_names_the_holder_the_kernel_lists_when_the_lock_file_has_none_yet() {
        let dir = tempfile::tempdir().unwrap();
        let lock = lock(dir.path(), "dev").unwrap();
        // The lock file is still empty: the holder (this process) is named from /proc/locks.
        let own = std::process::id() as i32;
        assert_eq!(lock_refusal(dir.path()), Some(own), "an empty lock file and no pid file");
        // A pid file naming another live process (our parent, the test harness) is not believed.
        let parent = nix::unistd::getppid().as_raw();
        fs::write(dir.path().join(PID_FILE), format!("{parent}\n")).unwrap();
        assert_eq!(lock_refusal(dir.path()), Some(own), "a pid file naming another process");
        assert_eq!(running(dir.path()), Some(own));
        drop(lock);
        assert_eq!(running(dir.path()), None, "nobody holds the lock: a pid file naming a live process is stale");
    }

    /// The pid a refused claim of `dir` names.
    fn lock_refusal(dir: &Path) -> Option<i32> {
        let err = PidFile::claim(dir, "dev").err().expect("refused").to_string();
        let pid = err.split_once("(pid ").map(|(_, rest)| rest.split(')').next().unwrap().parse().unwrap());
        assert!(err.contains("is in use by another `jobset up`"), "{err}");
        pid
    }

    #[test]
    fn down_command_names_the_data_dir_unless_it_is_the_names_own() {
        let own = Path::new("/home/u/.local/share/jobset/default");
        for (name, dir, default_dir, want) in [
            ("default", own, Some(own), "jobset down"),
            ("dev", Path::new("/d/dev"), Some(Path::new("/d/dev")), "jobset down --name dev"),
            ("default", Path::new("/x"), Some(own), "jobset down --data-dir /x"),
            ("dev", Path::new("/x"), None, "jobset down --name dev --data-dir /x"),
        ] {
            assert_eq!(down_command(name, dir, default_dir), want, "{name} {dir:?}");
        }
    }

    #[test]
    fn private_mode_drops_group_and_other_bits() {
        for (mode, want) in [
            (0o755, Some(0o700)),
            (0o644, Some(0o600)),
            (0o640, Some(0o600)),
            (0o1777, Some(0o1700)),
            (0o700, None),
            (0o600, None),
            (0o400, None),
        ] {
            assert_eq!(private_mode(mode), want, "{mode:o}");
        }
    }

    #[test]
    fn claiming_a_loose_data_dir_makes_it_and_its_secret_files_private() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        fs::create_dir(&dir).unwrap();
        let store = dir.join(jobset_apiserver::persist::Redb::FILE);
        let other = dir.join("other");
        for (path, mode) in [(&dir, 0o755), (&store, 0o644), (&other, 0o644)] {
            if path != &dir {
                fs::write(path, "x").unwrap();
            }
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        }
        let claim = PidFile::claim(&dir, "x").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&store), 0o600);
        assert_eq!(mode(&dir.join(LOCK_FILE)), 0o600);
        assert_eq!(mode(&other), 0o644, "other files are closed by the directory's mode, not changed");
        drop(claim);
    }

    #[test]
    fn status_table_is_aligned() {
        let rows = [
            Row {
                name: "default".into(),
                endpoint: Some("https://127.0.0.1:6443".into()),
                pid: Some(42),
                status: "Ready".into(),
                data_dir: "/d/default".into(),
            },
            Row { name: "dev".into(), endpoint: None, pid: None, status: "Stopped".into(), data_dir: "/d/dev".into() },
        ];
        assert_eq!(
            table(&rows),
            "NAME      CONTEXT      ENDPOINT                 PID      STATUS    DATA DIR\n\
             default   jobset       https://127.0.0.1:6443   42       Ready     /d/default\n\
             dev       jobset-dev   <none>                   <none>   Stopped   /d/dev\n"
        );
    }
}
