//! The Job controller's Workload integration (Kubernetes 1.36, KEP-5547, alpha gate
//! `EnableWorkloadWithJob`): a gang-scheduling candidate Job (Indexed, `parallelism` > 1,
//! `completions` = `parallelism`, no `schedulingGroup` in its pod template) gets a Workload whose
//! `spec.controllerRef` names it, with one gang template of `minCount` = `parallelism`, and one
//! PodGroup from that template; its pods join the PodGroup (`spec.schedulingGroup.podGroupName`).
//! A Workload the Job controls (`metadata.ownerReferences`) and whose `controllerRef` names the
//! Job is used as it is: a user may write one before the Job. Anything else (two such
//! Workloads, one the Job does not control, one with several templates) falls back to default
//! scheduling, as upstream. Objects are created only for a Job that never started.
//!
//! This module decides from what is stored; `super` lists and creates.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1alpha2::{PodGroup, Workload};
use serde_json::{Value, json};

/// `DNS1123SubdomainMaxLength`.
const MAX_NAME: usize = 253;

/// `IsGangSchedulingCandidate`.
pub fn is_candidate(job: &Job) -> bool {
    let Some(spec) = job.spec.as_ref() else { return false };
    let parallelism = spec.parallelism.unwrap_or(1);
    parallelism > 1
        && spec.completion_mode.as_deref() == Some("Indexed")
        && spec.completions == Some(parallelism)
        && spec.template.spec.as_ref().is_none_or(|s| s.scheduling_group.is_none())
}

/// `isNewJob`: no pods, never started, nothing finished, never suspended.
pub fn is_new(job: &Job, pods: usize) -> bool {
    let status = job.status.as_ref();
    pods == 0
        && status.is_none_or(|s| {
            s.start_time.is_none()
                && s.succeeded.unwrap_or(0) == 0
                && s.failed.unwrap_or(0) == 0
                && !s.conditions.iter().flatten().any(|c| c.type_ == "Suspended")
        })
}

/// 32-bit FNV-1a, Go's `hash/fnv.New32a`.
fn fnv32a(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x01000193);
    }
    h
}

/// `rand.SafeEncodeString`: each byte mapped onto consonants and digits that spell no words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes().map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char).collect()
}

/// `computeWorkloadName`: `<job name, truncated>-<hash of its uid>`. (Upstream hashes the uid
/// as `DeepHashObject` prints it; this hashes its bytes, so the suffix differs.)
pub fn workload_name(job: &Job) -> String {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let hash = safe_encode(&fnv32a(&[uid.as_bytes()]).to_string());
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let prefix = &name[..name.len().min(MAX_NAME - hash.len() - 1)];
    format!("{prefix}-{hash}")
}

/// `computePodGroupName`: `<workload>-<template>-<hash of both>`, each part truncated to fit.
pub fn pod_group_name(workload: &str, template: &str) -> String {
    let hash = safe_encode(&fnv32a(&[workload.as_bytes(), template.as_bytes()]).to_string());
    let max = MAX_NAME - hash.len() - 2;
    let (mut wl, mut tpl) = (workload, template);
    if wl.len() + tpl.len() > max {
        let half = max / 2;
        if wl.len() <= half {
            tpl = &tpl[..max - wl.len()];
        } else if tpl.len() <= half {
            wl = &wl[..max - tpl.len()];
        } else {
            wl = &wl[..max - half];
            tpl = &tpl[..half];
        }
    }
    format!("{wl}-{tpl}-{hash}")
}

fn controller_ref(job: &Job) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "name": job.metadata.name, "uid": job.metadata.uid,
        "controller": true, "blockOwnerDeletion": true})
}

fn controlled_by(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, job: &Job) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == job.metadata.uid.as_ref())
}

/// `createWorkloadForJob`'s object: one gang template, `<job>-pgt-0`, of `minCount` = parallelism.
pub fn new_workload(job: &Job) -> Workload {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let parallelism = job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
    serde_json::from_value(json!({
        "metadata": {"name": workload_name(job), "namespace": job.metadata.namespace,
            "ownerReferences": [controller_ref(job)]},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
            "podGroupTemplates": [{"name": format!("{name}-pgt-0"),
                "schedulingPolicy": {"gang": {"minCount": parallelism}}}],
        },
    }))
    .expect("a Workload")
}

