//! `jobset bench compare BASE -- ARGS…`: the same `jobset bench ARGS…` of a baseline commit and of
//! this binary, run in turn (base, head, base, head, …) on one machine, and every figure of their
//! output side by side: the median of each and head / base. Pairing the runs keeps a ratio
//! meaningful when the machine's speed drifts; a figure recorded in docs/benchmarks.md quotes it.
//! Figures are read from the bench's markdown tables and from its other lines (`bench apiserver`
//! prints plain lines: a line is matched across runs by its text with the numbers left out).
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
        (Some(b), Some(h)) if !h.is_empty() => medians(b, h, unit),
        _ => format!("{} → {}", base.first().unwrap_or(&"–"), head.first().unwrap_or(&"–")),
    }
}

/// `base median → head median (head / base)`, each with `unit`; `– → head median` without base
/// runs. `head` is not empty.
fn medians(base: Vec<f64>, head: Vec<f64>, unit: &str) -> String {
    let h = median(head);
    if base.is_empty() {
        return format!("– → {}{unit}", trim(h));
    }
    let b = median(base);
    let ratio = if b > 0.0 { format!("{:.2}×", h / b) } else { "–".into() };
    format!("{}{unit} → {}{unit} ({ratio})", trim(b), trim(h))
}

/// A plain line of a bench's output (outside its tables), cut into text and numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Text and numbers in turn, starting and ending with text (maybe empty): `numbers[i]` comes
    /// between `texts[i]` and `texts[i + 1]`.
    texts: Vec<String>,
    numbers: Vec<String>,
}

impl Line {
    /// Cuts `line` at its numbers: runs of digits with at most one decimal point that are not
    /// part of a word (`p50`, `v1`, `2b0a2ef` are text).
    fn parse(line: &str) -> Line {
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let (mut texts, mut numbers) = (vec![String::new()], vec![]);
        let mut rest = line;
        while let Some(c) = rest.chars().next() {
            let before = texts.last().and_then(|t| t.chars().last());
            if c.is_ascii_digit() && !word(before) && before.is_none_or(|b| b != '.') {
                let num = split_number(rest).0.trim_end_matches('.');
                let after = &rest[num.len()..];
                if num.matches('.').count() <= 1 && !word(after.chars().next()) {
                    numbers.push(num.to_string());
                    texts.push(String::new());
                    rest = after;
                    continue;
                }
                // A word that starts with digits: text up to its end.
                let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len());
                texts.last_mut().expect("never empty").push_str(&rest[..end]);
                rest = &rest[end..];
                continue;
            }
            texts.last_mut().expect("never empty").push(c);
            rest = &rest[c.len_utf8()..];
        }
        Line { texts, numbers }
    }

    /// The line with its numbers as `#`: what matches it across runs.
    fn shape(&self) -> String {
        self.texts.join("#")
    }
}

/// The plain lines of `text` with a number in them: those outside its markdown tables.
pub fn lines(text: &str) -> Vec<Line> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('|'))
        .map(Line::parse)
        .filter(|l| !l.numbers.is_empty())
        .collect()
}

/// The word a figure is counted in, from the text after it (` s = …` → `s`, ` writes/s (…` →
/// `writes/s`, ` ms, …` → `ms`): a short word of letters and `/` right after one space.
fn line_unit(after: &str) -> &str {
    let Some(rest) = after.strip_prefix(' ') else { return "" };
    let word = &rest[..rest.find([' ', ',', ';', ')']).unwrap_or(rest.len())];
    let unit = word.chars().count() <= 8 && word.chars().all(|c| c.is_alphabetic() || c == '/');
    if unit && word.chars().next().is_some_and(char::is_alphabetic) { word } else { "" }
}

/// The head's first run's lines, each figure replaced by the medians of the base's and head's
/// runs (as in [`compare`]'s cells): a line is matched across runs by its shape (the text with
/// the numbers left out) and by its place among the lines of that shape. A figure the same in
/// every run stays as it is.
pub fn compare_lines(base: &[Vec<Line>], head: &[Vec<Line>]) -> Vec<String> {
    let Some(first) = head.first() else { return vec![] };
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    first
        .iter()
        .map(|line| {
            let shape = line.shape();
            let nth = seen.entry(shape.clone()).or_default();
            let same = |runs: &[Vec<Line>]| -> Vec<Line> {
                runs.iter().filter_map(|r| r.iter().filter(|l| l.shape() == shape).nth(*nth).cloned()).collect()
            };
            let (b, h) = (same(base), same(head));
            *nth += 1;
            let mut out = line.texts[0].clone();
            for (i, text) in line.texts[1..].iter().enumerate() {
                fn cells(runs: &[Line], i: usize) -> Vec<&str> {
                    runs.iter().map(|l| l.numbers[i].as_str()).collect()
                }
                let (bc, hc) = (cells(&b, i), cells(&h, i));
                if bc.iter().chain(&hc).all(|c| *c == hc[0]) {
                    out.push_str(hc[0]);
                    out.push_str(text);
                    continue;
                }
                let nums = |cells: &[&str]| cells.iter().filter_map(|c| c.parse().ok()).collect::<Vec<f64>>();
                let unit = line_unit(text);
                let spaced = if unit.is_empty() { String::new() } else { format!(" {unit}") };
                out.push_str(&medians(nums(&bc), nums(&hc), &spaced));
                out.push_str(&text[spaced.len()..]);
            }
            out
        })
        .collect()
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
    let base_bin = build_base(&repo, &sha)?;
    // A copy: a rebuild of the tree must not change the binary under measurement.
    let head_bin = repo.join("target/bench-compare/jobset-head");
    std::fs::copy(std::env::current_exe()?, &head_bin)?;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "jobset bench compare: base {} vs head {} (this binary), {runs} runs each in turn, {cores} cores, {}, load average {}",
        &sha[..12],
        head_commit(&repo),
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        load_average()
    );
    println!("  jobset bench {}\n", args.join(" "));
    let (mut b, mut h) = (vec![], vec![]);
    for i in 1..=runs {
        eprintln!("run {i}/{runs}: base");
        b.push(bench_output(&base_bin, args)?);
        eprintln!("run {i}/{runs}: head");
        h.push(bench_output(&head_bin, args)?);
    }
    println!("Each figure: median of the base's runs → median of the head's (head / base).\n");
    let read = |runs: &[String]| runs.iter().map(|r| tables(r)).collect::<Vec<_>>();
    let (bt, ht) = (read(&b), read(&h));
    if ht.first().is_some_and(|t| t.is_empty()) {
        // A bench of plain lines: its figures are in them.
        let read = |runs: &[String]| runs.iter().map(|r| lines(r)).collect::<Vec<_>>();
        for line in compare_lines(&read(&b), &read(&h)) {
            println!("{line}");
        }
    }
    for t in compare(&bt, &ht) {
        println!("{}\n", render(&t));
    }
    println!("load average at the end: {}", load_average());
    Ok(())
}

