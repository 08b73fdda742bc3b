//! `jobset bench crd`: what the API server's CRD schema enforcement and webhook-configuration
//! lookup cost, each against its in-run baseline. JobSet creates and the JobSet controller's
//! status writes (PUT `/status` of the whole object) with the JobSet CRD's full structural
//! schema, then with the open schema it had before (`x-kubernetes-preserve-unknown-fields`),
//! switched by updating the CRD through the API; pod creates and pod status patches with no
//! webhook configuration, then with a `ValidatingWebhookConfiguration` that does not match pods.
//! Rounds alternate the two cases so that a trend over the run (a growing store, other work on
//! the machine) shows as a difference between rounds, not between cases.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use jobset_apiserver::persist::Memory;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{UsageWho, cpu, jobset_resource, pod, server};

const CRD: &str = "jobsets.jobset.x-k8s.io";

/// The JobSet CRD's schema in a phase.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Schema {
    /// As shipped (config/crd/bases).
    Full,
    /// `type: object` with `x-kubernetes-preserve-unknown-fields: true`, as before schemas.
    Open,
}

/// Throughput and process CPU of one phase.
struct Figure {
    ops: usize,
    wall: Duration,
    cpu: Duration,
}

impl Figure {
    fn per_s(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64()
    }
    fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ops as f64
    }
    fn line(&self) -> String {
        format!(
            "{:>6.0}/s ({} in {:.2} s), {:>6.0} µs CPU each",
            self.per_s(),
            self.ops,
            self.wall.as_secs_f64(),
            self.cpu_us()
        )
    }
}

/// Runs `n` operations, `concurrency` at a time, timing wall clock and process CPU.
async fn timed<F, Fut>(n: usize, concurrency: usize, op: F) -> anyhow::Result<Figure>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let (cpu0, t0) = (cpu(UsageWho::RUSAGE_SELF), Instant::now());
    let results: Vec<anyhow::Result<()>> =
        futures::stream::iter(0..n).map(&op).buffer_unordered(concurrency).collect().await;
    let figure = Figure { ops: n, wall: t0.elapsed(), cpu: cpu(UsageWho::RUSAGE_SELF).saturating_sub(cpu0) };
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    Ok(figure)
}

/// A JobSet as users write them: `replicated_jobs` replicated jobs of 100-pod Indexed Jobs,
/// each with a realistic pod template (~1 KB).
fn jobset(name: &str, replicated_jobs: usize) -> Value {
    let rjobs: Vec<Value> = (0..replicated_jobs)
        .map(|r| {
            json!({
                "name": format!("workers-{r}"),
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": 100, "completions": 100, "completionMode": "Indexed", "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": {"app": "trainer", "tier": format!("rj-{r}")}},
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {"cloud.example.com/accelerator": "h100"},
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                            "containers": [{
                                "name": "trainer", "image": "registry.example.com/ml/trainer:2026.11",
                                "command": ["python", "-m", "train", "--config", "/etc/train/config.yaml"],
                                "env": [
                                    {"name": "MASTER_ADDR", "value": format!("{name}-workers-0-0-0.{name}")},
                                    {"name": "WORLD_SIZE", "value": (100 * replicated_jobs).to_string()},
                                    {"name": "NCCL_DEBUG", "value": "WARN"},
                                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                                ],
                                "ports": [{"containerPort": 29500, "name": "rendezvous", "protocol": "TCP"}],
                                "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                                              "limits": {"nvidia.com/gpu": "8"}},
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/train"}, {"name": "shm", "mountPath": "/dev/shm"}]
                            }],
                            "volumes": [{"name": "config", "configMap": {"name": "train-config"}},
                                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
                        }
                    }
                }}
            })
        })
        .collect();
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": {"team": "ml"}},
        "spec": {
            "replicatedJobs": rjobs,
            "network": {"enableDNSHostnames": true},
            "failurePolicy": {"maxRestarts": 5},
            "successPolicy": {"operator": "All"}
        }
    })
}

