use serde_json::{Value, json};

use super::*;

fn node(name: &str, extra: Value) -> Node {
    let mut v = json!({
        "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    });
    json_patch::merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, extra: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    });
    json_patch::merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn requests(r: Value) -> Value {
    json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": r}}]}})
}

fn on(node: &str, mut extra: Value) -> Value {
    json_patch::merge(&mut extra, &json!({"spec": {"nodeName": node}}));
    extra
}

/// `filter` of `p` against `n`, with `others` placed by their nodeName across `nodes`.
fn check(p: &Pod, n: &Node, others: &[Pod], nodes: &[Node]) -> Result<(), Unfit> {
    let name = n.metadata.name.as_deref();
    let here: Vec<&Pod> = others.iter().filter(|o| node_name(o) == name).collect();
    let all: Vec<&Pod> = others.iter().collect();
    let nodes: Vec<&Node> = nodes.iter().collect();
    filter(p, n, &here, &all, &nodes)
}

#[test]
fn quantities() {
    let cases: &[(&str, Option<i128>)] = &[
        ("100m", Some(100)),
        ("2", Some(2000)),
        ("0.5", Some(500)),
        (".5", Some(500)),
        ("1.5", Some(1500)),
        ("1Ki", Some(1024 * 1000)),
        ("500Mi", Some(500 * 1024 * 1024 * 1000)),
        ("1Gi", Some(1024 * 1024 * 1024 * 1000)),
        ("1.5Gi", Some(1536 * 1024 * 1024 * 1000)),
        ("1e3", Some(1_000_000)),
        ("1E3", Some(1_000_000)),
        ("2e-3", Some(2)),
        ("1k", Some(1_000_000)),
        ("1M", Some(1_000_000_000)),
        ("1G", Some(1_000_000_000_000)),
        ("1E", Some(1_000_000_000_000_000_000_000)),
        ("1Ei", Some((1i128 << 60) * 1000)),
        ("1u", Some(1)), // rounded up to a thousandth
        ("1n", Some(1)),
        ("0", Some(0)),
        ("+3", Some(3000)),
        ("-1", Some(-1000)),
        ("", None),
        ("m", None),
        ("1.2.3", None),
        ("1x", None),
        ("1e", None),
        ("12Kb", None),
    ];
    for (s, want) in cases {
        assert_eq!(parse_quantity(s), *want, "{s:?}");
    }
}

#[test]
fn requests_sum_containers_max_init_containers_add_sidecars_and_overhead() {
    let cases = [
        (
            "containers sum",
            json!({"containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m", "nvidia.com/gpu": "1"}}}]}),
            vec![("cpu", "300m"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")],
        ),
        (
            "limits without requests are the requests",
            json!({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}, "requests": {"cpu": "500m"}}}]}),
            vec![("cpu", "500m"), ("nvidia.com/gpu", "2")],
        ),
        (
            "the largest init container wins per resource",
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                   "initContainers": [{"name": "i1", "resources": {"requests": {"cpu": "2"}}},
                                      {"name": "i2", "resources": {"requests": {"memory": "512Mi"}}}]}),
            vec![("cpu", "2"), ("memory", "1Gi")],
        ),
        (
            "sidecars run with the containers and the later init containers",
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                   "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                                      {"name": "i", "resources": {"requests": {"cpu": "2"}}}]}),
            vec![("cpu", "2500m")],
        ),
        (
            "overhead is added",
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "overhead": {"cpu": "250m", "memory": "100Mi"}}),
            vec![("cpu", "1250m"), ("memory", "100Mi")],
        ),
        (
            "pod-level resources override cpu and memory",
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}],
                   "resources": {"requests": {"cpu": "3"}}}),
            vec![("cpu", "3"), ("nvidia.com/gpu", "1")],
        ),
    ];
    for (what, spec, want) in cases {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        let want: BTreeMap<String, i128> =
            want.into_iter().map(|(k, v): (&str, &str)| (k.to_string(), parse_quantity(v).unwrap())).collect();
        assert_eq!(pod_requests(&p), want, "{what}");
    }
}

