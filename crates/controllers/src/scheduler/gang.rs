//! Gang scheduling (KEP-4671): the pure placement decision of one round.
//!
//! A pending pod whose `spec.schedulingGroup.podGroupName` names a PodGroup with
//! `schedulingPolicy.gang.minCount` is placed together with the other pending pods of that group,
//! all or nothing: the group's pods are tried on a copy of the cluster, and the placements are kept
//! only when, with the group's pods already placed, at least `minCount` of them fit at once.
//! Groups are tried in queue order (a group's place is its first pod's), so of two gangs that
//! each fit alone but not together the first gets everything and the second keeps nothing, as
//! kube-scheduler's pod group scheduling cycle does. Once `minCount` pods of a group are placed
//! the gang is admitted and its remaining pods are placed one by one. Pods of a `basic` PodGroup,
//! and pods with no group, are placed one by one as before.
//!
//! The messages are kube-scheduler's GangScheduling plugin's (`PreEnqueue`, `Permit`,
//! `PlacementFeasible`); the PodGroup's reason is the first pod's fit error appended to
//! `PlacementFeasible`'s text, so that the group's condition says what is missing.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::fit::Cluster;

/// A PodGroup: (namespace, name).
pub type GroupKey = (String, String);

/// The PodGroups the scheduler sees: each one's gang size (`minCount`), `None` under `basic`.
pub type Groups = HashMap<GroupKey, Option<u32>>;

/// `Permit`'s wait message: this pod fits, the gang as a whole does not.
pub const WAITING_FOR_GANG: &str = "waiting for minCount pods from a gang to be scheduled";
/// `PreEnqueue`'s message while fewer than `minCount` pods of a gang exist.
pub const WAITING_FOR_MIN_COUNT: &str = "waiting for minCount pods from a gang to appear in scheduling queue";

/// `PreEnqueue`'s message while a pod's PodGroup does not exist.
pub fn waiting_for_group(name: &str) -> String {
    format!("waiting for pods's pod group {} to appear in scheduling queue", jobset_api::field::quote(name))
}

/// The PodGroup a pod belongs to.
pub fn group_key(pod: &Pod) -> Option<GroupKey> {
    let name = pod.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.as_deref().filter(|n| !n.is_empty())?;
    Some((pod.metadata.namespace.clone().unwrap_or_default(), name.to_string()))
}

/// What a round decided about a gang that had pending pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupOutcome {
    /// At least `minCount` pods placed: `PodGroupScheduled=True`.
    Scheduled,
    /// It does not fit: `PodGroupScheduled=False`, reason `Unschedulable`, this message.
    Unschedulable(String),
}

