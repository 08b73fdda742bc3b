//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), as
//! client-go's typed clients send them (`kubectl create namespace|configmap|secret|job|...`).
//!
//! A body is the magic `k8s\0` and a `runtime.Unknown` envelope whose `typeMeta` names the kind
//! and whose `raw` is the object's message (apimachinery `pkg/runtime/serializer/protobuf`). The
//! message is decoded with `prost-reflect` against the descriptors of the built-in groups this
//! server serves (`protobuf/k8s.binpb`) and turned into the JSON a Go client would have sent for
//! the same object: JSON names, `omitempty`, inlined members and the apimachinery types with their
//! own JSON form (`Time`, `MicroTime`, `IntOrString`, `Quantity`, `RawExtension`, `FieldsV1`).
//! What the descriptors cannot tell (which fields are Go pointers or lack `omitempty`) comes from
//! `protobuf/fields.txt`; `protobuf/generate.py` regenerates both from upstream's sources
//! (k8s.io/api and k8s.io/apimachinery v0.36.3). Fields unknown to those descriptors are dropped,
//! as kube-apiserver's generated decoders drop them. Answers stay JSON, which every client's
//! `Accept` allows.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use base64::Engine;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value as Pb};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::ResourceDef;

use crate::auth::PROTOBUF_CONTENT_TYPE;

/// What precedes every protobuf-encoded object.
const MAGIC: &[u8] = b"k8s\0";

const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
const META_PACKAGE: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// The descriptors of the served built-in groups (built in, so loading them cannot fail at run
/// time; a unit test loads them).
static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(include_bytes!("../protobuf/k8s.binpb").as_slice())
        .expect("protobuf/k8s.binpb is a FileDescriptorSet")
});

/// How one field of one message maps to JSON, beyond its proto name.
#[derive(Default)]
struct FieldRule {
    /// Emit a present zero value (a Go pointer, or a field without `omitempty`).
    keep: bool,
    /// The member's fields are the parent's (`json:",inline"`).
    inline: bool,
    /// The JSON name, when it is not the proto name.
    json: Option<&'static str>,
}

struct Rules {
    /// Keyed by `<message full name>.<field name>`.
    fields: HashMap<&'static str, FieldRule>,
    /// Go named slices, whose JSON is the array of their `items`.
    lists: HashSet<&'static str>,
}

static RULES: LazyLock<Rules> = LazyLock::new(|| {
    let mut rules = Rules { fields: HashMap::new(), lists: HashSet::new() };
    for line in include_str!("../protobuf/fields.txt").lines().filter(|l| !l.starts_with('#')) {
        let Some((key, what)) = line.split_once(' ') else { continue };
        if what == "list" {
            rules.lists.insert(key);
            continue;
        }
        let rule = rules.fields.entry(key).or_default();
        match what {
            "keep" => rule.keep = true,
            "inline" => rule.inline = true,
            _ => rule.json = what.strip_prefix("json="),
        }
    }
    rules
});

/// Whether a request's `Content-Type` is Kubernetes' protobuf encoding.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|m| m.trim() == PROTOBUF_CONTENT_TYPE)
}

/// Why a body could not be decoded, in apimachinery's words.
#[derive(Debug, PartialEq)]
pub enum DecodeError {
    /// Before the envelope named a kind (`the object provided is unrecognized ...`).
    Envelope(String),
    /// The object of the kind the envelope named (`<kind> in version ... cannot be handled ...`).
    Object { api_version: String, kind: String, why: String },
}

