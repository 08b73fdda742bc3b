//! Child Job construction (upstream's `constructJob`): names, labels and annotations, owner
//! reference, `suspend`, pod `subdomain`, claim volumes, the node-selector strategy of exclusive
//! placement and coordinator.
//!
//! Works on the template's JSON so fields a typed client would drop reach the Job.
//!
//! Exclusive placement by pod affinity is not the controller's: the Job and its pod template only
//! carry the exclusive-topology annotation, and upstream's pod webhooks
//! (`jobset_api::jobset::exclusive`: `jobset manager`'s, or the embedded API server's built-in
//! Pod admission) give the leader pod its affinity terms and pin its followers to its domain.

use std::collections::BTreeMap;

use jobset_api::jobset::keys::*;
use jobset_api::jobset::{JobSet, ReplicatedJob, job_name};
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

/// Hex SHA-1 of `<namespace>/<jobName>` (upstream's `job-key`, SHA-1 whatever its comment says).
pub fn job_key(namespace: &str, job: &str) -> String {
    let digest = Sha1::digest(format!("{namespace}/{job}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The labels (and same-valued annotations) of Job `index` of `rj`.
pub fn job_labels(js: &JobSet, rj: &ReplicatedJob, index: i32, with_job_restarts: bool) -> BTreeMap<String, String> {
    let status = js.status.as_ref();
    let rj_status = status.and_then(|s| s.replicated_jobs_status.iter().find(|s| s.name == rj.name));
    let name = job_name(js.name(), &rj.name, index);
    let all = &js.spec.replicated_jobs;
    let global_replicas: i32 = all.iter().map(|r| r.replicas).sum();
    let preceding: i32 = all.iter().take_while(|r| r.name != rj.name).map(|r| r.replicas).sum();
    let group = all.iter().filter(|r| r.group_name == rj.group_name);
    let group_replicas: i32 = group.clone().map(|r| r.replicas).sum();
    let group_preceding: i32 = group.take_while(|r| r.name != rj.name).map(|r| r.replicas).sum();
    let mut l = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        l.insert(k.to_string(), v);
    };
    put(JOBSET_NAME, js.name().to_string());
    put(JOBSET_UID, js.metadata.uid.clone().unwrap_or_default());
    put(REPLICATED_JOB_NAME, rj.name.clone());
    put(RESTART_ATTEMPT, status.map(|s| s.restarts).unwrap_or(0).to_string());
    if with_job_restarts {
        let n = rj_status.and_then(|s| s.job_restarts.get(index as usize)).copied().unwrap_or(0);
        put(JOB_RESTART_ATTEMPT, n.to_string());
    }
    put(REPLICATED_JOB_RESTART_ATTEMPT, rj_status.map(|s| s.restarts).unwrap_or(0).to_string());
    put(REPLICATED_JOB_REPLICAS, rj.replicas.to_string());
    put(GLOBAL_REPLICAS, global_replicas.to_string());
    put(JOB_INDEX, index.to_string());
    put(JOB_GLOBAL_INDEX, (preceding + index).to_string());
    put(JOB_KEY, job_key(js.namespace(), &name));
    put(GROUP_NAME, rj.group_name.clone());
    put(GROUP_REPLICAS, group_replicas.to_string());
    put(JOB_GROUP_INDEX, (group_preceding + index).to_string());
    if let Some(c) = &js.spec.coordinator {
        put(
            COORDINATOR,
            format!("{}-{}-{}-{}.{}", js.name(), c.replicated_job, c.job_index, c.pod_index, js.subdomain()),
        );
    }
    l
}

fn obj<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("made an object")
}

fn merge_strings(target: &mut Map<String, Value>, key: &str, values: &BTreeMap<String, String>) {
    let m = obj(target, key);
    for (k, v) in values {
        m.insert(k.clone(), Value::String(v.clone()));
    }
}

/// The exclusive-placement annotations of `rj`'s Jobs and pods (upstream's
/// `labelAndAnnotateObject`): the JobSet's topology and node-selector strategy, then the
/// replicated job template's over them; each level's strategy counts only with its topology.
fn exclusive(js: &JobSet, rj: &ReplicatedJob) -> BTreeMap<String, String> {
    let rj_ann = rj.template.0.pointer("/metadata/annotations").and_then(Value::as_object);
    let rj_ann: BTreeMap<&str, &str> =
        rj_ann.into_iter().flatten().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))).collect();
    let js_ann: BTreeMap<&str, &str> =
        js.metadata.annotations.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut out = BTreeMap::new();
    for level in [js_ann, rj_ann] {
        if let Some(topology) = level.get(EXCLUSIVE_TOPOLOGY) {
            out.insert(EXCLUSIVE_TOPOLOGY.to_string(), topology.to_string());
            if let Some(strategy) = level.get(NODE_SELECTOR_STRATEGY) {
                out.insert(NODE_SELECTOR_STRATEGY.to_string(), strategy.to_string());
            }
        }
    }
    out
}

