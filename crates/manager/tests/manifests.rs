//! The install manifests (config/, config-optional/, manifests.yaml) and the Helm chart
//! (charts/jobset-rs/): every object well-formed and in an order `kubectl apply -R -f config/`
//! can create; the Deployment runs `jobset manager` with flags and a configuration file it
//! accepts, naming the objects config/ ships; the webhooks at upstream's paths and rules; the RBAC
//! a superset of upstream's; the chart, rendered with its default values, the same objects as
//! config/ but for the deliberate differences listed in [`strip_helm_only`]; and config/ applied
//! with kubectl to the embedded API server.
//!
//! Helm is not installable here (no Debian package); the chart's templates are rendered by
//! [`helm`], gtmpl (Go's text/template) with the Helm functions the templates use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/spec/reference/upstream");
const NAMESPACE: &str = "jobset-system";
const SERVICE_ACCOUNT: &str = "jobset-controller-manager";
/// How long one kubectl command may take.
const KUBECTL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Regenerates manifests.yaml instead of comparing it.
const UPDATE: &str = "JOBSET_UPDATE_MANIFESTS";

// ---------------------------------------------------------------------------------------------
// Reading manifests
// ---------------------------------------------------------------------------------------------

/// The manifest files under `dir` in the order `kubectl apply -R -f dir` visits them
/// (`filepath.Walk`: lexical, depth first; files ending .json, .yaml or .yml).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let mut files = vec![];
    for p in entries {
        if p.is_dir() {
            files.extend(walk(&p));
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
            files.push(p);
        }
    }
    files
}

/// The YAML documents of `text` that are not empty.
fn documents(text: &str, source: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("{source}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Every object of the files under `dir`, in apply order, with the file it comes from.
fn objects_in(dir: &str) -> Vec<(String, Value)> {
    let root = Path::new(REPO).join(dir);
    let mut out = vec![];
    for f in walk(&root) {
        let name = f.strip_prefix(REPO).unwrap_or(&f).display().to_string();
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.extend(documents(&text, &name).into_iter().map(|d| (name.clone(), d)));
    }
    out
}

fn config() -> Vec<Value> {
    objects_in("config").into_iter().map(|(_, o)| o).collect()
}

/// `apiVersion/kind namespace/name`.
fn key(o: &Value) -> String {
    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
    format!("{}/{} {ns}/{}", o["apiVersion"].as_str().unwrap_or(""), o["kind"].as_str().unwrap_or(""), name(o))
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

fn find<'a>(objects: &'a [Value], kind: &str, object: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && name(o) == object)
        .unwrap_or_else(|| panic!("no {kind} {object} among {:?}", objects.iter().map(key).collect::<Vec<_>>()))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

#[test]
fn every_shipped_manifest_is_an_object_with_a_kind_and_a_name_once() {
    for (dir, at_least) in [("config", 20), ("config-optional", 4)] {
        let objects = objects_in(dir);
        assert!(objects.len() >= at_least, "{dir}: only {} objects", objects.len());
        let mut seen = BTreeMap::new();
        for (file, o) in &objects {
            for field in ["apiVersion", "kind"] {
                assert!(o[field].as_str().is_some_and(|s| !s.is_empty()), "{file}: an object without {field}: {o}");
            }
            assert!(!name(o).is_empty(), "{file}: {} without metadata.name", key(o));
            if let Some(previous) = seen.insert(key(o), file.clone()) {
                panic!("{} twice: in {previous} and {file}", key(o));
            }
        }
    }
}

/// The objects of `objects` that come before the Namespace they are in. kubectl applies objects
/// in the order it reads them and does not retry: such an object fails with
/// `namespaces "jobset-system" not found`.
fn before_their_namespace(objects: &[Value]) -> Vec<String> {
    // Namespaces every cluster has.
    let mut created = vec!["default", "kube-system"];
    let mut early = vec![];
    for o in objects {
        if o["kind"] == "Namespace" {
            created.push(name(o));
        }
        if let Some(ns) = o["metadata"]["namespace"].as_str()
            && !created.contains(&ns)
        {
            early.push(key(o));
        }
    }
    early
}

#[test]
fn a_recursive_apply_of_config_creates_each_namespace_before_the_objects_in_it() {
    let mut objects = config();
    assert_eq!(before_their_namespace(&objects), Vec::<String>::new());
    // The check on a wrong order: the Namespace last.
    let ns = objects.iter().position(|o| o["kind"] == "Namespace").unwrap();
    let namespace = objects.remove(ns);
    objects.push(namespace);
    let early = before_their_namespace(&objects);
    assert!(early.contains(&format!("v1/ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT}")), "{early:?}");
}

// ---------------------------------------------------------------------------------------------
// The manager's Deployment, configuration and Services
// ---------------------------------------------------------------------------------------------

/// `jobset manager`'s command line, as the binary parses it.
#[derive(clap::Parser, Debug)]
struct ManagerCommand {
    #[command(flatten)]
    args: jobset_manager::ManagerArgs,
}

fn manager_container(objects: &[Value]) -> &Value {
    let deployment = find(objects, "Deployment", SERVICE_ACCOUNT);
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    containers.iter().find(|c| c["name"] == "manager").expect("a container named manager")
}

fn port(container: &Value, port_name: &str) -> u64 {
    let ports = container["ports"].as_array().unwrap();
    let p = ports.iter().find(|p| p["name"] == port_name).unwrap_or_else(|| panic!("no port {port_name}"));
    p["containerPort"].as_u64().unwrap()
}

#[test]
fn the_deployment_runs_jobset_manager_with_flags_and_a_configuration_it_accepts() {
    use clap::Parser;
    let objects = config();
    let deployment = find(&objects, "Deployment", SERVICE_ACCOUNT);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], SERVICE_ACCOUNT);
    let selector = deployment["spec"]["selector"]["matchLabels"].as_object().unwrap();
    for (k, v) in selector {
        assert_eq!(&pod_labels(deployment)[k], v, "the pod template lacks the selector's label {k}");
    }
    let container = manager_container(&objects);

    // The image's entrypoint, then the subcommand; the flags are `jobset manager`'s.
    let command = strings(&container["command"]);
    let dockerfile = std::fs::read_to_string(format!("{REPO}/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("ENTRYPOINT [\"{}\"]", command[0])),
        "the Dockerfile's ENTRYPOINT is not {}",
        command[0]
    );
    assert_eq!(command[1..], ["manager"]);
    let args = strings(&container["args"]);
    let parsed = ManagerCommand::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("jobset manager {args:?}: {e}"))
        .args;
    assert!(
        ManagerCommand::try_parse_from(["manager", "--zap-log-level=2"]).is_err(),
        "a flag the manager lacks is refused"
    );

    // --config names the mounted ConfigMap key, which the manager's parser accepts.
    let config_path = parsed.config.expect("--config");
    let mounts = container["volumeMounts"].as_array().unwrap();
    let mount = mounts.iter().find(|m| m["mountPath"] == config_path.to_str().unwrap()).expect("--config is mounted");
    let volumes = pod["volumes"].as_array().unwrap();
    let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
    let configmap = find(&objects, "ConfigMap", volume["configMap"]["name"].as_str().unwrap());
    assert_eq!(configmap["metadata"]["namespace"], NAMESPACE);
    let key = mount["subPath"].as_str().unwrap();
    let text = configmap["data"][key].as_str().unwrap();
    let cfg = jobset_manager::config::parse(text, "the shipped ConfigMap").unwrap();
    assert!(cfg.leader_election.leader_elect);

    // The names and ports in the configuration are the shipped objects'.
    assert!(cfg.internal_cert_management.enable);
    let service_name = cfg.internal_cert_management.webhook_service_name.as_deref().unwrap();
    let secret_name = cfg.internal_cert_management.webhook_secret_name.as_deref().unwrap();
    let service = find(&objects, "Service", service_name);
    find(&objects, "Secret", secret_name);
    let cert =
        volumes.iter().find(|v| v["secret"]["secretName"] == secret_name).expect("the webhook Secret is mounted");
    let cert_mount = mounts.iter().find(|m| m["name"] == cert["name"]).unwrap();
    let cert_dir = cfg.webhook.cert_dir.as_deref().unwrap_or("/tmp/k8s-webhook-server/serving-certs");
    assert_eq!(cert_mount["mountPath"], cert_dir);
    assert_eq!(cert_mount["readOnly"], true);
    let webhook_port = u64::from(cfg.webhook.port);
    assert_eq!(port(container, "webhook-server"), webhook_port);
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], webhook_port);
    assert_eq!(service["spec"]["selector"].as_object().unwrap(), selector);

    let health = port_of(&cfg.health.health_probe_bind_address);
    assert_eq!(port(container, "health-probe"), health);
    assert_eq!(container["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": health, "scheme": "HTTP"}));
    assert_eq!(container["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": health, "scheme": "HTTP"}));
    let metrics = port_of(&cfg.metrics.bind_address);
    assert_eq!(port(container, "metrics"), metrics);
    let metrics_service = find(&objects, "Service", "jobset-controller-manager-metrics-service");
    assert_eq!(metrics_service["spec"]["ports"][0]["targetPort"], metrics);
    assert_eq!(metrics_service["spec"]["selector"].as_object().unwrap(), selector);
}

