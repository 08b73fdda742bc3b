//! What the fuzz targets share: the input's header line, and an in-memory API server holding one
//! object of each kind the write targets work on (docs/fuzzing.md).

use std::sync::{Arc, OnceLock};

use jobset_apiserver::ApiServer;
use jobset_apiserver::ops::{self, Ctx, Target};
use jobset_apiserver::resources::ResourceDef;
use serde_json::{Value, json};

/// The namespace every stored object lives in.
pub const NAMESPACE: &str = "default";

/// An input's first line (the target's choices, as words) and the rest (the text fuzzed).
/// Inputs are text: the seeds stay readable, and libFuzzer's dictionary-free mutations still
/// reach the words through its comparison tracing.
pub fn header(data: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(data).ok()?;
    Some(text.split_once('\n').unwrap_or((text, "")))
}

/// The choice among `options` a header names (a word equal to one), else one picked by the
/// header's bytes, so that every input exercises something.
pub fn choose<'a, T>(header: &str, options: &'a [(&str, T)]) -> &'a T {
    let named = header.split_whitespace().find_map(|w| options.iter().find(|(name, _)| *name == w));
    let (_, t) = named.unwrap_or_else(|| {
        let pick = header.bytes().fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b.into()));
        &options[pick % options.len()]
    });
    t
}

/// Prints what an input did when `FUZZ_VERBOSE` is set (running a target on one input, to see
/// what a reproduction or a seed does).
pub fn verbose(what: impl FnOnce() -> String) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("FUZZ_VERBOSE").is_some()) {
        eprintln!("{}", what());
    }
}

/// One stored object: where it is served and its name.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub name: &'static str,
    pub namespaced: bool,
}

pub const POD: Kind = Kind { group: "", version: "v1", plural: "pods", name: "p", namespaced: true };
pub const JOB: Kind = Kind { group: "batch", version: "v1", plural: "jobs", name: "j", namespaced: true };
pub const JOBSET: Kind =
    Kind { group: "jobset.x-k8s.io", version: "v1alpha2", plural: "jobsets", name: "paralleljobs", namespaced: true };
pub const APPWRAPPER: Kind = Kind {
    group: "workload.codeflare.dev",
    version: "v1beta2",
    plural: "appwrappers",
    name: "wrapped-job",
    namespaced: true,
};
pub const CONFIGMAP: Kind = Kind { group: "", version: "v1", plural: "configmaps", name: "c", namespaced: true };
pub const NODE: Kind = Kind { group: "", version: "v1", plural: "nodes", name: "n1", namespaced: false };

/// The kinds of [`server`]'s stored objects, by the word that names each in a header.
pub const KINDS: &[(&str, Kind)] = &[
    ("pod", POD),
    ("job", JOB),
    ("jobset", JOBSET),
    ("appwrapper", APPWRAPPER),
    ("configmap", CONFIGMAP),
    ("node", NODE),
];

impl Kind {
    /// The resource's definition on `server`.
    pub fn def(&self, server: &ApiServer) -> Arc<ResourceDef> {
        server.registry().get(self.group, self.version, self.plural).expect("served by every server")
    }

    /// The namespace of the stored object ("" for a cluster-scoped kind).
    pub fn namespace(&self) -> &'static str {
        if self.namespaced { NAMESPACE } else { "" }
    }
}

/// The manifest of the first object of `kind` in an example file.
fn example(file: &str, text: &str, kind: &str) -> Value {
    let docs = jobset_api::manifest::parse(file, text).expect("the examples parse");
    docs.into_iter().find(|d| d.kind() == kind).expect("the example has the kind").object
}

/// The stored objects, as created: the JobSet and the AppWrapper are the repository's examples.
fn objects() -> Vec<(Kind, Value)> {
    let container = json!({"name": "m", "image": "busybox", "command": ["sleep", "1"]});
    vec![
        (
            POD,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"app": "a", "jobset.sigs.k8s.io/jobset-name": "paralleljobs"},
                    "annotations": {"keep": "1"}, "finalizers": ["example.com/f"]},
                "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [container]}}),
        ),
        (
            JOB,
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": {"app": "a"}},
                "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}),
        ),
        (
            JOBSET,
            example("paralleljobs.yaml", include_str!("../../examples/upstream/simple/paralleljobs.yaml"), "JobSet"),
        ),
        (APPWRAPPER, example("job.yaml", include_str!("../../examples/appwrapper/job.yaml"), "AppWrapper")),
        (
            CONFIGMAP,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"app": "a"}},
                "data": {"k": "v"}}),
        ),
        (
            NODE,
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}, "spec": {}}),
        ),
    ]
}

/// A pod's status as a node agent writes it.
fn pod_status() -> Value {
    json!({"phase": "Running", "podIP": "10.0.0.1",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T00:00:00Z"},
                       {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "m", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
                               "state": {"running": {"startedAt": "2026-11-26T00:00:00Z"}}}]})
}

/// The in-memory server every write target shares (built once per process), holding the
/// objects of [`KINDS`], each written through the server's own admission. Targets write in
/// transactions they roll back ([`rolled_back`]), so it never grows.
pub fn server() -> &'static Arc<ApiServer> {
    static SERVER: OnceLock<Arc<ApiServer>> = OnceLock::new();
    SERVER.get_or_init(|| {
        let mut config = jobset_apiserver::ServerConfig::default();
        // A list or watch at a future resourceVersion waits this long for it: not a hang.
        config.resource_version_wait = std::time::Duration::from_millis(20);
        let server =
            ApiServer::new(Box::new(jobset_apiserver::persist::Memory), jobset_apiserver::Admission::default(), config)
                .expect("an in-memory server");
        let ctx = Ctx::new(&server.admission);
        for (kind, obj) in objects() {
            let def = kind.def(&server);
            server
                .store
                .write(|txn| ops::create(txn, &ctx, &def, kind.namespace(), obj))
                .unwrap_or_else(|e| panic!("storing the {} seed object: {e}", kind.plural));
        }
        let def = POD.def(&server);
        let mut pod = server.store.get(&def, NAMESPACE, POD.name).expect("stored").value();
        pod["status"] = pod_status();
        server
            .store
            .write(|txn| ops::update(txn, &ctx, &def, NAMESPACE, POD.name, pod, Target::Status, None, None))
            .expect("the pod's status is written");
        server
    })
}

/// Runs `f` in a store transaction that is then rolled back: nothing it writes is kept.
pub fn rolled_back<R>(server: &ApiServer, f: impl FnOnce(&mut jobset_apiserver::store::Txn<'_>) -> R) -> R {
    let mut out = None;
    let rollback = server.store.write(|txn| {
        out = Some(f(txn));
        Err::<(), _>(jobset_apiserver::ApiError::internal("rolled back"))
    });
    debug_assert!(rollback.is_err());
    out.expect("the transaction ran")
}
