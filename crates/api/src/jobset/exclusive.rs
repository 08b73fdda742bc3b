//! Exclusive placement per topology domain: upstream JobSet's pod webhooks
//! (`pkg/webhooks/pod_webhook.go`), shared by `jobset manager`'s `/mutate--v1-pod` and
//! `/validate--v1-pod` and the embedded API server's built-in Pod admission.
//!
//! A JobSet pod (annotation `jobset.sigs.k8s.io/jobset-name`, without the node-selector strategy)
//! is labelled with its `spec.priority`. If its JobSet is exclusive (annotation
//! `alpha.jobset.sigs.k8s.io/exclusive-topology`), its leader (completion index 0) gets a required
//! pod affinity to its own Job and anti-affinity to every other Job of its priority in the topology
//! domain; a follower is pinned (`nodeSelector`) to the domain of its scheduled leader and refused
//! until that leader is scheduled.
//!
//! The flows ([`default_pod`], [`validate_create`]) read the cluster through a [`Cluster`]: the
//! webhook asks the API server, the built-in hook its own store. The rest is pure.

use std::future::Future;

use serde_json::{Map, Value, json};

use super::keys::{
    EXCLUSIVE_TOPOLOGY, JOB_INDEX, JOB_KEY, JOBSET_NAME, NODE_SELECTOR_STRATEGY, PRIORITY, REPLICATED_JOB_NAME,
};
use crate::field::quote;

/// The Job controller's annotation with a pod's completion index.
const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// What the pod hooks read from the cluster (upstream: the manager's cache).
pub trait Cluster {
    /// A failed lookup, or one of the hooks' messages (`From<String>`): what refuses the pod.
    type Error: From<String>;
    /// The pods of namespace `ns` carrying every label of `labels`.
    fn pods(&self, ns: &str, labels: &[(&str, &str)]) -> impl Future<Output = Result<Vec<Value>, Self::Error>> + Send;
    /// The labels of Node `name`; a Node that is not there is an error, as a GET's NotFound.
    fn node_labels(&self, name: &str) -> impl Future<Output = Result<Map<String, Value>, Self::Error>> + Send;
}

/// `metadata.<map>.<key>`. Read by field rather than `Value::pointer`, which copies each
/// segment twice: the server runs these reads on every pod it creates.
fn meta_entry<'a>(pod: &'a Value, map: &str, key: &str) -> Option<&'a Value> {
    pod.get("metadata")?.get(map)?.get(key)
}

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    meta_entry(pod, "annotations", key).and_then(Value::as_str)
}

fn label<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    meta_entry(pod, "labels", key).and_then(Value::as_str)
}

fn has_annotation(pod: &Value, key: &str) -> bool {
    meta_entry(pod, "annotations", key).is_some()
}

/// The mutable object at `key` of `m`, made one if absent or not an object.
fn child<'a>(m: &'a mut Value, key: &str) -> &'a mut Value {
    if !m.is_object() {
        *m = json!({});
    }
    let slot = m.as_object_mut().expect("made an object").entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot
}

/// Whether the hooks concern the pod at all: a JobSet pod without the node-selector strategy.
fn concerned(pod: &Value) -> bool {
    has_annotation(pod, JOBSET_NAME) && !has_annotation(pod, NODE_SELECTOR_STRATEGY)
}

/// The topology key of a pod the placement acts on: a concerned pod with the exclusive annotation.
fn exclusive_topology(pod: &Value) -> Option<&str> {
    if !concerned(pod) {
        return None;
    }
    annotation(pod, EXCLUSIVE_TOPOLOGY)
}

/// Upstream's `placement.IsLeaderPod`: completion index 0.
pub fn is_leader(pod: &Value) -> bool {
    annotation(pod, JOB_COMPLETION_INDEX) == Some("0")
}

/// Upstream's priority label (upstream issue 1057): `spec.priority` as a label, when set, so the
/// pod is comparable with other exclusive pods of its priority.
pub fn set_priority_label(pod: &mut Value) {
    if let Some(priority) = pod.get("spec").and_then(|s| s.get("priority")).and_then(Value::as_i64) {
        let labels = child(child(pod, "metadata"), "labels");
        labels.as_object_mut().expect("made an object").insert(PRIORITY.into(), json!(priority.to_string()));
    }
}