#[test]
fn node_selector_and_required_node_affinity() {
    let n = node("n1", json!({"metadata": {"labels": {"zone": "a", "gen": "5", "accel": "h100"}}}));
    let affinity = |terms: Value| json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}});
    let cases = [
        ("no constraint", json!({}), true),
        ("selector matches", json!({"spec": {"nodeSelector": {"zone": "a"}}}), true),
        ("selector value differs", json!({"spec": {"nodeSelector": {"zone": "b"}}}), false),
        ("selector key missing", json!({"spec": {"nodeSelector": {"rack": "1"}}}), false),
        (
            "In",
            affinity(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}])),
            true,
        ),
        (
            "NotIn",
            affinity(json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}])),
            false,
        ),
        (
            "NotIn a missing label",
            affinity(json!([{"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["1"]}]}])),
            true,
        ),
        ("Exists", affinity(json!([{"matchExpressions": [{"key": "accel", "operator": "Exists"}]}])), true),
        (
            "DoesNotExist",
            affinity(json!([{"matchExpressions": [{"key": "accel", "operator": "DoesNotExist"}]}])),
            false,
        ),
        ("Gt", affinity(json!([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}])), true),
        ("Lt", affinity(json!([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]}])), false),
        (
            "terms are ORed",
            affinity(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                            {"matchExpressions": [{"key": "accel", "operator": "In", "values": ["h100"]}]}])),
            true,
        ),
        (
            "expressions are ANDed",
            affinity(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                                  {"key": "accel", "operator": "In", "values": ["a100"]}]}])),
            false,
        ),
        ("an empty term matches nothing", affinity(json!([{}])), false),
        (
            "matchFields on the name",
            affinity(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])),
            true,
        ),
        (
            "matchFields on another name",
            affinity(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])),
            false,
        ),
        (
            "selector and affinity both apply",
            {
                let mut v = affinity(json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]));
                json_patch::merge(&mut v, &json!({"spec": {"nodeSelector": {"zone": "b"}}}));
                v
            },
            false,
        ),
    ];
    for (what, extra, fits) in cases {
        let got = check(&pod("p", extra), &n, &[], &[]);
        let want = if fits { Ok(()) } else { Err(Unfit::NodeAffinity) };
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn taints_and_tolerations() {
    let tainted =
        |effect: &str| node("n1", json!({"spec": {"taints": [{"key": "gpu", "value": "true", "effect": effect}]}}));
    let tol = |t: Value| json!({"spec": {"tolerations": t}});
    let untolerated = Err(Unfit::UntoleratedTaint { key: "gpu".into(), value: "true".into() });
    let cases = [
        ("NoSchedule, no toleration", "NoSchedule", json!({}), untolerated.clone()),
        ("NoExecute, no toleration", "NoExecute", json!({}), untolerated.clone()),
        ("PreferNoSchedule is ignored", "PreferNoSchedule", json!({}), Ok(())),
        (
            "Equal with the value",
            "NoSchedule",
            tol(json!([{"key": "gpu", "operator": "Equal", "value": "true"}])),
            Ok(()),
        ),
        ("default operator is Equal", "NoSchedule", tol(json!([{"key": "gpu", "value": "true"}])), Ok(())),
        (
            "Equal with another value",
            "NoSchedule",
            tol(json!([{"key": "gpu", "operator": "Equal", "value": "false"}])),
            untolerated.clone(),
        ),
        ("Exists on the key", "NoExecute", tol(json!([{"key": "gpu", "operator": "Exists"}])), Ok(())),
        ("Exists without a key tolerates everything", "NoExecute", tol(json!([{"operator": "Exists"}])), Ok(())),
        (
            "Exists on another key",
            "NoSchedule",
            tol(json!([{"key": "tpu", "operator": "Exists"}])),
            untolerated.clone(),
        ),
        (
            "matching effect",
            "NoExecute",
            tol(json!([{"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}])),
            Ok(()),
        ),
        (
            "another effect",
            "NoExecute",
            tol(json!([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])),
            untolerated.clone(),
        ),
    ];
    for (what, effect, extra, want) in cases {
        assert_eq!(check(&pod("p", extra), &tainted(effect), &[], &[]), want, "{what}");
    }
    // A taint without a value, and the first untolerated taint is the one reported.
    let n = node(
        "n1",
        json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "x", "effect": "NoExecute"}]}}),
    );
    assert_eq!(
        check(&pod("p", json!({})), &n, &[], &[]),
        Err(Unfit::UntoleratedTaint { key: "a".into(), value: "".into() })
    );
    let p = pod("p", tol(json!([{"key": "a", "operator": "Exists"}])));
    assert_eq!(check(&p, &n, &[], &[]), Err(Unfit::UntoleratedTaint { key: "b".into(), value: "x".into() }));
    assert_eq!(
        Unfit::UntoleratedTaint { key: "b".into(), value: "x".into() }.to_string(),
        "node(s) had untolerated taint {b: x}"
    );
}

