//! `pods/{name}/log`: streams what a node agent wrote for a container.
//!
//! The interface between the node agent and this server is a directory layout, as on a real node
//! (`/var/log/pods`): `<log_dir>/<namespace>_<pod>_<uid>/<container>/<restartCount>.log`, one line
//! per write in the CRI format `<RFC 3339 nano timestamp> <stdout|stderr> <F|P> <text>`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, header};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncSeekExt};

use crate::error::{ApiError, Result};
use crate::http::ApiServer;
use crate::resources::ResourceDef;

/// Where a container's log for one run lives.
pub fn log_path(log_dir: &std::path::Path, ns: &str, pod: &str, uid: &str, container: &str, restart: u64) -> PathBuf {
    log_dir.join(format!("{ns}_{pod}_{uid}")).join(container).join(format!("{restart}.log"))
}

/// Formats one CRI log line (what a node agent appends).
pub fn cri_line(ts: jiff::Timestamp, stream: &str, text: &str) -> String {
    format!("{} {stream} F {text}\n", ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
}

/// The text of a CRI line, with its timestamp in front when asked for.
fn render_line(line: &str, timestamps: bool) -> String {
    let mut parts = line.splitn(4, ' ');
    let (Some(ts), Some(_stream), Some(tag), Some(text)) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return line.to_string();
    };
    let text = text.strip_suffix('\n').unwrap_or(text);
    let end = if tag == "P" { "" } else { "\n" };
    if timestamps { format!("{ts} {text}{end}") } else { format!("{text}{end}") }
}

struct Target {
    path: PathBuf,
    container: String,
}

fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/status/{k}"))?.as_array())
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
}

fn resolve(server: &ApiServer, pod: &Value, name: &str, container: Option<&str>, previous: bool) -> Result<Target> {
    let names: Vec<&str> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}"))?.as_array())
        .flatten()
        .filter_map(|c| c.get("name")?.as_str())
        .collect();
    let main: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name")?.as_str())
        .collect();
    let container = match container {
        Some(c) if names.contains(&c) => c.to_string(),
        Some(c) => {
            return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")));
        }
        None if main.len() == 1 => main[0].to_string(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                main.join(" ")
            )));
        }
    };
    let status = container_status(pod, &container);
    let restarts = status.and_then(|s| s.get("restartCount")).and_then(Value::as_u64).unwrap_or(0);
    let waiting = || {
        let reason = status
            .and_then(|s| s.pointer("/state/waiting/reason"))
            .and_then(Value::as_str)
            .unwrap_or("ContainerCreating");
        ApiError::bad_request(format!("container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"))
    };
    let run = if previous {
        if restarts == 0 {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        restarts - 1
    } else {
        restarts
    };
    let Some(dir) = &server.config.log_dir else { return Err(waiting()) };
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    let path = log_path(dir, ns, name, uid, &container, run);
    if !path.exists() {
        return Err(waiting());
    }
    Ok(Target { path, container })
}

fn running(server: &ApiServer, def: &ResourceDef, ns: &str, name: &str, uid: &str, container: &str) -> bool {
    let Some(o) = server.store.get(def, ns, name) else { return false };
    if o.uid != uid {
        return false;
    }
    let v = o.value();
    container_status(&v, container).is_some_and(|s| s.pointer("/state/running").is_some())
}

pub async fn serve(
    server: Arc<ApiServer>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    q: &std::collections::HashMap<String, String>,
) -> Result<Response> {
    let pod = server.store.get(def, ns, name).ok_or_else(|| ApiError::not_found(def, name))?.value();
    let flag = |k: &str| matches!(q.get(k).map(String::as_str), Some("true" | "1"));
    let tail = match q.get("tailLines") {
        Some(t) => {
            Some(t.parse::<usize>().map_err(|_| ApiError::bad_request(format!("tailLines: invalid value {t:?}")))?)
        }
        None => None,
    };
    let (follow, timestamps, previous) = (flag("follow"), flag("timestamps"), flag("previous"));
    let target = resolve(&server, &pod, name, q.get("container").map(String::as_str), previous)?;
    let text = tokio::fs::read_to_string(&target.path)
        .await
        .map_err(|e| ApiError::internal(format!("reading {}: {e}", target.path.display())))?;
    let lines: Vec<&str> = text.split_inclusive('\n').filter(|l| l.ends_with('\n')).collect();
    let start = tail.map(|t| lines.len().saturating_sub(t)).unwrap_or(0);
    let head: String = lines[start..].iter().map(|l| render_line(l, timestamps)).collect();
    let consumed: usize = lines.iter().map(|l| l.len()).sum();
    let headers = [(header::CONTENT_TYPE, "text/plain")];
    if !follow || previous {
        return Ok((StatusCode::OK, headers, head).into_response());
    }
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string();
    let (def, ns, name) = (def.clone(), ns.to_string(), name.to_string());
    let poll = server.config.log_poll_interval;
    let state = (Some(Bytes::from(head)), consumed as u64, target, server, false);
    let stream = futures::stream::unfold(state, move |(first, mut offset, target, server, done)| {
        let (def, ns, name, uid) = (def.clone(), ns.clone(), name.clone(), uid.clone());
        async move {
            if let Some(b) = first {
                return Some((Ok::<Bytes, std::io::Error>(b), (None, offset, target, server, done)));
            }
            if done {
                return None;
            }
            loop {
                let alive = running(&server, &def, &ns, &name, &uid, &target.container);
                let mut out = String::new();
                if let Ok(mut f) = tokio::fs::File::open(&target.path).await
                    && f.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
                {
                    let mut r = tokio::io::BufReader::new(f);
                    let mut line = String::new();
                    while r.read_line(&mut line).await.map(|n| n > 0).unwrap_or(false) {
                        if !line.ends_with('\n') {
                            break;
                        }
                        offset += line.len() as u64;
                        out.push_str(&render_line(&line, timestamps));
                        line.clear();
                    }
                }
                if !out.is_empty() {
                    return Some((Ok(Bytes::from(out)), (None, offset, target, server, !alive)));
                }
                if !alive {
                    return None;
                }
                tokio::time::sleep(poll).await;
            }
        }
    });
    Ok((StatusCode::OK, headers, Body::from_stream(stream)).into_response())
}
