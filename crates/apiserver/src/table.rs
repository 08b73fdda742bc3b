//! Server-side `meta.k8s.io/v1` Table rendering, as `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
//!
//! The columns and cells follow kube-apiserver:
//! - built-in kinds follow `k8s.io/kubernetes/pkg/printers/internalversion/printers.go`. The
//!   server always renders the wide (priority 1) columns too; kubectl hides them unless `-o wide`;
//! - custom resources follow the apiextensions-apiserver table convertor
//!   (`additionalPrinterColumns`, evaluated with a JSONPath subset; a CRD version without printer
//!   columns gets a single `Age` column);
//! - anything else gets the default table convertor's `Name` / `Created At`.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// Which columns a resource's Table gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Columns {
    /// A built-in printer, by kind (`"Pod"`, `"Job"`, `"Node"`, `"Namespace"`, `"Event"`,
    /// `"Service"`, `"ConfigMap"`, `"Secret"`, `"Lease"`, `"ServiceAccount"`,
    /// `"PersistentVolumeClaim"`, `"ResourceQuota"`, `"CustomResourceDefinition"`, `"RoleBinding"`,
    /// `"ClusterRoleBinding"`, `"PriorityClass"`, `"PodDisruptionBudget"`). An unknown kind (Role and ClusterRole among them, as upstream has
    /// no printer for them) renders like [`Columns::Default`].
    BuiltIn(&'static str),
    /// A custom resource's `additionalPrinterColumns` (the `Name` column is added in front).
    Printer(Vec<PrinterColumn>),
    /// kube-apiserver's default table convertor: `Name`, `Created At`.
    Default,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// The `includeObject` query parameter of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No `object` in the rows.
    None,
    /// `object` is a `meta.k8s.io/v1` `PartialObjectMetadata` with the object's metadata.
    #[default]
    Metadata,
    /// `object` is the whole object.
    Object,
}

/// The built-in kinds [`Columns::BuiltIn`] knows.
const BUILT_IN_KINDS: &[&str] = &[
    "Pod",
    "Job",
    "Node",
    "Namespace",
    "Event",
    "Service",
    "ConfigMap",
    "Secret",
    "Lease",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "ResourceQuota",
    "CustomResourceDefinition",
    "RoleBinding",
    "ClusterRoleBinding",
    "PriorityClass",
    "PodDisruptionBudget",
];

impl Columns {
    /// The built-in printer for `kind`, or [`Columns::Default`] when there is none.
    pub fn for_kind(kind: &str) -> Columns {
        BUILT_IN_KINDS.iter().find(|k| **k == kind).map_or(Columns::Default, |k| Columns::BuiltIn(k))
    }

    /// The columns of one version of a CustomResourceDefinition (a JSON object), as
    /// apiextensions-apiserver serves them: the version's `additionalPrinterColumns` (or the
    /// legacy top-level `spec.additionalPrinterColumns`), or a single `Age` column when there are
    /// none.
    pub fn for_crd_version(crd: &Value, version: &str) -> Columns {
        let version_columns = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|versions| versions.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(version)))
            .and_then(|v| v.get("additionalPrinterColumns"))
            .or_else(|| crd.pointer("/spec/additionalPrinterColumns"))
            .and_then(Value::as_array);
        let columns: Vec<PrinterColumn> = version_columns
            .map(|cols| cols.iter().filter_map(PrinterColumn::from_crd_json).collect())
            .unwrap_or_default();
        if columns.is_empty() {
            return Columns::Printer(vec![PrinterColumn {
                name: "Age".into(),
                type_: "date".into(),
                format: String::new(),
                description: CREATION_TIMESTAMP_DESCRIPTION.into(),
                priority: 0,
                json_path: ".metadata.creationTimestamp".into(),
            }]);
        }
        Columns::Printer(columns)
    }
}

impl PrinterColumn {
    /// Reads an `additionalPrinterColumns` entry (`name`, `type`, `format`, `description`,
    /// `priority`, `jsonPath`). `name` and `jsonPath` are required; `type` defaults to `string`.
    pub fn from_crd_json(v: &Value) -> Option<PrinterColumn> {
        let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        Some(PrinterColumn {
            name: text("name")?,
            type_: text("type").unwrap_or_else(|| "string".into()),
            format: text("format").unwrap_or_default(),
            description: text("description").unwrap_or_default(),
            priority: v.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: text("jsonPath")?,
        })
    }
}

impl IncludeObject {
    /// Parses the `includeObject` query value: `None`, `Metadata`, `Object`; empty means the
    /// default (`Metadata`). Anything else is `None` (the caller answers 400).
    pub fn from_query(value: &str) -> Option<IncludeObject> {
        match value {
            "" | "Metadata" => Some(IncludeObject::Metadata),
            "None" => Some(IncludeObject::None),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// Renders `objects` (full JSON objects of one resource) as a `meta.k8s.io/v1` Table.
/// `metadata.resourceVersion` is left out when `resource_version` is empty.
pub fn table(
    columns: &Columns,
    objects: &[Value],
    include_object: IncludeObject,
    resource_version: &str,
    now: Timestamp,
) -> Value {
    let printer = Renderer::new(columns);
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let (cells, conditions) = printer.row(obj, now);
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            if let Some(conditions) = conditions {
                row.insert("conditions".into(), Value::Array(conditions));
            }
            match include_object {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert("object".into(), partial_object_metadata(obj));
                }
                IncludeObject::Object => {
                    row.insert("object".into(), obj.clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    let mut metadata = Map::new();
    if !resource_version.is_empty() {
        metadata.insert("resourceVersion".into(), resource_version.into());
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": printer.definitions(),
        "rows": rows,
    })
}

/// `meta.k8s.io/v1` `PartialObjectMetadata` carrying `obj`'s metadata.
pub fn partial_object_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// k8s.io/apimachinery/pkg/util/duration.HumanDuration: `6s`, `2m30s`, `15m`, `5h3m`, `20h`,
/// `3d4h`, `120d`, `3y45d`, `9y`; under -1s is `<invalid>`, between -1s and 0 is `0s`.
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{h}h", hours / 24);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{dy}d", hours / 24 / 365);
    }
    format!("{}y", hours / 24 / 365)
}

/// Evaluates a JSONPath (kubectl's dialect, the subset printer columns use) against `root` and
/// returns every match in document order. Supported: `.a.b`, `['a']`, `[0]`, `[-1]`, `[1:3]`,
/// `[*]`, `.*`, `..a`, and filters `[?(@.type=="Completed")]` with `==`, `!=`, `<`, `<=`, `>`,
/// `>=` against string, number, boolean or null literals, or bare `[?(@.a)]` for presence. The
/// path may be wrapped in `{...}` and may start with `$`.
pub fn jsonpath_find<'a>(root: &'a Value, path: &str) -> Result<Vec<&'a Value>, String> {
    let segments = parse_path(path)?;
    Ok(eval(root, &segments))
}

/// The matches of `path` as text, joined by `,` (as `kubectl -o custom-columns` prints them):
/// strings verbatim, other scalars as JSON, objects/arrays as compact JSON. `None` when nothing
/// matches or the path doesn't parse.
pub fn jsonpath_text(root: &Value, path: &str) -> Option<String> {
    let matches = jsonpath_find(root, path).ok()?;
    if matches.is_empty() {
        return None;
    }
    Some(matches.into_iter().map(value_text).collect::<Vec<_>>().join(","))
}

// ---------------------------------------------------------------------------------------------
// Column definitions
// ---------------------------------------------------------------------------------------------

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DESCRIPTION: &str = "Names of each container in the template.";
const IMAGES_DESCRIPTION: &str = "Images referenced by each container in the template.";
const SELECTOR_DESCRIPTION: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

/// (name, type, format, priority, description)
type Def = (&'static str, &'static str, &'static str, i64, &'static str);

const NAME: Def = ("Name", "string", "name", 0, NAME_DESCRIPTION);
const AGE: Def = ("Age", "string", "", 0, CREATION_TIMESTAMP_DESCRIPTION);

