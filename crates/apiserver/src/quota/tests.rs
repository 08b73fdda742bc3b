use serde_json::json;

use super::*;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect()
}

fn printed(l: &ResourceList) -> Vec<(String, String)> {
    l.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
}

fn container(name: &str, requests: Value, limits: Value) -> Value {
    json!({"name": name, "image": "x", "resources": {"requests": requests, "limits": limits}})
}

fn pod(containers: Vec<Value>) -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": containers}})
}

fn quota(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> QuotaState {
    QuotaState { name: name.into(), hard: list(hard), used: list(used), selectors: vec![] }
}

#[test]
fn a_pod_uses_its_requests_limits_and_extended_resources_as_quota_names() {
    let cases = [
        (
            "cpu and memory requests and limits",
            pod(vec![container("c", json!({"cpu": "500m", "memory": "1Gi"}), json!({"cpu": "1", "memory": "2Gi"}))]),
            vec![
                ("count/pods", "1"),
                ("cpu", "500m"),
                ("limits.cpu", "1"),
                ("limits.memory", "2Gi"),
                ("memory", "1Gi"),
                ("pods", "1"),
                ("requests.cpu", "500m"),
                ("requests.memory", "1Gi"),
            ],
        ),
        (
            "requests default to limits; extended resources only as requests.<name>",
            pod(vec![container("c", json!({}), json!({"cpu": "2", "nvidia.com/gpu": "1"}))]),
            vec![
                ("count/pods", "1"),
                ("cpu", "2"),
                ("limits.cpu", "2"),
                ("pods", "1"),
                ("requests.cpu", "2"),
                ("requests.nvidia.com/gpu", "1"),
            ],
        ),
        (
            "containers summed, in the first container's format",
            pod(vec![
                container("a", json!({"memory": "1Gi"}), json!({})),
                container("b", json!({"memory": "512Mi", "hugepages-2Mi": "2Mi"}), json!({})),
            ]),
            vec![
                ("count/pods", "1"),
                ("hugepages-2Mi", "2Mi"),
                ("memory", "1536Mi"),
                ("pods", "1"),
                ("requests.hugepages-2Mi", "2Mi"),
                ("requests.memory", "1536Mi"),
            ],
        ),
        (
            "the largest init container counts when larger; sidecars add up; overhead is added",
            json!({"spec": {
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "3"}}},
                    {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                ],
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "overhead": {"cpu": "100m"},
            }}),
            vec![("count/pods", "1"), ("cpu", "3100m"), ("pods", "1"), ("requests.cpu", "3100m")],
        ),
        (
            "a terminal pod only counts as an object",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}}),
            vec![("count/pods", "1")],
        ),
    ];
    for (what, pod, want) in cases {
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(printed(&usage("", "pods", &pod)), want, "{what}");
    }
}

#[test]
fn other_objects_are_counted_under_count_names_and_legacy_aliases() {
    let none = json!({});
    let cases = [
        ("batch", "jobs", &none, vec![("count/jobs.batch", "1")]),
        ("jobset.x-k8s.io", "jobsets", &none, vec![("count/jobsets.jobset.x-k8s.io", "1")]),
        ("", "configmaps", &none, vec![("configmaps", "1"), ("count/configmaps", "1")]),
        (
            "",
            "services",
            &json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}}),
            vec![
                ("count/services", "1"),
                ("services", "1"),
                ("services.loadbalancers", "1"),
                ("services.nodeports", "2"),
            ],
        ),
        (
            "",
            "persistentvolumeclaims",
            &json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "10Gi"}}}}),
            vec![
                ("count/persistentvolumeclaims", "1"),
                ("gold.storageclass.storage.k8s.io/persistentvolumeclaims", "1"),
                ("gold.storageclass.storage.k8s.io/requests.storage", "10Gi"),
                ("persistentvolumeclaims", "1"),
                ("requests.storage", "10Gi"),
            ],
        ),
    ];
    for (group, plural, obj, want) in cases {
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(printed(&usage(group, plural, obj)), want, "{group}/{plural}");
    }
}

#[test]
fn quota_names_map_to_the_resource_whose_objects_they_measure() {
    let core = |p: &str| Some((String::new(), p.to_string()));
    let cases = [
        ("requests.cpu", core("pods")),
        ("count/pods", core("pods")),
        ("requests.nvidia.com/gpu", core("pods")),
        ("requests.hugepages-1Gi", core("pods")),
        ("services.nodeports", core("services")),
        ("requests.storage", core("persistentvolumeclaims")),
        ("secrets", core("secrets")),
        ("count/jobs.batch", Some(("batch".to_string(), "jobs".to_string()))),
        ("count/jobsets.jobset.x-k8s.io", Some(("jobset.x-k8s.io".to_string(), "jobsets".to_string()))),
        ("nvidia.com/gpu", None),
        ("storage", None),
    ];
    for (name, want) in cases {
        assert_eq!(resource_for(name), want, "{name}");
    }
}