/// The JobSet controller's status after `step` reconciles: one entry per replicated job and
/// two conditions, with counts that change every step (so every write changes the object).
fn status(replicated_jobs: usize, step: usize) -> Value {
    let rjs: Vec<Value> = (0..replicated_jobs)
        .map(|r| {
            json!({"name": format!("workers-{r}"), "ready": (step + r) % 2, "succeeded": 0, "failed": 0,
                   "active": 1, "suspended": 0})
        })
        .collect();
    json!({
        "restarts": step % 5, "restartsCountTowardsMax": step % 5,
        "replicatedJobsStatus": rjs,
        "conditions": [
            {"type": "StartupPolicyCompleted", "status": "True", "reason": "StartupPolicyCompleted",
             "message": "all replicated jobs have started", "lastTransitionTime": "2026-11-27T06:00:00Z"},
            {"type": "Suspended", "status": "False", "reason": "ResumeJobs",
             "message": "jobset is resumed", "lastTransitionTime": "2026-11-27T06:00:01Z"}
        ]
    })
}

/// Replaces the JobSet CRD's schema with `schema`'s, through the API.
async fn set_schema(client: &kube::Client, shipped: &Value, schema: Schema) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = serde_json::to_value(crds.get(CRD).await?)?;
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let versions = crd.pointer_mut("/spec/versions").and_then(Value::as_array_mut).context("CRD without versions")?;
    for (i, v) in versions.iter_mut().enumerate() {
        v["schema"]["openAPIV3Schema"] = match schema {
            Schema::Full => shipped
                .pointer(&format!("/spec/versions/{i}/schema/openAPIV3Schema"))
                .cloned()
                .context("shipped CRD without a schema")?,
            Schema::Open => open.clone(),
        };
    }
    crds.replace(CRD, &PostParams::default(), &serde_json::from_value(crd)?).await?;
    Ok(())
}

/// Checks that the served schema is the phase's: an unknown field is pruned by the full schema
/// and kept by the open one.
async fn check_schema(api: &Api<DynamicObject>, ns: &str, schema: Schema) -> anyhow::Result<()> {
    let mut probe = jobset(&format!("probe-{ns}"), 1);
    probe["spec"]["notAField"] = json!(1);
    let created = api.create(&PostParams::default(), &serde_json::from_value(probe)?).await?;
    let kept = created.data.pointer("/spec/notAField").is_some();
    anyhow::ensure!(
        kept == (schema == Schema::Open),
        "the {schema:?} schema is not the one served (unknown field kept: {kept})"
    );
    Ok(())
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}}))?).await?;
    Ok(())
}

/// One phase: `jobsets` creates, then `updates` status writes spread over the first
/// `concurrency` JobSets, each JobSet's writes one after the other (as one controller worker
/// reconciles one JobSet at a time).
async fn jobset_phase(
    client: &kube::Client,
    ns: &str,
    (jobsets, updates, replicated_jobs, concurrency): (usize, usize, usize, usize),
    schema: Schema,
) -> anyhow::Result<(Figure, Figure)> {
    namespace(client, ns).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &jobset_resource());
    check_schema(&api, ns, schema).await?;
    let creates = timed(jobsets, concurrency, |i| {
        let api = api.clone();
        async move {
            let js = serde_json::from_value(jobset(&format!("js-{i}"), replicated_jobs))?;
            api.create(&PostParams::default(), &js).await?;
            Ok(())
        }
    })
    .await?;
    let writers = concurrency.min(jobsets).max(1);
    let per_writer = updates.div_ceil(writers);
    let status_writes = timed(writers, writers, |w| {
        let api = api.clone();
        async move {
            let name = format!("js-{w}");
            let mut js = api.get(&name).await?;
            for step in 0..per_writer {
                js.data["status"] = status(replicated_jobs, step + 1);
                js = api.replace_status(&name, &PostParams::default(), &js).await?;
            }
            Ok(())
        }
    })
    .await?;
    Ok((creates, Figure { ops: writers * per_writer, ..status_writes }))
}

/// One webhook phase: `pods` creates, then a status patch of each (the node agents' write).
async fn pod_phase(
    client: &kube::Client,
    ns: &str,
    pods: usize,
    concurrency: usize,
) -> anyhow::Result<(Figure, Figure)> {
    namespace(client, ns).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let creates = timed(pods, concurrency, |i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &pod(i)).await?;
            Ok(())
        }
    })
    .await?;
    let patches = timed(pods, concurrency, |i| {
        let api = api.clone();
        async move {
            let name = pod(i).metadata.name.unwrap_or_default();
            let patch = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await?;
            Ok(())
        }
    })
    .await?;
    Ok((creates, patches))
}