fn builtin_definitions(kind: &str) -> Option<Vec<Def>> {
    let s = "string";
    Some(match kind {
        "Pod" => vec![
            NAME,
            ("Ready", s, "", 0, "The aggregate readiness state of this pod for accepting traffic."),
            ("Status", s, "", 0, "The aggregate status of the containers in this pod."),
            (
                "Restarts",
                s,
                "",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            (
                "IP",
                s,
                "",
                1,
                "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            (
                "Node",
                s,
                "",
                1,
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
            ),
            (
                "Nominated Node",
                s,
                "",
                1,
                "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
            ),
            (
                "Readiness Gates",
                s,
                "",
                1,
                "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
            ),
        ],
        "Job" => vec![
            NAME,
            ("Status", s, "", 0, "Status of the job."),
            (
                "Completions",
                s,
                "",
                0,
                "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.",
            ),
            ("Duration", s, "", 0, "Time required to complete the job."),
            AGE,
            ("Containers", s, "", 1, CONTAINERS_DESCRIPTION),
            ("Images", s, "", 1, IMAGES_DESCRIPTION),
            ("Selector", s, "", 1, SELECTOR_DESCRIPTION),
        ],
        "Node" => vec![
            NAME,
            ("Status", s, "", 0, "The status of the node"),
            ("Roles", s, "", 0, "The roles of the node"),
            AGE,
            ("Version", s, "", 0, "Kubelet Version reported by the node."),
            (
                "Internal-IP",
                s,
                "",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses",
            ),
            (
                "External-IP",
                s,
                "",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses",
            ),
            (
                "OS-Image",
                s,
                "",
                1,
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            (
                "Kernel-Version",
                s,
                "",
                1,
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            (
                "Container-Runtime",
                s,
                "",
                1,
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        "Namespace" => vec![NAME, ("Status", s, "", 0, "The status of the namespace"), AGE],
        "Event" => vec![
            ("Last Seen", s, "", 0, "The time at which the most recent occurrence of this event was recorded."),
            ("Type", s, "", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
            (
                "Reason",
                s,
                "",
                0,
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            ),
            ("Object", s, "", 0, "The object that this event is about."),
            (
                "Subobject",
                s,
                "",
                1,
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].",
            ),
            (
                "Source",
                s,
                "",
                1,
                "The component reporting this event. Should be a short machine understandable string.",
            ),
            ("Message", s, "", 0, "A human-readable description of the status of this operation."),
            (
                "First Seen",
                s,
                "",
                1,
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
            ),
            ("Count", s, "", 1, "The number of times this event has occurred."),
            ("Name", s, "name", 1, NAME_DESCRIPTION),
        ],
        "Service" => vec![
            NAME,
            (
                "Type",
                s,
                "",
                0,
                "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer.",
            ),
            ("Cluster-IP", s, "", 0, "clusterIP is the IP address of the service and is usually assigned randomly."),
            (
                "External-IP",
                s,
                "",
                0,
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
            ),
            (
                "Port(s)",
                s,
                "",
                0,
                "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
            ),
            AGE,
            (
                "Selector",
                s,
                "",
                1,
                "Route service traffic to pods with label keys and values matching this selector. More info: https://kubernetes.io/docs/concepts/services-networking/service/",
            ),
        ],
        "ConfigMap" => vec![
            NAME,
            (
                "Data",
                s,
                "",
                0,
                "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
            ),
            AGE,
        ],
        "Secret" => vec![
            NAME,
            (
                "Type",
                s,
                "",
                0,
                "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
            ),
            (
                "Data",
                s,
                "",
                0,
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'.",
            ),
            AGE,
        ],
        "Lease" => vec![
            NAME,
            ("Holder", s, "", 0, "holderIdentity contains the identity of the holder of a current lease."),
            AGE,
        ],
        "ServiceAccount" => vec![
            NAME,
            (
                "Secrets",
                s,
                "",
                0,
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
            ),
            AGE,
        ],
        "PersistentVolumeClaim" => vec![
            NAME,
            ("Status", s, "", 0, "phase represents the current phase of PersistentVolumeClaim."),
            ("Volume", s, "", 0, "volumeName is the binding reference to the PersistentVolume backing this claim."),
            ("Capacity", s, "", 0, "capacity represents the actual resources of the underlying volume."),
            (
                "Access Modes",
                s,
                "",
                0,
                "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1",
            ),
            ("StorageClass", s, "", 0, "StorageClass of the pvc"),
            ("VolumeAttributesClass", s, "", 0, "VolumeAttributesClass of the pvc"),
            AGE,
            (
                "VolumeMode",
                s,
                "",
                1,
                "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.",
            ),
        ],
        "ResourceQuota" => vec![
            NAME,
            AGE,
            ("Request", s, "", 0, "Request represents a minimum amount of cpu/memory that a container may consume."),
            (
                "Limit",
                s,
                "",
                0,
                "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            ),
        ],
        "PodDisruptionBudget" => vec![
            NAME,
            ("Min Available", s, "", 0, "The minimum number of pods that must be available."),
            ("Max Unavailable", s, "", 0, "The maximum number of pods that may be unavailable."),
            ("Allowed Disruptions", "integer", "", 0, "Calculated number of pods that may be disrupted at this time."),
            AGE,
        ],
        "PriorityClass" => vec![
            NAME,
            (
                "Value",
                "integer",
                "",
                0,
                "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.",
            ),
            (
                "Global-Default",
                "boolean",
                "",
                0,
                "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.",
            ),
            AGE,
            (
                "PreemptionPolicy",
                s,
                "",
                0,
                "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.",
            ),
        ],
        "RoleBinding" => binding_definitions(
            "roleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.",
            ["Users in the roleBinding", "Groups in the roleBinding", "ServiceAccounts in the roleBinding"],
        ),
        "ClusterRoleBinding" => binding_definitions(
            "roleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.",
            [
                "Users in the clusterRoleBinding",
                "Groups in the clusterRoleBinding",
                "ServiceAccounts in the clusterRoleBinding",
            ],
        ),
        _ => return None,
    })
}

/// RoleBinding and ClusterRoleBinding: `Name`, `Role`, `Age`, then (wide) `Users`, `Groups`,
/// `ServiceAccounts`.
fn binding_definitions(role: &'static str, subjects: [&'static str; 3]) -> Vec<Def> {
    let s = "string";
    vec![
        NAME,
        ("Role", s, "", 0, role),
        AGE,
        ("Users", s, "", 1, subjects[0]),
        ("Groups", s, "", 1, subjects[1]),
        ("ServiceAccounts", s, "", 1, subjects[2]),
    ]
}

fn default_definitions() -> Vec<Def> {
    vec![NAME, ("Created At", "date", "", 0, CREATION_TIMESTAMP_DESCRIPTION)]
}

fn definition_json(name: &str, type_: &str, format: &str, priority: i64, description: &str) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

// ---------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------

enum Renderer<'c> {
    BuiltIn(&'static str),
    Custom(Vec<(&'c PrinterColumn, Option<Vec<Segment>>)>),
    Default,
}

type Row = (Vec<Value>, Option<Vec<Value>>);

impl<'c> Renderer<'c> {
    fn new(columns: &'c Columns) -> Renderer<'c> {
        match columns {
            Columns::BuiltIn(kind) if builtin_definitions(kind).is_some() => Renderer::BuiltIn(kind),
            Columns::BuiltIn(_) | Columns::Default => Renderer::Default,
            Columns::Printer(cols) => {
                Renderer::Custom(cols.iter().map(|c| (c, parse_path(&c.json_path).ok())).collect())
            }
        }
    }

    fn definitions(&self) -> Vec<Value> {
        let defs = |defs: Vec<Def>| defs.into_iter().map(|(n, t, f, p, d)| definition_json(n, t, f, p, d)).collect();
        match self {
            Renderer::BuiltIn(kind) => defs(builtin_definitions(kind).unwrap_or_else(default_definitions)),
            Renderer::Default => defs(default_definitions()),
            Renderer::Custom(cols) => {
                let mut out = vec![{
                    let (n, t, f, p, d) = NAME;
                    definition_json(n, t, f, p, d)
                }];
                out.extend(cols.iter().map(|(c, _)| {
                    let description = if c.description.is_empty() {
                        format!("Custom resource definition column (in JSONPath format): {}", c.json_path)
                    } else {
                        c.description.clone()
                    };
                    definition_json(&c.name, &c.type_, &c.format, c.priority, &description)
                }));
                out
            }
        }
    }

    fn row(&self, obj: &Value, now: Timestamp) -> Row {
        match self {
            Renderer::BuiltIn(kind) => builtin_row(kind, obj, now),
            Renderer::Default => {
                (vec![name(obj).into(), created_at(ts(obj, &["metadata", "creationTimestamp"])).into()], None)
            }
            Renderer::Custom(cols) => {
                let mut cells = vec![Value::from(name(obj))];
                cells.extend(cols.iter().map(|(c, segments)| {
                    let Some(segments) = segments else {
                        return Value::Null;
                    };
                    match eval(obj, segments).first() {
                        Some(v) => printer_cell(&c.type_, v, now),
                        None => Value::Null,
                    }
                }));
                (cells, None)
            }
        }
    }
}

/// apiextensions-apiserver's tableconvertor: only the first match counts; `string` columns print
/// it as text, the others convert it (cellForJSONValue), `date` becomes an age.
fn printer_cell(type_: &str, v: &Value, now: Timestamp) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    match (type_, v) {
        ("string", v) => value_text(v).into(),
        ("integer", Value::Number(n)) => {
            n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).map_or(Value::Null, Value::from)
        }
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(b)) => (*b).into(),
        ("date", Value::String(s)) => {
            if s.is_empty() {
                return "<unknown>".into();
            }
            match s.parse::<Timestamp>() {
                Ok(t) if is_zero_time(t) => "<unknown>".into(),
                Ok(t) => human_duration(now.duration_since(t)).into(),
                Err(_) => "<invalid>".into(),
            }
        }
        _ => Value::Null,
    }
}

fn builtin_row(kind: &str, obj: &Value, now: Timestamp) -> Row {
    match kind {
        "Pod" => pod_row(obj, now),
        "Job" => (job_row(obj, now), None),
        "Node" => (node_row(obj, now), None),
        "Namespace" => {
            let phase = match text(obj, &["status", "phase"]) {
                "" if has(obj, &["metadata", "deletionTimestamp"]) => "Terminating",
                "" => "Active",
                phase => phase,
            };
            (vec![name(obj).into(), phase.into(), age(obj, now).into()], None)
        }
        "Event" => (event_row(obj, now), None),
        "Service" => (service_row(obj, now), None),
        "ConfigMap" => {
            let count = object_len(obj, "data") + object_len(obj, "binaryData");
            (vec![name(obj).into(), count.into(), age(obj, now).into()], None)
        }
        "Secret" => {
            let mut keys: Vec<&String> = ["data", "stringData"]
                .iter()
                .filter_map(|f| obj.get(*f).and_then(Value::as_object))
                .flat_map(|m| m.keys())
                .collect();
            keys.sort();
            keys.dedup();
            let type_ = match text(obj, &["type"]) {
                "" => "Opaque",
                t => t,
            };
            (vec![name(obj).into(), type_.into(), keys.len().into(), age(obj, now).into()], None)
        }
        "Lease" => (vec![name(obj).into(), text(obj, &["spec", "holderIdentity"]).into(), age(obj, now).into()], None),
        "ServiceAccount" => (vec![name(obj).into(), array(obj, &["secrets"]).len().into(), age(obj, now).into()], None),
        "PersistentVolumeClaim" => (pvc_row(obj, now), None),
        "ResourceQuota" => (resource_quota_row(obj, now), None),
        "RoleBinding" | "ClusterRoleBinding" => (binding_row(obj, now), None),
        // `printPriorityClass`.
        "PriorityClass" => (
            vec![
                name(obj).into(),
                int(obj, &["value"]).unwrap_or(0).into(),
                flag(obj, "globalDefault").into(),
                age(obj, now).into(),
                text(obj, &["preemptionPolicy"]).into(),
            ],
            None,
        ),
        "PodDisruptionBudget" => (pdb_row(obj, now), None),
        _ => (vec![name(obj).into(), created_at(ts(obj, &["metadata", "creationTimestamp"])).into()], None),
    }
}

/// `printPodDisruptionBudget`: each budget as written (`N/A` when unset), and the disruptions
/// the status allows.
fn pdb_row(pdb: &Value, now: Timestamp) -> Vec<Value> {
    let budget = |f: &str| match pdb.pointer(&format!("/spec/{f}")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "N/A".to_string(),
    };
    let allowed = pdb.pointer("/status/disruptionsAllowed").and_then(Value::as_i64).unwrap_or(0);
    vec![
        name(pdb).into(),
        budget("minAvailable").into(),
        budget("maxUnavailable").into(),
        allowed.into(),
        age(pdb, now).into(),
    ]
}

fn pod_row(pod: &Value, now: Timestamp) -> Row {
    let init_specs = array(pod, &["spec", "initContainers"]);
    let is_sidecar = |container_name: &str| {
        init_specs.iter().any(|c| text(c, &["name"]) == container_name && text(c, &["restartPolicy"]) == "Always")
    };
    let total = array(pod, &["spec", "containers"]).len()
        + init_specs.iter().filter(|c| text(c, &["restartPolicy"]) == "Always").count();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_sidecar_restart: Option<Timestamp> = None;

    let phase = text(pod, &["status", "phase"]);
    let status_reason = text(pod, &["status", "reason"]);
    let mut reason = if status_reason.is_empty() { phase } else { status_reason }.to_string();
    let conditions = array(pod, &["status", "conditions"]);
    if conditions.iter().any(|c| text(c, &["type"]) == "PodScheduled" && text(c, &["reason"]) == "SchedulingGated") {
        reason = "SchedulingGated".into();
    }
    let row_conditions = match phase {
        "Succeeded" => Some(vec![json!({
            "type": "Completed", "status": "True", "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        })]),
        "Failed" => Some(vec![json!({
            "type": "Completed", "status": "True", "reason": "Failed",
            "message": "The pod failed.",
        })]),
        _ => None,
    };

    let later = |acc: &mut Option<Timestamp>, cs: &Value| {
        if let Some(t) = ts(cs, &["lastState", "terminated", "finishedAt"])
            && acc.is_none_or(|a| a < t)
        {
            *acc = Some(t);
        }
    };

    let mut initializing = false;
    for (i, cs) in array(pod, &["status", "initContainerStatuses"]).iter().enumerate() {
        let count = int(cs, &["restartCount"]).unwrap_or(0);
        restarts += count;
        later(&mut last_restart, cs);
        let sidecar = is_sidecar(text(cs, &["name"]));
        if sidecar {
            sidecar_restarts += count;
            later(&mut last_sidecar_restart, cs);
        }
        let terminated = get(cs, &["state", "terminated"]);
        let waiting_reason = text(cs, &["state", "waiting", "reason"]);
        if let Some(t) = terminated
            && int(t, &["exitCode"]).unwrap_or(0) == 0
        {
            continue;
        }
        if sidecar && get(cs, &["started"]).and_then(Value::as_bool) == Some(true) {
            if flag(cs, "ready") {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(t) = terminated {
            match text(t, &["reason"]) {
                "" => match int(t, &["signal"]).unwrap_or(0) {
                    0 => format!("Init:ExitCode:{}", int(t, &["exitCode"]).unwrap_or(0)),
                    signal => format!("Init:Signal:{signal}"),
                },
                r => format!("Init:{r}"),
            }
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{}/{}", i, init_specs.len())
        };
        initializing = true;
        break;
    }

    let condition_true =
        |type_: &str| conditions.iter().any(|c| text(c, &["type"]) == type_ && text(c, &["status"]) == "True");
    if !initializing || condition_true("Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for cs in array(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int(cs, &["restartCount"]).unwrap_or(0);
            later(&mut last_restart, cs);
            let waiting_reason = text(cs, &["state", "waiting", "reason"]);
            let terminated = get(cs, &["state", "terminated"]);
            if !waiting_reason.is_empty() {
                reason = waiting_reason.into();
            } else if let Some(t) = terminated {
                reason = match text(t, &["reason"]) {
                    "" => match int(t, &["signal"]).unwrap_or(0) {
                        0 => format!("ExitCode:{}", int(t, &["exitCode"]).unwrap_or(0)),
                        signal => format!("Signal:{signal}"),
                    },
                    r => r.to_string(),
                };
            } else if flag(cs, "ready") && has(cs, &["state", "running"]) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true("Ready") { "Running" } else { "NotReady" }.into();
        }
    }

    let deleting = has(pod, &["metadata", "deletionTimestamp"]);
    if deleting && status_reason == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let pod_ip = array(pod, &["status", "podIPs"])
        .first()
        .map(|ip| text(ip, &["ip"]))
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| text(pod, &["status", "podIP"]));
    let gates = array(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|g| {
                let type_ = text(g, &["conditionType"]);
                conditions.iter().find(|c| text(c, &["type"]) == type_).is_some_and(|c| text(c, &["status"]) == "True")
            })
            .count();
        format!("{true_conditions}/{}", gates.len())
    };

    (
        vec![
            name(pod).into(),
            format!("{ready}/{total}").into(),
            reason.into(),
            restarts_cell.into(),
            age(pod, now).into(),
            or_none(pod_ip).into(),
            or_none(text(pod, &["spec", "nodeName"])).into(),
            or_none(text(pod, &["status", "nominatedNodeName"])).into(),
            readiness_gates.into(),
        ],
        row_conditions,
    )
}

fn job_row(job: &Value, now: Timestamp) -> Vec<Value> {
    let succeeded = int(job, &["status", "succeeded"]).unwrap_or(0);
    let completions = match int(job, &["spec", "completions"]) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match int(job, &["spec", "parallelism"]).unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = ts(job, &["status", "startTime"]);
    let completion = ts(job, &["status", "completionTime"]);
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.duration_since(start)),
        (Some(start), Some(end)) => human_duration(end.duration_since(start)),
    };
    let conditions = array(job, &["status", "conditions"]);
    let is = |type_: &str| conditions.iter().any(|c| text(c, &["type"]) == type_ && text(c, &["status"]) == "True");
    let status = if is("Complete") {
        "Complete"
    } else if is("Failed") {
        "Failed"
    } else if has(job, &["metadata", "deletionTimestamp"]) {
        "Terminating"
    } else if is("Suspended") {
        "Suspended"
    } else if is("FailureTarget") {
        "FailureTarget"
    } else if is("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let (names, images) = container_cells(array(job, &["spec", "template", "spec", "containers"]));
    vec![
        name(job).into(),
        status.into(),
        completions.into(),
        duration.into(),
        age(job, now).into(),
        names.into(),
        images.into(),
        format_label_selector(get(job, &["spec", "selector"])).into(),
    ]
}

fn node_row(node: &Value, now: Timestamp) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    // NodeAllConditions is just Ready; the last condition of a type wins, as in a Go map.
    if let Some(ready) = array(node, &["status", "conditions"]).iter().rev().find(|c| text(c, &["type"]) == "Ready") {
        status.push(if text(ready, &["status"]) == "True" { "Ready" } else { "NotReady" }.into());
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if flag(get(node, &["spec"]).unwrap_or(&Value::Null), "unschedulable") {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<&str> = Vec::new();
    if let Some(labels) = get(node, &["metadata", "labels"]).and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role);
                }
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.push(v);
            }
        }
    }
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() { "<none>".to_string() } else { roles.join(",") };
    let address = |type_: &str| {
        array(node, &["status", "addresses"])
            .iter()
            .find(|a| text(a, &["type"]) == type_)
            .map_or("<none>", |a| text(a, &["address"]))
            .to_string()
    };
    let info = |field: &str| match text(node, &["status", "nodeInfo", field]) {
        "" => "<unknown>".to_string(),
        v => v.to_string(),
    };
    vec![
        name(node).into(),
        status.join(",").into(),
        roles.into(),
        age(node, now).into(),
        text(node, &["status", "nodeInfo", "kubeletVersion"]).into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        info("osImage").into(),
        info("kernelVersion").into(),
        info("containerRuntimeVersion").into(),
    ]
}

/// core/v1 Event (events.k8s.io/v1 field names are accepted as fall-backs).
fn event_row(ev: &Value, now: Timestamp) -> Vec<Value> {
    let first = ts(ev, &["firstTimestamp"]).or_else(|| ts(ev, &["deprecatedFirstTimestamp"]));
    let first_seen = match first {
        Some(t) => since(Some(t), now),
        None => since(ts(ev, &["eventTime"]), now),
    };
    let last = ts(ev, &["lastTimestamp"]).or_else(|| ts(ev, &["deprecatedLastTimestamp"]));
    let mut last_seen = match last {
        Some(t) => since(Some(t), now),
        None => first_seen.clone(),
    };
    let mut count = int(ev, &["count"]).or_else(|| int(ev, &["deprecatedCount"])).unwrap_or(0);
    if let Some(series) = get(ev, &["series"]).filter(|s| s.is_object()) {
        last_seen = since(ts(series, &["lastObservedTime"]), now);
        count = int(series, &["count"]).unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = get(ev, &["involvedObject"]).or_else(|| get(ev, &["regarding"])).unwrap_or(&Value::Null);
    let kind = text(involved, &["kind"]).to_lowercase();
    let target = match text(involved, &["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &'_ str, b: &'_ str| {
        if a.is_empty() { b.to_string() } else { a.to_string() }
    };
    let component = first_non_empty(
        text(ev, &["source", "component"]),
        &first_non_empty(text(ev, &["reportingController"]), text(ev, &["deprecatedSource", "component"])),
    );
    let host = first_non_empty(
        text(ev, &["source", "host"]),
        &first_non_empty(text(ev, &["reportingInstance"]), text(ev, &["deprecatedSource", "host"])),
    );
    let source = if host.is_empty() { component } else { format!("{component}, {host}") };
    let message = first_non_empty(text(ev, &["message"]), text(ev, &["note"]));
    vec![
        last_seen.into(),
        text(ev, &["type"]).into(),
        text(ev, &["reason"]).into(),
        target.into(),
        text(involved, &["fieldPath"]).into(),
        source.into(),
        message.trim().into(),
        first_seen.into(),
        count.into(),
        name(ev).into(),
    ]
}

fn service_row(svc: &Value, now: Timestamp) -> Vec<Value> {
    let type_ = match text(svc, &["spec", "type"]) {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = array(svc, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .or_else(|| get(svc, &["spec", "clusterIP"]).and_then(Value::as_str))
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let external_ips: Vec<&str> = array(svc, &["spec", "externalIPs"]).iter().filter_map(Value::as_str).collect();
    let external_ip = match type_ {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ips: Vec<&str> = array(svc, &["status", "loadBalancer", "ingress"])
                .iter()
                .filter_map(|i| [text(i, &["ip"]), text(i, &["hostname"])].into_iter().find(|s| !s.is_empty()))
                .collect();
            ips.extend(external_ips);
            if ips.is_empty() { "<pending>".to_string() } else { ips.join(",") }
        }
        "ExternalName" => text(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = array(svc, &["spec", "ports"])
        .iter()
        .map(|p| {
            let port = int(p, &["port"]).unwrap_or(0);
            let protocol = match text(p, &["protocol"]) {
                "" => "TCP",
                proto => proto,
            };
            match int(p, &["nodePort"]).unwrap_or(0) {
                node_port if node_port > 0 => format!("{port}:{node_port}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() { "<none>".to_string() } else { ports.join(",") };
    let selector = format_labels(get(svc, &["spec", "selector"]));
    vec![
        name(svc).into(),
        type_.into(),
        cluster_ip.into(),
        external_ip.into(),
        ports.into(),
        age(svc, now).into(),
        selector.into(),
    ]
}

/// `printRoleBinding` / `printClusterRoleBinding`: the role as `<Kind>/<name>`, and the subjects
/// as `rbac.SubjectsStrings` sorts them (service accounts as `<namespace>/<name>`; other kinds
/// are not shown), each list joined with `, `.
fn binding_row(b: &Value, now: Timestamp) -> Vec<Value> {
    let role = format!("{}/{}", text(b, &["roleRef", "kind"]), text(b, &["roleRef", "name"]));
    let (mut users, mut groups, mut sas) = (vec![], vec![], vec![]);
    for s in array(b, &["subjects"]) {
        let name = text(s, &["name"]);
        match text(s, &["kind"]) {
            "ServiceAccount" => sas.push(format!("{}/{name}", text(s, &["namespace"]))),
            "User" => users.push(name.to_string()),
            "Group" => groups.push(name.to_string()),
            _ => {}
        }
    }
    vec![
        name(b).into(),
        role.into(),
        age(b, now).into(),
        users.join(", ").into(),
        groups.join(", ").into(),
        sas.join(", ").into(),
    ]
}

/// `printResourceQuota`: `<resource>: <used>/<hard>` for each enforced resource in name order,
/// `limits.*` under Limit and the rest under Request.
fn resource_quota_row(quota: &Value, now: Timestamp) -> Vec<Value> {
    let quantity = |v: Option<&Value>| -> String {
        let text = match v {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return "0".into(),
        };
        jobset_api::quantity::Quantity::parse(&text).map_or(text, |q| q.to_string())
    };
    let hard = get(quota, &["status", "hard"]).and_then(Value::as_object);
    let (mut request, mut limit) = (vec![], vec![]);
    let mut names: Vec<&String> = hard.map(|h| h.keys().collect()).unwrap_or_default();
    names.sort();
    for resource in names {
        let used = quantity(get(quota, &["status", "used", resource.as_str()]));
        let cell = format!("{resource}: {used}/{}", quantity(hard.and_then(|h| h.get(resource))));
        // A name whose first dot-separated piece is `limits` goes under Limit.
        let pieces: Vec<&str> = resource.split('.').collect();
        if pieces.len() > 1 && pieces[0] == "limits" { limit.push(cell) } else { request.push(cell) }
    }
    vec![name(quota).into(), age(quota, now).into(), request.join(", ").into(), limit.join(", ").into()]
}

fn pvc_row(pvc: &Value, now: Timestamp) -> Vec<Value> {
    let phase =
        if has(pvc, &["metadata", "deletionTimestamp"]) { "Terminating" } else { text(pvc, &["status", "phase"]) };
    let volume = text(pvc, &["spec", "volumeName"]);
    let (capacity, access_modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        let capacity = match get(pvc, &["status", "capacity", "storage"]) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => "0".to_string(),
        };
        let modes: Vec<&str> = array(pvc, &["status", "accessModes"]).iter().filter_map(Value::as_str).collect();
        let short: Vec<&str> =
            [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
                .iter()
                .filter(|(long, _)| modes.contains(long))
                .map(|(_, s)| *s)
                .collect();
        (capacity, short.join(","))
    };
    let class = match text(pvc, &["metadata", "annotations", "volume.beta.kubernetes.io/storage-class"]) {
        "" => text(pvc, &["spec", "storageClassName"]),
        c => c,
    };
    let unset = |v: &str| {
        if v.is_empty() { "<unset>".to_string() } else { v.to_string() }
    };
    vec![
        name(pvc).into(),
        phase.into(),
        volume.into(),
        capacity.into(),
        access_modes.into(),
        class.into(),
        unset(text(pvc, &["spec", "volumeAttributesClassName"])).into(),
        age(pvc, now).into(),
        unset(text(pvc, &["spec", "volumeMode"])).into(),
    ]
}

fn container_cells(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| text(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| text(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// metav1.FormatLabelSelector: requirements sorted by key, `<none>` when empty or absent.
fn format_label_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return "<none>".into();
    };
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            requirements.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for expr in array(selector, &["matchExpressions"]) {
        let key = text(expr, &["key"]);
        let mut values: Vec<&str> = array(expr, &["values"]).iter().filter_map(Value::as_str).collect();
        values.sort();
        let rendered = match text(expr, &["operator"]) {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<error>".into(),
        };
        requirements.push((key.to_string(), rendered));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    let out: Vec<String> = requirements.into_iter().map(|(_, r)| r).collect();
    if out.is_empty() { "<none>".into() } else { out.join(",") }
}

/// labels.FormatLabels: `k=v` sorted by key, `<none>` when empty.
fn format_labels(labels: Option<&Value>) -> String {
    let Some(labels) = labels.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return "<none>".into();
    };
    let mut pairs: Vec<String> =
        labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
    pairs.sort();
    pairs.join(",")
}

// ---------------------------------------------------------------------------------------------
// Field helpers
// ---------------------------------------------------------------------------------------------

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| v.get(*key))
}

fn has(v: &Value, path: &[&str]) -> bool {
    get(v, path).is_some_and(|v| !v.is_null())
}

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path).and_then(Value::as_str).unwrap_or("")
}

fn int(v: &Value, path: &[&str]) -> Option<i64> {
    let v = get(v, path)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn array<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn object_len(v: &Value, key: &str) -> usize {
    v.get(key).and_then(Value::as_object).map_or(0, Map::len)
}

fn name(obj: &Value) -> &str {
    text(obj, &["metadata", "name"])
}

/// Go's zero `time.Time`, which `IsZero` reports.
fn is_zero_time(t: Timestamp) -> bool {
    t.as_second() == -62_135_596_800 && t.subsec_nanosecond() == 0
}

/// A timestamp field; absent, unparseable and Go's zero time are all `None`.
fn ts(v: &Value, path: &[&str]) -> Option<Timestamp> {
    get(v, path).and_then(Value::as_str).and_then(|s| s.parse::<Timestamp>().ok()).filter(|t| !is_zero_time(*t))
}

/// translateTimestampSince.
fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".into(),
    }
}

fn age(obj: &Value, now: Timestamp) -> String {
    since(ts(obj, &["metadata", "creationTimestamp"]), now)
}

/// The default table convertor's `Created At`: RFC 3339 in UTC, seconds precision.
fn created_at(t: Option<Timestamp>) -> String {
    match t {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => "0001-01-01T00:00:00Z".into(),
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() { "<none>".into() } else { s.into() }
}

/// A JSONPath result as text: strings verbatim, the rest as compact JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// JSONPath subset
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Field(String),
    Wildcard,
    Index(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    Filter(Filter),
    /// `..`: the node and all its descendants; the next segment applies to each.
    Descendants,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Path(Vec<Segment>),
    Literal(Value),
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Exists(Vec<Segment>),
    Compare(Operand, String, Operand),
}

fn parse_path(path: &str) -> Result<Vec<Segment>, String> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    let p = p.strip_prefix('$').unwrap_or(p);
    let segments = parse_segments(p, false)?;
    if segments.is_empty() && !p.is_empty() {
        return Err(format!("invalid JSONPath {path:?}"));
    }
    Ok(segments)
}

/// Parses `.a[0]..b[*]` style segments. `relative` paths (inside filters, after `@`) may also
/// start with a bare field name.
fn parse_segments(s: &str, relative: bool) -> Result<Vec<Segment>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let read_name = |i: &mut usize| -> String {
        let mut name = String::new();
        while *i < chars.len() {
            let c = chars[*i];
            if c == '\\' && *i + 1 < chars.len() {
                name.push(chars[*i + 1]);
                *i += 2;
                continue;
            }
            if c == '.' || c == '[' || c.is_whitespace() {
                break;
            }
            name.push(c);
            *i += 1;
        }
        name
    };
    if relative && i < chars.len() && chars[i] != '.' && chars[i] != '[' {
        let name = read_name(&mut i);
        out.push(Segment::Field(name));
    }
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if i < chars.len() && chars[i] == '.' {
                    i += 1;
                    out.push(Segment::Descendants);
                    if i < chars.len() && chars[i] == '[' {
                        continue;
                    }
                }
                if i < chars.len() && chars[i] == '*' {
                    i += 1;
                    out.push(Segment::Wildcard);
                    continue;
                }
                let name = read_name(&mut i);
                if name.is_empty() {
                    if i >= chars.len() && out.is_empty() {
                        // `.` alone is the root.
                        continue;
                    }
                    return Err(format!("empty field name in JSONPath {s:?}"));
                }
                out.push(Segment::Field(name));
            }
            '[' => {
                let start = i + 1;
                let mut depth = 0usize;
                let mut quote: Option<char> = None;
                let mut j = start;
                while j < chars.len() {
                    let c = chars[j];
                    match quote {
                        Some(q) if c == q => quote = None,
                        Some(_) => {}
                        None => match c {
                            '\'' | '"' => quote = Some(c),
                            '(' | '[' => depth += 1,
                            ')' => depth = depth.saturating_sub(1),
                            ']' if depth == 0 => break,
                            ']' => depth -= 1,
                            _ => {}
                        },
                    }
                    j += 1;
                }
                if j >= chars.len() {
                    return Err(format!("unterminated [ in JSONPath {s:?}"));
                }
                let inner: String = chars[start..j].iter().collect();
                out.push(parse_bracket(inner.trim())?);
                i = j + 1;
            }
            c if c.is_whitespace() => i += 1,
            c => return Err(format!("unexpected {c:?} in JSONPath {s:?}")),
        }
    }
    Ok(out)
}

fn parse_bracket(inner: &str) -> Result<Segment, String> {
    if inner == "*" {
        return Ok(Segment::Wildcard);
    }
    if let Some(filter) = inner.strip_prefix('?') {
        let filter = filter.trim();
        let body = filter
            .strip_prefix('(')
            .and_then(|f| f.strip_suffix(')'))
            .ok_or_else(|| format!("invalid filter {inner:?}"))?;
        return Ok(Segment::Filter(parse_filter(body.trim())?));
    }
    if let Some(name) = unquote(inner) {
        return Ok(Segment::Field(name));
    }
    if inner.contains(':') {
        let parts: Vec<&str> = inner.split(':').collect();
        if parts.len() > 3 {
            return Err(format!("invalid slice {inner:?}"));
        }
        let num = |s: Option<&&str>| -> Result<Option<i64>, String> {
            match s.map(|s| s.trim()) {
                None | Some("") => Ok(None),
                Some(n) => n.parse().map(Some).map_err(|_| format!("invalid slice {inner:?}")),
            }
        };
        return Ok(Segment::Slice(num(parts.first())?, num(parts.get(1))?, num(parts.get(2))?));
    }
    inner.parse::<i64>().map(Segment::Index).map_err(|_| format!("invalid array index {inner:?}"))
}

fn unquote(s: &str) -> Option<String> {
    let mut chars = s.chars();
    let q = chars.next()?;
    if (q == '\'' || q == '"') && s.len() >= 2 && s.ends_with(q) {
        return Some(s[1..s.len() - 1].to_string());
    }
    None
}

fn parse_filter(body: &str) -> Result<Filter, String> {
    // Find a comparison operator outside quotes.
    let chars: Vec<char> = body.chars().collect();
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                } else if matches!(c, '=' | '!' | '<' | '>') {
                    let two = chars.get(i + 1) == Some(&'=');
                    let op: String = if two { format!("{c}=") } else { c.to_string() };
                    if op == "=" || op == "!" {
                        return Err(format!("invalid filter operator in {body:?}"));
                    }
                    let left: String = chars[..i].iter().collect();
                    let right: String = chars[i + op.len()..].iter().collect();
                    return Ok(Filter::Compare(parse_operand(left.trim())?, op, parse_operand(right.trim())?));
                }
            }
        }
        i += 1;
    }
    match parse_operand(body)? {
        Operand::Path(p) => Ok(Filter::Exists(p)),
        Operand::Literal(_) => Err(format!("invalid filter {body:?}")),
    }
}

