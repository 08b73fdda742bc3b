//! `jobset get KIND [NAME...]`: the server's Table, printed as kubectl does; or objects as
//! YAML, JSON or names; `-w` streams changes.

use clap::Args;
use futures::{AsyncBufReadExt, StreamExt};
use kube::Client;
use serde_json::{Value, json};

use crate::client::{self, ClientArgs};
use crate::kinds::{self, Resource};
use crate::progress::align;
use crate::{Failure, USAGE};

pub const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

#[derive(Args, Debug)]
pub struct GetArgs {
    /// The kind: `pods`, `po`, `jobs`, `jobs.batch`, `jobsets`, ... (comma-separated for several).
    pub kind: String,
    /// Object names (default: all).
    pub names: Vec<String>,
    /// Output format: wide, yaml, json or name (default: a table).
    #[arg(short = 'o', long, value_parser = ["wide", "yaml", "json", "name"])]
    pub output: Option<String>,
    /// After listing, watch for changes.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Label selector, e.g. `app=x,tier!=db`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// List across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// How table rows are printed.
#[derive(Debug, Clone, Default)]
pub struct TableOptions {
    pub wide: bool,
    pub namespace_column: bool,
    /// `job.batch/` in front of names when several kinds are listed.
    pub name_prefix: Option<String>,
}

/// The header and rows of a `meta.k8s.io/v1` Table, as cells (pure).
pub fn table_cells(table: &Value, opts: &TableOptions) -> (Vec<String>, Vec<Vec<String>>) {
    let columns = table["columnDefinitions"].as_array().cloned().unwrap_or_default();
    let shown: Vec<usize> =
        (0..columns.len()).filter(|i| opts.wide || columns[*i]["priority"].as_i64().unwrap_or(0) == 0).collect();
    let mut header: Vec<String> =
        shown.iter().map(|i| columns[*i]["name"].as_str().unwrap_or_default().to_uppercase()).collect();
    if opts.namespace_column {
        header.insert(0, "NAMESPACE".into());
    }
    let mut rows = Vec::new();
    for row in table["rows"].as_array().into_iter().flatten() {
        let cells = row["cells"].as_array().cloned().unwrap_or_default();
        let mut out: Vec<String> = shown.iter().map(|i| cell(cells.get(*i).unwrap_or(&Value::Null))).collect();
        if let (Some(prefix), Some(first)) = (&opts.name_prefix, out.first_mut()) {
            *first = format!("{prefix}/{first}");
        }
        if opts.namespace_column {
            out.insert(0, row["object"]["metadata"]["namespace"].as_str().unwrap_or_default().to_string());
        }
        rows.push(out);
    }
    (header, rows)
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<none>".into(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// A list of objects as kubectl prints it with `-o yaml|json`: a `v1` `List` with kinds filled in.
pub fn as_list(resource: &Resource, list: &Value) -> Value {
    let items: Vec<Value> = list["items"].as_array().into_iter().flatten().map(|i| with_kind(resource, i)).collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
}

fn with_kind(resource: &Resource, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Value::Object(m) = &mut o {
        m.entry("apiVersion").or_insert_with(|| resource.api_version().into());
        m.entry("kind").or_insert_with(|| resource.kind.clone().into());
    }
    o
}

pub fn to_yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# {e}\n"))
}

pub fn print_object(format: &str, resource: &Resource, obj: &Value) {
    match format {
        "json" => println!("{}", serde_json::to_string_pretty(obj).unwrap_or_default()),
        "yaml" => print!("{}", to_yaml(obj)),
        _ => println!("{}/{}", resource.singular_ref(), obj["metadata"]["name"].as_str().unwrap_or_default()),
    }
}

pub async fn request(client: &Client, path: &str, accept: Option<&str>) -> Result<Value, kube::Error> {
    let mut req = http::Request::get(path);
    if let Some(a) = accept {
        req = req.header(http::header::ACCEPT, a);
    }
    client.request::<Value>(req.body(Vec::new()).expect("request")).await
}

/// Resolves a kind word against discovery, with kubectl's error.
pub fn resolve_kind(resources: &[Resource], word: &str) -> Result<Resource, Failure> {
    kinds::resolve(resources, word)
        .cloned()
        .ok_or_else(|| Failure::new(1, format!("error: the server doesn't have a resource type {word:?}")))
}

fn query(selector: Option<&str>, fields: Option<&str>, extra: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded_pairs(extra);
    if let Some(l) = selector {
        q.push(("labelSelector".into(), l.into()));
    }
    if let Some(f) = fields {
        q.push(("fieldSelector".into(), f.into()));
    }
    if q.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = q.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    format!("?{}", parts.join("&"))
}

fn form_urlencoded_pairs(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Percent-encodes a query value.
pub fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub async fn run(args: GetArgs) -> anyhow::Result<i32> {
    let conn = client::connect(&args.client).await?;
    let resources = kinds::discover(&conn.client).await?;
    let words: Vec<&str> = args.kind.split(',').filter(|w| !w.is_empty()).collect();
    if words.is_empty() {
        return Err(Failure::new(USAGE, "error: a resource type is required").into());
    }
    if words.len() > 1 && !args.names.is_empty() {
        return Err(Failure::new(USAGE, "error: names can only be given with a single resource type").into());
    }
    if args.all_namespaces && !args.names.is_empty() {
        return Err(Failure::new(USAGE, "error: a resource cannot be retrieved by name across all namespaces").into());
    }
    let kinds: Vec<Resource> = words.iter().map(|w| resolve_kind(&resources, w)).collect::<Result<_, _>>()?;
    let namespace = (!args.all_namespaces).then_some(conn.namespace.as_str());
    let format = args.output.as_deref().unwrap_or("table");
    let mut code = 0;
    let mut printed_any = false;
    for (k, resource) in kinds.iter().enumerate() {
        let base = resource.collection_path(namespace);
        let opts = TableOptions {
            wide: format == "wide",
            namespace_column: args.all_namespaces && resource.namespaced,
            name_prefix: (kinds.len() > 1).then(|| resource.singular_ref()),
        };
        if !args.names.is_empty() {
            let mut cells = Vec::new();
            let mut header = Vec::new();
            for name in &args.names {
                let path = format!("{base}/{name}");
                let accept = matches!(format, "table" | "wide").then_some(TABLE_ACCEPT);
                match request(&conn.client, &path, accept).await {
                    Ok(v) if accept.is_some() => {
                        let (h, rows) = table_cells(&v, &opts);
                        header = h;
                        cells.extend(rows);
                    }
                    Ok(v) => print_object(format, resource, &with_kind(resource, &v)),
                    Err(e) => {
                        eprintln!("{}", client::server_error(&e));
                        code = 1;
                    }
                }
            }
            if !cells.is_empty() {
                cells.insert(0, header);
                align(&cells).iter().for_each(|l| println!("{l}"));
            }
            if args.watch {
                let fields = args.names.iter().map(|n| format!("metadata.name={n}")).next();
                watch(&conn.client, resource, &base, args.selector.as_deref(), fields.as_deref(), format, &opts)
                    .await?;
            }
            continue;
        }
        let q = query(args.selector.as_deref(), None, &[]);
        let path = format!("{base}{q}");
        match format {
            "table" | "wide" => {
                let t = request(&conn.client, &path, Some(TABLE_ACCEPT))
                    .await
                    .map_err(|e| Failure::new(1, client::server_error(&e)))?;
                let (header, rows) = table_cells(&t, &opts);
                if !rows.is_empty() {
                    if k > 0 && printed_any {
                        println!();
                    }
                    let mut cells = vec![header];
                    cells.extend(rows);
                    align(&cells).iter().for_each(|l| println!("{l}"));
                    printed_any = true;
                } else if kinds.len() == 1 || (k + 1 == kinds.len() && !printed_any) {
                    match namespace.filter(|_| resource.namespaced) {
                        Some(ns) => eprintln!("No resources found in {ns} namespace."),
                        None => eprintln!("No resources found"),
                    }
                }
            }
            _ => {
                let list =
                    request(&conn.client, &path, None).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
                match format {
                    "name" => {
                        for item in list["items"].as_array().into_iter().flatten() {
                            print_object("name", resource, item);
                        }
                    }
                    f => print_object(f, resource, &as_list(resource, &list)),
                }
            }
        }
        if args.watch {
            watch(&conn.client, resource, &base, args.selector.as_deref(), None, format, &opts).await?;
        }
    }
    Ok(code)
}

/// Streams changes from now on: table rows, or objects in the chosen format.
async fn watch(
    client: &Client,
    resource: &Resource,
    base: &str,
    selector: Option<&str>,
    fields: Option<&str>,
    format: &str,
    opts: &TableOptions,
) -> anyhow::Result<()> {
    let table = matches!(format, "table" | "wide");
    // Start from the current resourceVersion: what was listed is not repeated.
    let list = request(client, &format!("{base}{}", query(selector, fields, &[("limit", "1")])), None)
        .await
        .map_err(|e| Failure::new(1, client::server_error(&e)))?;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
    let q = query(selector, fields, &[("watch", "true"), ("resourceVersion", &rv), ("allowWatchBookmarks", "false")]);
    let mut req = http::Request::get(format!("{base}{q}"));
    if table {
        req = req.header(http::header::ACCEPT, TABLE_ACCEPT);
    }
    let body =
        client.request_stream(req.body(Vec::new())?).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
    let mut lines = body.lines();
    while let Some(line) = lines.next().await {
        let line = line?;
        let Ok(ev) = serde_json::from_str::<Value>(&line) else { continue };
        match ev["type"].as_str() {
            Some("ERROR") => {
                return Err(Failure::new(
                    1,
                    format!("error: watch: {}", ev["object"]["message"].as_str().unwrap_or_default()),
                )
                .into());
            }
            Some("BOOKMARK") | None => continue,
            _ => {}
        }
        if table {
            let (header, rows) = table_cells(&ev["object"], opts);
            for r in rows {
                let cells = vec![header.clone(), r];
                if let Some(l) = align(&cells).pop() {
                    println!("{l}");
                }
            }
        } else {
            print_object(format, resource, &with_kind(resource, &ev["object"]));
        }
        use std::io::Write;
        std::io::stdout().flush().ok();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Value {
        json!({"kind": "Table", "columnDefinitions": [
            {"name": "Name", "priority": 0}, {"name": "Status", "priority": 0},
            {"name": "Completions", "priority": 0}, {"name": "Containers", "priority": 1}],
            "rows": [
                {"cells": ["a", "Running", "0/1", "main"], "object": {"metadata": {"name": "a", "namespace": "ns1"}}},
                {"cells": ["longer-name", "Complete", 1, null], "object": {"metadata": {"name": "longer-name", "namespace": "default"}}}]})
    }

    #[test]
    fn tables_hide_wide_columns_unless_asked() {
        let (h, rows) = table_cells(&table(), &TableOptions::default());
        let mut cells = vec![h];
        cells.extend(rows);
        assert_eq!(
            align(&cells),
            ["NAME          STATUS     COMPLETIONS", "a             Running    0/1", "longer-name   Complete   1"]
        );
        let opts = TableOptions { wide: true, namespace_column: true, name_prefix: Some("job.batch".into()) };
        let (h, rows) = table_cells(&table(), &opts);
        assert_eq!(h, ["NAMESPACE", "NAME", "STATUS", "COMPLETIONS", "CONTAINERS"]);
        assert_eq!(rows[0], ["ns1", "job.batch/a", "Running", "0/1", "main"]);
        assert_eq!(rows[1][4], "<none>");
    }

    #[test]
    fn lists_get_kinds_and_queries_are_encoded() {
        let job = crate::kinds::fake("batch", "Job", "jobs", &[], true);
        let l = as_list(&job, &json!({"items": [{"metadata": {"name": "a"}}]}));
        assert_eq!(l["kind"], "List");
        assert_eq!(l["items"][0]["kind"], "Job");
        assert_eq!(l["items"][0]["apiVersion"], "batch/v1");
        assert_eq!(
            query(Some("a in (x,y)"), None, &[("watch", "true")]),
            "?watch=true&labelSelector=a%20in%20%28x%2Cy%29"
        );
        assert_eq!(query(None, None, &[]), "");
    }
}