/// `createPodGroupForWorkload`'s object: the first template's policy, the Job its controller and
/// the Workload a plain owner (which does not block the Workload's deletion).
pub fn new_pod_group(job: &Job, workload: &Workload) -> PodGroup {
    let template = &workload.spec.pod_group_templates[0];
    let wl = workload.metadata.name.as_deref().unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": {"name": pod_group_name(wl, &template.name), "namespace": job.metadata.namespace,
            "ownerReferences": [controller_ref(job),
                {"apiVersion": jobset_api::workload::API_VERSION, "kind": "Workload", "name": wl, "uid": workload.metadata.uid}]},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": wl, "podGroupTemplateName": template.name}},
            "schedulingPolicy": template.scheduling_policy,
        },
    }))
    .expect("a PodGroup")
}

/// What to do about a Job's Workload, given the Workloads whose `controllerRef` names it.
#[derive(Debug, PartialEq)]
pub enum WorkloadStep<'a> {
    /// Default scheduling: no Workload integration for this Job.
    Fallback,
    Create,
    Use(&'a Workload),
}

/// `getOrCreateWorkload` and `validateWorkloadStructure`.
pub fn workload_step<'a>(job: &Job, referencing: &'a [Workload], new_job: bool) -> WorkloadStep<'a> {
    match referencing {
        [] if new_job => WorkloadStep::Create,
        [wl] if controlled_by(&wl.metadata, job) && wl.spec.pod_group_templates.len() == 1 => WorkloadStep::Use(wl),
        _ => WorkloadStep::Fallback,
    }
}

/// Whether a Workload's `spec.controllerRef` names this Job.
pub fn references(workload: &Workload, job: &Job) -> bool {
    workload.spec.controller_ref.as_ref().is_some_and(|r| {
        r.api_group.as_deref() == Some("batch") && r.kind == "Job" && Some(&r.name) == job.metadata.name.as_ref()
    })
}

/// Whether a PodGroup was made from this Workload (`spec.podGroupTemplateRef.workload`).
pub fn made_from(pod_group: &PodGroup, workload: &str) -> bool {
    let r = pod_group.spec.pod_group_template_ref.as_ref().and_then(|r| r.workload.as_ref());
    r.is_some_and(|w| w.workload_name == workload)
}

/// What to do about the PodGroup, given those made from the Workload.
#[derive(Debug, PartialEq)]
pub enum PodGroupStep<'a> {
    Fallback,
    Create,
    Use(&'a PodGroup),
}

/// `getOrCreatePodGroup`.
pub fn pod_group_step<'a>(job: &Job, made: &'a [PodGroup]) -> PodGroupStep<'a> {
    match made {
        [] => PodGroupStep::Create,
        [pg] if controlled_by(&pg.metadata, job) => PodGroupStep::Use(pg),
        _ => PodGroupStep::Fallback,
    }
}