fn parse_operand(s: &str) -> Result<Operand, String> {
    if let Some(rest) = s.strip_prefix('@') {
        return Ok(Operand::Path(parse_segments(rest, false)?));
    }
    if let Some(text) = unquote(s) {
        return Ok(Operand::Literal(Value::String(text)));
    }
    match s {
        "true" => return Ok(Operand::Literal(Value::Bool(true))),
        "false" => return Ok(Operand::Literal(Value::Bool(false))),
        "null" | "nil" => return Ok(Operand::Literal(Value::Null)),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return Ok(Operand::Literal(i.into()));
    }
    if let Ok(f) = s.parse::<f64>() {
        return Ok(Operand::Literal(f.into()));
    }
    Err(format!("invalid filter operand {s:?}"))
}

fn eval<'a>(root: &'a Value, segments: &[Segment]) -> Vec<&'a Value> {
    let mut current = vec![root];
    for segment in segments {
        let mut next = Vec::new();
        for v in current {
            apply(v, segment, &mut next);
        }
        current = next;
        if current.is_empty() {
            break;
        }
    }
    current
}

fn apply<'a>(v: &'a Value, segment: &Segment, out: &mut Vec<&'a Value>) {
    match segment {
        Segment::Field(name) => {
            if let Some(found) = v.as_object().and_then(|m| m.get(name)) {
                out.push(found);
            }
        }
        Segment::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Segment::Index(i) => {
            if let Some(a) = v.as_array() {
                let len = a.len() as i64;
                let idx = if *i < 0 { len + i } else { *i };
                if (0..len).contains(&idx) {
                    out.push(&a[idx as usize]);
                }
            }
        }
        Segment::Slice(start, end, step) => {
            if let Some(a) = v.as_array() {
                let len = a.len() as i64;
                let clamp = |x: i64| if x < 0 { (len + x).max(0) } else { x.min(len) };
                let start = start.map_or(0, clamp);
                let end = end.map_or(len, clamp);
                let step = step.unwrap_or(1).max(1);
                let mut k = start;
                while k < end {
                    out.push(&a[k as usize]);
                    k += step;
                }
            }
        }
        Segment::Filter(filter) => {
            let items: Box<dyn Iterator<Item = &'a Value>> = match v {
                Value::Array(a) => Box::new(a.iter()),
                Value::Object(m) => Box::new(m.values()),
                _ => return,
            };
            out.extend(items.filter(|item| filter_matches(item, filter)));
        }
        Segment::Descendants => collect_descendants(v, out),
    }
}

