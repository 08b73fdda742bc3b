//! Upstream JobSet's pod webhooks (`pkg/webhooks/pod_webhook.go`): exclusive placement per
//! topology domain, `/mutate--v1-pod` and `/validate--v1-pod`. The decisions and their flow are
//! `jobset_api::jobset::exclusive`'s, shared with the embedded API server's built-in Pod
//! admission (which steps aside when JobSet admission is external, as for a manager serving
//! these); here they read the cluster through the API server (a [`Cluster`]).

use jobset_api::jobset::exclusive::{self, Cluster};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::{Map, Value};

use super::{Answer, Failure, decode};
use crate::webhook::AdmissionRequest;

/// The cluster as the API server behind `Client` shows it.
pub struct ApiServer<'a>(pub &'a Client);

impl Cluster for ApiServer<'_> {
    type Error = Failure;
    async fn pods(&self, ns: &str, labels: &[(&str, &str)]) -> Result<Vec<Value>, Failure> {
        let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let params = ListParams::default().labels(&selector.join(","));
        let pods = Api::<Pod>::namespaced(self.0.clone(), ns).list(&params).await?;
        Ok(pods.items.iter().map(|p| serde_json::to_value(p).unwrap_or_default()).collect())
    }
    async fn node_labels(&self, name: &str) -> Result<Map<String, Value>, Failure> {
        let node = Api::<Node>::all(self.0.clone()).get(name).await?;
        let labels = node.metadata.labels.unwrap_or_default();
        Ok(labels.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
    }
}

impl From<String> for Failure {
    fn from(m: String) -> Failure {
        Failure::Message(m)
    }
}

/// `/mutate--v1-pod`.
pub async fn mutate<C: Cluster<Error = Failure>>(req: &AdmissionRequest, cluster: &C) -> Answer {
    if req.operation == "DELETE" {
        return Answer::allowed();
    }
    let pod = match decode(req.object.as_ref()) {
        Ok(p) => p,
        Err(a) => return a,
    };
    let mut defaulted = pod.clone();
    match exclusive::default_pod(&mut defaulted, cluster).await {
        Ok(()) => Answer::patch(pod, &defaulted),
        Err(f) => f.into_answer(),
    }
}

/// `/validate--v1-pod`: creates only.
pub async fn validate<C: Cluster<Error = Failure>>(req: &AdmissionRequest, cluster: &C) -> Answer {
    match req.operation.as_str() {
        "CREATE" => {
            let pod = match decode(req.object.as_ref()) {
                Ok(p) => p,
                Err(a) => return a,
            };
            match exclusive::validate_create(pod, cluster).await {
                Ok(()) => Answer::allowed(),
                Err(f) => f.into_answer(),
            }
        }
        _ => super::validate_other(req),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobset_api::field::quote;
    use jobset_api::jobset::keys::{
        EXCLUSIVE_TOPOLOGY, JOB_INDEX, JOB_KEY, JOBSET_NAME, PRIORITY, REPLICATED_JOB_NAME,
    };
    use serde_json::json;
    use std::collections::BTreeMap;

    /// Pods by namespace and nodes' labels.
    #[derive(Default)]
    struct Fake {
        pods: Vec<Value>,
        nodes: BTreeMap<String, Value>,
    }

    impl Cluster for Fake {
        type Error = Failure;
        async fn pods(&self, ns: &str, labels: &[(&str, &str)]) -> Result<Vec<Value>, Failure> {
            let matches = |p: &&Value| labels.iter().all(|(k, v)| p["metadata"]["labels"][k] == *v);
            Ok(self.pods.iter().filter(|p| p["metadata"]["namespace"] == ns).filter(matches).cloned().collect())
        }
        async fn node_labels(&self, name: &str) -> Result<Map<String, Value>, Failure> {
            match self.nodes.get(name) {
                Some(l) => Ok(l.as_object().cloned().unwrap_or_default()),
                None => Err(Failure::Status(json!({
                    "metadata": {}, "status": "Failure", "message": format!("nodes {} not found", quote(name)),
                    "reason": "NotFound", "details": {"name": name, "kind": "nodes"}, "code": 404,
                }))),
            }
        }
    }

    /// A pod of JobSet `js`, replicated job `w`, Job 0, completion index `index`, exclusive on
    /// `rack`, owned by Job uid `job`.
    fn pod(name: &str, index: &str, job: &str) -> Value {
        let meta = json!({JOBSET_NAME: "js", REPLICATED_JOB_NAME: "w", JOB_INDEX: "0", JOB_KEY: "k0"});
        let mut annotations = meta.clone();
        annotations[EXCLUSIVE_TOPOLOGY] = json!("rack");
        annotations["batch.kubernetes.io/job-completion-index"] = json!(index);
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "ns", "labels": meta, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "js-w-0", "uid": job, "controller": true}],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "priority": 0},
        })
    }

    fn create(obj: Value) -> AdmissionRequest {
        AdmissionRequest { uid: "u".into(), operation: "CREATE".into(), object: Some(obj), ..Default::default() }
    }

    fn patched(answer: &Answer, pod: &Value) -> Value {
        assert!(answer.allowed, "{answer:?}");
        let mut p = pod.clone();
        json_patch::patch(&mut p, &answer.patch).unwrap();
        p
    }

    #[tokio::test]
    async fn the_mutating_webhook_patches_a_leader_with_the_priority_label_and_affinity_terms() {
        let leader = pod("js-w-0-0-abcde", "0", "j0");
        let got = patched(&mutate(&create(leader.clone()), &Fake::default()).await, &leader);
        assert_eq!(got["metadata"]["labels"][PRIORITY], "0");
        let anti = &got["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            anti["labelSelector"]["matchExpressions"][2],
            json!({"key": PRIORITY, "operator": "In", "values": ["0"]})
        );
    }

    #[tokio::test]
    async fn a_follower_is_pinned_then_admitted_and_refused_while_its_leader_is_unscheduled() {
        let mut leader = pod("js-w-0-0-abcde", "0", "j0");
        let follower = pod("js-w-0-1-fghij", "1", "j0");
        let waiting = Fake { pods: vec![leader.clone()], ..Fake::default() };
        let unpinned = patched(&mutate(&create(follower.clone()), &waiting).await, &follower);
        assert!(unpinned["spec"].get("nodeSelector").is_none());
        assert_eq!(validate(&create(unpinned), &waiting).await, Answer::denied("follower pod node selector not set"));
        leader["spec"]["nodeName"] = json!("n1");
        let cluster = Fake { pods: vec![leader], nodes: BTreeMap::from([("n1".into(), json!({"rack": "r7"}))]) };
        let got = patched(&mutate(&create(follower.clone()), &cluster).await, &follower);
        assert_eq!(got["spec"]["nodeSelector"], json!({"rack": "r7"}));
        assert_eq!(validate(&create(got), &cluster).await, Answer::allowed());
    }

    #[tokio::test]
    async fn a_lookup_s_api_status_is_answered_as_is() {
        let mut leader = pod("js-w-0-0-abcde", "0", "j0");
        leader["spec"]["nodeName"] = json!("n1");
        let gone = Fake { pods: vec![leader], ..Fake::default() };
        let answer = mutate(&create(pod("js-w-0-1-fghij", "1", "j0")), &gone).await;
        assert!(!answer.allowed);
        let status = answer.status.unwrap();
        assert_eq!((status["code"].clone(), status["message"].clone()), (json!(404), json!("nodes \"n1\" not found")));
    }
}