#[test]
fn cordoned_nodes_take_only_pods_tolerating_unschedulable() {
    let n = node("n1", json!({"spec": {"unschedulable": true}}));
    assert_eq!(check(&pod("p", json!({})), &n, &[], &[]), Err(Unfit::Unschedulable));
    let p = pod(
        "p",
        json!({"spec": {"tolerations": [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(check(&p, &n, &[], &[]), Ok(()));
}

#[test]
fn resources_against_allocatable() {
    let n = node(
        "n1",
        json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2", "pods": "3"}}}),
    );
    let insufficient = |names: &[&str]| {
        Err(Unfit::Resources { too_many_pods: false, insufficient: names.iter().map(|s| s.to_string()).collect() })
    };
    let running = |name: &str, r: Value| pod(name, on("n1", requests(r)));
    let cases = [
        ("fits", requests(json!({"cpu": "4", "memory": "8Gi"})), vec![], Ok(())),
        ("cpu", requests(json!({"cpu": "4100m"})), vec![], insufficient(&["cpu"])),
        ("memory", requests(json!({"memory": "8193Mi"})), vec![], insufficient(&["memory"])),
        ("gpu", requests(json!({"nvidia.com/gpu": "3"})), vec![], insufficient(&["nvidia.com/gpu"])),
        (
            "a resource the node lacks",
            requests(json!({"example.com/fpga": "1"})),
            vec![],
            insufficient(&["example.com/fpga"]),
        ),
        (
            "several, cpu and memory first",
            requests(json!({"nvidia.com/gpu": "3", "memory": "9Gi", "cpu": "5", "example.com/a": "1"})),
            vec![],
            insufficient(&["cpu", "memory", "example.com/a", "nvidia.com/gpu"]),
        ),
        (
            "used by running pods",
            requests(json!({"nvidia.com/gpu": "1", "cpu": "1"})),
            vec![
                running("a", json!({"nvidia.com/gpu": "1", "cpu": "1"})),
                running("b", json!({"nvidia.com/gpu": "1"})),
            ],
            insufficient(&["nvidia.com/gpu"]),
        ),
        (
            "finished pods free their resources",
            requests(json!({"nvidia.com/gpu": "2"})),
            vec![
                pod("done", {
                    let mut v = on("n1", requests(json!({"nvidia.com/gpu": "2"})));
                    json_patch::merge(&mut v, &json!({"status": {"phase": "Succeeded"}}));
                    v
                }),
                pod("failed", {
                    let mut v = on("n1", requests(json!({"nvidia.com/gpu": "2"})));
                    json_patch::merge(&mut v, &json!({"status": {"phase": "Failed"}}));
                    v
                }),
            ],
            Ok(()),
        ),
        (
            "pods on other nodes do not count",
            requests(json!({"nvidia.com/gpu": "2"})),
            vec![pod("elsewhere", on("n2", requests(json!({"nvidia.com/gpu": "2"}))))],
            Ok(()),
        ),
        (
            "init containers",
            json!({"spec": {"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "5"}}}]}}),
            vec![],
            insufficient(&["cpu"]),
        ),
        ("zero requests fit anywhere", requests(json!({"cpu": "0"})), vec![running("a", json!({"cpu": "4"}))], Ok(())),
        (
            "too many pods",
            json!({}),
            vec![running("a", json!({})), running("b", json!({})), running("c", json!({}))],
            Err(Unfit::Resources { too_many_pods: true, insufficient: vec![] }),
        ),
    ];
    for (what, extra, others, want) in cases {
        assert_eq!(check(&pod("p", extra), &n, &others, std::slice::from_ref(&n)), want, "{what}");
    }
    let u = Unfit::Resources { too_many_pods: true, insufficient: vec!["cpu".into(), "nvidia.com/gpu".into()] };
    assert_eq!(u.reasons(), ["Too many pods", "Insufficient cpu", "Insufficient nvidia.com/gpu"]);
}

#[test]
fn a_node_without_allocatable_uses_capacity_and_without_pods_has_no_pod_limit() {
    let n: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1"}}})).unwrap();
    assert_eq!(check(&pod("p", requests(json!({"cpu": "1"}))), &n, &[], &[]), Ok(()));
    let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    assert_eq!(check(&pod("p", json!({})), &bare, &[], &[]), Ok(()));
    assert_eq!(
        check(&pod("p", requests(json!({"cpu": "1m"}))), &bare, &[], &[]),
        Err(Unfit::Resources { too_many_pods: false, insufficient: vec!["cpu".into()] })
    );
}

fn pod_affinity(kind: &str, selector: Value, topology_key: &str) -> Value {
    json!({"spec": {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": topology_key}]}}}})
}

fn labelled(name: &str, labels: Value, node: &str, mut extra: Value) -> Pod {
    json_patch::merge(&mut extra, &json!({"metadata": {"labels": labels}, "spec": {"nodeName": node}}));
    pod(name, extra)
}

#[test]
fn pod_anti_affinity_by_hostname_and_by_a_custom_topology_label() {
    let nodes = vec![
        node("n1", json!({"metadata": {"labels": {"rack": "r1"}}})),
        node("n2", json!({"metadata": {"labels": {"rack": "r1"}}})),
        node("n3", json!({"metadata": {"labels": {"rack": "r2"}}})),
        node("n4", json!({})), // no rack label
    ];
    let web = json!({"matchLabels": {"app": "web"}});
    let others = vec![labelled("w1", json!({"app": "web"}), "n1", json!({}))];
    let anti = Err(Unfit::PodAntiAffinity);
    let cases = [
        ("hostname: same node", HOSTNAME_LABEL, "n1", anti.clone()),
        ("hostname: another node", HOSTNAME_LABEL, "n2", Ok(())),
        ("rack: same rack", "rack", "n2", anti.clone()),
        ("rack: another rack", "rack", "n3", Ok(())),
        ("rack: a node without the label", "rack", "n4", Ok(())),
    ];
    for (what, key, n, want) in cases {
        let p = pod("p", pod_affinity("podAntiAffinity", web.clone(), key));
        let target = nodes.iter().find(|x| x.metadata.name.as_deref() == Some(n)).unwrap();
        assert_eq!(check(&p, target, &others, &nodes), want, "{what}");
    }
    // Only pods in the pod's namespace count unless the term names others.
    let mut elsewhere = others.clone();
    elsewhere[0].metadata.namespace = Some("other".into());
    let p = pod("p", pod_affinity("podAntiAffinity", web.clone(), HOSTNAME_LABEL));
    assert_eq!(check(&p, &nodes[0], &elsewhere, &nodes), Ok(()));
    let mut v = pod_affinity("podAntiAffinity", web.clone(), HOSTNAME_LABEL);
    v["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaceSelector"] =
        json!({});
    assert_eq!(check(&pod("p", v), &nodes[0], &elsewhere, &nodes), anti);
    // Symmetry: an existing pod's anti-affinity keeps matching pods out of its domain.
    let guard = labelled("guard", json!({"app": "guard"}), "n1", pod_affinity("podAntiAffinity", web.clone(), "rack"));
    let p = pod("p", json!({"metadata": {"labels": {"app": "web"}}}));
    assert_eq!(check(&p, &nodes[1], std::slice::from_ref(&guard), &nodes), Err(Unfit::ExistingPodsAntiAffinity));
    assert_eq!(check(&p, &nodes[2], std::slice::from_ref(&guard), &nodes), Ok(()));
    assert_eq!(check(&pod("q", json!({})), &nodes[1], std::slice::from_ref(&guard), &nodes), Ok(()));
}

#[test]
fn pod_affinity_follows_matching_pods_and_lets_the_first_of_a_group_start() {
    let nodes = vec![
        node("n1", json!({"metadata": {"labels": {"zone": "a"}}})),
        node("n2", json!({"metadata": {"labels": {"zone": "a"}}})),
        node("n3", json!({"metadata": {"labels": {"zone": "b"}}})),
        node("n4", json!({})),
    ];
    let db = json!({"matchLabels": {"app": "db"}});
    let others = vec![labelled("db", json!({"app": "db"}), "n1", json!({}))];
    let p = pod("p", pod_affinity("podAffinity", db.clone(), "zone"));
    assert_eq!(check(&p, &nodes[1], &others, &nodes), Ok(()));
    assert_eq!(check(&p, &nodes[2], &others, &nodes), Err(Unfit::PodAffinity));
    assert_eq!(check(&p, &nodes[3], &others, &nodes), Err(Unfit::PodAffinity), "no topology label");
    // Nothing matches anywhere: only a pod matching its own terms may start the group.
    assert_eq!(check(&p, &nodes[2], &[], &nodes), Err(Unfit::PodAffinity));
    let first = pod("db-0", {
        let mut v = pod_affinity("podAffinity", db.clone(), "zone");
        json_patch::merge(&mut v, &json!({"metadata": {"labels": {"app": "db"}}}));
        v
    });
    assert_eq!(check(&first, &nodes[2], &[], &nodes), Ok(()));
    assert_eq!(check(&first, &nodes[3], &[], &nodes), Err(Unfit::PodAffinity), "still needs the topology label");
    // matchLabelKeys narrows the selector to pods sharing the label's value.
    let group = |g: &str| json!({"app": "w", "group": g});
    let placed = vec![labelled("w-a", group("a"), "n3", json!({})), labelled("w-b0", group("b"), "n1", json!({}))];
    let mut v = pod_affinity("podAffinity", json!({"matchLabels": {"app": "w"}}), "zone");
    v["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["matchLabelKeys"] =
        json!(["group"]);
    json_patch::merge(&mut v, &json!({"metadata": {"labels": group("b")}}));
    let b = pod("w-b", v);
    assert_eq!(check(&b, &nodes[2], &placed, &nodes), Err(Unfit::PodAffinity), "group a's zone");
    assert_eq!(check(&b, &nodes[1], &placed, &nodes), Ok(()), "group b's zone");
    let mut plain = b.clone();
    plain
        .spec
        .as_mut()
        .unwrap()
        .affinity
        .as_mut()
        .unwrap()
        .pod_affinity
        .as_mut()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_mut()
        .unwrap()[0]
        .match_label_keys = None;
    assert_eq!(check(&plain, &nodes[2], &placed, &nodes), Ok(()), "without matchLabelKeys any app=w pod counts");
}

#[test]
fn selectors_with_expressions() {
    let nodes = vec![node("n1", json!({}))];
    let others = vec![labelled("x", json!({"job": "j1"}), "n1", json!({}))];
    let cases = [
        (json!({"matchExpressions": [{"key": "job", "operator": "Exists"}]}), true),
        (json!({"matchExpressions": [{"key": "job", "operator": "DoesNotExist"}]}), false),
        (json!({"matchExpressions": [{"key": "job", "operator": "In", "values": ["j1", "j2"]}]}), true),
        (json!({"matchExpressions": [{"key": "job", "operator": "NotIn", "values": ["j1"]}]}), false),
        (
            json!({"matchExpressions": [{"key": "job", "operator": "Exists"}, {"key": "job", "operator": "NotIn", "values": ["j2"]}]}),
            true,
        ),
        (json!({}), true),
        (json!({"matchExpressions": [{"key": "job", "operator": "Bogus"}]}), false),
    ];
    for (sel, conflicts) in cases {
        let p = pod("p", pod_affinity("podAntiAffinity", sel.clone(), HOSTNAME_LABEL));
        let want = if conflicts { Err(Unfit::PodAntiAffinity) } else { Ok(()) };
        assert_eq!(check(&p, &nodes[0], &others, &nodes), want, "{sel}");
    }
}

#[test]
fn the_first_failing_filter_is_reported() {
    let n = node(
        "n1",
        json!({"spec": {"unschedulable": true, "taints": [{"key": "t", "effect": "NoSchedule"}]},
               "status": {"allocatable": {"cpu": "1"}}}),
    );
    let p = pod("p", {
        let mut v = requests(json!({"cpu": "2"}));
        json_patch::merge(&mut v, &json!({"spec": {"nodeSelector": {"x": "y"}}}));
        v
    });
    assert_eq!(check(&p, &n, &[], &[]), Err(Unfit::Unschedulable));
}

#[test]
fn fit_error_counts_and_sorts_reasons_like_upstream() {
    let gpu = Unfit::Resources { too_many_pods: false, insufficient: vec!["nvidia.com/gpu".into()] };
    let msg = fit_error(4, &[gpu.clone(), Unfit::NodeAffinity, gpu, Unfit::NodeAffinity]);
    assert_eq!(
        msg,
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    );
    assert_eq!(fit_error(0, &[]), NO_NODES_MESSAGE);
}

#[test]
fn schedule_picks_the_least_allocated_node_ties_by_name_or_explains() {
    let nodes: Vec<Node> = ["c", "a", "b"].iter().map(|n| node(n, json!({}))).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let p = pod("p", requests(json!({"cpu": "1"})));
    assert_eq!(schedule(&p, &refs, &[]), Ok("a".into()));
    let busy = pod("busy", on("a", requests(json!({"cpu": "2"}))));
    assert_eq!(schedule(&p, &refs, &[&busy]), Ok("b".into()));
    let huge = pod("huge", requests(json!({"cpu": "5", "nvidia.com/gpu": "1"})));
    assert_eq!(
        schedule(&huge, &refs, &[]),
        Err("0/3 nodes are available: 3 Insufficient cpu, 3 Insufficient nvidia.com/gpu. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
            .into())
    );
    assert_eq!(schedule(&p, &[], &[]), Err(NO_NODES_MESSAGE.into()));
}

#[test]
fn cluster_add_accounts_for_assumed_pods_and_updates_affinity_counts() {
    let nodes: Vec<Node> = ["n1", "n2"]
        .iter()
        .map(|n| node(n, json!({"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})))
        .collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let gpu = |name: &str| pod(name, requests(json!({"nvidia.com/gpu": "1"})));
    let (a, b, c) = (gpu("a"), gpu("b"), gpu("c"));
    let mut cluster = Cluster::new(&refs, &[]);
    let na = cluster.schedule(&a).unwrap();
    cluster.add(&a, &na);
    let nb = cluster.schedule(&b).unwrap();
    assert_ne!(na, nb);
    cluster.add(&b, &nb);
    assert!(cluster.schedule(&c).unwrap_err().contains("2 Insufficient nvidia.com/gpu"));

    // Anti-affinity counts cached by an earlier decision see pods added afterwards.
    let spread = |name: &str| {
        let mut v = pod_affinity("podAntiAffinity", json!({"matchLabels": {"app": "s"}}), HOSTNAME_LABEL);
        json_patch::merge(&mut v, &json!({"metadata": {"labels": {"app": "s"}}}));
        pod(name, v)
    };
    let (s1, s2, s3) = (spread("s1"), spread("s2"), spread("s3"));
    let mut cluster = Cluster::new(&refs, &[]);
    let n1 = cluster.schedule(&s1).unwrap();
    cluster.add(&s1, &n1);
    let n2 = cluster.schedule(&s2).unwrap();
    assert_ne!(n1, n2);
    cluster.add(&s2, &n2);
    assert_eq!(
        cluster.schedule(&s3),
        Err("0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. \
             preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            .into())
    );
}

#[test]
fn pending_and_queue_order() {
    let cases = [
        ("unbound", json!({}), true),
        ("bound", json!({"spec": {"nodeName": "n1"}}), false),
        ("named default-scheduler", json!({"spec": {"schedulerName": "default-scheduler"}}), true),
        ("another scheduler", json!({"spec": {"schedulerName": "other"}}), false),
        ("gated", json!({"spec": {"schedulingGates": [{"name": "g"}]}}), false),
        ("being deleted", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}), false),
        ("failed", json!({"status": {"phase": "Failed"}}), false),
    ];
    for (what, extra, want) in cases {
        assert_eq!(is_pending(&pod("p", extra), DEFAULT_SCHEDULER_NAME), want, "{what}");
    }
    let at = |name: &str, t: &str, prio: i32| {
        pod(name, json!({"metadata": {"creationTimestamp": t}, "spec": {"priority": prio}}))
    };
    let mut pods = [
        at("late", "2026-01-01T00:00:02Z", 0),
        at("early", "2026-01-01T00:00:01Z", 0),
        at("vip", "2026-01-01T00:00:03Z", 10),
    ];
    pods.sort_by(queue_order);
    let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["vip", "early", "late"]);
}

#[test]
fn unschedulable_reported_compares_the_condition() {
    let p = pod(
        "p",
        json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}]}}),
    );
    assert!(unschedulable_reported(&p, "m"));
    assert!(!unschedulable_reported(&p, "other"));
    assert!(!unschedulable_reported(&pod("q", json!({})), "m"));
}

#[test]
fn equal_nodes_take_pods_in_turn() {
    let (a, b) = (node("a", json!({})), node("b", json!({})));
    let pods: Vec<Pod> = (0..4).map(|i| pod(&format!("p{i}"), json!({}))).collect();
    let mut cluster = Cluster::new(&[&a, &b], &[]);
    let mut placed = vec![];
    for p in &pods {
        let n = cluster.schedule(p).unwrap();
        cluster.add(p, &n);
        placed.push(n);
    }
    assert_eq!(placed, ["a", "b", "a", "b"]);
}

fn preferring(terms: Value) -> Value {
    json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}}})
}

fn prefer(weight: i32, key: &str, op: &str, values: &[&str]) -> Value {
    json!({"weight": weight, "preference": {"matchExpressions": [{"key": key, "operator": op, "values": values}]}})
}

#[test]
fn preferred_node_affinity_picks_the_node_with_the_most_matching_weight() {
    let nodes: Vec<Node> = [("a", "x"), ("b", "y"), ("c", "z")]
        .iter()
        .map(|(n, zone)| {
            node(n, json!({"metadata": {"labels": {"zone": zone, "disk": if *n == "c" { "ssd" } else { "hdd" }}}}))
        })
        .collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let place = |extra: Value| schedule(&pod("p", extra), &refs, &[]);
    let cases = [
        ("no preference: least allocated, then by name", json!({}), "a"),
        ("one preferred term", preferring(json!([prefer(10, "zone", "In", &["y"])])), "b"),
        (
            "weights of matching terms add up",
            preferring(json!([
                prefer(30, "zone", "In", &["y"]),
                prefer(20, "zone", "In", &["z"]),
                prefer(20, "disk", "In", &["ssd"])
            ])),
            "c",
        ),
        ("NotIn matches nodes without the value", preferring(json!([prefer(5, "zone", "NotIn", &["x"])])), "b"),
        ("a term no node matches changes nothing", preferring(json!([prefer(50, "zone", "In", &["nowhere"])])), "a"),
        ("weight 0 is ignored", preferring(json!([prefer(0, "zone", "In", &["z"])])), "a"),
        (
            "negative weights (invalid) are ignored, not subtracted",
            preferring(json!([prefer(-50, "zone", "In", &["x"]), prefer(10, "disk", "In", &["hdd"])])),
            "a",
        ),
        (
            "an empty preference matches nothing",
            preferring(json!([{"weight": 50, "preference": {}}, prefer(1, "zone", "In", &["z"])])),
            "c",
        ),
        (
            "matchFields on the name",
            preferring(
                json!([{"weight": 7, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}}]),
            ),
            "c",
        ),
        (
            "a preferred node that does not fit is not taken",
            {
                let mut v = preferring(json!([prefer(100, "zone", "In", &["z"])]));
                json_patch::merge(&mut v, &json!({"spec": {"nodeSelector": {"disk": "hdd"}}}));
                v
            },
            "a",
        ),
    ];
    for (what, extra, want) in cases {
        assert_eq!(place(extra), Ok(want.to_string()), "{what}");
    }
}

#[test]
fn node_affinity_counts_twice_least_allocated_after_normalisation() {
    // Least allocated for a 1-cpu pod: 86 on an empty node, 47 on one already running 3 cpus.
    // Node affinity is scaled so the best node gets 100, then weighted 2 against 1.
    let nodes: Vec<Node> = [("loaded", "p1"), ("empty", "p2")]
        .iter()
        .map(|(n, tier)| node(n, json!({"metadata": {"labels": {"tier": tier}}})))
        .collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let busy = pod("busy", on("loaded", requests(json!({"cpu": "3"}))));
    let p = |w1: i32, w2: i32| {
        let mut v = preferring(json!([prefer(w1, "tier", "In", &["p1"]), prefer(w2, "tier", "In", &["p2"])]));
        json_patch::merge(&mut v, &requests(json!({"cpu": "1"})));
        pod("p", v)
    };
    let cases = [
        // 47 + 2·100 = 247 against 86 + 2·70 = 226 (raw weights or weight 1 would pick "empty").
        (50, 35, "loaded"),
        // 47 + 200 = 247 against 86 + 2·90 = 266: the allocation still counts.
        (50, 45, "empty"),
        // Normalised by the best node, so scaling every weight changes nothing.
        (100, 70, "loaded"),
        (10, 9, "empty"),
    ];
    for (w1, w2, want) in cases {
        assert_eq!(schedule(&p(w1, w2), &refs, &[&busy]), Ok(want.to_string()), "weights {w1}/{w2}");
    }
}

#[test]
fn autopilot_anti_affinities_keep_pods_off_flagged_nodes() {
    const HEALTH: &str = "autopilot.ibm.com/gpuhealth";
    let nodes: Vec<Node> =
        [("a-evict", Some("EVICT")), ("b-testing", Some("TESTING")), ("c-warn", Some("WARN")), ("d-ok", None)]
            .iter()
            .map(|(n, health)| {
                let labels = match health {
                    Some(h) => json!({HEALTH: h}),
                    None => json!({}),
                };
                node(n, json!({"metadata": {"labels": labels}}))
            })
            .collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let required = |values: &[&str]| {
        json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": HEALTH, "operator": "NotIn", "values": values}]}]}}}}})
    };
    assert_eq!(check(&pod("p", required(&["EVICT"])), &nodes[0], &[], &[]), Err(Unfit::NodeAffinity));
    assert_eq!(check(&pod("p", required(&["EVICT"])), &nodes[1], &[], &[]), Ok(()));
    // Required NotIn alone: the first node by name that is not EVICT.
    assert_eq!(schedule(&pod("p", required(&["EVICT"])), &refs, &[]), Ok("b-testing".into()));
    // With the PreferNoSchedule term as upstream injects it, the healthy node wins over WARN.
    let mut v = required(&["TESTING", "EVICT"]);
    json_patch::merge(&mut v, &preferring(json!([prefer(50, HEALTH, "NotIn", &["WARN"])])));
    assert_eq!(schedule(&pod("p", v.clone()), &refs, &[]), Ok("d-ok".into()));
    // Only flagged nodes left: WARN is used, EVICT and TESTING never.
    assert_eq!(schedule(&pod("p", v.clone()), &refs[..3], &[]), Ok("c-warn".into()));
    assert_eq!(
        schedule(&pod("p", v), &refs[..2], &[]),
        Err("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. \
             preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
            .into())
    );
}

#[test]
fn unreachable_and_not_ready_taints_keep_intolerant_pods_off() {
    let tainted = |key: &str, effect: &str| node("n1", json!({"spec": {"taints": [{"key": key, "effect": effect}]}}));
    // Kubernetes' default tolerations (DefaultTolerationSeconds admission) cover NoExecute only.
    let defaults = json!({"spec": {"tolerations": [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}});
    let untolerated = |key: &str| Err(Unfit::UntoleratedTaint { key: key.into(), value: "".into() });
    for key in ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"] {
        for effect in ["NoSchedule", "NoExecute"] {
            assert_eq!(
                check(&pod("p", json!({})), &tainted(key, effect), &[], &[]),
                untolerated(key),
                "{key}:{effect}"
            );
        }
        assert_eq!(
            check(&pod("p", defaults.clone()), &tainted(key, "NoSchedule"), &[], &[]),
            untolerated(key),
            "{key}"
        );
        assert_eq!(check(&pod("p", defaults.clone()), &tainted(key, "NoExecute"), &[], &[]), Ok(()), "{key}");
    }
    // A cordoned node next to tainted ones: only the plain node is picked.
    let nodes = [
        node("a", json!({"spec": {"unschedulable": true}})),
        node("b", json!({"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}})),
        node("c", json!({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}})),
        node("d", json!({})),
    ];
    let refs: Vec<&Node> = nodes.iter().collect();
    assert_eq!(schedule(&pod("p", json!({})), &refs, &[]), Ok("d".into()));
}
