//! The review APIs delegated authentication and authorization use (controller-runtime's secure
//! metrics, kube-rbac-proxy, `kubectl auth can-i`), read, checked and answered as
//! kube-apiserver's REST storage does. Nothing is stored: the answer is the posted object with a
//! `status`.
//!
//! - `authentication.k8s.io/v1` **TokenReview** ([`TokenReview`]): who `spec.token` names, for
//!   `spec.audiences` (the API's when empty). An unusable token is still a 201, with
//!   `status.error` saying why.
//! - `authorization.k8s.io/v1` **SubjectAccessReview** and **SelfSubjectAccessReview**
//!   ([`AccessReview`]): whether a user (the spec's, or the requester) may make a resource or
//!   non-resource request, decided by [`crate::rbac::Policy::review`].
//!
//! The decisions are pure; `ApiServer::review_token` / `review_access` do the lookups.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::auth::Identity;
use crate::auth::proto::{Field, fields, string};
use crate::error::{ApiError, Cause};
use crate::rbac::{RequestInfo, UserInfo, Verdict};
use crate::resources::Review;

impl Review {
    pub fn kind(self) -> &'static str {
        match self {
            Review::Token => "TokenReview",
            Review::SubjectAccess => "SubjectAccessReview",
            Review::SelfSubjectAccess => "SelfSubjectAccessReview",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            Review::Token => "authentication.k8s.io",
            Review::SubjectAccess | Review::SelfSubjectAccess => "authorization.k8s.io",
        }
    }

    fn api_version(self) -> String {
        format!("{}/v1", self.group())
    }
}

/// A field of the wrong type: kube-apiserver's decoder refuses the body (400).
fn undecodable(kind: Review, field: &str, what: &str) -> ApiError {
    let kind = kind.kind();
    ApiError::bad_request(format!("{kind} in version \"v1\" cannot be handled as a {kind}: {field}: must be {what}"))
}

/// An object field: absent or null is empty.
fn object(v: Option<&Value>, kind: Review, field: &str) -> Result<Map<String, Value>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(undecodable(kind, field, "an object")),
    }
}

fn text(m: &Map<String, Value>, key: &str, kind: Review, field: &str) -> Result<String, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(undecodable(kind, &format!("{field}.{key}"), "a string")),
    }
}

fn texts(m: &Map<String, Value>, key: &str, kind: Review, field: &str) -> Result<Vec<String>, ApiError> {
    let bad = || undecodable(kind, &format!("{field}.{key}"), "a list of strings");
    match m.get(key) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => {
            a.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<_>>().ok_or_else(bad)
        }
        Some(_) => Err(bad()),
    }
}

/// The posted object's `metadata`, which these answers echo with kube's `creationTimestamp: null`.
fn answer_metadata(metadata: &Map<String, Value>) -> Value {
    let mut m = metadata.clone();
    m.entry("creationTimestamp").or_insert(Value::Null);
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------------
// TokenReview
// ---------------------------------------------------------------------------------------------

/// A posted `TokenReview` (`pkg/registry/authentication/tokenreview`).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenReview {
    metadata: Map<String, Value>,
    /// `spec.token`: never empty (a 400 otherwise).
    pub token: String,
    /// `spec.audiences` as posted: empty means the API's audience.
    pub audiences: Vec<String>,
}

impl TokenReview {
    /// Reads the body: a field of the wrong type is a 400 naming it, and so is an empty token
    /// (kube's `token is required for TokenReview in authentication`).
    pub fn parse(body: &Value) -> Result<TokenReview, ApiError> {
        let kind = Review::Token;
        let obj = body.as_object().ok_or_else(|| undecodable(kind, "(body)", "a JSON object"))?;
        let metadata = object(obj.get("metadata"), kind, "metadata")?;
        let spec = object(obj.get("spec"), kind, "spec")?;
        let token = text(&spec, "token", kind, "spec")?;
        let audiences = texts(&spec, "audiences", kind, "spec")?;
        if token.is_empty() {
            return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
        }
        Ok(TokenReview { metadata, token, audiences })
    }