/// The commit this binary was built from (its build script's `git rev-parse --short HEAD`), and
/// whether the checkout has changes beyond it now (a build from such a tree includes them).
fn head_commit(repo: &Path) -> String {
    let built = env!("JOBSET_GIT_COMMIT");
    match git(repo, &["status", "--porcelain", "--untracked-files=no"]) {
        Ok(changes) if !changes.is_empty() => format!("{built} + uncommitted changes of the checkout"),
        _ => built.to_string(),
    }
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), `?` where that is not readable.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let avg: Vec<&str> = text.split_whitespace().take(3).collect();
    if avg.len() == 3 { avg.join(" ") } else { "?".into() }
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

    /// `jobset bench apiserver`'s lines, its figures as given.
    fn apiserver(writes: &str, secs: &str, rss: &str) -> String {
        format!(
            "jobset bench apiserver (2 cores)\n\
             create, in memory, in-process kube::Client: 15000 pods in {secs} s = {writes} writes/s (concurrency 32)\n\
             resident memory with 15000 pods stored: {rss} MB (process was 5 MB before the server)\n\
             watch fan-out to 100 watchers (20 events, 2000 deliveries): p50 1.5 ms, p99 3.0 ms, max 4.0 ms\n"
        )
    }

    #[test]
    fn a_plain_line_is_cut_at_numbers_that_are_not_part_of_a_word() {
        // (line, numbers, shape)
        let cases: [(&str, &[&str], &str); 5] = [
            ("15000 pods in 1.55 s = 9677 writes/s", &["15000", "1.55", "9677"], "# pods in # s = # writes/s"),
            ("p50 1.5 ms, p99 3.0 ms", &["1.5", "3.0"], "p50 # ms, p99 # ms"),
            ("base 2b0a2ef, v1, 1.2.3", &[], "base 2b0a2ef, v1, 1.2.3"),
            ("took 5.", &["5"], "took #."),
            ("(2 cores)", &["2"], "(# cores)"),
        ];
        for (line, numbers, shape) in cases {
            let l = Line::parse(line);
            assert_eq!(l.numbers, numbers, "{line}");
            assert_eq!(l.shape(), shape, "{line}");
        }
    }

    #[test]
    fn a_benchs_plain_lines_are_compared_figure_by_figure_with_their_units() {
        let base =
            [apiserver("9000", "1.67", "193"), apiserver("10000", "1.50", "193"), apiserver("9500", "1.58", "194")];
        let head =
            [apiserver("12000", "1.25", "160"), apiserver("11000", "1.36", "160"), apiserver("13000", "1.15", "161")];
        let read = |runs: &[String]| runs.iter().map(|r| lines(r)).collect::<Vec<_>>();
        let out = compare_lines(&read(&base), &read(&head));
        assert_eq!(out.len(), 4, "{out:#?}");
        assert_eq!(out[0], "jobset bench apiserver (2 cores)", "the same in every run: as it is");
        assert_eq!(
            out[1],
            "create, in memory, in-process kube::Client: 15000 pods in 1.58 s → 1.25 s (0.79×) = \
             9500 writes/s → 12000 writes/s (1.26×) (concurrency 32)"
        );
        assert_eq!(
            out[2],
            "resident memory with 15000 pods stored: 193 MB → 160 MB (0.83×) (process was 5 MB before the server)"
        );
        assert_eq!(
            out[3],
            "watch fan-out to 100 watchers (20 events, 2000 deliveries): p50 1.5 ms, p99 3.0 ms, max 4.0 ms"
        );
    }

    #[test]
    fn a_line_the_base_does_not_print_shows_the_head_alone() {
        let head = [
            format!("{}new figure: 3 MB\n", apiserver("1", "1", "1")),
            format!("{}new figure: 5 MB\n", apiserver("1", "1", "1")),
        ];
        let base = [apiserver("1", "1", "1")];
        let read = |runs: &[String]| runs.iter().map(|r| lines(r)).collect::<Vec<_>>();
        let out = compare_lines(&read(&base), &read(&head));
        assert_eq!(out.last().map(String::as_str), Some("new figure: – → 4 MB"));
    }
}