/// Upstream's `setExclusiveAffinities`: appends the leader's required pod affinity to its own
/// `job-key` and anti-affinity to other `job-key`s of its priority, in the topology domain.
pub fn set_exclusive_affinities(pod: &mut Value, topology: &str) {
    let job_key = label(pod, JOB_KEY).unwrap_or_default().to_string();
    let priority = label(pod, PRIORITY).unwrap_or_default().to_string();
    let affinity = child(child(pod, "spec"), "affinity");
    let term = |exprs: Value| json!({"labelSelector": {"matchExpressions": exprs}, "topologyKey": topology, "namespaceSelector": {}});
    let terms = [
        ("podAffinity", term(json!([{"key": JOB_KEY, "operator": "In", "values": [job_key]}]))),
        (
            "podAntiAffinity",
            term(json!([
                {"key": JOB_KEY, "operator": "Exists"},
                {"key": JOB_KEY, "operator": "NotIn", "values": [job_key]},
                {"key": PRIORITY, "operator": "In", "values": [priority]},
            ])),
        ),
    ];
    for (kind, term) in terms {
        let required = child(affinity, kind)
            .as_object_mut()
            .expect("made an object")
            .entry("requiredDuringSchedulingIgnoredDuringExecution")
            .or_insert_with(|| json!([]));
        if !required.is_array() {
            *required = json!([]);
        }
        required.as_array_mut().expect("made an array").push(term);
    }
}

/// Upstream's `removePodNameSuffix`: the name without its random suffix, for names of at least
/// five dash-separated parts (`<jobset>-<rjob>-<jobIndex>-<podIndex>-<suffix>`).
pub fn remove_pod_name_suffix(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('-').collect();
    (parts.len() >= 5).then(|| parts[..parts.len() - 1].join("-"))
}

/// Upstream's `genLeaderPodName`: `<jobset>-<rjob>-<jobIndex>-0` from the follower's labels.
pub fn leader_pod_name(pod: &Value) -> Result<String, String> {
    let get = |key: &str| label(pod, key).ok_or_else(|| format!("pod missing label: {key}"));
    Ok(format!("{}-{}-{}-0", get(JOBSET_NAME)?, get(REPLICATED_JOB_NAME)?, get(JOB_INDEX)?))
}

fn controller_uid(pod: &Value) -> Option<&str> {
    let refs = pod.pointer("/metadata/ownerReferences")?.as_array()?;
    let owner = refs.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    Some(owner.get("uid").and_then(Value::as_str).unwrap_or_default())
}

/// Upstream's `leaderPodForFollower` over the pods found: the one live pod (not terminating,
/// failed or succeeded) whose name less its suffix is `leader_name` (among pods with the
/// exclusive annotation, as upstream's pod-name index), owned by the follower's Job.
pub fn find_leader(pods: &[Value], leader_name: &str, follower: &Value) -> Result<Value, String> {
    let live = |p: &&Value| {
        let phase = p.pointer("/status/phase").and_then(Value::as_str);
        p.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null)
            && !matches!(phase, Some("Failed" | "Succeeded"))
    };
    let named = |p: &&Value| {
        has_annotation(p, EXCLUSIVE_TOPOLOGY)
            && p.pointer("/metadata/name").and_then(Value::as_str).and_then(remove_pod_name_suffix).as_deref()
                == Some(leader_name)
    };
    let found: Vec<&Value> = pods.iter().filter(named).filter(live).collect();
    if found.len() != 1 {
        return Err(format!(
            "expected 1 leader pod ({leader_name}), but got {}. this is an expected, transient error",
            found.len()
        ));
    }
    let leader = found[0];
    let follower_uid = controller_uid(follower).ok_or("follower pod has no owner reference")?;
    let leader_name = leader.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let leader_uid =
        controller_uid(leader).ok_or_else(|| format!("leader pod {} has no owner reference", quote(leader_name)))?;
    if follower_uid != leader_uid {
        return Err(format!("follower pod owner UID ({follower_uid}) != leader pod owner UID ({leader_uid})"));
    }
    Ok(leader.clone())
}

/// The follower's leader: among the pods of its Job's labels (upstream lists by its pod-name
/// index; every pod named as the leader carries these labels).
async fn leader_for<C: Cluster>(pod: &Value, cluster: &C) -> Result<Value, C::Error> {
    let name = leader_pod_name(pod)?;
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let selector: Vec<(&str, &str)> = [JOBSET_NAME, REPLICATED_JOB_NAME, JOB_INDEX]
        .into_iter()
        .map(|k| (k, label(pod, k).unwrap_or_default()))
        .collect();
    let pods = cluster.pods(ns, &selector).await?;
    Ok(find_leader(&pods, &name, pod)?)
}