/// A validating webhook configuration whose only rule is JobSets: pod writes must look it up
/// and find nothing (it points at a closed port, so a match would fail the write).
fn non_matching_webhook() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench-jobsets-only"},
        "webhooks": [{
            "name": "vjobset.bench.example.com",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["jobsets"]}]
        }]
    })
}

/// `jobset bench crd`.
pub async fn bench(
    jobsets: usize,
    updates: usize,
    replicated_jobs: usize,
    pods: usize,
    rounds: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    println!(
        "jobset bench crd ({} cores; concurrency {concurrency}; JobSets of {replicated_jobs} replicated jobs, {} bytes of JSON)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        serde_json::to_vec(&jobset("js-0", replicated_jobs))?.len()
    );
    let s = server(Box::new(Memory))?;
    let client = s.client();
    let shipped = jobset_api::crds::preinstalled()
        .map_err(anyhow::Error::msg)?
        .into_iter()
        .find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(CRD))
        .context("the JobSet CRD is preinstalled")?;

    let mut by_schema: Vec<(Schema, Figure, Figure)> = vec![];
    for round in 0..rounds {
        for schema in [Schema::Full, Schema::Open] {
            set_schema(&client, &shipped, schema).await?;
            let ns = format!("crd-{}-{round}", format!("{schema:?}").to_lowercase());
            let (c, u) = jobset_phase(&client, &ns, (jobsets, updates, replicated_jobs, concurrency), schema).await?;
            println!("round {round}, {schema:?} schema: JobSet create {}; status update {}", c.line(), u.line());
            by_schema.push((schema, c, u));
        }
    }
    set_schema(&client, &shipped, Schema::Full).await?;

    let webhooks: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
            "validatingwebhookconfigurations",
        ),
    );
    let mut by_webhook: Vec<(bool, Figure, Figure)> = vec![];
    for round in 0..rounds {
        for registered in [false, true] {
            if registered {
                webhooks.create(&PostParams::default(), &serde_json::from_value(non_matching_webhook())?).await?;
            }
            let ns = format!("webhook-{}-{round}", if registered { "registered" } else { "none" });
            let (c, p) = pod_phase(&client, &ns, pods, concurrency).await?;
            let what = if registered { "a non-matching webhook registered" } else { "no webhook configuration" };
            println!("round {round}, {what}: pod create {}; pod status patch {}", c.line(), p.line());
            by_webhook.push((registered, c, p));
            if registered {
                webhooks.delete("bench-jobsets-only", &Default::default()).await?;
            }
        }
    }

    // Summary: the best round of each case (the least disturbed by the rest of the machine).
    let best = |figures: Vec<&Figure>| figures.into_iter().map(Figure::per_s).fold(0.0, f64::max);
    let least_cpu = |figures: Vec<&Figure>| figures.into_iter().map(Figure::cpu_us).fold(f64::INFINITY, f64::min);
    println!("summary (best round of {rounds}):");
    for (what, pick) in [
        ("JobSet create", (|f: &(Schema, Figure, Figure)| &f.1) as fn(&(Schema, Figure, Figure)) -> &Figure),
        ("JobSet status update", |f| &f.2),
    ] {
        let of = |s: Schema| by_schema.iter().filter(|f| f.0 == s).map(pick).collect::<Vec<_>>();
        let (full, open) = (best(of(Schema::Full)), best(of(Schema::Open)));
        println!(
            "  {what}: full schema {full:.0}/s ({:.0} µs CPU), open schema {open:.0}/s ({:.0} µs CPU): {:.2}× the open schema's time",
            least_cpu(of(Schema::Full)),
            least_cpu(of(Schema::Open)),
            open / full
        );
    }
    for (what, pick) in [
        ("pod create", (|f: &(bool, Figure, Figure)| &f.1) as fn(&(bool, Figure, Figure)) -> &Figure),
        ("pod status patch", |f| &f.2),
    ] {
        let of = |r: bool| by_webhook.iter().filter(|f| f.0 == r).map(pick).collect::<Vec<_>>();
        let (none, registered) = (best(of(false)), best(of(true)));
        println!(
            "  {what}: no webhook {none:.0}/s ({:.0} µs CPU), non-matching webhook {registered:.0}/s ({:.0} µs CPU): {:.2}× the time",
            least_cpu(of(false)),
            least_cpu(of(true)),
            none / registered
        );
    }
    Ok(())
}
