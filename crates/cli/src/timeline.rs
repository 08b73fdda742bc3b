//! `jobset timeline NAME`: the JobSet's restart timeline, as a self-contained HTML page (a Gantt
//! chart of its pods and the phases of each recorded restart) or as JSON for scripts. The shell
//! fetches the JobSet, its Jobs and pods; `jobset_ui` builds and draws.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use jiff::Timestamp;
use jobset_api::jobset::{JobSet, keys};
use jobset_ui::{render, timeline};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::core::ObjectMeta;

use crate::Failure;
use crate::client::{self, ClientArgs};

#[derive(Args, Debug)]
pub struct TimelineArgs {
    /// The JobSet's name.
    pub name: String,
    /// `html`: write a self-contained page (inline SVG, no network) and print its path; `json`:
    /// print the timeline on stdout.
    #[arg(long, value_enum, default_value_t = Format::Html)]
    pub format: Format,
    /// The HTML file to write (default: `<name>-timeline.html` in the current directory).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Html,
    Json,
}

pub async fn run(args: TimelineArgs) -> anyhow::Result<i32> {
    let conn = client::connect(&args.client).await?;
    let jobset = Api::<JobSet>::namespaced(conn.client.clone(), &conn.namespace)
        .get(&args.name)
        .await
        .map_err(|e| Failure::new(1, client::server_error(&e)))?;
    let selector = ListParams::default().labels(&format!("{}={}", keys::JOBSET_NAME, args.name));
    let mut jobs = Api::<Job>::namespaced(conn.client.clone(), &conn.namespace)
        .list(&selector)
        .await
        .map_err(|e| Failure::new(1, client::server_error(&e)))?
        .items;
    let mut pods = Api::<Pod>::namespaced(conn.client.clone(), &conn.namespace)
        .list(&selector)
        .await
        .map_err(|e| Failure::new(1, client::server_error(&e)))?
        .items;
    // Children of an earlier JobSet of the same name are not this one's.
    let uid = jobset.metadata.uid.clone().unwrap_or_default();
    jobs.retain(|j| of_jobset(&j.metadata, &uid));
    pods.retain(|p| of_jobset(&p.metadata, &uid));

    let t = timeline::build(&timeline::Inputs { jobset: &jobset, jobs: &jobs, pods: &pods, now: Timestamp::now() });
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&t)?),
        Format::Html => {
            let path = args.output.unwrap_or_else(|| PathBuf::from(format!("{}-timeline.html", args.name)));
            std::fs::write(&path, render::page(&t))
                .map_err(|e| Failure::new(1, format!("error: writing {}: {e}", path.display())))?;
            println!("{}", path.display());
        }
    }
    Ok(0)
}

/// Whether an object labelled with a JobSet UID (if any) belongs to the JobSet of `uid`.
fn of_jobset(meta: &ObjectMeta, uid: &str) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(keys::JOBSET_UID)).is_none_or(|u| uid.is_empty() || u == uid)
}