fn pod_labels(deployment: &Value) -> &serde_json::Map<String, Value> {
    deployment["spec"]["template"]["metadata"]["labels"].as_object().unwrap()
}

fn port_of(bind_address: &str) -> u64 {
    bind_address.rsplit(':').next().unwrap().parse().unwrap_or_else(|e| panic!("{bind_address}: {e}"))
}

#[test]
fn the_manager_runs_as_upstreams_non_root_read_only_and_without_privileges() {
    let objects = config();
    let deployment = find(&objects, "Deployment", SERVICE_ACCOUNT);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}));
    assert_eq!(
        manager_container(&objects)["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
    );
    // The image's user, which runAsNonRoot needs to be numeric.
    let dockerfile = std::fs::read_to_string(format!("{REPO}/Dockerfile")).unwrap();
    assert!(dockerfile.lines().any(|l| l == "USER 65532:65532"), "the Dockerfile sets no numeric non-root USER");
}

#[test]
fn the_image_tag_is_the_workspace_version_and_the_charts() {
    let objects = config();
    let image = manager_container(&objects)["image"].as_str().unwrap().to_string();
    assert_eq!(image, format!("jobset-rs:{}", env!("CARGO_PKG_VERSION")));
    let chart = chart_metadata();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
}

// ---------------------------------------------------------------------------------------------
// Webhooks and RBAC against upstream's
// ---------------------------------------------------------------------------------------------