/// The JSON object a protobuf body stands for, with `apiVersion` and `kind` from its envelope
/// (defaulted to `default_api_version` / `default_kind` where the envelope leaves them out, as
/// apimachinery's `copyKindDefaults` does).
pub fn to_json(body: &[u8], default_api_version: &str, default_kind: &str) -> Result<Value, DecodeError> {
    let envelope = match body {
        [] => return Err(DecodeError::Envelope("empty data".into())),
        b if !b.starts_with(MAGIC) => {
            // Go's `%v` of the prefix bytes.
            return Err(DecodeError::Envelope(
                "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]".into(),
            ));
        }
        b if b.len() == MAGIC.len() => return Err(DecodeError::Envelope("empty body".into())),
        b => &b[MAGIC.len()..],
    };
    let unknown = POOL.get_message_by_name(UNKNOWN).expect("runtime.Unknown is in protobuf/k8s.binpb");
    let unknown = DynamicMessage::decode(unknown, envelope).map_err(|e| DecodeError::Envelope(e.to_string()))?;
    let type_meta = unknown.get_field_by_name("typeMeta");
    let meta = |k: &str| {
        type_meta
            .as_ref()
            .and_then(|t| t.as_message()?.get_field_by_name(k)?.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let (mut api_version, mut kind) = (meta("apiVersion"), meta("kind"));
    if kind.is_empty() {
        kind = default_kind.into();
    }
    if api_version.is_empty() {
        api_version = default_api_version.into();
    }
    let fail = |why: String| DecodeError::Object { api_version: api_version.clone(), kind: kind.clone(), why };
    let desc = message_for(&api_version, &kind)
        .ok_or_else(|| fail(format!("no kind {kind:?} is registered for version {api_version:?}")))?;
    let raw = unknown.get_field_by_name("raw");
    let raw = raw.as_ref().and_then(|r| r.as_bytes()).map(|b| b.as_ref()).unwrap_or_default();
    let object = DynamicMessage::decode(desc, raw).map_err(|e| fail(e.to_string()))?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    match message(&object).map_err(fail)? {
        Value::Object(fields) => out.extend(fields),
        _ => return Err(fail(format!("{kind} is not an object"))),
    }
    Ok(Value::Object(out))
}

/// The JSON object of a protobuf body posted to `def`, or kube-apiserver's refusal: 415 for
/// custom resources (which never accept protobuf), 400 for a body that does not decode.
pub fn decode(body: &[u8], def: &ResourceDef) -> Result<Value, ApiError> {
    if !def.builtin {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        ));
    }
    to_json(body, &def.api_version(), &def.kind).map_err(|e| {
        ApiError::bad_request(match e {
            DecodeError::Envelope(why) => {
                format!("the object provided is unrecognized (must be of type {}): {why} ({})", def.kind, summary(body))
            }
            DecodeError::Object { api_version, kind, why } => {
                let version = api_version.rsplit('/').next().unwrap_or_default();
                format!("{kind} in version {version:?} cannot be handled as a {}: {why}", def.kind)
            }
        })
    })
}

/// apimachinery's `summarizeData`: the first 30 bytes, in hex.
fn summary(body: &[u8]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match body.len() {
        0 => "<empty>".into(),
        n if n > 30 => format!("{} ...", hex(&body[..30])),
        _ => hex(body),
    }
}

/// The message of `kind` in `apiVersion`: `k8s.io.api.<first label of the group, or core>.<version>`,
/// else the meta.k8s.io kinds every group version has (`DeleteOptions`, ...).
fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group.split('.').next() {
        Some("") | None => "core",
        Some(label) => label,
    };
    POOL.get_message_by_name(&format!("k8s.io.api.{package}.{version}.{kind}"))
        .or_else(|| POOL.get_message_by_name(&format!("{META_PACKAGE}.{kind}")))
}

