//! Gang scheduling of a JobSet through the Workload API (KEP-4671; upstream JobSet issue #969
//! and its gang-scheduling KEP draft, kubernetes-sigs/jobset#1111, whose `gangPolicyOption`
//! values this uses). Extension: opted into with the annotation
//! `jobset.sigs.k8s.io/gang-policy` rather than the draft's `spec.gangPolicy` field, which
//! upstream has not settled on:
//!
//! - `JobSetAsGang`: one gang of every pod of the JobSet;
//! - `JobSetGangPerReplicatedJob`: one gang per replicated job.
//!
//! The JobSet controller creates one Workload named after the JobSet (one PodGroupTemplate per
//! gang: `all`, or the replicated job's name; `minCount` = the pods the gang runs at once) and,
//! for the Jobs it creates, the PodGroups their pods join (`spec.schedulingGroup.podGroupName`).
//! A PodGroup is one attempt of a gang: its name carries the JobSet's restart attempt (and, per
//! replicated job, that replicated job's), so the Jobs of a restart that recreates them form a
//! new gang, scheduled all or nothing again, while pods restarted in place keep theirs.

use serde_json::{Value, json};

use super::keys;
use super::{JobSet, ReplicatedJob};
use crate::field::FieldError;

/// The annotation that opts a JobSet into gang scheduling.
pub const GANG_POLICY: &str = "jobset.sigs.k8s.io/gang-policy";
/// The whole JobSet is one gang.
pub const JOBSET_AS_GANG: &str = "JobSetAsGang";
/// Each replicated job is a gang of its own.
pub const GANG_PER_REPLICATED_JOB: &str = "JobSetGangPerReplicatedJob";
/// The template of the one gang of `JobSetAsGang`.
pub const ALL: &str = "all";

/// The gang policy of a JobSet, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    AsGang,
    PerReplicatedJob,
}

pub fn policy(js: &JobSet) -> Option<Policy> {
    match js.metadata.annotations.as_ref()?.get(GANG_POLICY)?.as_str() {
        JOBSET_AS_GANG => Some(Policy::AsGang),
        GANG_PER_REPLICATED_JOB => Some(Policy::PerReplicatedJob),
        _ => None,
    }
}

fn annotation(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/annotations").and_then(|a| a.get(GANG_POLICY))
}

/// The annotation's value is one of the two policies and never changes; `JobSetAsGang` cannot
/// wait for replicated jobs to start in order (its first pods would wait for the last ones'),
/// and a Workload holds at most 8 templates.
pub fn validate(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let path = format!("metadata.annotations[{GANG_POLICY}]");
    let mut errs = vec![];
    if let Some(old) = old {
        if annotation(obj) != annotation(old) {
            errs.push(FieldError::invalid(&path, annotation(obj).unwrap_or(&Value::Null), "field is immutable"));
        }
        return errs;
    }
    let Some(v) = annotation(obj) else { return errs };
    match v.as_str() {
        Some(JOBSET_AS_GANG) => {
            let in_order =
                obj.pointer("/spec/startupPolicy/startupPolicyOrder").and_then(Value::as_str) == Some("InOrder");
            let depends = obj.pointer("/spec/replicatedJobs").and_then(Value::as_array).is_some_and(|rjs| {
                rjs.iter().any(|r| r.get("dependsOn").and_then(Value::as_array).is_some_and(|d| !d.is_empty()))
            });
            if in_order || depends {
                errs.push(FieldError::invalid(
                    &path,
                    v,
                    "JobSetAsGang schedules every pod at once: it cannot be combined with startupPolicyOrder InOrder or dependsOn",
                ));
            }
        }
        Some(GANG_PER_REPLICATED_JOB) => {
            let n = obj.pointer("/spec/replicatedJobs").and_then(Value::as_array).map_or(0, Vec::len);
            if n > crate::workload::MAX_POD_GROUP_TEMPLATES {
                errs.push(FieldError::invalid(
                    &path,
                    v,
                    format!(
                        "a Workload holds at most {} pod group templates, one per replicated job",
                        crate::workload::MAX_POD_GROUP_TEMPLATES
                    ),
                ));
            }
        }
        _ => errs.push(FieldError::not_supported(&path, v, &[JOBSET_AS_GANG, GANG_PER_REPLICATED_JOB])),
    }
    errs
}