fn node_name(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default()
}

/// Upstream's `podWebhook.Default`: the priority label, the leader's affinity terms, a follower's
/// `nodeSelector` once its leader is scheduled. A follower without a scheduled leader is left as
/// it is ([`validate_create`] refuses it); a leader's Node gone or without the topology label is
/// an error.
pub async fn default_pod<C: Cluster>(pod: &mut Value, cluster: &C) -> Result<(), C::Error> {
    default_finding_leader(pod, cluster).await.map(drop)
}

/// [`default_pod`], returning the follower's leader when it found one.
async fn default_finding_leader<C: Cluster>(pod: &mut Value, cluster: &C) -> Result<Option<Value>, C::Error> {
    if !concerned(pod) {
        return Ok(None);
    }
    set_priority_label(pod);
    let Some(topology) = exclusive_topology(pod).map(str::to_string) else { return Ok(None) };
    if is_leader(pod) {
        set_exclusive_affinities(pod, &topology);
        return Ok(None);
    }
    let Ok(leader) = leader_for(pod, cluster).await else { return Ok(None) };
    if node_name(&leader).is_empty() {
        return Ok(Some(leader));
    }
    let labels = cluster.node_labels(node_name(&leader)).await?;
    let value =
        labels.get(&topology).cloned().ok_or_else(|| format!("node does not have topology label: {topology}"))?;
    let selector = child(child(pod, "spec"), "nodeSelector");
    selector.as_object_mut().expect("made an object").insert(topology, value);
    Ok(Some(leader))
}

/// Both pod webhooks as one admission step (the embedded server's): [`default_pod`], then
/// [`validate_create`], the follower's leader looked up once.
pub async fn admit_create<C: Cluster>(pod: &mut Value, cluster: &C) -> Result<(), C::Error> {
    let leader = default_finding_leader(pod, cluster).await?;
    validate_with_leader(pod, cluster, leader).await
}

/// Upstream's `podWebhook.ValidateCreate`: a follower only once its leader is scheduled and its
/// own node selector pins the topology domain.
pub async fn validate_create<C: Cluster>(pod: &Value, cluster: &C) -> Result<(), C::Error> {
    validate_with_leader(pod, cluster, None).await
}