/// A message as JSON.
fn message(m: &DynamicMessage) -> Result<Value, String> {
    let desc = m.descriptor();
    let name = desc.full_name();
    let field = |n: &str| m.get_field_by_name(n).filter(|_| m.has_field_by_name(n));
    match name {
        // Go's zero time (an empty message) is `null`; metav1.Time keeps whole seconds.
        TIME | MICRO_TIME => {
            if m.fields().next().is_none() {
                return Ok(Value::Null);
            }
            let secs = field("seconds").and_then(|v| v.as_i64()).unwrap_or_default();
            let nanos = if name == TIME { 0 } else { field("nanos").and_then(|v| v.as_i32()).unwrap_or_default() };
            let t = jiff::Timestamp::new(secs, nanos).map_err(|e| format!("{name}: {e}"))?;
            return Ok(json!(if name == TIME {
                crate::object::rfc3339_seconds(t)
            } else {
                t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
            }));
        }
        INT_OR_STRING => {
            return Ok(match field("type").and_then(|v| v.as_i64()) {
                Some(1) => json!(field("strVal").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()),
                _ => json!(field("intVal").and_then(|v| v.as_i32()).unwrap_or_default()),
            });
        }
        QUANTITY => {
            let q = field("string").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            return Ok(json!(if q.is_empty() { "0".to_string() } else { q }));
        }
        RAW_EXTENSION | FIELDS_V1 => {
            let raw = field(if name == RAW_EXTENSION { "raw" } else { "Raw" });
            return match raw.as_ref().and_then(|v| v.as_bytes()) {
                None => Ok(Value::Null),
                Some(b) => serde_json::from_slice(b).map_err(|e| format!("{name} is not JSON: {e}")),
            };
        }
        _ => {}
    }
    if RULES.lists.contains(name) {
        return Ok(field("items").map(|v| value(&v)).transpose()?.unwrap_or_else(|| Value::Array(vec![])));
    }
    let mut out = Map::new();
    for (f, v) in m.fields() {
        let rule = RULES.fields.get(format!("{name}.{}", f.name()).as_str());
        if rule.is_some_and(|r| r.inline) {
            if let Value::Object(members) = value(v)? {
                out.extend(members);
            }
            continue;
        }
        // gogo writes every non-pointer field; Go's `omitempty` leaves the zero ones out.
        if is_zero(v) && !rule.is_some_and(|r| r.keep) {
            continue;
        }
        let key = rule.and_then(|r| r.json).unwrap_or(f.name());
        out.insert(key.to_string(), value(v)?);
    }
    Ok(Value::Object(out))
}