    /// The answer: the review with `status`. `outcome` is who the token names and the audiences
    /// it is good for among those asked, or why it names nobody (`authenticated` then left out,
    /// as Go's `omitempty` leaves a false out, and `user` empty).
    pub fn answer(&self, outcome: &Result<(Identity, Vec<String>), String>) -> Value {
        let mut spec = json!({"token": self.token});
        if !self.audiences.is_empty() {
            spec["audiences"] = json!(self.audiences);
        }
        let status = match outcome {
            Ok((identity, audiences)) => {
                json!({"authenticated": true, "user": user_json(identity), "audiences": audiences})
            }
            Err(error) => json!({"user": {}, "error": error}),
        };
        json!({
            "kind": Review::Token.kind(),
            "apiVersion": Review::Token.api_version(),
            "metadata": answer_metadata(&self.metadata),
            "spec": spec,
            "status": status,
        })
    }
}

/// `authentication.k8s.io/v1` `UserInfo`: every field `omitempty`.
fn user_json(id: &Identity) -> Value {
    let mut u = Map::new();
    if !id.username.is_empty() {
        u.insert("username".into(), json!(id.username));
    }
    if !id.uid.is_empty() {
        u.insert("uid".into(), json!(id.uid));
    }
    if !id.groups.is_empty() {
        u.insert("groups".into(), json!(id.groups));
    }
    if !id.extra.is_empty() {
        u.insert("extra".into(), json!(id.extra));
    }
    Value::Object(u)
}

// ---------------------------------------------------------------------------------------------
// SubjectAccessReview, SelfSubjectAccessReview
// ---------------------------------------------------------------------------------------------

/// `spec.resourceAttributes`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceAttributes {
    pub namespace: String,
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// `fieldSelector` / `labelSelector`, echoed: RBAC does not look at them.
    selectors: Map<String, Value>,
}

/// `spec.nonResourceAttributes`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NonResourceAttributes {
    pub path: String,
    pub verb: String,
}

/// A posted `SubjectAccessReview` or `SelfSubjectAccessReview`, valid
/// (`pkg/registry/authorization/subjectaccessreview`, `.../selfsubjectaccessreview`).
#[derive(Debug, Clone, PartialEq)]
pub struct AccessReview {
    kind: Review,
    metadata: Map<String, Value>,
    pub resource: Option<ResourceAttributes>,
    pub non_resource: Option<NonResourceAttributes>,
    /// `spec.user`, `spec.groups`, `spec.uid`, `spec.extra` (a SubjectAccessReview's only).
    pub user: String,
    pub groups: Vec<String>,
    pub uid: String,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// ObjectMeta's fields in Go's order (how `json.Marshal` renders one in a message), but
/// `managedFields`, which a message never shows.
pub(crate) const OBJECT_META_FIELDS: [&str; 14] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
];

/// A decoded value's emptiness, as `apiequality.Semantic.DeepEqual` with the zero value sees it.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `metadata` as kube's field error renders an ObjectMeta (JSON, Go's field order, `omitempty`
/// but for `creationTimestamp`), or None when it is empty (`managedFields` aside).
fn nonempty_metadata(m: &Map<String, Value>) -> Option<String> {
    if OBJECT_META_FIELDS.iter().all(|k| m.get(*k).is_none_or(is_zero)) {
        return None;
    }
    let parts: Vec<String> = OBJECT_META_FIELDS
        .iter()
        .filter_map(|k| match m.get(*k) {
            Some(v) if !is_zero(v) => Some(format!("{}:{v}", json!(k))),
            _ if *k == "creationTimestamp" => Some("\"creationTimestamp\":null".into()),
            _ => None,
        })
        .collect();
    Some(format!("{{{}}}", parts.join(",")))
}