fn collect_descendants<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(v);
    match v {
        Value::Object(m) => m.values().for_each(|c| collect_descendants(c, out)),
        Value::Array(a) => a.iter().for_each(|c| collect_descendants(c, out)),
        _ => {}
    }
}

fn filter_matches(item: &Value, filter: &Filter) -> bool {
    match filter {
        Filter::Exists(path) => !eval(item, path).is_empty(),
        Filter::Compare(left, op, right) => {
            let resolve = |o: &Operand| -> Option<Value> {
                match o {
                    Operand::Literal(v) => Some(v.clone()),
                    Operand::Path(p) => eval(item, p).first().map(|v| (*v).clone()),
                }
            };
            let (Some(l), Some(r)) = (resolve(left), resolve(right)) else {
                return false;
            };
            compare(&l, op, &r)
        }
    }
}

fn compare(l: &Value, op: &str, r: &Value) -> bool {
    let ordering = match (l, r) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().partial_cmp(&b.as_f64()),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (a, b) if a == b => Some(std::cmp::Ordering::Equal),
        _ => None,
    };
    use std::cmp::Ordering::*;
    match op {
        "==" => ordering == Some(Equal),
        "!=" => ordering != Some(Equal),
        "<" => ordering == Some(Less),
        "<=" => matches!(ordering, Some(Less | Equal)),
        ">" => ordering == Some(Greater),
        ">=" => matches!(ordering, Some(Greater | Equal)),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2025-01-01T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    /// A timestamp `secs` seconds before [`NOW`].
    fn ago(secs: i64) -> String {
        (now() - SignedDuration::from_secs(secs)).to_string()
    }

    fn cells(columns: &Columns, obj: Value) -> Vec<Value> {
        let t = table(columns, &[obj], IncludeObject::None, "1", now());
        t["rows"][0]["cells"].as_array().unwrap().clone()
    }

    fn column_names(columns: &Columns) -> Vec<String> {
        let t = table(columns, &[], IncludeObject::None, "1", now());
        t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
    }

    fn pod(status: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "creationTimestamp": ago(60)},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": status,
        })
    }

    fn pod_status_cell(p: Value) -> String {
        cells(&Columns::BuiltIn("Pod"), p)[2].as_str().unwrap().to_string()
    }

    // --- human_duration ---------------------------------------------------------------------

    #[test]
    fn human_duration_matches_apimachinery_boundaries() {
        let cases: &[(i64, &str)] = &[
            (-3, "<invalid>"),
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (6, "6s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 3 * 60, "5h3m"),
            (8 * 3600 - 1, "7h59m"),
            (8 * 3600, "8h"),
            (48 * 3600 - 1, "47h"),
            (48 * 3600, "2d"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (8 * 86400 - 1, "7d23h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400 - 1, "729d"),
            (2 * 365 * 86400, "2y"),
            (3 * 365 * 86400 + 45 * 86400, "3y45d"),
            (8 * 365 * 86400 - 1, "7y364d"),
            (8 * 365 * 86400, "8y"),
            (20 * 365 * 86400, "20y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(SignedDuration::from_secs(*secs)), *want, "{secs}s");
        }
    }

    #[test]
    fn human_duration_truncates_fractional_negative_seconds_toward_zero() {
        assert_eq!(human_duration(SignedDuration::from_millis(-1500)), "0s");
        assert_eq!(human_duration(SignedDuration::from_millis(-2000)), "<invalid>");
        assert_eq!(human_duration(SignedDuration::from_millis(1999)), "1s");
    }

    // --- table shape / includeObject --------------------------------------------------------

    fn sample_pod() -> Value {
        pod(json!({"phase": "Running"}))
    }

    #[test]
    fn table_has_kind_api_version_resource_version_and_rows() {
        let t = table(&Columns::BuiltIn("Pod"), &[sample_pod()], IncludeObject::Metadata, "114", now());
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(t["metadata"], json!({"resourceVersion": "114"}));
        assert_eq!(t["rows"].as_array().unwrap().len(), 1);
        let name = &t["columnDefinitions"][0];
        assert_eq!(name["name"], "Name");
        assert_eq!(name["type"], "string");
        assert_eq!(name["format"], "name");
        assert_eq!(name["priority"], 0);
        assert!(name["description"].as_str().unwrap().starts_with("Name must be unique"));
    }

    #[test]
    fn empty_resource_version_is_left_out_and_no_objects_give_empty_rows() {
        let t = table(&Columns::Default, &[], IncludeObject::Metadata, "", now());
        assert_eq!(t["metadata"], json!({}));
        assert_eq!(t["rows"], json!([]));
    }

    #[test]
    fn include_object_metadata_wraps_metadata_in_partial_object_metadata() {
        let p = sample_pod();
        let t = table(&Columns::BuiltIn("Pod"), std::slice::from_ref(&p), IncludeObject::Metadata, "1", now());
        assert_eq!(
            t["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]})
        );
    }

    #[test]
    fn include_object_object_embeds_the_full_object() {
        let p = sample_pod();
        let t = table(&Columns::BuiltIn("Pod"), std::slice::from_ref(&p), IncludeObject::Object, "1", now());
        assert_eq!(t["rows"][0]["object"], p);
    }

    #[test]
    fn include_object_none_leaves_object_out() {
        let t = table(&Columns::BuiltIn("Pod"), &[sample_pod()], IncludeObject::None, "1", now());
        assert!(t["rows"][0].get("object").is_none());
    }

    #[test]
    fn include_object_parses_query_values() {
        assert_eq!(IncludeObject::from_query(""), Some(IncludeObject::Metadata));
        assert_eq!(IncludeObject::from_query("Metadata"), Some(IncludeObject::Metadata));
        assert_eq!(IncludeObject::from_query("Object"), Some(IncludeObject::Object));
        assert_eq!(IncludeObject::from_query("None"), Some(IncludeObject::None));
        assert_eq!(IncludeObject::from_query("bogus"), None);
        assert_eq!(IncludeObject::default(), IncludeObject::Metadata);
    }

    // --- Pod --------------------------------------------------------------------------------

    #[test]
    fn pod_columns_match_kube_apiserver() {
        assert_eq!(
            column_names(&Columns::BuiltIn("Pod")),
            ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
        );
        let t = table(&Columns::BuiltIn("Pod"), &[], IncludeObject::None, "1", now());
        let priorities: Vec<i64> =
            t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["priority"].as_i64().unwrap()).collect();
        assert_eq!(priorities, [0, 0, 0, 0, 0, 1, 1, 1, 1]);
    }

    #[test]
    fn running_ready_pod_prints_ready_count_status_restarts_age_and_wide_cells() {
        let mut p = pod(json!({
            "phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
            "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0, "state": {"running": {}}}],
        }));
        p["spec"]["nodeName"] = json!("node-1");
        assert_eq!(
            cells(&Columns::BuiltIn("Pod"), p),
            json!(["p", "1/1", "Running", "0", "60s", "10.0.0.5", "node-1", "<none>", "<none>"])
                .as_array()
                .unwrap()
                .clone()
        );
    }

    #[test]
    fn pod_ready_counts_only_ready_running_containers_against_spec_containers() {
        let mut p = pod(json!({
            "phase": "Running",
            "containerStatuses": [
                {"name": "a", "ready": true, "state": {"running": {}}},
                {"name": "b", "ready": false, "state": {"running": {}}},
            ],
        }));
        p["spec"]["containers"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
        assert_eq!(cells(&Columns::BuiltIn("Pod"), p)[1], "1/3");
    }

    #[test]
    fn pod_status_cases() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("pending without statuses shows phase", pod(json!({"phase": "Pending"})), "Pending"),
            (
                "waiting container shows ContainerCreating",
                pod(json!({"phase": "Pending", "containerStatuses": [
                    {"name": "main", "ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}]})),
                "ContainerCreating",
            ),
            (
                "crash looping container shows CrashLoopBackOff",
                pod(json!({"phase": "Running", "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 5,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(300)}}}]})),
                "CrashLoopBackOff",
            ),
            (
                "succeeded pod shows Completed",
                pod(json!({"phase": "Succeeded", "containerStatuses": [
                    {"name": "main", "ready": false, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]})),
                "Completed",
            ),
            (
                "failed container shows Error",
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "main", "ready": false, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]})),
                "Error",
            ),
            (
                "terminated without reason shows ExitCode",
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "main", "state": {"terminated": {"exitCode": 3}}}]})),
                "ExitCode:3",
            ),
            (
                "terminated by signal without reason shows Signal",
                pod(json!({"phase": "Failed", "containerStatuses": [
                    {"name": "main", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]})),
                "Signal:9",
            ),
            (
                "status reason wins over phase (Evicted)",
                pod(json!({"phase": "Failed", "reason": "Evicted"})),
                "Evicted",
            ),
            (
                "scheduling gated pod",
                pod(json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})),
                "SchedulingGated",
            ),
        ];
        for (behaviour, p, want) in cases {
            assert_eq!(pod_status_cell(p), want, "{behaviour}");
        }
    }

    #[test]
    fn pod_completed_with_a_running_container_is_running_or_not_ready() {
        let mut p = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": false, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "b", "ready": true, "state": {"running": {}}},
        ]}));
        p["spec"]["containers"] = json!([{"name": "a"}, {"name": "b"}]);
        assert_eq!(pod_status_cell(p.clone()), "NotReady");
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        assert_eq!(pod_status_cell(p), "Running");
    }

    #[test]
    fn pod_with_deletion_timestamp_is_terminating_unless_terminal() {
        let mut p = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "main", "ready": true, "state": {"running": {}}}]}));
        p["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(pod_status_cell(p.clone()), "Terminating");
        p["status"]["phase"] = json!("Succeeded");
        p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        assert_eq!(pod_status_cell(p.clone()), "Completed");
        p["status"]["phase"] = json!("Running");
        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(pod_status_cell(p), "Unknown");
    }

    #[test]
    fn pod_init_container_statuses() {
        let with_init = |init_statuses: Value, n_init: usize| {
            let mut p = pod(json!({"phase": "Pending", "initContainerStatuses": init_statuses,
                "containerStatuses": [{"name": "main", "ready": false,
                    "state": {"waiting": {"reason": "PodInitializing"}}}]}));
            p["spec"]["initContainers"] =
                json!((0..n_init).map(|i| json!({"name": format!("init{i}")})).collect::<Vec<_>>());
            p
        };
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "first init container running shows Init:0/1",
                with_init(json!([{"name": "init0", "state": {"running": {}}}]), 1),
                "Init:0/1",
            ),
            (
                "second of two init containers running shows Init:1/2",
                with_init(
                    json!([
                    {"name": "init0", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "init1", "state": {"running": {}}}]),
                    2,
                ),
                "Init:1/2",
            ),
            (
                "waiting PodInitializing init container counts as Init:0/1",
                with_init(json!([{"name": "init0", "state": {"waiting": {"reason": "PodInitializing"}}}]), 1),
                "Init:0/1",
            ),
            (
                "crash looping init container shows Init:CrashLoopBackOff",
                with_init(
                    json!([{"name": "init0", "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
                    1,
                ),
                "Init:CrashLoopBackOff",
            ),
            (
                "failed init container shows Init:Error",
                with_init(json!([{"name": "init0", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]), 1),
                "Init:Error",
            ),
            (
                "failed init container without reason shows Init:ExitCode",
                with_init(json!([{"name": "init0", "state": {"terminated": {"exitCode": 2}}}]), 1),
                "Init:ExitCode:2",
            ),
            (
                "all init containers done shows the app containers' state",
                with_init(
                    json!([{"name": "init0", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]),
                    1,
                ),
                "PodInitializing",
            ),
        ];
        for (behaviour, p, want) in cases {
            assert_eq!(pod_status_cell(p), want, "{behaviour}");
        }
    }

    #[test]
    fn pod_init_container_restarts_count_while_initializing() {
        let mut p = pod(json!({"phase": "Pending",
            "initContainerStatuses": [{"name": "init0", "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(30)}}}],
            "containerStatuses": [{"name": "main", "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}}}]}));
        p["spec"]["initContainers"] = json!([{"name": "init0"}]);
        assert_eq!(cells(&Columns::BuiltIn("Pod"), p)[3], "2 (30s ago)");
    }

    #[test]
    fn pod_sidecar_init_container_counts_toward_total_and_ready() {
        let mut p = pod(json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}],
            "initContainerStatuses": [{"name": "sidecar", "ready": true, "started": true,
                "restartCount": 1, "state": {"running": {}}}],
            "containerStatuses": [{"name": "main", "ready": true, "state": {"running": {}}}]}));
        p["spec"]["initContainers"] = json!([{"name": "sidecar", "restartPolicy": "Always"}]);
        let c = cells(&Columns::BuiltIn("Pod"), p);
        assert_eq!(c[1], "2/2");
        assert_eq!(c[2], "Running");
        assert_eq!(c[3], "1");
    }

    #[test]
    fn pod_restarts_sum_and_append_last_restart_age() {
        let mut p = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 3, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(600)}}},
            {"name": "b", "ready": true, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}}},
        ]}));
        p["spec"]["containers"] = json!([{"name": "a"}, {"name": "b"}]);
        assert_eq!(cells(&Columns::BuiltIn("Pod"), p)[3], "5 (5m ago)");
    }

    #[test]
    fn pod_restarts_without_last_termination_is_plain_count() {
        let p = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "main", "ready": true, "restartCount": 4, "state": {"running": {}}}]}));
        assert_eq!(cells(&Columns::BuiltIn("Pod"), p)[3], "4");
    }

    #[test]
    fn pod_readiness_gates_count_true_conditions() {
        let mut p = pod(json!({"phase": "Running", "conditions": [
            {"type": "example.com/a", "status": "True"},
            {"type": "example.com/b", "status": "False"}]}));
        p["spec"]["readinessGates"] = json!([
            {"conditionType": "example.com/a"}, {"conditionType": "example.com/b"}]);
        assert_eq!(cells(&Columns::BuiltIn("Pod"), p)[8], "1/2");
    }

    #[test]
    fn succeeded_and_failed_pods_carry_completed_row_conditions() {
        let t = table(
            &Columns::BuiltIn("Pod"),
            &[pod(json!({"phase": "Succeeded"})), pod(json!({"phase": "Failed"})), sample_pod()],
            IncludeObject::None,
            "1",
            now(),
        );
        assert_eq!(t["rows"][0]["conditions"][0]["reason"], "Succeeded");
        assert_eq!(t["rows"][1]["conditions"][0]["reason"], "Failed");
        assert_eq!(t["rows"][1]["conditions"][0]["type"], "Completed");
        assert!(t["rows"][2].get("conditions").is_none());
    }

    #[test]
    fn missing_creation_timestamp_is_unknown_age() {
        let mut p = sample_pod();
        p["metadata"].as_object_mut().unwrap().remove("creationTimestamp");
        assert_eq!(cells(&Columns::BuiltIn("Pod"), p)[4], "<unknown>");
    }

    // --- Job --------------------------------------------------------------------------------

    fn job(spec: Value, status: Value) -> Value {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"containers": [
            {"name": "worker", "image": "busybox:1"}, {"name": "side", "image": "nginx"}]}});
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "abc"}});
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "creationTimestamp": ago(600)},
            "spec": spec, "status": status,
        })
    }

    #[test]
    fn job_columns_match_kube_apiserver() {
        assert_eq!(
            column_names(&Columns::BuiltIn("Job")),
            ["Name", "Status", "Completions", "Duration", "Age", "Containers", "Images", "Selector"]
        );
    }

    #[test]
    fn running_job_prints_all_cells() {
        let j = job(
            json!({"completions": 3, "parallelism": 1}),
            json!({"succeeded": 1, "active": 1, "startTime": ago(150)}),
        );
        assert_eq!(
            cells(&Columns::BuiltIn("Job"), j),
            json!([
                "j",
                "Running",
                "1/3",
                "2m30s",
                "10m",
                "worker,side",
                "busybox:1,nginx",
                "batch.kubernetes.io/controller-uid=abc"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
    }

    #[test]
    fn job_completions_cases() {
        let cases: Vec<(&str, Value, Value, &str)> = vec![
            ("completions set", json!({"completions": 5}), json!({"succeeded": 2}), "2/5"),
            ("no completions and parallelism 1", json!({"parallelism": 1}), json!({"succeeded": 0}), "0/1"),
            ("no completions and parallelism unset", json!({}), json!({}), "0/1"),
            ("no completions with parallelism", json!({"parallelism": 4}), json!({"succeeded": 1}), "1/1 of 4"),
            (
                "completions null with parallelism",
                json!({"completions": null, "parallelism": 3}),
                json!({}),
                "0/1 of 3",
            ),
        ];
        for (behaviour, spec, status, want) in cases {
            assert_eq!(cells(&Columns::BuiltIn("Job"), job(spec, status))[2], want, "{behaviour}");
        }
    }

    #[test]
    fn job_status_cases() {
        let cond = |types: &[(&str, &str)]| {
            json!({"conditions": types.iter()
                .map(|(t, s)| json!({"type": t, "status": s}))
                .collect::<Vec<_>>()})
        };
        let cases: Vec<(&str, Value, &str)> = vec![
            ("no conditions is Running", json!({}), "Running"),
            ("Complete condition", cond(&[("SuccessCriteriaMet", "True"), ("Complete", "True")]), "Complete"),
            ("Failed condition", cond(&[("FailureTarget", "True"), ("Failed", "True")]), "Failed"),
            ("Suspended condition", cond(&[("Suspended", "True")]), "Suspended"),
            ("Suspended false is Running", cond(&[("Suspended", "False")]), "Running"),
            ("FailureTarget before Failed", cond(&[("FailureTarget", "True")]), "FailureTarget"),
            ("SuccessCriteriaMet before Complete", cond(&[("SuccessCriteriaMet", "True")]), "SuccessCriteriaMet"),
        ];
        for (behaviour, status, want) in cases {
            assert_eq!(cells(&Columns::BuiltIn("Job"), job(json!({}), status))[1], want, "{behaviour}");
        }
        let mut j = job(json!({}), json!({}));
        j["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&Columns::BuiltIn("Job"), j)[1], "Terminating");
    }

    #[test]
    fn job_duration_cases() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("not started is empty", json!({}), ""),
            ("running is now minus start", json!({"startTime": ago(45)}), "45s"),
            ("complete is completion minus start", json!({"startTime": ago(4000), "completionTime": ago(3700)}), "5m"),
        ];
        for (behaviour, status, want) in cases {
            assert_eq!(cells(&Columns::BuiltIn("Job"), job(json!({}), status))[3], want, "{behaviour}");
        }
    }

    #[test]
    fn label_selector_formatting() {
        assert_eq!(format_label_selector(None), "<none>");
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(
            format_label_selector(Some(&json!({
                "matchLabels": {"b": "2", "a": "1"},
                "matchExpressions": [
                    {"key": "c", "operator": "In", "values": ["y", "x"]},
                    {"key": "d", "operator": "NotIn", "values": ["z"]},
                    {"key": "e", "operator": "Exists"},
                    {"key": "f", "operator": "DoesNotExist"}]}))),
            "a=1,b=2,c in (x,y),d notin (z),e,!f"
        );
    }

    // --- Node, Namespace, Event -------------------------------------------------------------

    fn node(ready: Option<&str>, unschedulable: bool, labels: Value) -> Value {
        let conditions = ready.map_or(json!([]), |s| json!([{"type": "Ready", "status": s}]));
        json!({
            "kind": "Node",
            "metadata": {"name": "n1", "creationTimestamp": ago(3 * 86400), "labels": labels},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": conditions,
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian"},
                "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]},
        })
    }

    #[test]
    fn node_status_roles_and_version() {
        let cases: Vec<(&str, Value, &str, &str)> = vec![
            ("ready node", node(Some("True"), false, json!({})), "Ready", "<none>"),
            ("not ready node", node(Some("False"), false, json!({})), "NotReady", "<none>"),
            ("unknown ready status is NotReady", node(Some("Unknown"), false, json!({})), "NotReady", "<none>"),
            ("no Ready condition is Unknown", node(None, false, json!({})), "Unknown", "<none>"),
            ("cordoned", node(Some("True"), true, json!({})), "Ready,SchedulingDisabled", "<none>"),
            (
                "roles from labels sorted",
                node(
                    Some("True"),
                    false,
                    json!({"node-role.kubernetes.io/worker": "",
                    "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "infra"}),
                ),
                "Ready",
                "control-plane,infra,worker",
            ),
        ];
        for (behaviour, n, status, roles) in cases {
            let c = cells(&Columns::BuiltIn("Node"), n);
            assert_eq!(c[1], status, "{behaviour}");
            assert_eq!(c[2], roles, "{behaviour}");
            assert_eq!(c[3], "3d", "{behaviour}");
            assert_eq!(c[4], "v1.33.0", "{behaviour}");
            assert_eq!(
                &c[5..],
                &[json!("192.168.1.10"), json!("<none>"), json!("Debian"), json!("<unknown>"), json!("<unknown>")],
                "{behaviour}"
            );
        }
    }

    #[test]
    fn namespace_prints_phase() {
        assert_eq!(column_names(&Columns::BuiltIn("Namespace")), ["Name", "Status", "Age"]);
        let ns = json!({"metadata": {"name": "default", "creationTimestamp": ago(7200)},
            "status": {"phase": "Active"}});
        assert_eq!(cells(&Columns::BuiltIn("Namespace"), ns), vec![json!("default"), json!("Active"), json!("120m")]);
        let terminating = json!({"metadata": {"name": "x", "deletionTimestamp": ago(1)},
            "status": {"phase": "Terminating"}});
        assert_eq!(cells(&Columns::BuiltIn("Namespace"), terminating)[1], "Terminating");
    }

    #[test]
    fn event_columns_and_cells() {
        assert_eq!(
            column_names(&Columns::BuiltIn("Event")),
            ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"]
        );
        let ev = json!({
            "kind": "Event", "metadata": {"name": "demo.17a", "creationTimestamp": ago(120)},
            "involvedObject": {"kind": "JobSet", "name": "demo", "fieldPath": "spec"},
            "type": "Normal", "reason": "Created", "message": "  created job  \n",
            "source": {"component": "jobset-controller"},
            "firstTimestamp": ago(120), "lastTimestamp": ago(6), "count": 3,
        });
        assert_eq!(
            cells(&Columns::BuiltIn("Event"), ev),
            json!([
                "6s",
                "Normal",
                "Created",
                "jobset/demo",
                "spec",
                "jobset-controller",
                "created job",
                "2m",
                3,
                "demo.17a"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
    }

    #[test]
    fn event_falls_back_to_event_time_series_and_count_one() {
        let ev = json!({
            "metadata": {"name": "e"}, "involvedObject": {"kind": "Pod"},
            "eventTime": ago(30), "reportingController": "ctrl", "reportingInstance": "host-1",
            "type": "Warning", "reason": "X", "message": "m",
        });
        let c = cells(&Columns::BuiltIn("Event"), ev.clone());
        assert_eq!(c[0], "30s");
        assert_eq!(c[3], "pod");
        assert_eq!(c[5], "ctrl, host-1");
        assert_eq!(c[7], "30s");
        assert_eq!(c[8], 1);
        let mut series = ev;
        series["series"] = json!({"count": 7, "lastObservedTime": ago(5)});
        let c = cells(&Columns::BuiltIn("Event"), series);
        assert_eq!(c[0], "5s");
        assert_eq!(c[8], 7);
    }

    // --- Service, ConfigMap, Secret, Lease, ServiceAccount, PVC, CRD ------------------------

    #[test]
    fn service_cells() {
        assert_eq!(
            column_names(&Columns::BuiltIn("Service")),
            ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]
        );
        let svc = json!({"metadata": {"name": "web", "creationTimestamp": ago(10)},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                "selector": {"app": "web", "tier": "fe"}}});
        assert_eq!(
            cells(&Columns::BuiltIn("Service"), svc),
            json!(["web", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP", "10s", "app=web,tier=fe"])
                .as_array()
                .unwrap()
                .clone()
        );
        let headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        let c = cells(&Columns::BuiltIn("Service"), headless);
        assert_eq!(&c[1..5], &[json!("ClusterIP"), json!("None"), json!("<none>"), json!("<none>")]);
        let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer"}});
        assert_eq!(cells(&Columns::BuiltIn("Service"), lb)[3], "<pending>");
    }

    #[test]
    fn configmap_secret_lease_serviceaccount_cells() {
        let cm = json!({"metadata": {"name": "cm", "creationTimestamp": ago(5)},
            "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(cells(&Columns::BuiltIn("ConfigMap"), cm), vec![json!("cm"), json!(3), json!("5s")]);

        assert_eq!(column_names(&Columns::BuiltIn("Secret")), ["Name", "Type", "Data", "Age"]);
        let secret = json!({"metadata": {"name": "s", "creationTimestamp": ago(5)},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(
            cells(&Columns::BuiltIn("Secret"), secret),
            vec![json!("s"), json!("kubernetes.io/tls"), json!(2), json!("5s")]
        );
        let untyped = json!({"metadata": {"name": "s"}, "stringData": {"a": "x"}});
        assert_eq!(&cells(&Columns::BuiltIn("Secret"), untyped)[1..3], &[json!("Opaque"), json!(1)]);

        let lease = json!({"metadata": {"name": "l", "creationTimestamp": ago(5)},
            "spec": {"holderIdentity": "ctrl-1_abc"}});
        assert_eq!(cells(&Columns::BuiltIn("Lease"), lease), vec![json!("l"), json!("ctrl-1_abc"), json!("5s")]);

        let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(5)}});
        assert_eq!(cells(&Columns::BuiltIn("ServiceAccount"), sa), vec![json!("default"), json!(0), json!("5s")]);
    }

    #[test]
    fn bindings_print_their_role_and_subjects_as_kubectl_and_roles_their_creation() {
        for kind in ["RoleBinding", "ClusterRoleBinding"] {
            assert_eq!(
                column_names(&Columns::for_kind(kind)),
                ["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"],
                "{kind}"
            );
        }
        let b = json!({"metadata": {"name": "b", "creationTimestamp": ago(5)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
            {"kind": "Group", "name": "system:serviceaccounts"},
            {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"},
            {"kind": "ServiceAccount", "name": "local"},
            {"kind": "Robot", "name": "r"}
        ]});
        assert_eq!(
            cells(&Columns::for_kind("RoleBinding"), b),
            vec![
                json!("b"),
                json!("ClusterRole/view"),
                json!("5s"),
                json!("alice, bob"),
                json!("system:serviceaccounts"),
                json!("ns/sa, /local")
            ]
        );
        let empty = json!({"metadata": {"name": "e"}, "roleRef": {"kind": "Role", "name": "r"}});
        assert_eq!(
            &cells(&Columns::for_kind("ClusterRoleBinding"), empty)[1..],
            &[json!("Role/r"), json!("<unknown>"), json!(""), json!(""), json!("")]
        );
        for kind in ["Role", "ClusterRole"] {
            assert_eq!(column_names(&Columns::for_kind(kind)), ["Name", "Created At"], "{kind}");
        }
        let role = json!({"metadata": {"name": "r", "creationTimestamp": "2024-01-02T03:04:05Z"}});
        assert_eq!(cells(&Columns::for_kind("Role"), role), vec![json!("r"), json!("2024-01-02T03:04:05Z")]);
    }

    #[test]
    fn priority_classes_print_value_global_default_age_and_preemption_policy_as_kube_apiserver() {
        assert_eq!(
            column_names(&Columns::for_kind("PriorityClass")),
            ["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"]
        );
        let pc = json!({"metadata": {"name": "high", "creationTimestamp": ago(5)}, "value": 1000,
                        "globalDefault": true, "preemptionPolicy": "Never"});
        assert_eq!(
            cells(&Columns::for_kind("PriorityClass"), pc),
            vec![json!("high"), json!(1000), json!(true), json!("5s"), json!("Never")]
        );
        let bare = json!({"metadata": {"name": "bare", "creationTimestamp": ago(5)}});
        assert_eq!(
            cells(&Columns::for_kind("PriorityClass"), bare),
            vec![json!("bare"), json!(0), json!(false), json!("5s"), json!("")]
        );
    }

    #[test]
    fn pvc_cells() {
        assert_eq!(
            column_names(&Columns::BuiltIn("PersistentVolumeClaim")),
            [
                "Name",
                "Status",
                "Volume",
                "Capacity",
                "Access Modes",
                "StorageClass",
                "VolumeAttributesClass",
                "Age",
                "VolumeMode"
            ]
        );
        let bound = json!({"metadata": {"name": "data", "creationTimestamp": ago(5)},
            "spec": {"volumeName": "pv-1", "storageClassName": "standard", "volumeMode": "Filesystem",
                "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"},
                "accessModes": ["ReadWriteMany", "ReadWriteOnce"]}});
        assert_eq!(
            cells(&Columns::BuiltIn("PersistentVolumeClaim"), bound),
            json!(["data", "Bound", "pv-1", "2Gi", "RWO,RWX", "standard", "<unset>", "5s", "Filesystem"])
                .as_array()
                .unwrap()
                .clone()
        );
        let pending = json!({"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Pending"}});
        assert_eq!(
            &cells(&Columns::BuiltIn("PersistentVolumeClaim"), pending)[1..5],
            &[json!("Pending"), json!(""), json!(""), json!("")]
        );
    }

    #[test]
    fn resource_quota_cells_list_used_over_hard_with_limits_apart() {
        assert_eq!(column_names(&Columns::BuiltIn("ResourceQuota")), ["Name", "Age", "Request", "Limit"]);
        let quota = json!({"metadata": {"name": "compute", "creationTimestamp": ago(5)},
            "status": {"hard": {"pods": "2", "requests.cpu": "1", "limits.memory": "1Gi", "requests.nvidia.com/gpu": "1"},
                "used": {"pods": "1", "requests.cpu": "500m", "limits.memory": "512Mi"}}});
        assert_eq!(
            cells(&Columns::BuiltIn("ResourceQuota"), quota),
            [
                json!("compute"),
                json!("5s"),
                json!("pods: 1/2, requests.cpu: 500m/1, requests.nvidia.com/gpu: 0/1"),
                json!("limits.memory: 512Mi/1Gi"),
            ]
        );
    }

    #[test]
    fn crd_and_default_print_name_and_created_at() {
        for columns in [Columns::BuiltIn("CustomResourceDefinition"), Columns::Default, Columns::BuiltIn("Widget")] {
            assert_eq!(column_names(&columns), ["Name", "Created At"]);
            let t = table(&columns, &[], IncludeObject::None, "1", now());
            assert_eq!(t["columnDefinitions"][1]["type"], "date");
            let crd = json!({"metadata": {"name": "jobsets.jobset.x-k8s.io",
                "creationTimestamp": "2024-05-06T07:08:09.123Z"}});
            assert_eq!(cells(&columns, crd), vec![json!("jobsets.jobset.x-k8s.io"), json!("2024-05-06T07:08:09Z")]);
            assert_eq!(cells(&columns, json!({"metadata": {"name": "x"}}))[1], "0001-01-01T00:00:00Z");
        }
    }

    #[test]
    fn for_kind_maps_known_kinds_only() {
        assert_eq!(Columns::for_kind("Pod"), Columns::BuiltIn("Pod"));
        assert_eq!(Columns::for_kind("JobSet"), Columns::Default);
    }

    // --- Printer columns (custom resources) -------------------------------------------------

    fn jobset_crd() -> Value {
        json!({"spec": {"versions": [{"name": "v1alpha2", "additionalPrinterColumns": [
            {"name": "TerminalState", "type": "string", "description": "Final state of JobSet", "jsonPath": ".status.terminalState"},
            {"name": "Restarts", "type": "string", "jsonPath": ".status.restarts"},
            {"name": "Completed", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Completed\")].status"},
            {"name": "Suspended", "type": "string", "jsonPath": ".spec.suspend"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]}]}})
    }

    fn jobset(status: Value, suspend: Option<bool>) -> Value {
        let mut spec = json!({});
        if let Some(s) = suspend {
            spec["suspend"] = json!(s);
        }
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "demo", "creationTimestamp": ago(6)},
            "spec": spec, "status": status})
    }

    #[test]
    fn printer_column_from_crd_json() {
        let col = PrinterColumn::from_crd_json(&json!({"name": "Ready", "type": "integer", "format": "int32",
            "description": "d", "priority": 1, "jsonPath": ".status.ready"}))
        .unwrap();
        assert_eq!(
            col,
            PrinterColumn {
                name: "Ready".into(),
                type_: "integer".into(),
                format: "int32".into(),
                description: "d".into(),
                priority: 1,
                json_path: ".status.ready".into()
            }
        );
        let minimal = PrinterColumn::from_crd_json(&json!({"name": "X", "jsonPath": ".x"})).unwrap();
        assert_eq!((minimal.type_.as_str(), minimal.priority, minimal.format.as_str()), ("string", 0, ""));
        assert!(PrinterColumn::from_crd_json(&json!({"name": "X"})).is_none());
        assert!(PrinterColumn::from_crd_json(&json!({"jsonPath": ".x"})).is_none());
    }

    #[test]
    fn printer_column_definitions_put_name_first_and_default_description() {
        let columns = Columns::for_crd_version(&jobset_crd(), "v1alpha2");
        assert_eq!(column_names(&columns), ["Name", "TerminalState", "Restarts", "Completed", "Suspended", "Age"]);
        let t = table(&columns, &[], IncludeObject::None, "1", now());
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
        assert_eq!(t["columnDefinitions"][1]["description"], "Final state of JobSet");
        assert_eq!(
            t["columnDefinitions"][2]["description"],
            "Custom resource definition column (in JSONPath format): .status.restarts"
        );
        assert_eq!(t["columnDefinitions"][5]["type"], "date");
    }

    #[test]
    fn crd_version_without_printer_columns_gets_age() {
        let crd = json!({"spec": {"versions": [{"name": "v1"}]}});
        let columns = Columns::for_crd_version(&crd, "v1");
        assert_eq!(column_names(&columns), ["Name", "Age"]);
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": ago(90)}});
        assert_eq!(cells(&columns, obj), vec![json!("x"), json!("90s")]);
    }

    #[test]
    fn jobset_printer_columns() {
        let columns = Columns::for_crd_version(&jobset_crd(), "v1alpha2");
        let cases: Vec<(&str, Value, Value)> = vec![
            ("new jobset has no status yet", jobset(json!({}), None), json!(["demo", null, null, null, null, "6s"])),
            (
                "running jobset with restarts and an unsuspended spec",
                jobset(
                    json!({"restarts": 0, "conditions": [{"type": "StartupPolicyCompleted", "status": "True"}]}),
                    Some(false),
                ),
                json!(["demo", null, "0", null, "false", "6s"]),
            ),
            (
                "completed jobset",
                jobset(
                    json!({"restarts": 2, "terminalState": "Completed",
                    "conditions": [{"type": "Suspended", "status": "False"}, {"type": "Completed", "status": "True"}]}),
                    None,
                ),
                json!(["demo", "Completed", "2", "True", null, "6s"]),
            ),
            (
                "suspended jobset",
                jobset(json!({"restarts": 0, "conditions": [{"type": "Suspended", "status": "True"}]}), Some(true)),
                json!(["demo", null, "0", null, "true", "6s"]),
            ),
            (
                "failed jobset",
                jobset(
                    json!({"restarts": 1, "terminalState": "Failed",
                    "conditions": [{"type": "Failed", "status": "True"}]}),
                    None,
                ),
                json!(["demo", "Failed", "1", null, null, "6s"]),
            ),
        ];
        for (behaviour, obj, want) in cases {
            assert_eq!(Value::Array(cells(&columns, obj)), want, "{behaviour}");
        }
    }

    #[test]
    fn printer_cells_convert_by_column_type() {
        let col = |name: &str, type_: &str, path: &str| PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        };
        let columns = Columns::Printer(vec![
            col("Int", "integer", ".status.n"),
            col("IntFromFloat", "integer", ".status.f"),
            col("IntFromString", "integer", ".status.s"),
            col("Num", "number", ".status.f"),
            col("Bool", "boolean", ".spec.flag"),
            col("BoolFromString", "boolean", ".status.s"),
            col("StrFromObject", "string", ".spec.obj"),
            col("Date", "date", ".status.when"),
            col("BadDate", "date", ".status.s"),
            col("EmptyDate", "date", ".status.empty"),
            col("Unknown", "widget", ".status.n"),
            col("Null", "string", ".status.nothing"),
            col("Missing", "string", ".status.missing.deep"),
            col("Wildcard", "string", ".spec.items[*].name"),
            col("Invalid", "string", ".spec[[["),
        ]);
        let obj = json!({"metadata": {"name": "o"},
            "spec": {"flag": true, "obj": {"a": 1}, "items": [{"name": "x"}, {"name": "y"}]},
            "status": {"n": 3, "f": 2.5, "s": "abc", "when": ago(3 * 3600 + 60), "empty": "", "nothing": null}});
        assert_eq!(
            Value::Array(cells(&columns, obj)),
            json!([
                "o",
                3,
                2,
                null,
                2.5,
                true,
                null,
                "{\"a\":1}",
                "3h1m",
                "<invalid>",
                "<unknown>",
                null,
                null,
                null,
                "x",
                null
            ])
        );
    }

    // --- JSONPath ---------------------------------------------------------------------------

    #[test]
    fn jsonpath_cases() {
        let doc = json!({
            "metadata": {"name": "n", "labels": {"app.kubernetes.io/name": "demo"}},
            "spec": {"containers": [{"name": "a", "image": "i1", "ports": [{"containerPort": 80}]},
                                     {"name": "b", "image": "i2"}]},
            "status": {"conditions": [
                {"type": "Completed", "status": "True", "n": 1},
                {"type": "Failed", "status": "False", "n": 2}]},
        });
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("field chain", ".metadata.name", Some("n")),
            ("braces and dollar", "{$.metadata.name}", Some("n")),
            ("escaped dots", ".metadata.labels.app\\.kubernetes\\.io/name", Some("demo")),
            ("quoted bracket field", ".metadata.labels['app.kubernetes.io/name']", Some("demo")),
            ("index", ".spec.containers[1].name", Some("b")),
            ("negative index", ".spec.containers[-1].image", Some("i2")),
            ("out of range index", ".spec.containers[5].name", None),
            ("wildcard joins", ".spec.containers[*].name", Some("a,b")),
            ("slice", ".spec.containers[0:1].name", Some("a")),
            ("nested", ".spec.containers[0].ports[0].containerPort", Some("80")),
            ("filter ==", ".status.conditions[?(@.type==\"Completed\")].status", Some("True")),
            ("filter single quotes", ".status.conditions[?(@.type=='Failed')].status", Some("False")),
            ("filter !=", ".status.conditions[?(@.type!=\"Completed\")].type", Some("Failed")),
            ("filter with spaces", ".status.conditions[?( @.type == \"Failed\" )].n", Some("2")),
            ("filter no match", ".status.conditions[?(@.type==\"Nope\")].status", None),
            ("numeric filter", ".status.conditions[?(@.n>1)].type", Some("Failed")),
            ("presence filter", ".spec.containers[?(@.ports)].name", Some("a")),
            ("recursive descent", "..image", Some("i1,i2")),
            ("missing key", ".status.nope", None),
        ];
        for (behaviour, path, want) in cases {
            assert_eq!(jsonpath_text(&doc, path).as_deref(), *want, "{behaviour}: {path}");
        }
    }

    #[test]
    fn jsonpath_rejects_malformed_paths() {
        for path in [".spec[", ".status.conditions[?(@.type=\"x\")]", ".a[x]", "a b"] {
            assert!(jsonpath_find(&json!({}), path).is_err(), "{path}");
        }
    }
}