/// The pods a replicated job runs at once: its Jobs times each one's `parallelism` (default 1).
fn pods_at_once(rj: &ReplicatedJob) -> i64 {
    let parallelism = rj.template.0.pointer("/spec/parallelism").and_then(Value::as_i64).unwrap_or(1);
    i64::from(rj.replicas) * parallelism
}

/// The gangs of a JobSet: (template name, minCount).
fn templates(js: &JobSet, policy: Policy) -> Vec<(String, i64)> {
    let rjs = &js.spec.replicated_jobs;
    match policy {
        Policy::AsGang => vec![(ALL.to_string(), rjs.iter().map(pods_at_once).sum())],
        Policy::PerReplicatedJob => rjs.iter().map(|rj| (rj.name.clone(), pods_at_once(rj))).collect(),
    }
}

/// The PodGroup the pods of `rj`'s Jobs join now: `<jobset>-<template>-<restart attempt>` (and
/// `-<replicated job restart attempt>` per replicated job).
pub fn pod_group_name(js: &JobSet, rj: &ReplicatedJob) -> Option<String> {
    let status = js.status.as_ref();
    let restarts = status.map_or(0, |s| s.restarts);
    Some(match policy(js)? {
        Policy::AsGang => format!("{}-{ALL}-{restarts}", js.name()),
        Policy::PerReplicatedJob => {
            let rj_restarts = status
                .and_then(|s| s.replicated_jobs_status.iter().find(|r| r.name == rj.name))
                .map_or(0, |r| r.restarts);
            format!("{}-{}-{restarts}-{rj_restarts}", js.name(), rj.name)
        }
    })
}

fn owner(js: &JobSet) -> Value {
    json!({"apiVersion": keys::API_VERSION, "kind": keys::KIND, "name": js.name(),
        "uid": js.metadata.uid.clone().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true})
}

/// The JobSet's Workload, named after it; None without a gang policy.
pub fn workload(js: &JobSet) -> Option<Value> {
    let templates: Vec<Value> = templates(js, policy(js)?)
        .into_iter()
        .map(|(name, min)| json!({"name": name, "schedulingPolicy": {"gang": {"minCount": min}}}))
        .collect();
    Some(json!({
        "apiVersion": crate::workload::API_VERSION, "kind": crate::workload::WORKLOAD_KIND,
        "metadata": {"name": js.name(), "namespace": js.namespace(), "ownerReferences": [owner(js)],
            "labels": {keys::JOBSET_NAME: js.name()}},
        "spec": {"controllerRef": {"apiGroup": keys::GROUP, "kind": keys::KIND, "name": js.name()},
            "podGroupTemplates": templates},
    }))
}

/// The PodGroup named `name` that `rj`'s pods join (see [`pod_group_name`]), from the Workload's
/// template of `rj`.
pub fn pod_group(js: &JobSet, rj: &ReplicatedJob) -> Option<Value> {
    let policy = policy(js)?;
    let name = pod_group_name(js, rj)?;
    let template = if policy == Policy::AsGang { ALL } else { rj.name.as_str() };
    let min = templates(js, policy).into_iter().find(|(t, _)| t == template).map_or(0, |(_, m)| m);
    Some(json!({
        "apiVersion": crate::workload::API_VERSION, "kind": crate::workload::POD_GROUP_KIND,
        "metadata": {"name": name, "namespace": js.namespace(), "ownerReferences": [owner(js)],
            "labels": {keys::JOBSET_NAME: js.name()}},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": js.name(), "podGroupTemplateName": template}},
            "schedulingPolicy": {"gang": {"minCount": min}},
        },
    }))
}

