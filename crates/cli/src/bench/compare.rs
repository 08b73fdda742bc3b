//! `jobset bench compare BASE -- ARGS…`: the same `jobset bench ARGS…` of a baseline commit and of
//! this binary, run in turn (base, head, base, head, …) on one machine, and every figure of their
//! tables side by side: the median of each and head / base. Pairing the runs keeps a ratio
//! meaningful when the machine's speed drifts; a figure recorded in docs/benchmarks.md quotes it.
//!
//! The base is built from `git archive BASE` under `target/bench-compare/` (its own target
//! directory, kept between calls); the head is the running binary, so run it as
//! `cargo run --release -p jobset-cli -- bench compare BASE -- in-place …`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// One markdown table of a bench's output: its header row and its data rows, as cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// The markdown tables in `text`, in order (a separator row `|---|` is skipped).
pub fn tables(text: &str) -> Vec<Table> {
    let mut out: Vec<Table> = vec![];
    let mut open = false;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            open = false;
            continue;
        }
        let cells: Vec<String> = line.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
        if cells.iter().all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':'))) {
            continue;
        }
        match out.last_mut() {
            Some(t) if open => t.rows.push(cells),
            _ => out.push(Table { header: cells, rows: vec![] }),
        }
        open = true;
    }
    out
}

/// A cell split after the digits it starts with: (`3.30`, ` s`).
fn split_number(cell: &str) -> (&str, &str) {
    cell.split_at(cell.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(cell.len()))
}

/// The number a cell starts with (`3.30 s`, `20063 (watch …)`, `3.2×`); `None` for `-` or text.
pub fn leading_number(cell: &str) -> Option<f64> {
    split_number(cell).0.parse().ok()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// One cell of the comparison: the same text in every run (a label), or the medians of a figure.
fn compare_cell(base: &[&str], head: &[&str]) -> String {
    let all = || base.iter().chain(head);
    if let Some(first) = base.first().or(head.first())
        && all().all(|c| c == first)
    {
        return first.to_string();
    }
    let nums = |cells: &[&str]| cells.iter().map(|c| leading_number(c)).collect::<Option<Vec<f64>>>();
    let unit = head.first().map_or("", |c| unit(c));
    match (nums(base), nums(head)) {
        (Some(b), Some(h)) if b.is_empty() && !h.is_empty() => format!("– → {}{unit}", trim(median(h))),
        (Some(b), Some(h)) if !b.is_empty() && !h.is_empty() => {
            let (b, h) = (median(b), median(h));
            let ratio = if b > 0.0 { format!("{:.2}×", h / b) } else { "–".into() };
            format!("{}{unit} → {}{unit} ({ratio})", trim(b), trim(h))
        }
        _ => format!("{} → {}", base.first().unwrap_or(&"–"), head.first().unwrap_or(&"–")),
    }
}

/// The unit after a cell's number (` s`, ` MB`, `×`), kept on the medians; longer text (a
/// breakdown in parentheses) is not.
fn unit(cell: &str) -> &str {
    let rest = split_number(cell).1;
    if rest.trim().chars().count() <= 2 && !rest.contains('(') { rest } else { "" }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The tables of the head runs with each cell compared against the base runs' same cell: tables
/// are matched by their position and header, rows by their position. A table or row the base does
/// not have is shown with the head's medians alone (`–` for the base).
pub fn compare(base: &[Vec<Table>], head: &[Vec<Table>]) -> Vec<Table> {
    let Some(first) = head.first() else { return vec![] };
    first
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let same = |runs: &[Vec<Table>]| -> Vec<Table> {
                runs.iter().filter_map(|r| r.get(ti).filter(|b| b.header == t.header).cloned()).collect()
            };
            let (b, h) = (same(base), same(head));
            let rows = (0..t.rows.len())
                .map(|ri| {
                    (0..t.rows[ri].len())
                        .map(|ci| {
                            fn cell(runs: &[Table], ri: usize, ci: usize) -> Vec<&str> {
                                runs.iter().filter_map(|r| r.rows.get(ri)?.get(ci).map(String::as_str)).collect()
                            }
                            compare_cell(&cell(&b, ri, ci), &cell(&h, ri, ci))
                        })
                        .collect()
                })
                .collect();
            Table { header: t.header.clone(), rows }
        })
        .collect()
}

fn render(t: &Table) -> String {
    let row = |cells: &[String]| format!("| {} |", cells.join(" | "));
    let mut out = vec![row(&t.header), format!("|{}", "---|".repeat(t.header.len()))];
    out.extend(t.rows.iter().map(|r| row(r)));
    out.join("\n")
}

