//! Log lines on stderr, filtered by `$JOBSET_LOG` (tracing's env-filter syntax): text for people,
//! coloured only on a terminal and never with `NO_COLOR` (no-color.org); or JSON for machines.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields` (with `message`), `target`.
    Json,
}

/// Whether text log lines carry ANSI colours: only when stderr is a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
pub fn ansi(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Installs the process's subscriber: `$JOBSET_LOG` when set and valid, else `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = EnvFilter::try_from_env("JOBSET_LOG").unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let colour = ansi(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
            builder.with_ansi(colour).init();
        }
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_without_a_non_empty_no_color() {
        for (terminal, no_color, want) in [
            (true, None, true),
            (true, Some(""), true),
            (true, Some("1"), false),
            (true, Some("0"), false),
            (false, None, false),
            (false, Some(""), false),
            (false, Some("1"), false),
        ] {
            assert_eq!(ansi(terminal, no_color.map(OsStr::new)), want, "terminal {terminal}, NO_COLOR {no_color:?}");
        }
    }
}