impl AccessReview {
    /// Reads and validates the body as kube-apiserver does
    /// (`pkg/apis/authorization/validation`): exactly one of `resourceAttributes` and
    /// `nonResourceAttributes`, a user or a group (SubjectAccessReview), an empty `metadata`.
    /// A field of the wrong type is a 400, an invalid review a 422, each naming the field.
    pub fn parse(kind: Review, body: &Value) -> Result<AccessReview, ApiError> {
        let obj = body.as_object().ok_or_else(|| undecodable(kind, "(body)", "a JSON object"))?;
        let metadata = object(obj.get("metadata"), kind, "metadata")?;
        let spec = object(obj.get("spec"), kind, "spec")?;
        let resource = match spec.get("resourceAttributes") {
            None | Some(Value::Null) => None,
            v => {
                let field = "spec.resourceAttributes";
                let m = object(v, kind, field)?;
                let t = |k: &str| text(&m, k, kind, field);
                let selectors = ["fieldSelector", "labelSelector"]
                    .into_iter()
                    .filter_map(|k| m.get(k).filter(|v| !v.is_null()).map(|v| (k.to_string(), v.clone())))
                    .collect();
                Some(ResourceAttributes {
                    namespace: t("namespace")?,
                    verb: t("verb")?,
                    group: t("group")?,
                    version: t("version")?,
                    resource: t("resource")?,
                    subresource: t("subresource")?,
                    name: t("name")?,
                    selectors,
                })
            }
        };
        let non_resource = match spec.get("nonResourceAttributes") {
            None | Some(Value::Null) => None,
            v => {
                let field = "spec.nonResourceAttributes";
                let m = object(v, kind, field)?;
                Some(NonResourceAttributes {
                    path: text(&m, "path", kind, field)?,
                    verb: text(&m, "verb", kind, field)?,
                })
            }
        };
        let (mut user, mut groups, mut uid, mut extra) = (String::new(), vec![], String::new(), BTreeMap::new());
        // A SelfSubjectAccessReviewSpec has no subject: whatever else is posted is dropped, as
        // kube's decoder drops unknown fields.
        if kind == Review::SubjectAccess {
            user = text(&spec, "user", kind, "spec")?;
            groups = texts(&spec, "groups", kind, "spec")?;
            uid = text(&spec, "uid", kind, "spec")?;
            let extras = object(spec.get("extra"), kind, "spec.extra")?;
            for k in extras.keys() {
                extra.insert(k.clone(), texts(&extras, k, kind, "spec.extra")?);
            }
        }
        let review = AccessReview { kind, metadata, resource, non_resource, user, groups, uid, extra };
        let causes = review.validate();
        if !causes.is_empty() {
            // kube names the kind of the decoded (internal) object, whose kind is empty:
            // `.authorization.k8s.io "" is invalid: ...`.
            return Err(ApiError::invalid_kind(kind.group(), "", "", causes));
        }
        Ok(review)
    }

    /// `ValidateSubjectAccessReview` / `ValidateSelfSubjectAccessReview`.
    fn validate(&self) -> Vec<Cause> {
        let mut causes = vec![];
        match (&self.resource, &self.non_resource) {
            (Some(_), Some(n)) => causes.push(Cause::invalid_rendered(
                "spec.nonResourceAttributes",
                // The internal type, without JSON tags.
                &format!("{{\"Path\":{},\"Verb\":{}}}", json!(n.path), json!(n.verb)),
                "cannot be specified in combination with resourceAttributes",
            )),
            (None, None) => causes.push(Cause::invalid_rendered(
                "spec.resourceAttributes",
                "null",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )),
            _ => {}
        }
        if self.kind == Review::SubjectAccess && self.user.is_empty() && self.groups.is_empty() {
            causes.push(Cause::invalid("spec.user", "", "at least one of user or group must be specified"));
        }
        if let Some(rendered) = nonempty_metadata(&self.metadata) {
            causes.push(Cause::invalid_rendered("metadata", &rendered, "must be empty"));
        }
        causes
    }