fn git(repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git").arg("-C").arg(repo).args(args).output().context("running git")?;
    if !out.status.success() {
        bail!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds `jobset` at `sha` under `target/bench-compare/` (once; kept for the next call).
fn build_base(repo: &Path, sha: &str) -> anyhow::Result<PathBuf> {
    let dir = repo.join("target/bench-compare");
    let bin = dir.join(format!("jobset-{}", &sha[..12]));
    if bin.exists() {
        return Ok(bin);
    }
    let src = dir.join(format!("src-{}", &sha[..12]));
    if !src.exists() {
        std::fs::create_dir_all(&src)?;
        let archive = Command::new("git").arg("-C").arg(repo).args(["archive", sha]).stdout(Stdio::piped()).spawn()?;
        let status = Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(&src)
            .stdin(archive.stdout.context("git archive's output")?)
            .status()?;
        if !status.success() {
            std::fs::remove_dir_all(&src).ok();
            bail!("unpacking git archive {sha} into {}", src.display());
        }
    }
    eprintln!("building the base {} (release) in {}", &sha[..12], src.display());
    let status = Command::new("cargo")
        .args(["build", "--release", "-p", "jobset-cli"])
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("building the base {sha} failed");
    }
    std::fs::copy(dir.join("target/release/jobset"), &bin)?;
    Ok(bin)
}

fn bench_output(bin: &Path, args: &[String]) -> anyhow::Result<String> {
    let out = Command::new(bin).arg("bench").args(args).stderr(Stdio::null()).output()?;
    if !out.status.success() {
        bail!("{} bench {}: exit {}", bin.display(), args.join(" "), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `jobset bench compare` (see the module docs).
pub fn run(base: &str, runs: usize, args: &[String]) -> anyhow::Result<()> {
    if args.first().is_some_and(|a| a == "compare") {
        bail!("bench compare compares another bench: give its arguments after --");
    }
    let here = std::env::current_dir()?;
    let repo = PathBuf::from(git(&here, &["rev-parse", "--show-toplevel"]).context("run it inside the repository")?);
    let sha = git(&repo, &["rev-parse", "--verify", &format!("{base}^{{commit}}")])?;
    let head_rev = git(&repo, &["describe", "--always", "--dirty"])?;
    let base_bin = build_base(&repo, &sha)?;
    // A copy: a rebuild of the tree must not change the binary under measurement.
    let head_bin = repo.join("target/bench-compare/jobset-head");
    std::fs::copy(std::env::current_exe()?, &head_bin)?;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "jobset bench compare: base {} vs head {head_rev} (this binary), {runs} runs each in turn, {cores} cores, {}",
        &sha[..12],
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC")
    );
    println!("  jobset bench {}\n", args.join(" "));
    let (mut b, mut h) = (vec![], vec![]);
    for i in 1..=runs {
        eprintln!("run {i}/{runs}: base");
        b.push(tables(&bench_output(&base_bin, args)?));
        eprintln!("run {i}/{runs}: head");
        h.push(tables(&bench_output(&head_bin, args)?));
    }
    println!("Each figure: median of the base's runs → median of the head's (head / base).\n");
    for t in compare(&b, &h) {
        println!("{}\n", render(&t));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "jobset bench in-place (2 cores)\n\
        | pods | runtime | in-place restart | API requests |\n\
        |---|---|---|---|\n\
        | 5000 | simulated, sidecar | 3.185 s | 25905 (list 5000, patch 15000) |\n\
        | 64 | process, sidecar | 2.142 s | - |\n\
        \n\
        | pods | ratio |\n\
        |---|---|\n\
        | 5000 | 9.11× |\n";

    #[test]
    fn a_benchs_tables_are_read_with_their_header_and_rows() {
        let t = tables(RUN);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(t[0].header, ["pods", "runtime", "in-place restart", "API requests"]);
        assert_eq!(t[0].rows[1], ["64", "process, sidecar", "2.142 s", "-"]);
        assert_eq!(t[1].rows, [["5000", "9.11×"]]);
    }

    #[test]
    fn a_cell_is_read_by_the_number_it_starts_with() {
        let cases = [
            ("3.185 s", Some(3.185)),
            ("25905 (list 5000, patch 15000)", Some(25905.0)),
            ("9.11×", Some(9.11)),
            ("1315 MB", Some(1315.0)),
            ("-", None),
            ("simulated, sidecar", None),
        ];
        for (cell, want) in cases {
            assert_eq!(leading_number(cell), want, "{cell}");
        }
    }

    #[test]
    fn labels_stay_and_figures_become_medians_with_head_over_base() {
        let with = |secs: &str, requests: &str| {
            RUN.replace("3.185 s", secs).replace("25905 (list 5000, patch 15000)", requests)
        };
        let base = [with("3.0 s", "100 (x)"), with("4.0 s", "100 (x)"), with("3.5 s", "100 (x)")];
        let head = [with("2.0 s", "80 (y)"), with("1.0 s", "80 (y)"), with("1.5 s", "80 (y)")];
        let (b, h): (Vec<_>, Vec<_>) =
            (base.iter().map(|r| tables(r)).collect(), head.iter().map(|r| tables(r)).collect());
        let c = compare(&b, &h);
        // (case, table, row, cell, want)
        let cases = [
            ("a label the same in every run", 0, 0, 1, "simulated, sidecar"),
            ("a figure: medians with its unit and their ratio", 0, 0, 2, "3.5 s → 1.5 s (0.43×)"),
            ("a figure with text after it", 0, 0, 3, "100 → 80 (0.80×)"),
            ("a figure the same in every run stays as it is", 0, 1, 2, "2.142 s"),
            ("a dash in every run", 0, 1, 3, "-"),
        ];
        for (case, t, r, col, want) in cases {
            assert_eq!(c[t].rows[r][col], want, "{case}");
        }
    }

    #[test]
    fn a_table_the_base_does_not_have_shows_the_head_alone() {
        let head = tables(&format!("{RUN}\n| new | figure |\n|---|---|\n| a | 1.0 s |\n"));
        let h = vec![
            head.clone(),
            head.clone()
                .into_iter()
                .map(|mut t| {
                    if t.header[0] == "new" {
                        t.rows[0][1] = "3.0 s".into();
                    }
                    t
                })
                .collect(),
        ];
        let b = vec![tables(RUN)];
        let c = compare(&b, &h);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].rows[0], ["a", "– → 2 s"], "the head's median alone");
    }
}