fn upstream(file: &str) -> Vec<Value> {
    let path = format!("{UPSTREAM}/{file}");
    documents(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")), &path)
}

/// Upstream's kustomize patch (config/components/webhook/patches): the pod webhooks see JobSet
/// pods only.
fn upstream_object_selector(path: &str) -> Option<Value> {
    path.ends_with("-v1-pod")
        .then(|| json!({"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}))
}

#[test]
fn every_upstream_webhook_is_served_at_its_path_and_rules_through_the_shipped_service() {
    let objects = config();
    let service = find(&objects, "Service", "jobset-webhook-service");
    let mut ours = BTreeMap::new();
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let configs: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(configs.len(), 1, "one {kind}");
        for w in configs[0]["webhooks"].as_array().unwrap() {
            let svc = &w["clientConfig"]["service"];
            assert_eq!(svc["name"], service["metadata"]["name"]);
            assert_eq!(svc["namespace"], service["metadata"]["namespace"]);
            assert!(svc.get("port").is_none(), "the Service's port 443 is the default");
            ours.insert(svc["path"].as_str().unwrap().to_string(), (kind, w.clone()));
        }
    }
    let mut expected = 0;
    for file in ["jobset/webhook_manifests.yaml", "appwrapper/webhook_manifests.yaml"] {
        for config in upstream(file) {
            for theirs in config["webhooks"].as_array().unwrap() {
                expected += 1;
                let path = theirs["clientConfig"]["service"]["path"].as_str().unwrap();
                let (kind, w) = ours.get(path).unwrap_or_else(|| panic!("no webhook at upstream's {path}"));
                assert_eq!(*kind, config["kind"], "{path}");
                for field in ["name", "rules", "failurePolicy", "sideEffects", "admissionReviewVersions"] {
                    assert_eq!(w[field], theirs[field], "{path}: {field}");
                }
                assert_eq!(w.get("objectSelector").cloned(), upstream_object_selector(path), "{path}: objectSelector");
            }
        }
    }
    assert_eq!(ours.len(), expected, "webhooks upstream does not have: {:?}", ours.keys().collect::<Vec<_>>());
}

/// (apiGroup, resource, verb) that the manager's ServiceAccount is granted, and where: `None`
/// cluster-wide, `Some(ns)` in that namespace only.
fn grants(objects: &[Value]) -> Vec<(String, String, String, Option<String>)> {
    let bound_to_manager = |binding: &Value| {
        binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == SERVICE_ACCOUNT && s["namespace"] == NAMESPACE)
    };
    let mut out = vec![];
    for binding in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding") {
        if !bound_to_manager(binding) {
            continue;
        }
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role_name = binding["roleRef"]["name"].as_str().unwrap();
        let role = find(objects, role_kind, role_name);
        let scope = match (binding["kind"].as_str(), role_kind) {
            (Some("ClusterRoleBinding"), _) => None,
            _ => Some(binding["metadata"]["namespace"].as_str().unwrap().to_string()),
        };
        for rule in role["rules"].as_array().unwrap() {
            for g in strings(&rule["apiGroups"]) {
                for r in strings(&rule["resources"]) {
                    for v in strings(&rule["verbs"]) {
                        out.push((g.to_string(), r.to_string(), v.to_string(), scope.clone()));
                    }
                }
            }
        }
    }
    out
}

/// What upstream grants its managers that ours does not, and why.
const NOT_GRANTED: &[(&str, &str, &str, &str)] = &[
    (
        "",
        "configmaps",
        "*",
        "upstream's leader-election-role keeps ConfigMaps for client-go's old ConfigMap lock; ours elects on Leases only",
    ),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "list",
        "upstream AppWrapper lists CRDs to find which wrapped kinds a cluster serves; ours does not",
    ),
];

