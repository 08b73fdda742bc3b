//! Sets `JOBSET_GIT_COMMIT` for `jobset version`: `$JOBSET_GIT_COMMIT` when set (the Docker
//! build's argument: its context has no `.git`), else `git rev-parse --short HEAD`, else
//! "unknown" (a crate tarball, no git installed). Only HEAD and the ref it points to are
//! watched, so a commit rebuilds this crate and nothing else does.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=JOBSET_GIT_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let commit = match std::env::var("JOBSET_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => match git(&dir, &["rev-parse", "--short", "HEAD"]) {
            Some(c) => {
                watch_head(&dir);
                c
            }
            None => "unknown".to_string(),
        },
    };
    println!("cargo:rustc-env=JOBSET_GIT_COMMIT={commit}");
}

/// Reruns this script when HEAD moves: HEAD itself (a checkout), the branch it points to (a
/// commit), packed-refs (a branch packed by `git gc`). Paths that do not exist are left out: cargo
/// would rerun the script on every build for them.
fn watch_head(dir: &Path) {
    let mut paths = vec!["HEAD".to_string(), "packed-refs".to_string()];
    paths.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    for p in paths {
        // `--git-path` resolves worktrees' split HEAD and refs; the answer is relative to `dir`.
        if let Some(path) = git(dir, &["rev-parse", "--git-path", &p]).map(|p| dir.join(p))
            && path.exists()
        {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The trimmed stdout of a successful `git ARGS` run in `dir`.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