#[test]
fn admission_charges_matching_quotas_or_refuses_with_kubernetes_messages() {
    let cpu_pod = |cpu: &str| pod(vec![container("c", json!({"cpu": cpu}), json!({}))]);
    let forbidden = |m: &str| Err(Refusal::Forbidden(m.to_string()));
    type Case = (
        &'static str,
        Vec<QuotaState>,
        Value,
        std::result::Result<Vec<(usize, Vec<(&'static str, &'static str)>)>, Refusal>,
    );
    let cases: Vec<Case> = vec![
        (
            "within the quota: used grows by the request",
            vec![quota("compute", &[("pods", "2"), ("requests.cpu", "2")], &[("pods", "0"), ("requests.cpu", "0")])],
            cpu_pod("1"),
            Ok(vec![(0, vec![("pods", "1"), ("requests.cpu", "1")])]),
        ),
        (
            "over the quota: the exceeded resources only",
            vec![quota("compute", &[("pods", "5"), ("requests.cpu", "2")], &[("pods", "1"), ("requests.cpu", "1")])],
            cpu_pod("2"),
            forbidden(
                "exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=1, limited: requests.cpu=2",
            ),
        ),
        (
            "several exceeded resources are listed in name order",
            vec![quota("q", &[("pods", "1"), ("requests.cpu", "1")], &[("pods", "1"), ("requests.cpu", "500m")])],
            cpu_pod("1"),
            forbidden(
                "exceeded quota: q, requested: pods=1,requests.cpu=1, used: pods=1,requests.cpu=500m, limited: pods=1,requests.cpu=1",
            ),
        ),
        (
            "a quota on cpu limits needs every container to state one",
            vec![quota(
                "compute",
                &[("limits.cpu", "4"), ("requests.memory", "1Gi")],
                &[("limits.cpu", "0"), ("requests.memory", "0")],
            )],
            pod(vec![
                container("b", json!({"cpu": "1"}), json!({})),
                container("a", json!({"memory": "1Mi"}), json!({"cpu": "1"})),
            ]),
            forbidden("failed quota: compute: must specify limits.cpu for: b; requests.memory for: b"),
        ),
        (
            "an extended resource a pod does not request need not be stated",
            vec![quota("gpu", &[("requests.nvidia.com/gpu", "1")], &[("requests.nvidia.com/gpu", "0")])],
            cpu_pod("1"),
            Ok(vec![]),
        ),
        (
            "an extended resource is limited as requests.<name>",
            vec![quota("gpu", &[("requests.nvidia.com/gpu", "1")], &[("requests.nvidia.com/gpu", "1")])],
            pod(vec![container("c", json!({}), json!({"nvidia.com/gpu": "1"}))]),
            forbidden(
                "exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1",
            ),
        ),
        (
            "a quota on other resources does not apply",
            vec![quota("objects", &[("configmaps", "1")], &[("configmaps", "1")])],
            cpu_pod("1"),
            Ok(vec![]),
        ),
        (
            "a quota without usage for what it enforces is computed first",
            vec![quota("compute", &[("pods", "1")], &[])],
            cpu_pod("1"),
            Err(Refusal::StatusUnknown(0)),
        ),
        (
            "every matching quota is charged",
            vec![
                quota("a", &[("pods", "3")], &[("pods", "1")]),
                quota(
                    "b",
                    &[("count/pods", "10"), ("requests.cpu", "4")],
                    &[("count/pods", "2"), ("requests.cpu", "1500m")],
                ),
            ],
            cpu_pod("500m"),
            Ok(vec![(0, vec![("pods", "2")]), (1, vec![("count/pods", "3"), ("requests.cpu", "2")])]),
        ),
    ];
    for (what, quotas, obj, want) in cases {
        let got = check_create(&quotas, "", "pods", &obj)
            .map(|changes| changes.into_iter().map(|(i, used)| (i, printed(&used))).collect::<Vec<_>>());
        let want = want.map(|changes| {
            changes
                .into_iter()
                .map(|(i, used)| (i, used.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        });
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn object_counts_limit_any_resource_and_scoped_quotas_only_pods() {
    let jobs = quota("jobs", &[("count/jobs.batch", "1")], &[("count/jobs.batch", "1")]);
    assert_eq!(
        check_create(&[jobs], "batch", "jobs", &json!({})),
        Err(Refusal::Forbidden(
            "exceeded quota: jobs, requested: count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1".into()
        ))
    );
    let mut scoped = quota("be", &[("pods", "1")], &[("pods", "1")]);
    scoped.selectors = vec![ScopeSelector { scope: "BestEffort".into(), operator: "Exists".into(), values: vec![] }];
    let best_effort = pod(vec![json!({"name": "c"})]);
    let burstable = pod(vec![container("c", json!({"cpu": "1"}), json!({}))]);
    assert!(matches!(
        check_create(std::slice::from_ref(&scoped), "", "pods", &best_effort),
        Err(Refusal::Forbidden(_))
    ));
    assert_eq!(check_create(std::slice::from_ref(&scoped), "", "pods", &burstable), Ok(vec![]));
    let mut priority = quota("high", &[("pods", "1")], &[("pods", "1")]);
    priority.selectors =
        vec![ScopeSelector { scope: "PriorityClass".into(), operator: "In".into(), values: vec!["high".into()] }];
    let high = json!({"spec": {"priorityClassName": "high", "containers": [{"name": "c"}]}});
    assert!(matches!(check_create(std::slice::from_ref(&priority), "", "pods", &high), Err(Refusal::Forbidden(_))));
    assert_eq!(check_create(std::slice::from_ref(&priority), "", "pods", &best_effort), Ok(vec![]));
}

#[test]
fn released_usage_never_goes_below_zero_and_touches_only_enforced_names() {
    let used = list(&[("pods", "1"), ("requests.cpu", "500m")]);
    let hard = list(&[("pods", "2"), ("requests.cpu", "2")]);
    let usage = list(&[("pods", "1"), ("requests.cpu", "1"), ("count/pods", "1")]);
    let left = released(&used, &hard, &usage).expect("changed");
    assert_eq!(printed(&left), [("pods".to_string(), "0".to_string()), ("requests.cpu".to_string(), "0".to_string())]);
    assert_eq!(released(&used, &list(&[("secrets", "1")]), &usage), None);
}

#[test]
fn quota_specs_are_validated_like_kubernetes() {
    let cases = [
        ("valid", json!({"hard": {"pods": "2", "requests.nvidia.com/gpu": "1", "count/jobs.batch": "3"}}), vec![]),
        (
            "negative",
            json!({"hard": {"cpu": "-1"}}),
            vec!["spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"],
        ),
        (
            "not an integer",
            json!({"hard": {"pods": "1.5"}}),
            vec!["spec.hard[pods]: Invalid value: \"1500m\": must be an integer"],
        ),
        (
            "unknown unqualified name",
            json!({"hard": {"gpus": "1"}}),
            vec!["spec.hard[gpus]: Invalid value: \"gpus\": must be a standard resource type or fully qualified"],
        ),
        (
            "storage",
            json!({"hard": {"storage": "1Gi"}}),
            vec!["spec.hard[storage]: Invalid value: \"storage\": must be a standard resource for quota"],
        ),
        (
            "conflicting scopes",
            json!({"hard": {"pods": "1"}, "scopes": ["BestEffort", "NotBestEffort"]}),
            vec![
                "spec.scopes: Invalid value: []core.ResourceQuotaScope{\"BestEffort\", \"NotBestEffort\"}: conflicting scopes",
            ],
        ),
        (
            "a scope that does not apply to a resource",
            json!({"hard": {"requests.cpu": "1"}, "scopes": ["BestEffort"]}),
            vec![
                "spec.scopes: Invalid value: []core.ResourceQuotaScope{\"BestEffort\"}: unsupported scope applied to resource",
            ],
        ),
        (
            "scope selector without values",
            json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]}}),
            vec![
                "spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            ],
        ),
    ];
    for (what, spec, want) in cases {
        let quota = json!({"spec": spec});
        let hard = decode_hard(&quota).expect("quantities");
        let got: Vec<String> =
            validate(&quota, &hard, None).iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(got, want, "{what}");
    }
    let old = json!({"spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort"]}});
    let new = json!({"spec": {"hard": {"pods": "1"}}});
    let causes = validate(&new, &decode_hard(&new).unwrap(), Some(&old));
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].message, "Invalid value: []core.ResourceQuotaScope{}: field is immutable");
    let bad = decode_hard(&json!({"spec": {"hard": {"cpu": "lots"}}})).unwrap_err();
    assert_eq!(bad.code, 400);
    assert_eq!(
        bad.message,
        "ResourceQuota in version \"v1\" cannot be handled as a ResourceQuota: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
}