/// The child Job `index` of `rj`, as JSON ready to create.
pub fn construct_job(js: &JobSet, rj: &ReplicatedJob, index: i32, with_job_restarts: bool) -> Value {
    let name = job_name(js.name(), &rj.name, index);
    let labels = job_labels(js, rj, index, with_job_restarts);
    let mut template = rj.template.0.as_object().cloned().unwrap_or_default();
    let mut meta = template.remove("metadata").and_then(|m| m.as_object().cloned()).unwrap_or_default();
    let mut spec = template.remove("spec").and_then(|s| s.as_object().cloned()).unwrap_or_default();
    let mut annotations = labels.clone();
    annotations.extend(exclusive(js, rj));
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(js.namespace()));
    meta.remove("generateName");
    merge_strings(&mut meta, "labels", &labels);
    merge_strings(&mut meta, "annotations", &annotations);
    // Upstream reads the Job's annotations, the replicated job template's among them.
    let job_annotations = meta.get("annotations").and_then(Value::as_object);
    let node_selector_strategy =
        job_annotations.is_some_and(|a| a.contains_key(EXCLUSIVE_TOPOLOGY) && a.contains_key(NODE_SELECTOR_STRATEGY));
    meta.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": API_VERSION, "kind": KIND, "name": js.name(),
            "uid": js.metadata.uid.clone().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true
        }]),
    );
    spec.insert("suspend".into(), json!(js.suspended()));
    let pod = obj(&mut spec, "template");
    let pod_meta = obj(pod, "metadata");
    merge_strings(pod_meta, "labels", &labels);
    merge_strings(pod_meta, "annotations", &annotations);
    let pod_spec = obj(pod, "spec");
    if js.dns_hostnames() {
        pod_spec.insert("subdomain".into(), json!(js.subdomain()));
    }
    add_claim_volumes(js, pod_spec);
    // Extension: a gang-scheduled JobSet's pods join their gang's PodGroup.
    if let Some(group) = jobset_api::jobset::gang::pod_group_name(js, rj) {
        pod_spec.insert("schedulingGroup".into(), json!({"podGroupName": group}));
    }
    // The node-selector strategy: nodes labelled and tainted per Job beforehand
    // (upstream's hack/label_nodes).
    if node_selector_strategy {
        obj(pod_spec, "nodeSelector").insert(NAMESPACED_JOB.into(), json!(format!("{}_{name}", js.namespace())));
        let tolerations = pod_spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Some(t) = tolerations.as_array_mut() {
            t.push(json!({"key": NO_SCHEDULE_TAINT, "operator": "Exists", "effect": "NoSchedule"}));
        }
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
}

