//! `jobset events`: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, oldest first, like kubectl events.

use clap::Args;
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};

use crate::Failure;
use crate::client::{self, ClientArgs};
use crate::progress::align;

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Events of all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After listing, print new events as they come.
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// When the event last happened (pure): lastTimestamp, eventTime, firstTimestamp, creation.
pub fn last_seen(e: &Event) -> Option<Timestamp> {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The header of the table.
pub fn header(namespace_column: bool) -> Vec<String> {
    let mut h: Vec<String> = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"].map(String::from).to_vec();
    if namespace_column {
        h.insert(0, "NAMESPACE".into());
    }
    h
}

/// One event's cells (pure).
pub fn row(e: &Event, now: Timestamp, namespace_column: bool) -> Vec<String> {
    let age = last_seen(e).map_or("<unknown>".into(), |t| {
        jobset_apiserver::table::human_duration(now.duration_since(t).max(jiff::SignedDuration::ZERO))
    });
    let o = &e.involved_object;
    let mut r = vec![
        age,
        e.type_.clone().unwrap_or_default(),
        e.reason.clone().unwrap_or_default(),
        format!("{}/{}", o.kind.as_deref().unwrap_or_default(), o.name.as_deref().unwrap_or_default()),
        e.message.clone().unwrap_or_default().trim_end().to_string(),
    ];
    if namespace_column {
        r.insert(0, e.metadata.namespace.clone().unwrap_or_default());
    }
    r
}

/// The whole table, oldest first.
pub fn table(events: &mut [Event], now: Timestamp, namespace_column: bool) -> Vec<String> {
    events.sort_by_key(last_seen);
    let mut cells = vec![header(namespace_column)];
    cells.extend(events.iter().map(|e| row(e, now, namespace_column)));
    align(&cells)
}

pub async fn run(args: EventsArgs) -> anyhow::Result<i32> {
    let conn = client::connect(&args.client).await?;
    let api: Api<Event> = if args.all_namespaces {
        Api::all(conn.client.clone())
    } else {
        Api::namespaced(conn.client.clone(), &conn.namespace)
    };
    let mut list = api.list(&ListParams::default()).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
    if list.items.is_empty() && !args.watch {
        match args.all_namespaces {
            true => eprintln!("No events found."),
            false => eprintln!("No events found in {} namespace.", conn.namespace),
        }
        return Ok(0);
    }
    for l in table(&mut list.items, Timestamp::now(), args.all_namespaces) {
        println!("{l}");
    }
    if args.watch {
        let mut seen: std::collections::HashMap<String, String> = list
            .items
            .iter()
            .map(|e| {
                (e.metadata.uid.clone().unwrap_or_default(), e.metadata.resource_version.clone().unwrap_or_default())
            })
            .collect();
        let mut stream = watcher(api, watcher::Config::default()).applied_objects().boxed();
        while let Some(e) = stream.try_next().await? {
            let uid = e.metadata.uid.clone().unwrap_or_default();
            let version = e.metadata.resource_version.clone().unwrap_or_default();
            if seen.insert(uid, version.clone()).as_deref() == Some(version.as_str()) {
                continue;
            }
            let cells = [header(args.all_namespaces), row(&e, Timestamp::now(), args.all_namespaces)];
            if let Some(l) = align(&cells).pop() {
                println!("{l}");
            }
            use std::io::Write;
            std::io::stdout().flush().ok();
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_print_oldest_first() {
        let ev = |name: &str, t: &str, reason: &str| -> Event {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": "p"}, "type": "Normal", "reason": reason,
                "message": "m\n", "lastTimestamp": t}))
            .unwrap()
        };
        let mut events = vec![ev("b", "2026-01-01T00:01:00Z", "Started"), ev("a", "2026-01-01T00:00:00Z", "Scheduled")];
        let now: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        assert_eq!(
            table(&mut events, now, false),
            [
                "LAST SEEN   TYPE     REASON      OBJECT   MESSAGE",
                "2m          Normal   Scheduled   Pod/p    m",
                "60s         Normal   Started     Pod/p    m",
            ]
        );
        assert_eq!(table(&mut events, now, true)[1].split_whitespace().next(), Some("default"));
    }
}