fn value(v: &Pb) -> Result<Value, String> {
    Ok(match v {
        Pb::Bool(b) => json!(b),
        Pb::I32(n) | Pb::EnumNumber(n) => json!(n),
        Pb::I64(n) => json!(n),
        Pb::U32(n) => json!(n),
        Pb::U64(n) => json!(n),
        Pb::F32(n) => json!(n),
        Pb::F64(n) => json!(n),
        Pb::String(s) => json!(s),
        Pb::Bytes(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        Pb::Message(m) => message(m)?,
        Pb::List(items) => Value::Array(items.iter().map(value).collect::<Result<_, _>>()?),
        Pb::Map(entries) => {
            let mut out = Map::new();
            for (k, v) in entries {
                let k = match k {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                out.insert(k, value(v)?);
            }
            Value::Object(out)
        }
    })
}

/// A scalar's zero value (messages are never zero: Go emits empty structs).
fn is_zero(v: &Pb) -> bool {
    match v {
        Pb::Bool(b) => !b,
        Pb::I32(n) | Pb::EnumNumber(n) => *n == 0,
        Pb::I64(n) => *n == 0,
        Pb::U32(n) => *n == 0,
        Pb::U64(n) => *n == 0,
        Pb::F32(n) => *n == 0.0,
        Pb::F64(n) => *n == 0.0,
        Pb::String(s) => s.is_empty(),
        Pb::Bytes(b) => b.is_empty(),
        Pb::Message(_) => false,
        Pb::List(items) => items.is_empty(),
        Pb::Map(entries) => entries.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use prost_reflect::prost::Message;

    use super::*;
    use crate::resources::Registry;

    /// A message of `name` with `fields` set, as gogo would have encoded it.
    fn msg(name: &str, fields: Vec<(&str, Pb)>) -> DynamicMessage {
        let desc = POOL.get_message_by_name(name).unwrap_or_else(|| panic!("no message {name}"));
        let mut m = DynamicMessage::new(desc);
        for (f, v) in fields {
            assert!(m.descriptor().get_field_by_name(f).is_some(), "{name} has no field {f}");
            m.set_field_by_name(f, v);
        }
        m
    }

    fn core(kind: &str, fields: Vec<(&str, Pb)>) -> Pb {
        Pb::Message(msg(&format!("k8s.io.api.core.v1.{kind}"), fields))
    }

    fn meta(kind: &str, fields: Vec<(&str, Pb)>) -> Pb {
        Pb::Message(msg(&format!("{META_PACKAGE}.{kind}"), fields))
    }

    fn s(v: &str) -> Pb {
        Pb::String(v.into())
    }

    /// ObjectMeta as Go writes it for a new object: every non-pointer field, empty or not.
    fn object_meta(name: &str) -> Pb {
        meta(
            "ObjectMeta",
            vec![
                ("name", s(name)),
                ("generateName", s("")),
                ("namespace", s("")),
                ("selfLink", s("")),
                ("uid", s("")),
                ("resourceVersion", s("")),
                ("generation", Pb::I64(0)),
                ("creationTimestamp", meta("Time", vec![])),
            ],
        )
    }

    /// `k8s\0` + runtime.Unknown{typeMeta, raw}.
    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let type_meta = Pb::Message(msg(
            "k8s.io.apimachinery.pkg.runtime.TypeMeta",
            vec![("apiVersion", s(api_version)), ("kind", s(kind))],
        ));
        let unknown = msg(
            UNKNOWN,
            vec![
                ("typeMeta", type_meta),
                ("raw", Pb::Bytes(raw.into())),
                ("contentEncoding", s("")),
                ("contentType", s("")),
            ],
        );
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    fn object(api_version: &str, kind: &str, message: &str, fields: Vec<(&str, Pb)>) -> Vec<u8> {
        envelope(api_version, kind, msg(message, fields).encode_to_vec())
    }

    fn namespace() -> Vec<u8> {
        object(
            "v1",
            "Namespace",
            "k8s.io.api.core.v1.Namespace",
            vec![
                ("metadata", object_meta("team")),
                ("spec", core("NamespaceSpec", vec![])),
                ("status", core("NamespaceStatus", vec![("phase", s(""))])),
            ],
        )
    }

    #[test]
    fn decodes_objects_into_the_json_a_go_client_sends() {
        let secret = object(
            "v1",
            "Secret",
            "k8s.io.api.core.v1.Secret",
            vec![
                ("metadata", object_meta("creds")),
                ("type", s("Opaque")),
                ("data", Pb::Map([(MapKey::String("user".into()), Pb::Bytes(b"admin".as_slice().into()))].into())),
            ],
        );
        let container = core(
            "Container",
            vec![
                ("name", s("hello")),
                ("image", s("busybox")),
                ("command", Pb::List(vec![s("echo"), s("hello")])),
                ("resources", core("ResourceRequirements", vec![])),
                ("terminationMessagePath", s("")),
                ("stdin", Pb::Bool(false)),
                (
                    "ports",
                    Pb::List(vec![core(
                        "ContainerPort",
                        vec![("name", s("")), ("hostPort", Pb::I32(0)), ("containerPort", Pb::I32(0))],
                    )]),
                ),
            ],
        );
        let volume = core(
            "Volume",
            vec![
                ("name", s("scratch")),
                (
                    "volumeSource",
                    core("VolumeSource", vec![("emptyDir", core("EmptyDirVolumeSource", vec![("medium", s(""))]))]),
                ),
            ],
        );
        let job = object(
            "batch/v1",
            "Job",
            "k8s.io.api.batch.v1.Job",
            vec![
                ("metadata", object_meta("hello")),
                (
                    "spec",
                    Pb::Message(msg(
                        "k8s.io.api.batch.v1.JobSpec",
                        vec![
                            ("backoffLimit", Pb::I32(0)),
                            (
                                "template",
                                core(
                                    "PodTemplateSpec",
                                    vec![
                                        ("metadata", object_meta("")),
                                        (
                                            "spec",
                                            core(
                                                "PodSpec",
                                                vec![
                                                    ("containers", Pb::List(vec![container])),
                                                    ("volumes", Pb::List(vec![volume])),
                                                    ("restartPolicy", s("Never")),
                                                    ("hostNetwork", Pb::Bool(false)),
                                                ],
                                            ),
                                        ),
                                    ],
                                ),
                            ),
                        ],
                    )),
                ),
                ("status", Pb::Message(msg("k8s.io.api.batch.v1.JobStatus", vec![("active", Pb::I32(0))]))),
            ],
        );
        let int_or_string = |t: i64, i: i32, v: &str| {
            Pb::Message(msg(INT_OR_STRING, vec![("type", Pb::I64(t)), ("intVal", Pb::I32(i)), ("strVal", s(v))]))
        };
        let service = object(
            "v1",
            "Service",
            "k8s.io.api.core.v1.Service",
            vec![
                ("metadata", object_meta("web")),
                (
                    "spec",
                    core(
                        "ServiceSpec",
                        vec![(
                            "ports",
                            Pb::List(vec![
                                core(
                                    "ServicePort",
                                    vec![("port", Pb::I32(80)), ("targetPort", int_or_string(0, 8080, ""))],
                                ),
                                core(
                                    "ServicePort",
                                    vec![("port", Pb::I32(81)), ("targetPort", int_or_string(1, 0, "http"))],
                                ),
                            ]),
                        )],
                    ),
                ),
            ],
        );
        let quota = object(
            "v1",
            "ResourceQuota",
            "k8s.io.api.core.v1.ResourceQuota",
            vec![
                ("metadata", object_meta("q")),
                (
                    "spec",
                    core(
                        "ResourceQuotaSpec",
                        vec![(
                            "hard",
                            Pb::Map(
                                [(
                                    MapKey::String("nvidia.com/gpu".into()),
                                    Pb::Message(msg(QUANTITY, vec![("string", s("4"))])),
                                )]
                                .into(),
                            ),
                        )],
                    ),
                ),
            ],
        );
        let binding = object(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "k8s.io.api.rbac.v1.RoleBinding",
            vec![
                ("metadata", object_meta("b")),
                (
                    "subjects",
                    Pb::List(vec![Pb::Message(msg(
                        "k8s.io.api.rbac.v1.Subject",
                        vec![
                            ("kind", s("ServiceAccount")),
                            ("apiGroup", s("")),
                            ("name", s("robot")),
                            ("namespace", s("default")),
                        ],
                    ))]),
                ),
                (
                    "roleRef",
                    Pb::Message(msg(
                        "k8s.io.api.rbac.v1.RoleRef",
                        vec![("apiGroup", s("rbac.authorization.k8s.io")), ("kind", s("Role")), ("name", s("reader"))],
                    )),
                ),
            ],
        );
        let lease = object(
            "coordination.k8s.io/v1",
            "Lease",
            "k8s.io.api.coordination.v1.Lease",
            vec![
                ("metadata", object_meta("l")),
                (
                    "spec",
                    Pb::Message(msg(
                        "k8s.io.api.coordination.v1.LeaseSpec",
                        vec![
                            (
                                "renewTime",
                                meta(
                                    "MicroTime",
                                    vec![("seconds", Pb::I64(1_700_000_000)), ("nanos", Pb::I32(123_456_789))],
                                ),
                            ),
                            ("acquireTime", meta("MicroTime", vec![("seconds", Pb::I64(0)), ("nanos", Pb::I32(0))])),
                        ],
                    )),
                ),
            ],
        );
        let created = meta("Time", vec![("seconds", Pb::I64(1_700_000_000)), ("nanos", Pb::I32(999))]);
        let event = object(
            "v1",
            "Event",
            "k8s.io.api.core.v1.Event",
            vec![("metadata", object_meta("e")), ("firstTimestamp", created), ("count", Pb::I32(0))],
        );
        let cases: Vec<(&str, Vec<u8>, Value)> = vec![
            (
                "empty non-pointer fields are left out, empty structs and the zero time stay",
                namespace(),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "creationTimestamp": null}, "spec": {}, "status": {}}),
            ),
            (
                "bytes are base64",
                secret,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "creationTimestamp": null}, "type": "Opaque", "data": {"user": "YWRtaW4="}}),
            ),
            (
                "a pod template: pointers set to zero and fields without omitempty are kept, inline members flattened",
                job,
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello", "creationTimestamp": null},
                    "spec": {"backoffLimit": 0, "template": {"metadata": {"creationTimestamp": null}, "spec": {
                        "containers": [{"name": "hello", "image": "busybox", "command": ["echo", "hello"], "resources": {}, "ports": [{"containerPort": 0}]}],
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "restartPolicy": "Never"}}},
                    "status": {}}),
            ),
            (
                "IntOrString is a number or a string",
                service,
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "creationTimestamp": null},
                    "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 81, "targetPort": "http"}]}}),
            ),
            (
                "quantities are strings",
                quota,
                json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "creationTimestamp": null}, "spec": {"hard": {"nvidia.com/gpu": "4"}}}),
            ),
            (
                "rbac: an empty apiGroup of a subject is left out, roleRef's is required",
                binding,
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b", "creationTimestamp": null},
                    "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}}),
            ),
            (
                "MicroTime keeps microseconds; a set zero time is the epoch",
                lease,
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "creationTimestamp": null},
                    "spec": {"renewTime": "2023-11-14T22:13:20.123456Z", "acquireTime": "1970-01-01T00:00:00.000000Z"}}),
            ),
            (
                "Time keeps whole seconds",
                event,
                json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "creationTimestamp": null}, "firstTimestamp": "2023-11-14T22:13:20Z"}),
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(to_json(&body, "v1", "Unused"), Ok(want), "{name}");
        }
    }

    #[test]
    fn bad_bodies_get_apimachinery_errors() {
        let ns = namespace();
        let object_error = |api_version: &str, kind: &str, why: &str| {
            Err(DecodeError::Object { api_version: api_version.into(), kind: kind.into(), why: why.into() })
        };
        let truncated_raw = {
            let raw = msg("k8s.io.api.core.v1.Namespace", vec![("metadata", object_meta("team"))]).encode_to_vec();
            envelope("v1", "Namespace", raw[..raw.len() - 2].to_vec())
        };
        let cases: Vec<(&str, Vec<u8>, Result<Value, DecodeError>)> = vec![
            ("no data", vec![], Err(DecodeError::Envelope("empty data".into()))),
            (
                "bad magic",
                [b"k8z\0".as_slice(), &ns[4..]].concat(),
                Err(DecodeError::Envelope(
                    "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]".into(),
                )),
            ),
            (
                "JSON",
                br#"{"kind":"Namespace"}"#.to_vec(),
                Err(DecodeError::Envelope(
                    "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]".into(),
                )),
            ),
            ("magic only", MAGIC.to_vec(), Err(DecodeError::Envelope("empty body".into()))),
            (
                "an unknown kind",
                envelope("v1", "Widget", vec![]),
                object_error("v1", "Widget", r#"no kind "Widget" is registered for version "v1""#),
            ),
            (
                "a group this server has no messages for",
                envelope("example.com/v1", "Namespace", vec![]),
                object_error(
                    "example.com/v1",
                    "Namespace",
                    r#"no kind "Namespace" is registered for version "example.com/v1""#,
                ),
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(to_json(&body, "v1", "Namespace"), want, "{name}");
        }
        // prost's own messages for wire-level damage: only whether the envelope or the object
        // failed is asserted.
        let cases = [
            ("truncated envelope", ns[..ns.len() - 3].to_vec(), true),
            ("garbage after the magic", [MAGIC, &[0xff, 0xff, 0xff]].concat(), true),
            ("truncated object", truncated_raw, false),
        ];
        for (name, body, in_envelope) in cases {
            let got = to_json(&body, "v1", "Namespace");
            let ok = match &got {
                Err(DecodeError::Envelope(_)) => in_envelope,
                Err(DecodeError::Object { kind, .. }) => !in_envelope && kind == "Namespace",
                Ok(_) => false,
            };
            assert!(ok, "{name}: {got:?}");
        }
    }

    #[test]
    fn an_envelope_without_type_meta_takes_the_endpoint_kind() {
        let raw = msg("k8s.io.api.core.v1.ConfigMap", vec![("metadata", object_meta("c"))]).encode_to_vec();
        let unknown = msg(UNKNOWN, vec![("raw", Pb::Bytes(raw.into()))]);
        let body = [MAGIC, &unknown.encode_to_vec()].concat();
        assert_eq!(
            to_json(&body, "v1", "ConfigMap"),
            Ok(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "creationTimestamp": null}}))
        );
    }

    #[test]
    fn delete_options_decode_in_any_group_version() {
        let body = object(
            "batch/v1",
            "DeleteOptions",
            "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            vec![("gracePeriodSeconds", Pb::I64(0)), ("propagationPolicy", s("Foreground"))],
        );
        assert_eq!(
            to_json(&body, "batch/v1", "Job"),
            Ok(
                json!({"apiVersion": "batch/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "propagationPolicy": "Foreground"})
            )
        );
    }

    #[test]
    fn every_served_builtin_kind_has_a_message() {
        let registry = Registry::with_builtins();
        let missing: Vec<String> = registry
            .all()
            .iter()
            // Reviews decode their own bodies (`crate::review`); CRDs are not in the descriptor set,
            // nor (yet) the alpha `scheduling.k8s.io/v1alpha2` kinds: their clients send JSON.
            .filter(|d| d.builtin && d.review.is_none() && !d.is_crd())
            .filter(|d| d.api_version() != jobset_api::workload::API_VERSION)
            .filter(|d| message_for(&d.api_version(), &d.kind).is_none())
            .map(|d| format!("{}/{}", d.api_version(), d.kind))
            .collect();
        assert!(missing.is_empty(), "no protobuf message for {missing:?}");
    }

    #[test]
    fn custom_resources_refuse_protobuf_and_bad_bodies_are_bad_requests() {
        let registry = Registry::with_builtins();
        let namespaces = registry.get("", "v1", "namespaces").expect("namespaces");
        let mut custom = (*namespaces).clone();
        custom.builtin = false;
        let e = decode(&namespace(), &custom).expect_err("a custom resource");
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                415,
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml"
            )
        );

        let e = decode(b"k8z\0\x01", &namespaces).expect_err("bad magic");
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "the object provided is unrecognized (must be of type Namespace): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] (6b387a0001)"
            )
        );
        let e = decode(&envelope("v1", "Widget", vec![]), &namespaces).expect_err("unknown kind");
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                r#"Widget in version "v1" cannot be handled as a Namespace: no kind "Widget" is registered for version "v1""#
            )
        );
        assert_eq!(decode(&namespace(), &namespaces).map(|v| v["metadata"]["name"].clone()).ok(), Some(json!("team")));
    }

    #[test]
    fn protobuf_content_types() {
        for (ct, want) in [
            ("application/vnd.kubernetes.protobuf", true),
            ("application/vnd.kubernetes.protobuf; charset=utf-8", true),
            ("application/json", false),
            ("application/vnd.kubernetes.protobufx", false),
        ] {
            assert_eq!(is_protobuf(ct), want, "{ct}");
        }
    }
}