/// One round's decisions.
#[derive(Debug, Default)]
pub struct Decisions<'a> {
    /// Pods to bind, with their node.
    pub binds: Vec<(&'a Pod, String)>,
    /// Pods that stay pending, with their `PodScheduled=False` message.
    pub unschedulable: Vec<(&'a Pod, String)>,
    /// Gangs that were tried this round.
    pub groups: Vec<(GroupKey, GroupOutcome)>,
}

enum Unit<'a> {
    Single(&'a Pod),
    /// A gang: its PodGroup, `minCount` and pending pods.
    Gang(GroupKey, u32, Vec<&'a Pod>),
}

/// Places `pending` (in queue order) on `cluster`, which is left holding every placement made.
/// `bound` counts, per group, its pods already placed (bound or assumed, not finished).
pub fn place<'a>(
    cluster: &mut Cluster<'a>,
    pending: &[&'a Pod],
    groups: &Groups,
    bound: &HashMap<GroupKey, usize>,
) -> Decisions<'a> {
    let mut units: Vec<Unit<'a>> = Vec::new();
    let mut unit_of: HashMap<GroupKey, usize> = HashMap::new();
    for &p in pending {
        // Only gangs are placed as units; other pods keep their own place in the queue.
        let gang = group_key(p).and_then(|k| groups.get(&k).copied().flatten().map(|min| (k, min)));
        match gang {
            Some((k, min)) => match unit_of.get(&k) {
                Some(&i) => {
                    if let Unit::Gang(_, _, pods) = &mut units[i] {
                        pods.push(p);
                    }
                }
                None => {
                    unit_of.insert(k.clone(), units.len());
                    units.push(Unit::Gang(k, min, vec![p]));
                }
            },
            None => units.push(Unit::Single(p)),
        }
    }
    let mut d = Decisions::default();
    for unit in units {
        match unit {
            Unit::Single(p) => match group_key(p).filter(|k| !groups.contains_key(k)) {
                Some((_, missing)) => d.unschedulable.push((p, waiting_for_group(&missing))),
                None => one_by_one(cluster, &[p], &mut d),
            },
            Unit::Gang(k, min, pods) => {
                let placed = bound.get(&k).copied().unwrap_or(0);
                let need = (min as usize).saturating_sub(placed);
                if need == 0 {
                    one_by_one(cluster, &pods, &mut d);
                } else if pods.len() < need {
                    d.unschedulable.extend(pods.iter().map(|&p| (p, WAITING_FOR_MIN_COUNT.to_string())));
                } else {
                    let outcome = gang(cluster, &pods, min, placed, need, &mut d);
                    d.groups.push((k, outcome));
                }
            }
        }
    }
    d
}

fn one_by_one<'a>(cluster: &mut Cluster<'a>, pods: &[&'a Pod], d: &mut Decisions<'a>) {
    for &p in pods {
        match cluster.schedule(p) {
            Ok(node) => {
                cluster.add(p, &node);
                d.binds.push((p, node));
            }
            Err(msg) => d.unschedulable.push((p, msg)),
        }
    }
}

/// All or nothing: `pods` tried on a copy of `cluster`, kept when `need` of them fit.
fn gang<'a>(
    cluster: &mut Cluster<'a>,
    pods: &[&'a Pod],
    min: u32,
    already: usize,
    need: usize,
    d: &mut Decisions<'a>,
) -> GroupOutcome {
    let mut trial = cluster.clone();
    let mut fits = Vec::new();
    let mut unfit = Vec::new();
    for &p in pods {
        match trial.schedule(p) {
            Ok(node) => {
                trial.add(p, &node);
                fits.push((p, node));
            }
            Err(msg) => unfit.push((p, msg)),
        }
    }
    if fits.len() >= need {
        *cluster = trial;
        d.binds.extend(fits);
        d.unschedulable.extend(unfit);
        return GroupOutcome::Scheduled;
    }
    let why = unfit.first().map(|(_, m)| m.clone()).unwrap_or_default();
    let scheduled = already + fits.len();
    d.unschedulable.extend(fits.into_iter().map(|(p, _)| (p, WAITING_FOR_GANG.to_string())));
    d.unschedulable.extend(unfit);
    GroupOutcome::Unschedulable(format!(
        "minCount ({min}) cannot be satisfied: {scheduled} scheduled, 0 remaining: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::{Value, json};

    fn node(name: &str, gpus: u32, cordoned: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()}},
        }))
        .unwrap()
    }

    /// A pod asking for `gpus` GPUs, in PodGroup `group` (none when empty), bound to `on`.
    fn pod(name: &str, group: &str, gpus: u32, on: Option<&str>) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"nodeName": on, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
        });
        if !group.is_empty() {
            v["spec"]["schedulingGroup"] = json!({"podGroupName": group});
        }
        serde_json::from_value(v).unwrap()
    }

    fn key(name: &str) -> GroupKey {
        ("ns".into(), name.into())
    }

    struct Case {
        name: &'static str,
        nodes: Vec<Node>,
        /// Pods already placed.
        placed: Vec<Pod>,
        /// Pending pods, in queue order.
        pending: Vec<Pod>,
        groups: Vec<(&'static str, Option<u32>)>,
        /// The pods bound, by name.
        bound: Vec<&'static str>,
        /// The gangs' outcomes: Ok for Scheduled, Err(message prefix) for Unschedulable.
        outcomes: Vec<(&'static str, Result<(), &'static str>)>,
    }

    /// The pods bound, each gang's outcome, and the waiting pods with their messages.
    type Ran = (Vec<String>, Vec<(String, Result<(), String>)>, Vec<(String, String)>);

    fn run(c: &Case) -> Ran {
        let nodes: Vec<&Node> = c.nodes.iter().collect();
        let placed: Vec<&Pod> = c.placed.iter().collect();
        let mut cluster = Cluster::new(&nodes, &placed);
        let groups: Groups = c.groups.iter().map(|(n, m)| (key(n), *m)).collect();
        let mut bound: HashMap<GroupKey, usize> = HashMap::new();
        for p in &c.placed {
            if let Some(k) = group_key(p) {
                *bound.entry(k).or_default() += 1;
            }
        }
        let pending: Vec<&Pod> = c.pending.iter().collect();
        let d = place(&mut cluster, &pending, &groups, &bound);
        let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        let bound = d.binds.iter().map(|(p, _)| name(p)).collect();
        let outcomes = d
            .groups
            .iter()
            .map(|(k, o)| {
                (
                    k.1.clone(),
                    match o {
                        GroupOutcome::Scheduled => Ok(()),
                        GroupOutcome::Unschedulable(m) => Err(m.clone()),
                    },
                )
            })
            .collect();
        let waiting = d.unschedulable.iter().map(|(p, m)| (name(p), m.clone())).collect();
        (bound, outcomes, waiting)
    }

    #[test]
    fn gangs_bind_all_or_nothing_in_queue_order() {
        let two_nodes = || vec![node("n1", 4, false), node("n2", 4, false)];
        let cases = vec![
            Case {
                name: "a gang that fits binds every pod",
                nodes: two_nodes(),
                placed: vec![],
                pending: vec![pod("a0", "a", 2, None), pod("a1", "a", 2, None), pod("a2", "a", 2, None)],
                groups: vec![("a", Some(3))],
                bound: vec!["a0", "a1", "a2"],
                outcomes: vec![("a", Ok(()))],
            },
            Case {
                name: "a gang that does not fit binds none, though two of its pods would fit",
                nodes: vec![node("n1", 4, false), node("n2", 4, true)],
                placed: vec![],
                pending: vec![pod("a0", "a", 2, None), pod("a1", "a", 2, None), pod("a2", "a", 2, None)],
                groups: vec![("a", Some(3))],
                bound: vec![],
                outcomes: vec![("a", Err("minCount (3) cannot be satisfied: 2 scheduled, 0 remaining: 0/2 nodes"))],
            },
            Case {
                name: "two gangs that each fit alone: the first gets everything, the second nothing",
                nodes: two_nodes(),
                placed: vec![],
                pending: vec![
                    pod("a0", "a", 2, None),
                    pod("b0", "b", 2, None),
                    pod("a1", "a", 2, None),
                    pod("b1", "b", 2, None),
                    pod("a2", "a", 2, None),
                    pod("b2", "b", 2, None),
                ],
                groups: vec![("a", Some(3)), ("b", Some(3))],
                bound: vec!["a0", "a1", "a2"],
                outcomes: vec![("a", Ok(())), ("b", Err("minCount (3) cannot be satisfied: 1 scheduled"))],
            },
            Case {
                name: "a gang smaller than its pods binds those that fit once minCount fit",
                nodes: vec![node("n1", 4, false)],
                placed: vec![],
                pending: vec![pod("a0", "a", 2, None), pod("a1", "a", 2, None), pod("a2", "a", 2, None)],
                groups: vec![("a", Some(2))],
                bound: vec!["a0", "a1"],
                outcomes: vec![("a", Ok(()))],
            },
            Case {
                name: "pods already bound count toward minCount: a replacement binds alone",
                nodes: two_nodes(),
                placed: vec![pod("a0", "a", 2, Some("n1")), pod("a1", "a", 2, Some("n1"))],
                pending: vec![pod("a2", "a", 2, None)],
                groups: vec![("a", Some(3))],
                bound: vec!["a2"],
                outcomes: vec![("a", Ok(()))],
            },
            Case {
                name: "an admitted gang places its other pods one by one",
                nodes: vec![node("n1", 4, false)],
                placed: vec![pod("a0", "a", 2, Some("n1")), pod("a1", "a", 2, Some("n1"))],
                pending: vec![pod("a2", "a", 2, None)],
                groups: vec![("a", Some(2))],
                bound: vec![],
                outcomes: vec![],
            },
            Case {
                name: "fewer pods than minCount: none binds, the group is not tried",
                nodes: two_nodes(),
                placed: vec![],
                pending: vec![pod("a0", "a", 2, None), pod("a1", "a", 2, None)],
                groups: vec![("a", Some(3))],
                bound: vec![],
                outcomes: vec![],
            },
            Case {
                name: "no PodGroup: its pods wait",
                nodes: two_nodes(),
                placed: vec![],
                pending: vec![pod("a0", "missing", 1, None)],
                groups: vec![],
                bound: vec![],
                outcomes: vec![],
            },
            Case {
                name: "a basic group and pods without one are placed one by one, as before",
                nodes: vec![node("n1", 4, false)],
                placed: vec![],
                pending: vec![pod("b0", "basic", 2, None), pod("p", "", 2, None), pod("b1", "basic", 2, None)],
                groups: vec![("basic", None)],
                bound: vec!["b0", "p"],
                outcomes: vec![],
            },
        ];
        for c in cases {
            let (bound, outcomes, _) = run(&c);
            assert_eq!(bound, c.bound, "{}", c.name);
            assert_eq!(outcomes.len(), c.outcomes.len(), "{}: {outcomes:?}", c.name);
            for ((group, got), (want_group, want)) in outcomes.iter().zip(&c.outcomes) {
                assert_eq!(group, want_group, "{}", c.name);
                match (got, want) {
                    (Ok(()), Ok(())) => {}
                    (Err(m), Err(prefix)) => assert!(m.starts_with(prefix), "{}: {m}", c.name),
                    _ => panic!("{}: {got:?}, want {want:?}", c.name),
                }
            }
        }
    }

    #[test]
    fn pods_of_a_gang_that_waits_say_why() {
        let c = Case {
            name: "",
            nodes: vec![node("n1", 4, false), node("n2", 4, true)],
            placed: vec![],
            pending: vec![
                pod("a0", "a", 2, None),
                pod("a1", "a", 2, None),
                pod("a2", "a", 2, None),
                pod("m", "missing", 1, None),
                pod("s0", "small", 1, None),
            ],
            groups: vec![("a", Some(3)), ("small", Some(2))],
            bound: vec![],
            outcomes: vec![],
        };
        let (_, _, waiting) = run(&c);
        let msg = |n: &str| waiting.iter().find(|(p, _)| p == n).map(|(_, m)| m.as_str()).unwrap_or_default();
        assert_eq!(msg("a0"), WAITING_FOR_GANG);
        assert_eq!(msg("a1"), WAITING_FOR_GANG);
        assert!(msg("a2").starts_with("0/2 nodes are available"), "{}", msg("a2"));
        assert_eq!(msg("m"), r#"waiting for pods's pod group "missing" to appear in scheduling queue"#);
        assert_eq!(msg("s0"), WAITING_FOR_MIN_COUNT);
    }

    #[test]
    fn group_membership_is_the_scheduling_group_s_pod_group() {
        let p: Pod = serde_json::from_value::<Value>(json!({"metadata": {"namespace": "x"},
            "spec": {"containers": [], "schedulingGroup": {"podGroupName": "g"}}}))
        .map(|v| serde_json::from_value(v).unwrap())
        .unwrap();
        assert_eq!(group_key(&p), Some(("x".into(), "g".into())));
        assert_eq!(group_key(&pod("p", "", 1, None)), None);
    }
}
