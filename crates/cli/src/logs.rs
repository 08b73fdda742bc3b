//! `jobset logs POD | job/NAME [-c C] [-f] [--previous] [--tail N] [--timestamps]`.

use clap::Args;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};

use crate::client::{self, ClientArgs};
use crate::{Failure, USAGE};

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// A pod name, `pod/NAME`, or `job/NAME` (the Job's first pod).
    pub target: String,
    /// The container (default: the pod's only or first container).
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Keep streaming new output.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous (terminated) instance of the container.
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Only the last N lines.
    #[arg(long)]
    pub tail: Option<i64>,
    /// Prefix each line with its RFC 3339 timestamp.
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// What the target names (pure).
#[derive(Debug, PartialEq)]
pub enum Target {
    Pod(String),
    Job(String),
}

pub fn parse_target(s: &str) -> Result<Target, String> {
    match s.split_once('/') {
        None => Ok(Target::Pod(s.to_string())),
        Some(("pod" | "pods" | "po", n)) if !n.is_empty() => Ok(Target::Pod(n.to_string())),
        Some(("job" | "jobs" | "job.batch" | "jobs.batch", n)) if !n.is_empty() => Ok(Target::Job(n.to_string())),
        Some((kind, _)) => Err(format!("error: cannot get logs of {kind:?}: expected POD, pod/NAME or job/NAME")),
    }
}

pub async fn run(args: LogsArgs) -> anyhow::Result<i32> {
    let target = parse_target(&args.target).map_err(|m| Failure::new(USAGE, m))?;
    let conn = client::connect(&args.client).await?;
    let pods: Api<Pod> = Api::namespaced(conn.client.clone(), &conn.namespace);
    let pod = match target {
        Target::Pod(p) => p,
        Target::Job(j) => {
            let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={j}"));
            let mut list = pods.list(&lp).await.map_err(|e| Failure::new(1, client::server_error(&e)))?.items;
            list.sort_by_key(|p| (p.metadata.creation_timestamp.clone().map(|t| t.0), p.name_any()));
            match list.first() {
                Some(p) => p.name_any(),
                None => return Err(Failure::new(1, format!("error: job {j:?} has no pods")).into()),
            }
        }
    };
    let lp = LogParams {
        container: args.container.clone(),
        follow: args.follow,
        previous: args.previous,
        tail_lines: args.tail,
        timestamps: args.timestamps,
        ..LogParams::default()
    };
    if args.follow {
        let stream = pods.log_stream(&pod, &lp).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
        let mut lines = stream.lines();
        while let Some(l) = lines.try_next().await? {
            println!("{l}");
        }
    } else {
        let text = pods.logs(&pod, &lp).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
        print!("{text}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(parse_target("p"), Ok(Target::Pod("p".into())));
        assert_eq!(parse_target("pod/p"), Ok(Target::Pod("p".into())));
        assert_eq!(parse_target("job/j"), Ok(Target::Job("j".into())));
        assert!(parse_target("svc/s").is_err());
        assert!(parse_target("job/").is_err());
    }
}