/// [`validate_create`], with the follower's leader when already found.
async fn validate_with_leader<C: Cluster>(pod: &Value, cluster: &C, leader: Option<Value>) -> Result<(), C::Error> {
    let Some(topology) = exclusive_topology(pod) else { return Ok(()) };
    if is_leader(pod) {
        return Ok(());
    }
    let Some(selector) = pod.pointer("/spec/nodeSelector").filter(|s| !s.is_null()) else {
        return Err(String::from("follower pod node selector not set").into());
    };
    if selector.get(topology).is_none() {
        return Err(
            format!("follower pod node selector for topology domain not found. missing selector: {topology}").into()
        );
    }
    let leader = match leader {
        Some(l) => l,
        None => leader_for(pod, cluster).await?,
    };
    if node_name(&leader).is_empty() {
        return Err(String::from(
            "leader pod not yet scheduled, not creating follower pod. this is an expected, transient error",
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    /// A lookup failure: a Node that is not there.
    #[derive(Debug, PartialEq)]
    enum Failure {
        NotFound(String),
        Message(String),
    }

    impl From<String> for Failure {
        fn from(m: String) -> Failure {
            Failure::Message(m)
        }
    }

    /// Pods and nodes' labels.
    #[derive(Default)]
    struct Fake {
        pods: Vec<Value>,
        nodes: BTreeMap<String, Value>,
    }

    impl Cluster for Fake {
        type Error = Failure;
        async fn pods(&self, ns: &str, labels: &[(&str, &str)]) -> Result<Vec<Value>, Failure> {
            let matches = |p: &&Value| labels.iter().all(|(k, v)| label(p, k) == Some(v));
            Ok(self.pods.iter().filter(|p| p["metadata"]["namespace"] == ns).filter(matches).cloned().collect())
        }
        async fn node_labels(&self, name: &str) -> Result<Map<String, Value>, Failure> {
            match self.nodes.get(name) {
                Some(l) => Ok(l.as_object().cloned().unwrap_or_default()),
                None => Err(Failure::NotFound(format!("nodes {} not found", quote(name)))),
            }
        }
    }

    /// The fake's futures are ready at once.
    fn now<T>(f: impl Future<Output = T>) -> T {
        match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => unreachable!("the fake cluster never waits"),
        }
    }

    fn defaulted(pod: &Value, cluster: &Fake) -> Result<Value, Failure> {
        let mut p = pod.clone();
        now(default_pod(&mut p, cluster)).map(|()| p)
    }

    /// A pod of JobSet `js`, replicated job `w`, Job 0, completion index `index`, exclusive on
    /// `rack`, owned by Job uid `job`.
    fn pod(name: &str, index: &str, job: &str) -> Value {
        let meta = json!({
            JOBSET_NAME: "js", REPLICATED_JOB_NAME: "w", JOB_INDEX: "0", JOB_KEY: "k0",
        });
        let mut annotations = meta.clone();
        annotations[EXCLUSIVE_TOPOLOGY] = json!("rack");
        annotations[JOB_COMPLETION_INDEX] = json!(index);
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "ns", "labels": meta, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "js-w-0", "uid": job, "controller": true}],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        })
    }

    #[test]
    fn a_leader_gets_upstream_s_affinity_terms_and_its_priority_label() {
        let mut leader = pod("js-w-0-0-abcde", "0", "j0");
        leader["spec"]["priority"] = json!(100);
        let got = defaulted(&leader, &Fake::default()).unwrap();
        assert_eq!(got["metadata"]["labels"][PRIORITY], "100");
        assert_eq!(
            got["spec"]["affinity"],
            json!({
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": ["k0"]}]},
                    "topologyKey": "rack", "namespaceSelector": {},
                }]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchExpressions": [
                        {"key": JOB_KEY, "operator": "Exists"},
                        {"key": JOB_KEY, "operator": "NotIn", "values": ["k0"]},
                        {"key": PRIORITY, "operator": "In", "values": ["100"]},
                    ]},
                    "topologyKey": "rack", "namespaceSelector": {},
                }]},
            })
        );
    }

    #[test]
    fn every_jobset_pod_is_labelled_with_its_priority_exclusive_or_not() {
        let mut not_exclusive = pod("js-w-0-1-abcde", "1", "j0");
        not_exclusive["metadata"]["annotations"].as_object_mut().unwrap().remove(EXCLUSIVE_TOPOLOGY);
        not_exclusive["spec"]["priority"] = json!(0);
        let got = defaulted(&not_exclusive, &Fake::default()).unwrap();
        assert_eq!(got["metadata"]["labels"][PRIORITY], "0");
        assert!(got["spec"].get("affinity").is_none());
        // Without spec.priority (no Priority admission before), there is nothing to copy.
        not_exclusive["spec"].as_object_mut().unwrap().remove("priority");
        let got = defaulted(&not_exclusive, &Fake::default()).unwrap();
        assert!(got["metadata"]["labels"].get(PRIORITY).is_none());
    }

    #[test]
    fn affinity_terms_are_appended_to_the_pod_s_own() {
        let mut leader = pod("js-w-0-0-abcde", "0", "j0");
        let own = json!({"labelSelector": {}, "topologyKey": "zone"});
        leader["spec"]["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [own]}});
        let got = defaulted(&leader, &Fake::default()).unwrap();
        let terms = got["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .unwrap();
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0], own);
        assert_eq!(terms[1]["topologyKey"], "rack");
    }

    #[test]
    fn pods_the_placement_does_not_concern_pass_unchanged() {
        let mut plain = pod("p", "1", "j");
        plain["metadata"]["annotations"].as_object_mut().unwrap().remove(JOBSET_NAME);
        plain["spec"]["priority"] = json!(5);
        let mut node_selector = pod("js-w-0-1-abcde", "1", "j0");
        node_selector["metadata"]["annotations"][NODE_SELECTOR_STRATEGY] = json!("true");
        node_selector["spec"]["priority"] = json!(5);
        let mut not_exclusive = pod("js-w-0-1-abcde", "1", "j0");
        not_exclusive["metadata"]["annotations"].as_object_mut().unwrap().remove(EXCLUSIVE_TOPOLOGY);
        for (name, p) in
            [("not a JobSet pod", plain), ("node-selector strategy", node_selector), ("not exclusive", not_exclusive)]
        {
            assert_eq!(defaulted(&p, &Fake::default()), Ok(p.clone()), "{name}: default");
            assert_eq!(now(validate_create(&p, &Fake::default())), Ok(()), "{name}: validate");
        }
    }

    #[test]
    fn a_follower_is_pinned_to_its_scheduled_leader_s_domain_and_then_admitted() {
        let mut leader = pod("js-w-0-0-abcde", "0", "j0");
        leader["spec"]["nodeName"] = json!("n1");
        let cluster = Fake { pods: vec![leader], nodes: BTreeMap::from([("n1".into(), json!({"rack": "r7"}))]) };
        let follower = pod("js-w-0-1-fghij", "1", "j0");
        let got = defaulted(&follower, &cluster).unwrap();
        assert_eq!(got["spec"]["nodeSelector"], json!({"rack": "r7"}));
        assert!(got["spec"].get("affinity").is_none(), "followers get no affinity");
        assert_eq!(now(validate_create(&got, &cluster)), Ok(()));
    }

    #[test]
    fn a_follower_is_refused_with_upstream_s_messages_until_its_leader_is_scheduled() {
        let follower = pod("js-w-0-1-fghij", "1", "j0");
        let mut pinned = follower.clone();
        pinned["spec"]["nodeSelector"] = json!({"rack": "r7"});
        let mut other_key = follower.clone();
        other_key["spec"]["nodeSelector"] = json!({"zone": "z"});
        let unscheduled = pod("js-w-0-0-abcde", "0", "j0");
        let mut other_job = pod("js-w-0-0-abcde", "0", "j-old");
        other_job["spec"]["nodeName"] = json!("n1");
        let mut finished = pod("js-w-0-0-fghij", "0", "j0");
        finished["status"] = json!({"phase": "Succeeded"});
        let mut no_labels = pinned.clone();
        no_labels["metadata"]["labels"].as_object_mut().unwrap().remove(JOB_INDEX);
        let cases = [
            ("no node selector", follower.clone(), vec![], "follower pod node selector not set".to_string()),
            (
                "node selector without the topology",
                other_key,
                vec![],
                "follower pod node selector for topology domain not found. missing selector: rack".into(),
            ),
            (
                "no leader",
                pinned.clone(),
                vec![finished],
                "expected 1 leader pod (js-w-0-0), but got 0. this is an expected, transient error".into(),
            ),
            (
                "leader unscheduled",
                pinned.clone(),
                vec![unscheduled.clone()],
                "leader pod not yet scheduled, not creating follower pod. this is an expected, transient error".into(),
            ),
            (
                "leader of another Job",
                pinned.clone(),
                vec![other_job],
                "follower pod owner UID (j0) != leader pod owner UID (j-old)".into(),
            ),
            (
                "two leaders",
                pinned.clone(),
                vec![unscheduled.clone(), pod("js-w-0-0-zzzzz", "0", "j0")],
                "expected 1 leader pod (js-w-0-0), but got 2. this is an expected, transient error".into(),
            ),
            ("follower missing a label", no_labels, vec![], format!("pod missing label: {JOB_INDEX}")),
        ];
        for (name, p, pods, message) in cases {
            let got = now(validate_create(&p, &Fake { pods, ..Fake::default() }));
            assert_eq!(got, Err(Failure::Message(message)), "{name}");
        }
    }

    #[test]
    fn a_leader_node_without_the_topology_label_or_gone_fails_the_defaulting() {
        let mut leader = pod("js-w-0-0-abcde", "0", "j0");
        leader["spec"]["nodeName"] = json!("n1");
        let unlabelled = Fake { pods: vec![leader.clone()], nodes: BTreeMap::from([("n1".into(), json!({}))]) };
        let follower = pod("js-w-0-1-fghij", "1", "j0");
        let message = "node does not have topology label: rack".to_string();
        assert_eq!(defaulted(&follower, &unlabelled), Err(Failure::Message(message)));
        let gone = Fake { pods: vec![leader], ..Fake::default() };
        assert_eq!(defaulted(&follower, &gone), Err(Failure::NotFound("nodes \"n1\" not found".into())));
        // A follower whose leader cannot be found is left alone: validation refuses it.
        assert_eq!(defaulted(&follower, &Fake::default()), Ok(follower.clone()));
    }

    #[test]
    fn pod_names_lose_their_suffix_only_with_five_parts_or_more() {
        assert_eq!(remove_pod_name_suffix("js-w-0-0-abcde").as_deref(), Some("js-w-0-0"));
        assert_eq!(remove_pod_name_suffix("my-js-w-0-0-abcde").as_deref(), Some("my-js-w-0-0"));
        assert_eq!(remove_pod_name_suffix("w-0-0-abcde"), None);
    }
}