/// What must exist before Jobs of the replicated jobs `rjs` are created: the Workload and the
/// PodGroups their pods join (each once). None without a gang policy.
pub fn objects_for<'a>(js: &JobSet, rjs: impl IntoIterator<Item = &'a str>) -> Option<(Value, Vec<Value>)> {
    let workload = workload(js)?;
    let mut groups: Vec<Value> = Vec::new();
    for name in rjs {
        let Some(rj) = js.spec.replicated_jobs.iter().find(|r| r.name == name) else { continue };
        if let Some(g) =
            pod_group(js, rj).filter(|g| !groups.iter().any(|x| x["metadata"]["name"] == g["metadata"]["name"]))
        {
            groups.push(g);
        }
    }
    Some((workload, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(policy: &str, status: Value) -> Value {
        json!({
            "metadata": {"name": "train", "namespace": "ns", "uid": "u", "annotations": {GANG_POLICY: policy}},
            "spec": {"replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": {"template": {"spec": {}}}}},
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 3, "completions": 3,
                    "template": {"spec": {}}}}},
            ]},
            "status": status,
        })
    }

    fn typed(v: Value) -> JobSet {
        serde_json::from_value(v).unwrap()
    }

    fn messages(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_annotation_takes_upstream_s_two_options_and_is_immutable() {
        assert_eq!(messages(validate(&js(JOBSET_AS_GANG, json!({})), None)), Vec::<String>::new());
        assert_eq!(messages(validate(&js(GANG_PER_REPLICATED_JOB, json!({})), None)), Vec::<String>::new());
        assert_eq!(
            messages(validate(&js("JobSetWorkloadTemplate", json!({})), None)),
            [format!(
                "metadata.annotations[{GANG_POLICY}]: Unsupported value: \"JobSetWorkloadTemplate\": supported values: \"JobSetAsGang\", \"JobSetGangPerReplicatedJob\""
            )]
        );
        let mut in_order = js(JOBSET_AS_GANG, json!({}));
        in_order["spec"]["startupPolicy"] = json!({"startupPolicyOrder": "InOrder"});
        assert_eq!(validate(&in_order, None).len(), 1);
        let got = messages(validate(&js(GANG_PER_REPLICATED_JOB, json!({})), Some(&js(JOBSET_AS_GANG, json!({})))));
        assert_eq!(
            got,
            [format!(
                "metadata.annotations[{GANG_POLICY}]: Invalid value: \"JobSetGangPerReplicatedJob\": field is immutable"
            )]
        );
    }

    #[test]
    fn one_gang_of_every_pod_or_one_per_replicated_job() {
        let all = typed(js(JOBSET_AS_GANG, json!({})));
        let wl = workload(&all).unwrap();
        assert_eq!(wl["metadata"]["name"], "train");
        assert_eq!(
            wl["spec"]["controllerRef"],
            json!({"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "train"})
        );
        assert_eq!(
            wl["spec"]["podGroupTemplates"],
            json!([{"name": "all", "schedulingPolicy": {"gang": {"minCount": 7}}}])
        );
        let pg = pod_group(&all, &all.spec.replicated_jobs[1]).unwrap();
        assert_eq!(pg["metadata"]["name"], "train-all-0");
        assert_eq!(pg["spec"]["schedulingPolicy"]["gang"]["minCount"], 7);

        let per = typed(js(GANG_PER_REPLICATED_JOB, json!({})));
        let wl = workload(&per).unwrap();
        let mins: Vec<(&str, i64)> = wl["spec"]["podGroupTemplates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t["schedulingPolicy"]["gang"]["minCount"].as_i64().unwrap()))
            .collect();
        assert_eq!(mins, [("leader", 1), ("workers", 6)]);
        let pg = pod_group(&per, &per.spec.replicated_jobs[1]).unwrap();
        assert_eq!(pg["metadata"]["name"], "train-workers-0-0");
        assert_eq!(pg["spec"]["podGroupTemplateRef"]["workload"]["podGroupTemplateName"], "workers");

        assert!(workload(&typed(json!({"metadata": {"name": "x"}, "spec": {"replicatedJobs": []}}))).is_none());
        let (_, groups) = objects_for(&per, ["workers", "workers", "leader"]).unwrap();
        let names: Vec<&str> = groups.iter().map(|g| g["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["train-workers-0-0", "train-leader-0-0"]);
        let (_, groups) = objects_for(&all, ["workers", "leader"]).unwrap();
        assert_eq!(groups.len(), 1, "one gang for the whole JobSet");
    }

    #[test]
    fn a_restart_that_recreates_jobs_makes_a_new_gang() {
        let restarted = typed(js(JOBSET_AS_GANG, json!({"restarts": 2})));
        assert_eq!(pod_group_name(&restarted, &restarted.spec.replicated_jobs[0]).as_deref(), Some("train-all-2"));
        let status = json!({"restarts": 1, "replicatedJobsStatus": [{"name": "workers", "ready": 0, "succeeded": 0,
            "failed": 0, "active": 0, "suspended": 0, "restarts": 3}]});
        let per = typed(js(GANG_PER_REPLICATED_JOB, status));
        assert_eq!(pod_group_name(&per, &per.spec.replicated_jobs[1]).as_deref(), Some("train-workers-1-3"));
        assert_eq!(pod_group_name(&per, &per.spec.replicated_jobs[0]).as_deref(), Some("train-leader-1-0"));
    }
}
