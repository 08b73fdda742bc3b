//! The manifests shipped for real clusters (config/in-place-restart/) grant the in-place restart
//! agent exactly what the embedded server's pod-bound tokens allow (crates/apiserver/src/auth.rs):
//! the same requests through the Role, the same pod writes through the ValidatingAdmissionPolicy,
//! whose CEL is evaluated here with kube-cel's `cel`.

use std::path::Path;

use http::Method;
use jobset_apiserver::auth::{self, PodIdentity, ResourceRequest};
use jobset_apiserver::resources::Registry;
use kube_cel::cel::{Context, Program};
use serde_json::{Value, json};

const ATTEMPT: &str = "jobset.sigs.k8s.io/in-place-restart-attempt";

fn manifests(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/in-place-restart").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

fn agent() -> PodIdentity {
    PodIdentity::of(&json!({
        "metadata": {"name": "js-rj-0-0-abcde", "namespace": "default", "uid": "u1",
                     "labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
        "spec": {"serviceAccountName": "jobset-in-place-restart"}
    }))
}

#[test]
fn the_role_grants_exactly_the_requests_a_pod_token_may_make() {
    let rbac = manifests("rbac.yaml");
    let sa = of_kind(&rbac, "ServiceAccount");
    let role = of_kind(&rbac, "Role");
    let binding = of_kind(&rbac, "RoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], sa["metadata"]["namespace"]);
    assert_eq!(sa["metadata"]["name"], agent().service_account);

    // JobSets are a preinstalled CRD: served once a server bootstrapped.
    let server = jobset_apiserver::ApiServer::in_memory();
    let registry = server.registry();
    let id = agent();
    for (group, version, plural, own_name) in [
        ("", "v1", "pods", "js-rj-0-0-abcde"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets", "js"),
        ("", "v1", "secrets", "s"),
    ] {
        let def = registry.get(group, version, plural).expect("a served resource");
        let selector = format!("metadata.name={own_name}");
        for (method, name, watch, verb) in [
            (Method::GET, Some(own_name), false, "get"),
            (Method::GET, None, false, "list"),
            (Method::GET, None, true, "watch"),
            (Method::POST, None, false, "create"),
            (Method::PUT, Some(own_name), false, "update"),
            (Method::PATCH, Some(own_name), false, "patch"),
            (Method::DELETE, Some(own_name), false, "delete"),
            (Method::DELETE, None, false, "deletecollection"),
        ] {
            let req = ResourceRequest {
                method: &method,
                def: &def,
                namespace: Some("default"),
                name,
                subresource: None,
                watch,
                field_selector: Some(&selector),
            };
            let local = auth::authorize(&id, &req).is_ok();
            let granted = role["rules"].as_array().unwrap().iter().any(|r| {
                let has = |field: &str, v: &str| r[field].as_array().unwrap().iter().any(|x| x == v);
                has("apiGroups", group) && has("resources", plural) && has("verbs", verb)
            });
            assert_eq!(granted, local, "{verb} {plural}: Role grants {granted}, pod token allowed {local}");
        }
    }
}

/// Runs the policy on an UPDATE of `old` to `new` by `username` (whose bound token names
/// `token_pod`): `None` when it does not apply, else the failed validations' messages.
fn policy_verdict(old: &Value, new: &Value, username: &str, token_pod: Option<&str>) -> Option<Vec<String>> {
    let vap = manifests("validating-admission-policy.yaml");
    let policy = of_kind(&vap, "ValidatingAdmissionPolicy");
    let binding = of_kind(&vap, "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rules["operations"], json!(["UPDATE"]), "a patch reaches admission as UPDATE");
    assert_eq!(rules["resources"], json!(["pods"]));

    let mut user = json!({"username": username, "groups": ["system:serviceaccounts"]});
    if let Some(pod) = token_pod {
        user["extra"] = json!({"authentication.kubernetes.io/pod-name": [pod]});
    }
    let request = json!({"operation": "UPDATE", "userInfo": user, "name": new["metadata"]["name"]});
    let mut ctx = Context::default();
    for (name, v) in [("object", new), ("oldObject", old), ("request", &request)] {
        ctx.add_variable(name, kube_cel::cel::to_value(v).unwrap()).unwrap();
    }
    let eval = |expr: &Value| -> bool {
        let src = expr.as_str().unwrap();
        let program = Program::compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        match program.execute(&ctx) {
            Ok(kube_cel::cel::Value::Bool(b)) => b,
            other => panic!("{src}: {other:?}"),
        }
    };
    let matched = policy["spec"]["matchConditions"].as_array().unwrap().iter().all(|c| eval(&c["expression"]));
    matched.then(|| {
        policy["spec"]["validations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| !eval(&v["expression"]))
            .map(|v| v["message"].as_str().unwrap().to_string())
            .collect()
    })
}

fn pod(name: &str, annotations: Value, labels: Value, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": "u1", "resourceVersion": "7",
                     "annotations": annotations, "labels": labels},
        "spec": {"serviceAccountName": "jobset-in-place-restart", "containers": [{"name": "w", "image": image}]}
    })
}

#[test]
fn the_policy_and_the_embedded_server_agree_on_every_pod_write() {
    let labels = json!({"jobset.sigs.k8s.io/jobset-name": "js"});
    let base = pod("js-rj-0-0-abcde", json!({"a": "1"}), labels.clone(), "busybox");
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    let cases: Vec<(&str, Value, bool)> = vec![
        ("adds the attempt annotation", with(&|p| p["metadata"]["annotations"][ATTEMPT] = json!("0")), true),
        ("no change", base.clone(), true),
        ("adds another annotation", with(&|p| p["metadata"]["annotations"]["b"] = json!("2")), false),
        ("changes another annotation", with(&|p| p["metadata"]["annotations"]["a"] = json!("2")), false),
        ("removes another annotation", with(&|p| p["metadata"]["annotations"] = json!({ATTEMPT: "1"})), false),
        ("adds a label", with(&|p| p["metadata"]["labels"]["x"] = json!("y")), false),
        ("changes the spec", with(&|p| p["spec"]["containers"][0]["image"] = json!("evil")), false),
        ("adds a finalizer", with(&|p| p["metadata"]["finalizers"] = json!(["x/y"])), false),
    ];
    let id = agent();
    let def = Registry::with_builtins().get("", "v1", "pods").unwrap();
    for (what, new, allowed) in cases {
        let local = auth::check_pod_write(&id, &def, &base, &new).is_ok();
        let verdict = policy_verdict(&base, &new, &id.username(), Some(&id.pod)).expect("the policy applies");
        assert_eq!(local, allowed, "{what}: embedded server");
        assert_eq!(verdict.is_empty(), allowed, "{what}: policy says {verdict:?}");
    }

    // A write of the attempt annotation to a pod a bound token does not name: denied by both
    // (locally by authorization, before any content check).
    let other = pod("js-rj-0-1-fghij", json!({}), labels.clone(), "busybox");
    let mut other_new = other.clone();
    other_new["metadata"]["annotations"][ATTEMPT] = json!("1");
    let verdict = policy_verdict(&other, &other_new, &id.username(), Some(&id.pod)).unwrap();
    assert_eq!(verdict, ["the in-place restart agent may only change its own pod"]);
    let req = ResourceRequest {
        method: &Method::PATCH,
        def: &def,
        namespace: Some("default"),
        name: Some("js-rj-0-1-fghij"),
        subresource: None,
        watch: false,
        field_selector: None,
    };
    assert!(auth::authorize(&id, &req).is_err());

    // Without the pod name in the token (older clusters) the content rules still hold.
    let label_change = with(&|p| p["metadata"]["labels"]["x"] = json!("y"));
    assert_eq!(policy_verdict(&base, &label_change, &id.username(), None).unwrap().len(), 1);
    // Other users are not this policy's business.
    assert_eq!(policy_verdict(&base, &label_change, "system:serviceaccount:default:default", None), None);
    assert_eq!(policy_verdict(&base, &label_change, "admin", None), None);
}