    /// The user to decide for: the spec's (a SubjectAccessReview: no group is added, not even
    /// `system:authenticated`, as upstream), or the requester's (a SelfSubjectAccessReview).
    pub fn subject(&self, requester: &UserInfo) -> UserInfo {
        match self.kind {
            Review::SubjectAccess => UserInfo { name: self.user.clone(), groups: self.groups.clone() },
            _ => requester.clone(),
        }
    }

    /// The request as the authorizer sees it (`ResourceAttributesFrom` /
    /// `NonResourceAttributesFrom`: the attributes as given, an empty version meaning `*`).
    pub fn request(&self) -> RequestInfo {
        match (&self.resource, &self.non_resource) {
            (Some(r), _) => RequestInfo {
                is_resource_request: true,
                path: String::new(),
                verb: r.verb.clone(),
                api_group: r.group.clone(),
                api_version: if r.version.is_empty() { "*".into() } else { r.version.clone() },
                namespace: r.namespace.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone(),
                name: r.name.clone(),
            },
            (None, Some(n)) => RequestInfo { path: n.path.clone(), verb: n.verb.clone(), ..RequestInfo::default() },
            // `parse` refuses a review with neither.
            (None, None) => RequestInfo::default(),
        }
    }

    /// The answer: the review with `status` (`allowed` always there, `denied` never: RBAC has
    /// no opinion on what it does not allow; `reason` when there is one).
    pub fn answer(&self, verdict: &Verdict) -> Value {
        let mut spec = Map::new();
        if let Some(r) = &self.resource {
            let mut m = Map::new();
            for (k, v) in [
                ("namespace", &r.namespace),
                ("verb", &r.verb),
                ("group", &r.group),
                ("version", &r.version),
                ("resource", &r.resource),
                ("subresource", &r.subresource),
                ("name", &r.name),
            ] {
                if !v.is_empty() {
                    m.insert(k.into(), json!(v));
                }
            }
            m.extend(r.selectors.clone());
            spec.insert("resourceAttributes".into(), Value::Object(m));
        }
        if let Some(n) = &self.non_resource {
            let mut m = Map::new();
            for (k, v) in [("path", &n.path), ("verb", &n.verb)] {
                if !v.is_empty() {
                    m.insert(k.into(), json!(v));
                }
            }
            spec.insert("nonResourceAttributes".into(), Value::Object(m));
        }
        if !self.user.is_empty() {
            spec.insert("user".into(), json!(self.user));
        }
        if !self.groups.is_empty() {
            spec.insert("groups".into(), json!(self.groups));
        }
        if !self.extra.is_empty() {
            spec.insert("extra".into(), json!(self.extra));
        }
        if !self.uid.is_empty() {
            spec.insert("uid".into(), json!(self.uid));
        }
        let mut status = json!({"allowed": verdict.allowed});
        if !verdict.reason.is_empty() {
            status["reason"] = json!(verdict.reason);
        }
        json!({
            "kind": self.kind.kind(),
            "apiVersion": self.kind.api_version(),
            "metadata": answer_metadata(&self.metadata),
            "spec": spec,
            "status": status,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Protobuf
// ---------------------------------------------------------------------------------------------

/// A review in Kubernetes' protobuf encoding (`k8s\0`, then a `runtime.Unknown` whose `raw` is
/// the message), which client-go's typed clients post (`kubectl auth can-i`), as the JSON object
/// [`TokenReview::parse`] / [`AccessReview::parse`] read. Fields these reviews do not use are
/// skipped.
pub fn from_protobuf(kind: Review, body: &[u8]) -> Result<Value, String> {
    let envelope = body.strip_prefix(b"k8s\0").ok_or("missing the k8s protobuf envelope (k8s\\0)")?;
    let mut raw: &[u8] = &[];
    for (num, f) in fields(envelope)? {
        if let (2, Field::Bytes(b)) = (num, f) {
            raw = b;
        }
    }
    let (mut metadata, mut spec) = (Map::new(), Map::new());
    for (num, f) in fields(raw)? {
        match (num, f) {
            (1, Field::Bytes(m)) => {
                metadata = decode(m, &[(1, "name"), (2, "generateName"), (3, "namespace"), (5, "uid")])?
            }
            (2, Field::Bytes(m)) => spec = spec_from_protobuf(kind, m)?,
            _ => {}
        }
    }
    Ok(json!({"apiVersion": kind.api_version(), "kind": kind.kind(), "metadata": metadata, "spec": spec}))
}

/// The string fields `names` (field number, JSON name) of one message.
fn decode(message: &[u8], names: &[(u64, &str)]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for (num, f) in fields(message)? {
        if let Some((_, name)) = names.iter().find(|(n, _)| *n == num) {
            out.insert(name.to_string(), json!(string(f)?));
        }
    }
    Ok(out)
}

fn push(out: &mut Map<String, Value>, key: &str, f: Field<'_>) -> Result<(), String> {
    let v = string(f)?;
    match out.entry(key).or_insert_with(|| json!([])) {
        Value::Array(a) => a.push(json!(v)),
        _ => return Err(format!("{key} is not a list")),
    }
    Ok(())
}

fn spec_from_protobuf(kind: Review, m: &[u8]) -> Result<Map<String, Value>, String> {
    let mut spec = Map::new();
    for (num, f) in fields(m)? {
        match (kind, num, f) {
            (Review::Token, 1, f) => {
                spec.insert("token".into(), json!(string(f)?));
            }
            (Review::Token, 2, f) => push(&mut spec, "audiences", f)?,
            (Review::SubjectAccess | Review::SelfSubjectAccess, 1, Field::Bytes(r)) => {
                let names = [
                    (1, "namespace"),
                    (2, "verb"),
                    (3, "group"),
                    (4, "version"),
                    (5, "resource"),
                    (6, "subresource"),
                    (7, "name"),
                ];
                spec.insert("resourceAttributes".into(), Value::Object(decode(r, &names)?));
            }
            (Review::SubjectAccess | Review::SelfSubjectAccess, 2, Field::Bytes(n)) => {
                spec.insert("nonResourceAttributes".into(), Value::Object(decode(n, &[(1, "path"), (2, "verb")])?));
            }
            (Review::SubjectAccess, 3, f) => {
                spec.insert("user".into(), json!(string(f)?));
            }
            (Review::SubjectAccess, 4, f) => push(&mut spec, "groups", f)?,
            (Review::SubjectAccess, 5, Field::Bytes(entry)) => {
                // map<string, ExtraValue>: entries of key = 1, value = 2 (ExtraValue: items = 1).
                let (mut key, mut items) = (String::new(), Map::new());
                for (num, f) in fields(entry)? {
                    match (num, f) {
                        (1, f) => key = string(f)?,
                        (2, Field::Bytes(v)) => {
                            for (num, f) in fields(v)? {
                                if num == 1 {
                                    push(&mut items, "items", f)?;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                let extra = spec.entry("extra").or_insert_with(|| json!({}));
                extra[key] = items.remove("items").unwrap_or_else(|| json!([]));
            }
            (Review::SubjectAccess, 6, f) => {
                spec.insert("uid".into(), json!(string(f)?));
            }
            _ => {}
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(e: ApiError) -> (u16, String) {
        (e.code, e.message)
    }

    /// (case, body, (token, audiences) or (code, message))
    type TokenCase<'a> = (&'a str, Value, Result<(&'a str, Vec<&'a str>), (u16, &'a str)>);

    #[test]
    fn a_token_review_needs_a_token_and_names_a_mistyped_field() {
        let cases: Vec<TokenCase> = vec![
            ("token only", json!({"spec": {"token": "t"}}), Ok(("t", vec![]))),
            ("audiences", json!({"spec": {"token": "t", "audiences": ["a", "b"]}}), Ok(("t", vec!["a", "b"]))),
            (
                "kubectl's body",
                json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                       "metadata": {"creationTimestamp": null}, "spec": {"token": "t"}, "status": {"user": {}}}),
                Ok(("t", vec![])),
            ),
            ("no token", json!({"spec": {}}), Err((400, "token is required for TokenReview in authentication"))),
            ("no spec", json!({}), Err((400, "token is required for TokenReview in authentication"))),
            (
                "token not a string",
                json!({"spec": {"token": 1}}),
                Err((
                    400,
                    "TokenReview in version \"v1\" cannot be handled as a TokenReview: spec.token: must be a string",
                )),
            ),
            (
                "audiences not strings",
                json!({"spec": {"token": "t", "audiences": "a"}}),
                Err((
                    400,
                    "TokenReview in version \"v1\" cannot be handled as a TokenReview: spec.audiences: must be a list of strings",
                )),
            ),
            (
                "spec not an object",
                json!({"spec": []}),
                Err((400, "TokenReview in version \"v1\" cannot be handled as a TokenReview: spec: must be an object")),
            ),
            (
                "not an object",
                json!("x"),
                Err((
                    400,
                    "TokenReview in version \"v1\" cannot be handled as a TokenReview: (body): must be a JSON object",
                )),
            ),
        ];
        for (case, body, want) in cases {
            let got = TokenReview::parse(&body).map_err(messages);
            let got = got.as_ref().map(|r| (r.token.as_str(), r.audiences.iter().map(String::as_str).collect()));
            let want = want.map_err(|(c, m)| (c, m.to_string()));
            assert_eq!(got, want.as_ref().map(|(t, a)| (*t, a.clone())), "{case}");
        }
    }

    #[test]
    fn a_token_review_answers_the_user_or_the_error_as_kube_apiserver() {
        let review = TokenReview::parse(&json!({"metadata": {"name": "x"}, "spec": {"token": "t"}})).unwrap();
        let id = Identity {
            username: "system:serviceaccount:ns:sa".into(),
            uid: "u1".into(),
            groups: vec!["system:serviceaccounts".into()],
            extra: [("k".to_string(), vec!["v".to_string()])].into_iter().collect(),
        };
        assert_eq!(
            review.answer(&Ok((id, vec!["api".into()]))),
            json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                   "metadata": {"name": "x", "creationTimestamp": null}, "spec": {"token": "t"},
                   "status": {"authenticated": true, "audiences": ["api"],
                              "user": {"username": "system:serviceaccount:ns:sa", "uid": "u1",
                                       "groups": ["system:serviceaccounts"], "extra": {"k": ["v"]}}}})
        );
        // Not authenticated: `authenticated` (false) and the empty user's fields are left out.
        let with_audiences = TokenReview::parse(&json!({"spec": {"token": "t", "audiences": ["a"]}})).unwrap();
        assert_eq!(
            with_audiences.answer(&Err("invalid bearer token".into())),
            json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                   "metadata": {"creationTimestamp": null}, "spec": {"token": "t", "audiences": ["a"]},
                   "status": {"user": {}, "error": "invalid bearer token"}})
        );
        // An identity without uid, groups or extra says so by leaving them out.
        let admin = Identity { username: "a".into(), ..Identity::default() };
        assert_eq!(review.answer(&Ok((admin, vec![])))["status"]["user"], json!({"username": "a"}));
    }

    /// (case, kind, body) → the 422's causes as kube-apiserver words them, or none.
    #[test]
    fn an_access_review_needs_exactly_one_kind_of_attributes_and_a_subject() {
        let sar = Review::SubjectAccess;
        let ssar = Review::SelfSubjectAccess;
        let res = json!({"verb": "get", "resource": "pods"});
        let non = json!({"path": "/metrics", "verb": "get"});
        let cases: Vec<(&str, Review, Value, Vec<&str>)> = vec![
            ("resource", sar, json!({"spec": {"user": "u", "resourceAttributes": res}}), vec![]),
            ("non-resource, by group", sar, json!({"spec": {"groups": ["g"], "nonResourceAttributes": non}}), vec![]),
            (
                "neither",
                sar,
                json!({"spec": {"user": "u"}}),
                vec![
                    "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ],
            ),
            (
                "both",
                sar,
                json!({"spec": {"user": "u", "resourceAttributes": res, "nonResourceAttributes": non}}),
                vec![
                    "spec.nonResourceAttributes: Invalid value: {\"Path\":\"/metrics\",\"Verb\":\"get\"}: cannot be specified in combination with resourceAttributes",
                ],
            ),
            (
                "no subject",
                sar,
                json!({"spec": {"resourceAttributes": res}}),
                vec!["spec.user: Invalid value: \"\": at least one of user or group must be specified"],
            ),
            (
                "nothing",
                sar,
                json!({}),
                vec![
                    "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                    "spec.user: Invalid value: \"\": at least one of user or group must be specified",
                ],
            ),
            (
                "named",
                sar,
                json!({"metadata": {"name": "x", "labels": {}}, "spec": {"user": "u", "resourceAttributes": res}}),
                vec!["metadata: Invalid value: {\"name\":\"x\",\"creationTimestamp\":null}: must be empty"],
            ),
            (
                "kubectl's empty metadata",
                sar,
                json!({"metadata": {"creationTimestamp": null}, "spec": {"user": "u", "resourceAttributes": res}}),
                vec![],
            ),
            ("self: no subject needed", ssar, json!({"spec": {"resourceAttributes": res}}), vec![]),
            (
                "self: neither",
                ssar,
                json!({"spec": {"user": "u"}}),
                vec![
                    "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ],
            ),
        ];
        for (case, kind, body, want) in cases {
            let got = match AccessReview::parse(kind, &body) {
                Ok(_) => vec![],
                Err(e) => {
                    assert_eq!((e.code, e.reason), (422, "Invalid"), "{case}");
                    let d = e.details.unwrap();
                    assert_eq!(d, json!({"group": "authorization.k8s.io", "causes": d["causes"]}), "{case}");
                    d["causes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
                        .collect()
                }
            };
            assert_eq!(got, want, "{case}");
        }
        let e = AccessReview::parse(sar, &json!({"spec": {"user": "u"}})).unwrap_err();
        assert_eq!(
            e.message,
            ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"
        );
    }

    #[test]
    fn an_access_review_names_a_mistyped_field() {
        let cases = [
            (json!({"spec": {"user": 1}}), "spec.user: must be a string"),
            (json!({"spec": {"groups": "g"}}), "spec.groups: must be a list of strings"),
            (json!({"spec": {"resourceAttributes": []}}), "spec.resourceAttributes: must be an object"),
            (json!({"spec": {"resourceAttributes": {"verb": 1}}}), "spec.resourceAttributes.verb: must be a string"),
            (
                json!({"spec": {"nonResourceAttributes": {"path": []}}}),
                "spec.nonResourceAttributes.path: must be a string",
            ),
            (json!({"spec": {"extra": {"k": "v"}}}), "spec.extra.k: must be a list of strings"),
        ];
        for (body, want) in cases {
            let e = AccessReview::parse(Review::SubjectAccess, &body).unwrap_err();
            assert_eq!(
                (e.code, e.message),
                (
                    400,
                    format!("SubjectAccessReview in version \"v1\" cannot be handled as a SubjectAccessReview: {want}")
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn an_access_review_asks_about_the_attributes_as_given() {
        let body = json!({"spec": {"user": "u", "groups": ["g"], "resourceAttributes":
            {"namespace": "ns", "verb": "update", "group": "jobset.x-k8s.io", "resource": "jobsets",
             "subresource": "status", "name": "x"}}});
        let r = AccessReview::parse(Review::SubjectAccess, &body).unwrap();
        let requester = UserInfo { name: "me".into(), groups: vec!["mine".into()] };
        assert_eq!(r.subject(&requester), UserInfo { name: "u".into(), groups: vec!["g".into()] });
        let want = RequestInfo {
            is_resource_request: true,
            path: String::new(),
            verb: "update".into(),
            api_group: "jobset.x-k8s.io".into(),
            api_version: "*".into(),
            namespace: "ns".into(),
            resource: "jobsets".into(),
            subresource: "status".into(),
            name: "x".into(),
        };
        assert_eq!(r.request(), want);
        let path = AccessReview::parse(
            Review::SelfSubjectAccess,
            &json!({"spec": {"user": "ignored", "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}),
        )
        .unwrap();
        assert_eq!(path.subject(&requester), requester, "a self review asks about the requester");
        assert_eq!(
            path.request(),
            RequestInfo { path: "/metrics".into(), verb: "get".into(), ..RequestInfo::default() }
        );
        assert_eq!(path.user, "", "a self review has no subject of its own");
    }

    #[test]
    fn an_access_review_answers_allowed_and_the_reason() {
        let r = AccessReview::parse(
            Review::SubjectAccess,
            &json!({"spec": {"user": "u", "uid": "1", "extra": {"k": ["v"]},
                   "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}),
        )
        .unwrap();
        let allowed = Verdict { allowed: true, reason: "RBAC: allowed by x".into() };
        assert_eq!(
            r.answer(&allowed),
            json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                   "metadata": {"creationTimestamp": null},
                   "spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}, "user": "u",
                            "uid": "1", "extra": {"k": ["v"]}},
                   "status": {"allowed": true, "reason": "RBAC: allowed by x"}})
        );
        // Not allowed: `allowed` is there (no `omitempty`), `denied` and an empty reason are not.
        assert_eq!(r.answer(&Verdict { allowed: false, reason: String::new() })["status"], json!({"allowed": false}));
    }

    /// Protobuf's encoding of a length-delimited field.
    fn pb(num: u64, b: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, b.len() as u8];
        out.extend_from_slice(b);
        out
    }

    fn envelope(message: &[u8]) -> Vec<u8> {
        [b"k8s\0".to_vec(), pb(2, message)].concat()
    }

    #[test]
    fn a_protobuf_review_reads_as_its_json() {
        // SelfSubjectAccessReview{spec{resourceAttributes{namespace, verb, resource}}}, as
        // `kubectl auth can-i get pods -n team` posts it.
        let attrs = [pb(1, b"team"), pb(2, b"get"), pb(5, b"pods")].concat();
        let body = envelope(&[pb(1, &[]), pb(2, &pb(1, &attrs))].concat());
        let v = from_protobuf(Review::SelfSubjectAccess, &body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods"}}})
        );
        // SubjectAccessReview{spec{nonResourceAttributes, user, groups, extra, uid}}.
        let extra = [pb(1, b"k"), pb(2, &[pb(1, b"v1"), pb(1, b"v2")].concat())].concat();
        let spec = [
            pb(2, &[pb(1, b"/metrics"), pb(2, b"get")].concat()),
            pb(3, b"u"),
            pb(4, b"g1"),
            pb(4, b"g2"),
            pb(5, &extra),
            pb(6, b"id"),
        ]
        .concat();
        let v = from_protobuf(Review::SubjectAccess, &envelope(&pb(2, &spec))).unwrap();
        assert_eq!(
            v["spec"],
            json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}, "user": "u",
                   "groups": ["g1", "g2"], "extra": {"k": ["v1", "v2"]}, "uid": "id"})
        );
        // TokenReview{spec{token, audiences}}.
        let spec = [pb(1, b"tok"), pb(2, b"a")].concat();
        let v = from_protobuf(Review::Token, &envelope(&[pb(1, &pb(1, b"n")), pb(2, &spec)].concat())).unwrap();
        assert_eq!(v["metadata"], json!({"name": "n"}));
        assert_eq!(v["spec"], json!({"token": "tok", "audiences": ["a"]}));
        for bad in [&b"{}"[..], b"k8s\0\x12\x05ab", b"k8s\0\x0f"] {
            assert!(from_protobuf(Review::Token, bad).is_err(), "{bad:?}");
        }
    }
}