/// Links a pod to its PodGroup.
pub fn join(pod: &mut Pod, pod_group: &str) {
    if let Some(spec) = pod.spec.as_mut() {
        spec.scheduling_group =
            Some(k8s_openapi::api::core::v1::PodSchedulingGroup { pod_group_name: Some(pod_group.to_string()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value, status: Value) -> Job {
        let mut template = json!({"spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}});
        if let Some(g) = spec.get("schedulingGroup") {
            template["spec"]["schedulingGroup"] = g.clone();
        }
        let mut s = spec.clone();
        s.as_object_mut().unwrap().remove("schedulingGroup");
        s["template"] = template;
        serde_json::from_value(json!({"metadata": {"name": "train", "namespace": "ns", "uid": "u-1"},
            "spec": s, "status": status}))
        .unwrap()
    }

    fn indexed(n: i32) -> Value {
        json!({"parallelism": n, "completions": n, "completionMode": "Indexed"})
    }

    #[test]
    fn only_indexed_jobs_running_every_index_at_once_are_gang_candidates() {
        let cases = [
            ("indexed, 4 of 4", indexed(4), true),
            ("one pod", indexed(1), false),
            ("non-indexed", json!({"parallelism": 4, "completions": 4}), false),
            (
                "fewer at once than completions",
                json!({"parallelism": 2, "completions": 4, "completionMode": "Indexed"}),
                false,
            ),
            (
                "its pods already name a group",
                {
                    let mut s = indexed(4);
                    s["schedulingGroup"] = json!({"podGroupName": "mine"});
                    s
                },
                false,
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(is_candidate(&job(spec, json!({}))), want, "{name}");
        }
    }

    #[test]
    fn only_a_job_that_never_started_is_new() {
        let cases = [
            ("fresh", json!({}), 0, true),
            ("has pods", json!({}), 1, false),
            ("started", json!({"startTime": "2026-01-01T00:00:00Z"}), 0, false),
            ("a failure", json!({"failed": 1}), 0, false),
            ("was suspended", json!({"conditions": [{"type": "Suspended", "status": "True"}]}), 0, false),
        ];
        for (name, status, pods, want) in cases {
            assert_eq!(is_new(&job(indexed(2), status), pods), want, "{name}");
        }
    }

    #[test]
    fn names_follow_upstream_s_pattern_and_fit_a_subdomain() {
        let j = job(indexed(3), json!({}));
        let wl = workload_name(&j);
        assert!(wl.starts_with("train-") && wl.len() > "train-".len(), "{wl}");
        assert!(wl["train-".len()..].bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)), "{wl}");
        // The hash runs over the names one after the other; the digits map as Go's.
        assert_eq!(fnv32a(&[b"wl", b"t"]), fnv32a(&[b"wlt"]));
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        let long = "w".repeat(300);
        assert!(pod_group_name(&long, "workers").len() <= MAX_NAME);
        assert!(pod_group_name(&long, "workers").contains("-workers-"));
    }

    #[test]
    fn a_workload_and_pod_group_are_created_for_a_new_job_and_reused_only_when_the_job_controls_them() {
        let j = job(indexed(3), json!({}));
        let mut wl = new_workload(&j);
        assert!(references(&wl, &j));
        assert_eq!(wl.spec.pod_group_templates[0].name, "train-pgt-0");
        assert_eq!(wl.spec.pod_group_templates[0].scheduling_policy.gang.as_ref().unwrap().min_count, 3);
        wl.metadata.uid = Some("w-1".into());
        assert_eq!(workload_step(&j, &[], true), WorkloadStep::Create);
        assert_eq!(workload_step(&j, &[], false), WorkloadStep::Fallback, "a started Job gets none");
        assert_eq!(workload_step(&j, std::slice::from_ref(&wl), false), WorkloadStep::Use(&wl));
        let mut foreign = wl.clone();
        foreign.metadata.owner_references = None;
        assert_eq!(workload_step(&j, &[foreign], true), WorkloadStep::Fallback);
        assert_eq!(workload_step(&j, &[wl.clone(), wl.clone()], true), WorkloadStep::Fallback);

        let pg = new_pod_group(&j, &wl);
        assert!(made_from(&pg, wl.metadata.name.as_deref().unwrap()));
        assert_eq!(pg.spec.scheduling_policy.gang.as_ref().unwrap().min_count, 3);
        let owners: Vec<(&str, Option<bool>)> =
            pg.metadata.owner_references.iter().flatten().map(|o| (o.kind.as_str(), o.controller)).collect();
        assert_eq!(owners, [("Job", Some(true)), ("Workload", None)]);
        assert_eq!(pod_group_step(&j, &[]), PodGroupStep::Create);
        assert_eq!(pod_group_step(&j, std::slice::from_ref(&pg)), PodGroupStep::Use(&pg));
        let mut theirs = pg.clone();
        theirs.metadata.owner_references = None;
        assert_eq!(pod_group_step(&j, &[theirs]), PodGroupStep::Fallback);
    }
}