#[test]
fn the_manager_is_granted_what_upstreams_managers_are_with_secrets_only_in_its_namespace() {
    let objects = config();
    let ours = grants(&objects);
    let granted = |g: &str, r: &str, v: &str, ns: Option<&str>| {
        ours.iter()
            .any(|(og, or, ov, scope)| og == g && or == r && ov == v && (scope.is_none() || scope.as_deref() == ns))
    };
    let mut checked = 0;
    for file in [
        "jobset/rbac_role.yaml",
        "jobset/rbac_leader_election_role.yaml",
        "jobset/rbac_manager_secrets_role.yaml",
        "appwrapper/rbac_role.yaml",
    ] {
        for role in upstream(file) {
            // Upstream's Roles are namespaced into the manager's namespace by kustomize.
            let ns = (role["kind"] == "Role").then_some(NAMESPACE);
            for rule in role["rules"].as_array().unwrap() {
                for g in strings(&rule["apiGroups"]) {
                    for r in strings(&rule["resources"]) {
                        for v in strings(&rule["verbs"]) {
                            if NOT_GRANTED
                                .iter()
                                .any(|(ng, nr, nv, _)| *ng == g && *nr == r && (*nv == v || *nv == "*"))
                            {
                                continue;
                            }
                            // Upstream AppWrapper's secrets are cluster-wide; the Secret is ours.
                            let ns = if r == "secrets" { Some(NAMESPACE) } else { ns };
                            assert!(granted(g, r, v, ns), "{file}: {v} {g}/{r} is not granted");
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} upstream grants checked");
    // Least privilege: no Secret outside the manager's namespace.
    assert!(!ours.iter().any(|(_, r, _, scope)| r == "secrets" && scope.is_none()), "secrets granted cluster-wide");
    assert!(granted("admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", None));
}

// ---------------------------------------------------------------------------------------------
// manifests.yaml
// ---------------------------------------------------------------------------------------------

/// config/ as one file: each file's text in `kubectl apply -R -f config/` order.
fn concatenated() -> String {
    let mut out = String::from(
        "# All of config/ in one file, in the order `kubectl apply -R -f config/` reads it:\n\
         #   kubectl apply --server-side -f manifests.yaml\n\
         # Generated: JOBSET_UPDATE_MANIFESTS=1 cargo test -p jobset-manager --test manifests\n",
    );
    for f in walk(&Path::new(REPO).join("config")) {
        let rel = f.strip_prefix(Path::new(REPO)).unwrap().display().to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        out.push_str(&format!("---\n# Source: {rel}\n"));
        out.push_str(text.trim_start_matches("---\n"));
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[test]
fn manifests_yaml_is_config_in_one_file() {
    let path = Path::new(REPO).join("manifests.yaml");
    let expected = concatenated();
    if std::env::var_os(UPDATE).is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "manifests.yaml is not config/ in one file: run {UPDATE}=1 cargo test -p jobset-manager --test manifests"
    );
    // And it holds the same objects.
    assert_eq!(documents(&actual, "manifests.yaml"), config());
}

// ---------------------------------------------------------------------------------------------
// The Helm chart
// ---------------------------------------------------------------------------------------------

fn chart_dir() -> PathBuf {
    Path::new(REPO).join("charts/jobset-rs")
}

fn chart_metadata() -> Value {
    let path = chart_dir().join("Chart.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn default_values() -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap()).unwrap()
}

/// The chart rendered as `helm template RELEASE charts/jobset-rs -n NAMESPACE` would, with
/// `set` merged over the default values.
fn render(release: &str, namespace: &str, set: Value) -> Vec<Value> {
    let mut values = default_values();
    merge(&mut values, set);
    let chart = chart_metadata();
    let top = json!({
        "Values": values,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": true},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
        "Template": {"BasePath": "jobset-rs/templates"},
    });
    let files = helm::templates(&chart_dir().join("templates"), "jobset-rs/templates");
    let mut objects = vec![];
    for (name, _) in files.iter().filter(|(n, _)| n.ends_with(".yaml")) {
        let text = helm::render(&files, name, &top).unwrap_or_else(|e| panic!("{name}: {e}"));
        for doc in split_documents(&text) {
            objects.extend(documents(&doc, name));
        }
    }
    objects
}

/// Helm's split of a rendered template into documents (lines `---`).
fn split_documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else {
            let last = docs.last_mut().unwrap();
            last.push_str(line);
            last.push('\n');
        }
    }
    docs
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Labels Helm charts carry and plain manifests do not.
const HELM_ONLY_LABELS: &[&str] = &["helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"];
/// The pod annotation that rolls the manager's pods when its configuration changes (as
/// upstream's chart): a hash of the rendered ConfigMap.
const CONFIG_HASH: &str = "jobset.x-k8s.io/config-hash";

/// The chart's objects less what only a chart has, which is checked here:
/// - the labels of [`HELM_ONLY_LABELS`], with Helm's values;
/// - the pod annotation [`CONFIG_HASH`], a SHA-256;
/// - a ConfigMap's YAML file (key ending `.yaml`) is compared as YAML, not text.
///
/// And, not done here but by the callers: config/'s Namespace is not the chart's (`helm install
/// --create-namespace`), and config/crd/bases/ are the chart's crds/ (not templated).
fn strip_helm_only(mut objects: Vec<Value>) -> Vec<Value> {
    for o in &mut objects {
        let k = key(o);
        let labels = o["metadata"]["labels"].as_object_mut().unwrap_or_else(|| panic!("{k} has no labels"));
        assert_eq!(labels.remove("app.kubernetes.io/managed-by"), Some(json!("Helm")));
        assert_eq!(labels.remove("helm.sh/chart"), Some(json!(format!("jobset-rs-{}", env!("CARGO_PKG_VERSION")))));
        assert_eq!(labels.remove("app.kubernetes.io/version"), Some(json!(env!("CARGO_PKG_VERSION"))));
        assert!(HELM_ONLY_LABELS.iter().all(|l| !labels.contains_key(*l)));
        if o["kind"] == "Deployment" {
            let labels = o["spec"]["template"]["metadata"]["labels"].as_object_mut().unwrap();
            for l in HELM_ONLY_LABELS {
                assert!(labels.remove(*l).is_some(), "the pod template has no label {l}");
            }
            let annotations = o["spec"]["template"]["metadata"]["annotations"].as_object_mut().unwrap();
            let hash = annotations.remove(CONFIG_HASH).expect("the config hash annotation");
            let hash = hash.as_str().unwrap();
            assert!(hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{CONFIG_HASH}: {hash}");
        }
    }
    objects.into_iter().map(yaml_files_parsed).collect()
}

fn yaml_files_parsed(mut o: Value) -> Value {
    if o["kind"] == "ConfigMap"
        && let Some(data) = o["data"].as_object_mut()
    {
        for (k, v) in data.iter_mut().filter(|(k, _)| k.ends_with(".yaml")) {
            *v = serde_saphyr::from_str::<Value>(v.as_str().unwrap()).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
    }
    o
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        if let Some(previous) = map.insert(key(&o), o) {
            panic!("{} twice", key(&previous));
        }
    }
    map
}

/// Compares object by object; the message names each object and field that differ.
fn assert_same_objects(chart: BTreeMap<String, Value>, plain: BTreeMap<String, Value>) {
    let mut problems = vec![];
    for k in chart.keys().filter(|k| !plain.contains_key(*k)) {
        problems.push(format!("only in the chart: {k}"));
    }
    for k in plain.keys().filter(|k| !chart.contains_key(*k)) {
        problems.push(format!("only in the plain manifests: {k}"));
    }
    for (k, ours) in &plain {
        if let Some(theirs) = chart.get(k)
            && theirs != ours
        {
            problems.push(format!("{k} differs: {}", differences(ours, theirs, "").join("; ")));
        }
    }
    assert!(problems.is_empty(), "the chart and the plain manifests differ:\n{}", problems.join("\n"));
}

/// The paths at which `a` (plain) and `b` (chart) differ, with both values.
fn differences(a: &Value, b: &Value, at: &str) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter()
                .flat_map(|k| {
                    differences(
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        &format!("{at}.{k}"),
                    )
                })
                .collect()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().flat_map(|(i, (p, q))| differences(p, q, &format!("{at}[{i}]"))).collect()
        }
        _ if a == b => vec![],
        _ => vec![format!("{at}: plain {a}, chart {b}")],
    }
}

fn plain_without_namespace_and_crds(objects: Vec<Value>) -> Vec<Value> {
    objects
        .into_iter()
        .filter(|o| o["kind"] != "Namespace" && o["kind"] != "CustomResourceDefinition")
        .map(yaml_files_parsed)
        .collect()
}

#[test]
fn the_chart_with_default_values_renders_the_objects_of_config() {
    let chart = strip_helm_only(render("jobset", NAMESPACE, json!({})));
    assert_same_objects(by_key(chart), by_key(plain_without_namespace_and_crds(config())));
}

#[test]
fn the_charts_notes_name_the_deployment() {
    let files = helm::templates(&chart_dir().join("templates"), "jobset-rs/templates");
    let top = json!({"Values": default_values(), "Release": {"Name": "jobset", "Namespace": NAMESPACE},
                     "Chart": {"Name": "jobset-rs"}});
    let notes = helm::render(&files, "jobset-rs/templates/NOTES.txt", &top).unwrap();
    assert!(notes.contains("kubectl -n jobset-system rollout status deployment/jobset-controller-manager"), "{notes}");
}

#[test]
fn the_chart_with_the_optional_objects_on_renders_config_optional_too() {
    let set = json!({"prometheus": {"enable": true}, "controller": {"podDisruptionBudget": {"enabled": true}}});
    let chart = strip_helm_only(render("jobset", NAMESPACE, set));
    let mut plain = config();
    plain.extend(objects_in("config-optional").into_iter().map(|(_, o)| o));
    assert_same_objects(by_key(chart), by_key(plain_without_namespace_and_crds(plain)));
}

#[test]
fn a_chart_difference_is_reported_by_object_and_field() {
    let chart = strip_helm_only(render("jobset", NAMESPACE, json!({"controller": {"replicas": 3}})));
    let message = std::panic::catch_unwind(|| {
        assert_same_objects(by_key(chart), by_key(plain_without_namespace_and_crds(config())));
    })
    .expect_err("3 replicas differ from config/'s 1");
    let message = message.downcast_ref::<String>().unwrap();
    assert!(
        message.contains(
            "apps/v1/Deployment jobset-system/jobset-controller-manager differs: .spec.replicas: plain 1, chart 3"
        ),
        "{message}"
    );
}

#[test]
fn the_charts_crds_are_config_crds() {
    let crds = chart_dir().join("crds");
    let ours: Vec<String> = walk(&crds).iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let bases = Path::new(REPO).join("config/crd/bases");
    let theirs: Vec<String> =
        walk(&bases).iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(ours, theirs);
    for f in &ours {
        let a = std::fs::read_to_string(crds.join(f)).unwrap();
        assert!(
            a == std::fs::read_to_string(bases.join(f)).unwrap(),
            "charts/jobset-rs/crds/{f} is not config/crd/bases/{f}"
        );
        assert!(documents(&a, f).iter().all(|d| d["kind"] == "CustomResourceDefinition"));
    }
}

#[test]
fn under_another_release_name_every_reference_names_the_renamed_object() {
    let objects = render("js", "batch-system", json!({}));
    let deployment = find(&objects, "Deployment", "js-jobset-controller-manager");
    assert_eq!(deployment["metadata"]["namespace"], "batch-system");
    let pod = &deployment["spec"]["template"]["spec"];
    let sa = find(&objects, "ServiceAccount", pod["serviceAccountName"].as_str().unwrap());
    assert_eq!(sa["metadata"]["namespace"], "batch-system");
    let volumes = pod["volumes"].as_array().unwrap();
    let configmap = find(&objects, "ConfigMap", volumes[0]["configMap"]["name"].as_str().unwrap());
    let text = configmap["data"]["controller_manager_config.yaml"].as_str().unwrap();
    let cfg = jobset_manager::config::parse(text, "the rendered ConfigMap").unwrap();
    let service = cfg.internal_cert_management.webhook_service_name.unwrap();
    let secret = cfg.internal_cert_management.webhook_secret_name.unwrap();
    assert_eq!(service, "js-jobset-webhook-service");
    find(&objects, "Service", &service);
    find(&objects, "Secret", &secret);
    assert!(volumes.iter().any(|v| v["secret"]["secretName"] == secret.as_str()));
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let config = objects.iter().find(|o| o["kind"] == kind).unwrap();
        for w in config["webhooks"].as_array().unwrap() {
            assert_eq!(w["clientConfig"]["service"]["name"], service.as_str());
            assert_eq!(w["clientConfig"]["service"]["namespace"], "batch-system");
        }
    }
    for binding in objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("RoleBinding"))) {
        let role =
            find(&objects, binding["roleRef"]["kind"].as_str().unwrap(), binding["roleRef"]["name"].as_str().unwrap());
        assert!(role["rules"].is_array());
        for s in binding["subjects"].as_array().unwrap() {
            if s["name"] != "jobset-in-place-restart" {
                assert_eq!(
                    s,
                    &json!({"kind": "ServiceAccount", "name": "js-jobset-controller-manager", "namespace": "batch-system"})
                );
            }
        }
    }
}

#[test]
fn with_cert_manager_the_chart_ships_a_certificate_instead_of_the_managers_own() {
    let objects = render("jobset", NAMESPACE, json!({"certManager": {"enable": true}}));
    assert!(!objects.iter().any(|o| o["kind"] == "Secret"), "cert-manager creates the Secret");
    let cert = find(&objects, "Certificate", "jobset-serving-cert");
    assert_eq!(cert["spec"]["secretName"], "jobset-webhook-server-cert");
    assert_eq!(cert["spec"]["dnsNames"][0], "jobset-webhook-service.jobset-system.svc");
    assert_eq!(cert["spec"]["issuerRef"]["name"], "jobset-selfsigned-issuer");
    find(&objects, "Issuer", "jobset-selfsigned-issuer");
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let config = objects.iter().find(|o| o["kind"] == kind).unwrap();
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "jobset-system/jobset-serving-cert"
        );
    }
    let text = find(&objects, "ConfigMap", "jobset-manager-config")["data"]["controller_manager_config.yaml"].clone();
    let cfg = jobset_manager::config::parse(text.as_str().unwrap(), "the rendered ConfigMap").unwrap();
    assert!(!cfg.internal_cert_management.enable);

    // An issuer of the user's: no Issuer of ours.
    let issuer = json!({"name": "corp", "kind": "ClusterIssuer"});
    let objects = render("jobset", NAMESPACE, json!({"certManager": {"enable": true, "issuerRef": issuer}}));
    assert!(!objects.iter().any(|o| o["kind"] == "Issuer"));
    assert_eq!(find(&objects, "Certificate", "jobset-serving-cert")["spec"]["issuerRef"], issuer);
}