/// A `persistentVolumeClaim` volume `<template>-<jobset>` for every claim template whose name a
/// container or init container mounts.
fn add_claim_volumes(js: &JobSet, pod_spec: &mut Map<String, Value>) {
    let mounted: Vec<String> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod_spec.get(*k)?.as_array())
        .flatten()
        .filter_map(|c| c.get("volumeMounts")?.as_array())
        .flatten()
        .filter_map(|m| Some(m.get("name")?.as_str()?.to_string()))
        .collect();
    for policy in &js.spec.volume_claim_policies {
        for t in &policy.templates {
            let tname = t.metadata.name.clone().unwrap_or_default();
            if tname.is_empty() || !mounted.contains(&tname) {
                continue;
            }
            let volumes = pod_spec.entry("volumes").or_insert_with(|| json!([]));
            let Some(v) = volumes.as_array_mut() else { continue };
            if !v.iter().any(|x| x.get("name").and_then(Value::as_str) == Some(tname.as_str())) {
                v.push(
                    json!({"name": tname, "persistentVolumeClaim": {"claimName": format!("{tname}-{}", js.name())}}),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(extra: Value) -> JobSet {
        let mut v = json!({
            "metadata": {"name": "js", "namespace": "ns", "uid": "u-1"},
            "spec": {
                "network": {"enableDNSHostnames": true},
                "replicatedJobs": [
                    {"name": "driver", "replicas": 1, "groupName": "g1", "template": {
                        "metadata": {"labels": {"team": "a"}},
                        "spec": {"completionMode": "Indexed", "parallelism": 1, "completions": 1,
                                 "podFailurePolicy": {"rules": [{"action": "FailJob", "setConditionReason": "ExitCode3",
                                     "onExitCodes": {"operator": "In", "values": [3]}}]},
                                 "template": {"spec": {"containers": [{"name": "main",
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}}},
                    {"name": "workers", "replicas": 3, "groupName": "g2", "template": {"spec": {"template": {"spec": {}}}}},
                    {"name": "extra", "replicas": 2, "groupName": "g1", "template": {"spec": {"template": {"spec": {}}}}}
                ]
            },
            "status": {"restarts": 2, "replicatedJobsStatus": [{"name": "workers", "ready": 0, "succeeded": 0,
                "failed": 0, "active": 0, "suspended": 0, "jobRestarts": [0, 4, 0], "restarts": 1}]}
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn job_key_is_the_sha1_of_namespace_and_name() {
        // printf 'ns/js-workers-1' | sha1sum
        assert_eq!(job_key("ns", "js-workers-1"), "517d70ff8ddeb6684a3a547e37602be566603129");
        assert_eq!(job_key("default", "a").len(), 40);
        assert_ne!(job_key("ns", "a"), job_key("ns", "b"));
    }

    #[test]
    fn labels_carry_indexes_replicas_and_attempts() {
        let js = js(json!({}));
        let l = job_labels(&js, &js.spec.replicated_jobs[1], 1, true);
        let get = |k: &str| l.get(k).map(String::as_str);
        assert_eq!(get(JOBSET_NAME), Some("js"));
        assert_eq!(get(JOBSET_UID), Some("u-1"));
        assert_eq!(get(RESTART_ATTEMPT), Some("2"));
        assert_eq!(get(JOB_RESTART_ATTEMPT), Some("4"));
        assert_eq!(get(REPLICATED_JOB_RESTART_ATTEMPT), Some("1"));
        assert_eq!(get(REPLICATED_JOB_REPLICAS), Some("3"));
        assert_eq!(get(GLOBAL_REPLICAS), Some("6"));
        assert_eq!(get(JOB_INDEX), Some("1"));
        assert_eq!(get(JOB_GLOBAL_INDEX), Some("2"));
        assert_eq!(get(GROUP_NAME), Some("g2"));
        assert_eq!(get(GROUP_REPLICAS), Some("3"));
        assert_eq!(get(JOB_GROUP_INDEX), Some("1"));
        let e = job_labels(&js, &js.spec.replicated_jobs[2], 1, true);
        assert_eq!(
            (e[GROUP_REPLICAS].as_str(), e[JOB_GROUP_INDEX].as_str(), e[JOB_GLOBAL_INDEX].as_str()),
            ("3", "2", "5")
        );
    }

    #[test]
    fn without_the_restart_job_feature_there_is_no_job_restart_attempt() {
        let js = js(json!({}));
        assert!(!job_labels(&js, &js.spec.replicated_jobs[1], 1, false).contains_key(JOB_RESTART_ATTEMPT));
    }

    #[test]
    fn the_job_keeps_unknown_template_fields_and_gets_owner_suspend_and_subdomain() {
        let js = js(json!({"spec": {"suspend": true}}));
        let j = construct_job(&js, &js.spec.replicated_jobs[0], 0, true);
        assert_eq!(j["metadata"]["name"], "js-driver-0");
        assert_eq!(j["metadata"]["labels"]["team"], "a");
        assert_eq!(j["metadata"]["annotations"][JOB_INDEX], "0");
        assert_eq!(j["spec"]["podFailurePolicy"]["rules"][0]["setConditionReason"], "ExitCode3");
        assert_eq!(j["spec"]["suspend"], true);
        assert_eq!(j["spec"]["template"]["spec"]["subdomain"], "js");
        assert_eq!(j["spec"]["template"]["metadata"]["labels"][REPLICATED_JOB_NAME], "driver");
        assert_eq!(j["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(j["metadata"]["ownerReferences"][0]["controller"], true);
    }

    #[test]
    fn claim_templates_are_mounted_where_a_container_names_them() {
        let js = js(json!({"spec": {"volumeClaimPolicies": [{"templates": [
            {"metadata": {"name": "data"}}, {"metadata": {"name": "unused"}}]}]}}));
        let j = construct_job(&js, &js.spec.replicated_jobs[0], 0, true);
        assert_eq!(
            j["spec"]["template"]["spec"]["volumes"],
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-js"}}])
        );
    }

    #[test]
    fn the_coordinator_label_names_the_coordinator_pod() {
        let js = js(json!({"spec": {"coordinator": {"replicatedJob": "driver", "jobIndex": 0, "podIndex": 0}}}));
        assert_eq!(job_labels(&js, &js.spec.replicated_jobs[1], 0, true)[COORDINATOR], "js-driver-0-0.js");
    }

    #[test]
    fn exclusive_topology_annotates_the_job_and_its_pods_and_adds_no_affinity() {
        let js = js(json!({"metadata": {"annotations": {EXCLUSIVE_TOPOLOGY: "rack"}}}));
        let j = construct_job(&js, &js.spec.replicated_jobs[1], 0, true);
        assert_eq!(j["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY], "rack");
        assert_eq!(j["spec"]["template"]["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY], "rack");
        let pod = &j["spec"]["template"]["spec"];
        assert!(pod.get("affinity").is_none() && pod.get("nodeSelector").is_none(), "{pod}");
    }

    #[test]
    fn the_replicated_job_s_exclusive_topology_wins_and_each_level_brings_its_strategy() {
        let rj_topology = |ann: Value| {
            json!({"metadata": {"annotations": {EXCLUSIVE_TOPOLOGY: "rack", NODE_SELECTOR_STRATEGY: "yes"}},
                   "spec": {"replicatedJobs": [{"name": "driver", "template": {"metadata": {"annotations": ann}}}]}})
        };
        // (replicated job template's annotations, pod annotations wanted)
        let cases = [
            (json!({EXCLUSIVE_TOPOLOGY: "zone"}), [Some("zone"), Some("yes")]),
            (json!({EXCLUSIVE_TOPOLOGY: "zone", NODE_SELECTOR_STRATEGY: "no"}), [Some("zone"), Some("no")]),
            (json!({}), [Some("rack"), Some("yes")]),
        ];
        for (ann, want) in cases {
            let js = js(rj_topology(ann.clone()));
            let j = construct_job(&js, &js.spec.replicated_jobs[0], 0, true);
            let pod = &j["spec"]["template"]["metadata"]["annotations"];
            let got = [EXCLUSIVE_TOPOLOGY, NODE_SELECTOR_STRATEGY].map(|k| pod[k].as_str());
            assert_eq!(got, want, "{ann}");
        }
    }

    #[test]
    fn the_node_selector_strategy_pins_the_job_to_labelled_nodes() {
        let js = js(json!({"metadata": {"annotations": {EXCLUSIVE_TOPOLOGY: "rack", NODE_SELECTOR_STRATEGY: "true"}}}));
        let j = construct_job(&js, &js.spec.replicated_jobs[1], 2, true);
        let p = &j["spec"]["template"]["spec"];
        assert_eq!(p["nodeSelector"][NAMESPACED_JOB], "ns_js-workers-2");
        assert_eq!(p["tolerations"][0]["key"], NO_SCHEDULE_TAINT);
        assert_eq!(j["spec"]["template"]["metadata"]["annotations"][NODE_SELECTOR_STRATEGY], "true");
        assert!(p.get("affinity").is_none());
    }
}