#[test]
fn the_charts_values_set_what_they_name() {
    let set = json!({
        "image": {"repository": "registry.example/jobset-rs", "tag": "v9", "pullSecrets": [{"name": "pull"}]},
        "controller": {
            "replicas": 2,
            "leaderElection": {"enable": false},
            "clientConnection": {"qps": 50, "burst": 100},
            "nodeSelector": {"pool": "system"},
            "tolerations": [{"key": "system", "operator": "Exists"}],
            "env": [{"name": "RUST_LOG", "value": "debug"}],
            "podAnnotations": {"a": "b"},
            "podDisruptionBudget": {"enabled": true, "maxUnavailable": 1},
        },
        "commonLabels": {"team": "batch"},
        "inPlaceRestart": {"namespaces": ["team-a", "team-b"]},
    });
    let objects = render("jobset", NAMESPACE, set);
    let deployment = find(&objects, "Deployment", SERVICE_ACCOUNT);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["metadata"]["labels"]["team"], "batch");
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["annotations"]["a"], "b");
    assert_eq!(pod["spec"]["nodeSelector"], json!({"pool": "system"}));
    assert_eq!(pod["spec"]["tolerations"], json!([{"key": "system", "operator": "Exists"}]));
    assert_eq!(pod["spec"]["imagePullSecrets"], json!([{"name": "pull"}]));
    let container = manager_container(&objects);
    assert_eq!(container["image"], "registry.example/jobset-rs:v9");
    assert_eq!(container["env"], json!([{"name": "RUST_LOG", "value": "debug"}]));
    let text = find(&objects, "ConfigMap", "jobset-manager-config")["data"]["controller_manager_config.yaml"].clone();
    let cfg = jobset_manager::config::parse(text.as_str().unwrap(), "the rendered ConfigMap").unwrap();
    assert!(!cfg.leader_election.leader_elect);
    assert_eq!((cfg.client_connection.qps, cfg.client_connection.burst), (50.0, 100));
    assert!(!objects.iter().any(|o| o["kind"] == "Role" && name(o) == "jobset-leader-election-role"));
    let pdb = find(&objects, "PodDisruptionBudget", "jobset-controller-manager-pdb");
    assert_eq!(pdb["spec"], json!({"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}));
    for ns in ["team-a", "team-b"] {
        let sas: Vec<&Value> = objects
            .iter()
            .filter(|o| {
                o["kind"] == "ServiceAccount"
                    && name(o) == "jobset-in-place-restart"
                    && o["metadata"]["namespace"] == ns
            })
            .collect();
        assert_eq!(sas.len(), 1, "the agent's ServiceAccount in {ns}");
    }
    // The configuration's hash changes with it: the pods roll.
    let default = render("jobset", NAMESPACE, json!({}));
    let hash = |objects: &[Value]| {
        find(objects, "Deployment", SERVICE_ACCOUNT)["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH].clone()
    };
    assert_ne!(hash(&objects), hash(&default));
}

#[test]
fn every_values_key_of_upstreams_chart_is_ours_but_those_listed() {
    // The metrics server's certificate is the manager's own (self-signed), not cert-manager's.
    const NOT_OURS: &[&str] = &["prometheus.prometheusClientCertSecretName"];
    fn paths(v: &Value, at: &str, out: &mut Vec<String>) {
        if let Some(map) = v.as_object().filter(|m| !m.is_empty()) {
            for (k, v) in map {
                paths(v, &if at.is_empty() { k.clone() } else { format!("{at}.{k}") }, out);
            }
        } else {
            out.push(at.to_string());
        }
    }
    let theirs = upstream("jobset/charts_jobset_values.yaml").remove(0);
    let (mut upstream_keys, mut our_keys) = (vec![], vec![]);
    paths(&theirs, "", &mut upstream_keys);
    paths(&default_values(), "", &mut our_keys);
    for k in upstream_keys.iter().filter(|k| !NOT_OURS.contains(&k.as_str())) {
        assert!(our_keys.contains(k), "upstream's chart value {k} is not ours");
    }
}

// ---------------------------------------------------------------------------------------------
// Applying config/ to the embedded API server
// ---------------------------------------------------------------------------------------------

/// `kubectl` on PATH (CI installs Debian's kubernetes-client).
fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("kubectl is not on PATH: this test drives a real kubectl (apt-get install kubernetes-client)")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_config_recursively_to_the_embedded_api_server_and_every_object_is_stored() {
    use jobset_apiserver::{Admission, ApiServer, ServerConfig, persist, serve, tls};
    let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), ServerConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let creds = tls::load_or_create(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let cfg = tls::server_config(&creds).unwrap();
    tokio::spawn(serve::serve_https(server.clone(), listener, cfg, creds.token.clone(), std::future::pending()));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, tls::kubeconfig_yaml(&url, &creds, "test")).unwrap();

    let kubectl = |args: &[&str]| {
        let out = tokio::process::Command::new(kubectl_path())
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .output();
        async move {
            let out = tokio::time::timeout(KUBECTL_TIMEOUT, out).await.expect("kubectl ends").unwrap();
            (
                out.status.success(),
                format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            )
        }
    };
    let (ok, out) = kubectl(&["apply", "--server-side", "-R", "-f", &format!("{REPO}/config")]).await;
    assert!(ok, "kubectl apply -R -f config/ failed:\n{out}");
    // manifests.yaml holds the same objects: applying it again changes nothing and conflicts with nothing.
    let (ok, out) = kubectl(&["apply", "--server-side", "-f", &format!("{REPO}/manifests.yaml")]).await;
    assert!(ok, "kubectl apply -f manifests.yaml failed:\n{out}");

    // Every object is stored as shipped (its spec, rules, webhooks, data).
    let client = server.client();
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    for o in config() {
        let (group, version) = match o["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", o["apiVersion"].as_str().unwrap()),
        };
        let gvk = kube::core::GroupVersionKind::gvk(group, version, o["kind"].as_str().unwrap());
        let (resource, caps) = discovery.resolve_gvk(&gvk).unwrap_or_else(|| panic!("{} is not served", key(&o)));
        let api: kube::Api<kube::core::DynamicObject> = match (caps.scope, o["metadata"]["namespace"].as_str()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => kube::Api::namespaced_with(client.clone(), ns, &resource),
            _ => kube::Api::all_with(client.clone(), &resource),
        };
        let stored = api.get(name(&o)).await.unwrap_or_else(|e| panic!("{}: {e}", key(&o)));
        let stored = serde_json::to_value(stored).unwrap();
        for field in ["spec", "rules", "webhooks", "data", "roleRef", "subjects"] {
            if let Some(shipped) = o.get(field)
                && o["kind"] != "CustomResourceDefinition"
            {
                assert!(contains(&stored[field], shipped), "{}: {field} stored as {}", key(&o), stored[field]);
            }
        }
    }
}

/// Whether `stored` has everything `shipped` has (the server adds defaults).
fn contains(stored: &Value, shipped: &Value) -> bool {
    match (stored, shipped) {
        (Value::Object(s), Value::Object(w)) => w.iter().all(|(k, v)| s.get(k).is_some_and(|sv| contains(sv, v))),
        (Value::Array(s), Value::Array(w)) => s.len() == w.len() && s.iter().zip(w).all(|(a, b)| contains(a, b)),
        // Quantities and ports may come back as strings.
        (Value::String(s), Value::Number(n)) => s == &n.to_string(),
        _ => stored == shipped,
    }
}

// ---------------------------------------------------------------------------------------------
// Helm's template language, as far as charts/jobset-rs uses it
// ---------------------------------------------------------------------------------------------

/// Go's text/template (gtmpl) with Helm's `include` and the Sprig functions the chart's
/// templates use: `default`, `quote`, `toYaml`, `indent`, `nindent`, `trunc`, `trimSuffix`,
/// `contains`, `replace`, `sha256sum`, `kindIs`. A function it lacks fails the render.
mod helm {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::path::Path;

    use gtmpl::{Context, FuncError, Template, Value};

    thread_local! {
        /// The chart's templates (name, text): `include` renders one of them.
        static FILES: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
    }

    /// Every file under `dir`, named `prefix/relative path` as Helm names them.
    pub fn templates(dir: &Path, prefix: &str) -> Vec<(String, String)> {
        let mut out = vec![];
        for f in super::walk_all(dir) {
            let rel = f.strip_prefix(dir).unwrap().display().to_string();
            out.push((format!("{prefix}/{rel}"), std::fs::read_to_string(&f).unwrap()));
        }
        out
    }

    /// Renders template `name` of `files` with `top` as its data.
    pub fn render(files: &[(String, String)], name: &str, top: &serde_json::Value) -> Result<String, String> {
        FILES.with(|f| *f.borrow_mut() = files.to_vec());
        execute(name, to_gtmpl(top))
    }

    fn execute(name: &str, data: Value) -> Result<String, String> {
        let mut t = Template::with_name("<main>");
        t.add_funcs(&[
            ("include", include as gtmpl::Func),
            ("default", default),
            ("quote", quote),
            ("toYaml", to_yaml),
            ("indent", indent),
            ("nindent", nindent),
            ("trunc", trunc),
            ("trimSuffix", trim_suffix),
            ("contains", contains),
            ("replace", replace),
            ("sha256sum", sha256sum),
            ("kindIs", kind_is),
        ]);
        FILES.with(|files| {
            for (n, text) in files.borrow().iter() {
                t.add_template(n.clone(), text.clone()).map_err(|e| format!("{n}: {e}"))?;
            }
            Ok::<_, String>(())
        })?;
        t.parse(format!("{{{{ template {name:?} . }}}}")).map_err(|e| e.to_string())?;
        let out = t.render(&Context::from(data)).map_err(|e| e.to_string())?;
        // Helm prints a missing value as nothing.
        Ok(out.replace("<no value>", ""))
    }

    fn arg<'a>(args: &'a [Value], i: usize, f: &str) -> Result<&'a Value, FuncError> {
        args.get(i).ok_or_else(|| FuncError::Generic(format!("{f}: missing argument {i}")))
    }

    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::NoValue | Value::Nil => String::new(),
            other => other.to_string(),
        }
    }

    fn include(args: &[Value]) -> Result<Value, FuncError> {
        let name = text(arg(args, 0, "include")?);
        let data = arg(args, 1, "include")?.clone();
        execute(&name, data).map(Value::from).map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))
    }

    fn empty(v: &Value) -> bool {
        match v {
            Value::NoValue | Value::Nil => true,
            Value::Bool(b) => !b,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Map(m) | Value::Object(m) => m.is_empty(),
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::Function(_) => false,
        }
    }

    /// `default DEFAULT VALUE`.
    fn default(args: &[Value]) -> Result<Value, FuncError> {
        let d = arg(args, 0, "default")?;
        Ok(match args.get(1) {
            Some(v) if !empty(v) => v.clone(),
            _ => d.clone(),
        })
    }

    fn quote(args: &[Value]) -> Result<Value, FuncError> {
        Ok(Value::from(format!("{:?}", text(arg(args, 0, "quote")?))))
    }

    /// As Helm's: block YAML, keys sorted, no trailing newline.
    fn to_yaml(args: &[Value]) -> Result<Value, FuncError> {
        let v = from_gtmpl(arg(args, 0, "toYaml")?);
        let yaml = serde_saphyr::to_string(&v).map_err(|e| FuncError::Generic(format!("toYaml: {e}")))?;
        Ok(Value::from(yaml.trim_end_matches('\n').to_string()))
    }

    fn indented(args: &[Value], f: &str) -> Result<String, FuncError> {
        let n = arg(args, 0, f)?.to_string().parse::<usize>().map_err(|e| FuncError::Generic(format!("{f}: {e}")))?;
        let pad = " ".repeat(n);
        Ok(format!("{pad}{}", text(arg(args, 1, f)?).replace('\n', &format!("\n{pad}"))))
    }

    fn indent(args: &[Value]) -> Result<Value, FuncError> {
        indented(args, "indent").map(Value::from)
    }

    fn nindent(args: &[Value]) -> Result<Value, FuncError> {
        indented(args, "nindent").map(|s| Value::from(format!("\n{s}")))
    }

    fn trunc(args: &[Value]) -> Result<Value, FuncError> {
        let n = arg(args, 0, "trunc")?
            .to_string()
            .parse::<usize>()
            .map_err(|e| FuncError::Generic(format!("trunc: {e}")))?;
        Ok(Value::from(text(arg(args, 1, "trunc")?).chars().take(n).collect::<String>()))
    }

    fn trim_suffix(args: &[Value]) -> Result<Value, FuncError> {
        let suffix = text(arg(args, 0, "trimSuffix")?);
        let s = text(arg(args, 1, "trimSuffix")?);
        Ok(Value::from(s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_string()))
    }

    /// `contains SUBSTRING STRING`.
    fn contains(args: &[Value]) -> Result<Value, FuncError> {
        Ok(Value::from(text(arg(args, 1, "contains")?).contains(&text(arg(args, 0, "contains")?))))
    }

    /// `replace OLD NEW STRING`.
    fn replace(args: &[Value]) -> Result<Value, FuncError> {
        let s = text(arg(args, 2, "replace")?);
        Ok(Value::from(s.replace(&text(arg(args, 0, "replace")?), &text(arg(args, 1, "replace")?))))
    }

    fn sha256sum(args: &[Value]) -> Result<Value, FuncError> {
        let digest = ring::digest::digest(&ring::digest::SHA256, text(arg(args, 0, "sha256sum")?).as_bytes());
        Ok(Value::from(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>()))
    }

    /// Go's reflect kinds, as Sprig's `kindIs` (a missing or null value is `invalid`).
    fn kind_is(args: &[Value]) -> Result<Value, FuncError> {
        let kind = match arg(args, 1, "kindIs")? {
            Value::NoValue | Value::Nil => "invalid",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "slice",
            Value::Map(_) | Value::Object(_) => "map",
            Value::Number(n) if n.as_i64().is_some() => "int64",
            Value::Number(_) => "float64",
            Value::Function(_) => "func",
        };
        Ok(Value::from(text(arg(args, 0, "kindIs")?) == kind))
    }

    pub fn to_gtmpl(v: &serde_json::Value) -> Value {
        use serde_json::Value as J;
        match v {
            J::Null => Value::Nil,
            J::Bool(b) => Value::from(*b),
            J::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Value::from(u),
                (_, Some(i)) => Value::from(i),
                _ => Value::from(n.as_f64().unwrap_or_default()),
            },
            J::String(s) => Value::from(s.clone()),
            J::Array(a) => Value::Array(a.iter().map(to_gtmpl).collect()),
            J::Object(m) => Value::Map(m.iter().map(|(k, v)| (k.clone(), to_gtmpl(v))).collect::<HashMap<_, _>>()),
        }
    }

    fn from_gtmpl(v: &Value) -> serde_json::Value {
        use serde_json::Value as J;
        match v {
            Value::NoValue | Value::Nil | Value::Function(_) => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::String(s) => J::String(s.clone()),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u.into(),
                (_, Some(i)) => i.into(),
                _ => n.as_f64().map(Into::into).unwrap_or(J::Null),
            },
            Value::Array(a) => J::Array(a.iter().map(from_gtmpl).collect()),
            Value::Map(m) | Value::Object(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), from_gtmpl(v))).collect()),
        }
    }

    #[test]
    fn helm_functions_behave_as_helms() {
        let files = vec![
            ("t/_h.tpl".to_string(), "{{- define \"n\" -}}{{ default \"x\" .a | trunc 3 | trimSuffix \"-\" }}{{- end }}".to_string()),
            (
                "t/a.yaml".to_string(),
                "k: {{ include \"n\" . }}\nm:\n  {{- toYaml .m | nindent 2 }}\nq: {{ .q | quote }}\nz: {{ kindIs \"invalid\" .z }}\nc: {{ contains \"ob\" \"jobset\" }}".to_string(),
            ),
        ];
        let top = serde_json::json!({"a": "ab-cd", "m": {"b": [1, 2], "a": {}}, "q": "1", "z": null});
        let out = render(&files, "t/a.yaml", &top).unwrap();
        assert_eq!(out, "k: ab\nm:\n  a: {}\n  b:\n  - 1\n  - 2\nq: \"1\"\nz: true\nc: true");
        assert!(render(&files, "t/missing.yaml", &top).is_err());
    }
}

/// Every file under `dir`, sorted, whatever its extension.
fn walk_all(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    let mut files = vec![];
    for p in entries {
        if p.is_dir() {
            files.extend(walk_all(&p));
        } else {
            files.push(p);
        }
    }
    files
}
