//! Who a request comes from, the tokens that say so, and what a pod's bound token may do.
//!
//! The server's own bearer token (`tls::Credentials::token`) may do anything. Two kinds of
//! tokens are signed with a key derived from it (HMAC-SHA256), so they survive an API server
//! restart:
//!
//! - **Service-account tokens** (`jssa1.<claims>.<tag>`), issued through the TokenRequest API
//!   (`POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`, `kubectl create token`), carry
//!   the ServiceAccount's namespace, name and uid and an expiry. One is accepted until it expires
//!   and while that ServiceAccount (same uid) exists; its user is
//!   `system:serviceaccount:<ns>:<name>` in the groups `system:serviceaccounts`,
//!   `system:serviceaccounts:<ns>` and `system:authenticated`, and RBAC ([`crate::rbac`]) decides
//!   what it may do.
//! - **Pod-bound tokens** (`jsp1.<claims>.<tag>`): local mode gives each pod a token bound to it
//!   (mounted by the node agent at the usual `/var/run/secrets/kubernetes.io/serviceaccount/token`),
//!   so the in-place restart agent inside the pod can use the standard in-cluster configuration.
//!   Such a token grants exactly what the in-place restart design's Role and
//!   ValidatingAdmissionPolicy grant together, scoped tighter (to the pod's own JobSet and own
//!   pod), without RBAC objects:
//!   - discovery (`/api`, `/apis`, ...), as every authenticated user may;
//!   - `get` of its own pod, `get` of its own JobSet, `list`/`watch` of JobSets with the field
//!     selector `metadata.name=<its JobSet>`;
//!   - `patch` of its own pod (as the shipped Role, config/in-place-restart/rbac.yaml) changing
//!     nothing but the annotation `jobset.sigs.k8s.io/in-place-restart-attempt`.
//!
//!   It stops working once its pod (same uid) is gone, like a Kubernetes bound token.
//!
//! [`Authenticator`] reads all three kinds; what a token names is checked against the stored
//! pod or ServiceAccount by `ApiServer::authenticate_token`, for requests and for TokenReviews
//! alike. The server's own token is the user [`ADMIN_USERNAME`] in [`crate::rbac::MASTERS`].
//!
//! A refusal is a 403 worded as kube-apiserver's ([`forbidden`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::Method;
use ring::hmac;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::rbac::{AUTHENTICATED, RequestInfo, UserInfo};
use crate::resources::ResourceDef;
use crate::selector::FieldSelector;

/// The annotation the in-place restart agent writes on its pod.
pub use jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
use jobset_api::jobset::keys::JOBSET_NAME;

/// The authenticated caller of a request (a request extension; none means in-process or the
/// server's own token: admin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    Admin,
    Pod(PodIdentity),
    /// A service-account token's holder, authorized by RBAC before the request is served.
    ServiceAccount(ServiceAccountClaims),
}

/// The user name of the server's own token (and of in-process callers), in the groups
/// [`crate::rbac::MASTERS`] and `system:authenticated`: cluster admin, as a kubeadm cluster's
/// `kubernetes-admin` or a static token in `system:masters` is.
pub const ADMIN_USERNAME: &str = "jobset:admin";

/// The `user.extra` keys kube-apiserver sets for a token bound to a pod.
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// Who a token names, as kube's `user.Info` (what a TokenReview reports).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl Identity {
    /// The user and groups RBAC decides by.
    pub fn user_info(&self) -> UserInfo {
        UserInfo { name: self.username.clone(), groups: self.groups.clone() }
    }
}

impl User {
    /// The identity kube-apiserver would give this caller. `service_account_uid` is the uid of a
    /// pod's ServiceAccount, when it exists (a pod-bound token carries none).
    pub fn identity(&self, service_account_uid: Option<&str>) -> Identity {
        match self {
            User::Admin => Identity {
                username: ADMIN_USERNAME.into(),
                groups: vec![crate::rbac::MASTERS.into(), AUTHENTICATED.into()],
                ..Identity::default()
            },
            User::ServiceAccount(sa) => {
                let u = sa.user_info();
                Identity { username: u.name, uid: sa.uid.clone(), groups: u.groups, ..Identity::default() }
            }
            User::Pod(id) => {
                let u = crate::rbac::UserInfo { name: id.username(), groups: service_account_groups(&id.namespace) };
                let extra = [(EXTRA_POD_NAME, &id.pod), (EXTRA_POD_UID, &id.uid)]
                    .map(|(k, v)| (k.to_string(), vec![v.clone()]));
                Identity {
                    username: u.name,
                    uid: service_account_uid.unwrap_or_default().into(),
                    groups: u.groups,
                    extra: extra.into_iter().collect(),
                }
            }
        }
    }
}

/// The groups of a service account of `namespace`: `system:serviceaccounts`,
/// `system:serviceaccounts:<namespace>`, `system:authenticated`.
fn service_account_groups(namespace: &str) -> Vec<String> {
    vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}"), AUTHENTICATED.into()]
}

/// What a bearer token claims, once its signature (or, for the server's own token, its value)
/// and audience are checked; whether the pod or ServiceAccount it names still exists is the
/// caller's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    Admin,
    Pod(PodIdentity),
    ServiceAccount(ServiceAccountClaims),
}

/// The message of kube-apiserver's bearer-token authenticator for a token no authenticator
/// accepted and none had anything more to say about.
pub const INVALID_BEARER_TOKEN: &str = "invalid bearer token";

/// The tokens this server accepts: its own, pod-bound and service-account tokens, the latter two
/// signed with keys derived from the first.
pub struct Authenticator {
    admin: String,
    pods: PodTokens,
    service_accounts: ServiceAccountTokens,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator(<redacted>)")
    }
}

impl Authenticator {
    pub fn new(server_token: &str) -> Authenticator {
        Authenticator {
            admin: server_token.to_string(),
            pods: PodTokens::new(server_token),
            service_accounts: ServiceAccountTokens::new(server_token),
        }
    }

    pub fn service_accounts(&self) -> &ServiceAccountTokens {
        &self.service_accounts
    }

    /// What `token` claims at `now` (Unix seconds), for one of `audiences` (the API's,
    /// [`API_AUDIENCE`], when empty), with the audiences it is good for among them; or why it
    /// is worth nothing, worded as kube-apiserver's authenticators. The server's own and
    /// pod-bound tokens are meant for the API only (upstream's audience-agnostic authenticators);
    /// a service-account token for the audiences it was issued for.
    pub fn read(&self, token: &str, now: i64, audiences: &[String]) -> Result<(Claimed, Vec<String>), String> {
        let api = [API_AUDIENCE.to_string()];
        let wanted = if audiences.is_empty() { &api[..] } else { audiences };
        if let Some(checked) = self.service_accounts.check(token, now, wanted) {
            return checked.map(|(claims, good)| (Claimed::ServiceAccount(claims), good));
        }
        let claimed = if crate::tls::token_is(&self.admin, token) {
            Claimed::Admin
        } else if let Some(id) = self.pods.verify(token) {
            Claimed::Pod(id)
        } else {
            return Err(INVALID_BEARER_TOKEN.into());
        };
        // Audience-agnostic: good for the API's audience only, and nothing said otherwise.
        if !wanted.iter().any(|a| a == API_AUDIENCE) {
            return Err(INVALID_BEARER_TOKEN.into());
        }
        Ok((claimed, api.to_vec()))
    }
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quoted(v: &[String]) -> String {
    format!("[{}]", v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "))
}

/// Signs and checks `<prefix><claims>.<tag>` tokens with a key derived from the server's token
/// for one purpose (whoever holds the server token may do anything anyway).
struct Signer {
    key: hmac::Key,
    prefix: &'static str,
}

impl Signer {
    fn new(server_token: &str, purpose: &[u8], prefix: &'static str) -> Signer {
        let derive = hmac::Key::new(hmac::HMAC_SHA256, server_token.as_bytes());
        let key = hmac::sign(&derive, purpose);
        Signer { key: hmac::Key::new(hmac::HMAC_SHA256, key.as_ref()), prefix }
    }

    fn sign(&self, claims: &impl Serialize) -> String {
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, claims.as_bytes()));
        format!("{}{claims}.{tag}", self.prefix)
    }

    fn verify<T: DeserializeOwned>(&self, token: &str) -> Option<T> {
        let (claims, tag) = token.strip_prefix(self.prefix)?.split_once('.')?;
        hmac::verify(&self.key, claims.as_bytes(), &URL_SAFE_NO_PAD.decode(tag).ok()?).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()
    }
}

/// The pod a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentity {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub service_account: String,
    /// The pod's `jobset.sigs.k8s.io/jobset-name` label when the token was issued.
    pub jobset: Option<String>,
}

impl PodIdentity {
    /// The identity of a pod object (JSON as stored).
    pub fn of(pod: &Value) -> PodIdentity {
        let s = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let sa = s("/spec/serviceAccountName");
        PodIdentity {
            namespace: s("/metadata/namespace"),
            pod: s("/metadata/name"),
            uid: s("/metadata/uid"),
            service_account: if sa.is_empty() { "default".into() } else { sa },
            jobset: pod
                .pointer("/metadata/labels")
                .and_then(|l| l.get(JOBSET_NAME))
                .and_then(Value::as_str)
                .map(Into::into),
        }
    }

    /// The user name Kubernetes gives a service account.
    pub fn username(&self) -> String {
        crate::rbac::service_account_username(&self.namespace, &self.service_account)
    }
}

/// Issues and checks pod-bound tokens.
pub struct PodTokens {
    signer: Signer,
}

impl std::fmt::Debug for PodTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PodTokens(<redacted>)")
    }
}

impl PodTokens {
    /// Keys derived from the server's token: whoever holds that may do anything anyway.
    pub fn new(server_token: &str) -> PodTokens {
        PodTokens { signer: Signer::new(server_token, b"jobset-rs pod-bound service account tokens v1", "jsp1.") }
    }

    pub fn issue(&self, id: &PodIdentity) -> String {
        self.signer.sign(id)
    }

    /// The identity a token names, if this server issued it (whether the pod still exists is the
    /// caller's check).
    pub fn verify(&self, token: &str) -> Option<PodIdentity> {
        self.signer.verify(token)
    }
}

// ---------------------------------------------------------------------------------------------
// Service-account tokens
// ---------------------------------------------------------------------------------------------

/// The audience tokens are for when a TokenRequest names none, and the one a token must have to
/// reach this server: kube-apiserver's `--api-audiences`, its service-account issuer (this value
/// on kind and kubeadm clusters).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// `spec.expirationSeconds` when a TokenRequest leaves it out (kube's defaulting).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest and longest expiry a TokenRequest may ask for (`ValidateTokenRequest`).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// What a service-account token says: whose it is and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAccountClaims {
    #[serde(rename = "ns")]
    pub namespace: String,
    pub name: String,
    /// The ServiceAccount's uid: a ServiceAccount deleted and created again under the same name
    /// does not revive the token.
    pub uid: String,
    /// Unix seconds from which the token is worth nothing.
    pub exp: i64,
    /// Who the token is for (`spec.audiences`); the API server accepts it only if it has
    /// [`API_AUDIENCE`].
    pub aud: Vec<String>,
}

impl ServiceAccountClaims {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        crate::rbac::service_account_username(&self.namespace, &self.name)
    }

    /// The user and groups kube-apiserver gives a service account.
    pub fn user_info(&self) -> UserInfo {
        UserInfo { name: self.username(), groups: service_account_groups(&self.namespace) }
    }
}

/// Issues and checks service-account tokens.
pub struct ServiceAccountTokens {
    signer: Signer,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceAccountTokens(<redacted>)")
    }
}

impl ServiceAccountTokens {
    /// Keys derived from the server's token (another key than pod-bound tokens').
    pub fn new(server_token: &str) -> ServiceAccountTokens {
        ServiceAccountTokens { signer: Signer::new(server_token, b"jobset-rs service account tokens v1", "jssa1.") }
    }

    pub fn issue(&self, claims: &ServiceAccountClaims) -> String {
        self.signer.sign(claims)
    }

    /// The claims of a token this server issued, unexpired at `now` (Unix seconds) and meant for
    /// this server. Whether the ServiceAccount still exists is the caller's check.
    pub fn verify(&self, token: &str, now: i64) -> Option<ServiceAccountClaims> {
        self.check(token, now, &[API_AUDIENCE.into()])?.ok().map(|(claims, _)| claims)
    }

    /// None if this server did not sign `token`; else its claims, if it is meant for one of
    /// `audiences` (with those it is good for) and unexpired at `now`, or why not, worded as
    /// kube-apiserver's service-account authenticator (audience first, then expiry).
    pub fn check(
        &self,
        token: &str,
        now: i64,
        audiences: &[String],
    ) -> Option<Result<(ServiceAccountClaims, Vec<String>), String>> {
        let claims: ServiceAccountClaims = self.signer.verify(token)?;
        let good: Vec<String> = claims.aud.iter().filter(|a| audiences.contains(a)).cloned().collect();
        Some(if good.is_empty() {
            Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(&claims.aud),
                go_quoted(audiences)
            ))
        } else if now >= claims.exp {
            Err("service account token has expired".into())
        } else {
            Ok((claims, good))
        })
    }
}

/// A `TokenRequest` (`authentication.k8s.io/v1`) posted to `serviceaccounts/<name>/token`, read
/// and checked as kube-apiserver's `TokenREST.Create` does.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRequest {
    /// The posted object's `metadata` (echoed in the answer).
    metadata: serde_json::Map<String, Value>,
    pub expiration_seconds: i64,
    pub audiences: Vec<String>,
    /// `metadata.uid`: when set, the ServiceAccount's uid must be it.
    pub uid: Option<String>,
    /// `spec.boundObjectRef`, which this server does not support.
    bound_object: Option<Value>,
}

const TOKEN_REQUEST_GROUP: &str = "authentication.k8s.io";
const TOKEN_REQUEST_KIND: &str = "TokenRequest";

fn undecodable(field: &str, what: &str) -> ApiError {
    ApiError::bad_request(format!(
        "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: {field}: must be {what}"
    ))
}

impl TokenRequest {
    /// Reads the posted body for ServiceAccount `name` of `namespace`: its `metadata.name` and
    /// `metadata.namespace`, when set, must be those (422 otherwise); a field of the wrong type is
    /// a 400 naming it.
    pub fn parse(body: &Value, namespace: &str, name: &str) -> Result<TokenRequest, ApiError> {
        let obj = body.as_object().ok_or_else(|| undecodable("(body)", "a JSON object"))?;
        let metadata = match obj.get("metadata") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(undecodable("metadata", "an object")),
        };
        let meta = |k: &str| -> Result<Option<&str>, ApiError> {
            match metadata.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
                Some(_) => Err(undecodable(&format!("metadata.{k}"), "a string")),
            }
        };
        for (k, want, what) in [("name", name, "name"), ("namespace", namespace, "namespace")] {
            if let Some(v) = meta(k)?
                && v != want
            {
                return Err(ApiError::invalid_kind(
                    TOKEN_REQUEST_GROUP,
                    TOKEN_REQUEST_KIND,
                    name,
                    vec![Cause::invalid(
                        format!("metadata.{k}"),
                        v,
                        &format!("must match the service account {what} if specified"),
                    )],
                ));
            }
        }
        let uid = meta("uid")?.map(str::to_string);
        let spec = match obj.get("spec") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(undecodable("spec", "an object")),
        };
        let expiration_seconds = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(v) => v.as_i64().ok_or_else(|| undecodable("spec.expirationSeconds", "an integer"))?,
        };
        let audiences = match spec.get("audiences") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| undecodable("spec.audiences", "a list of strings"))?,
            Some(_) => return Err(undecodable("spec.audiences", "a list of strings")),
        };
        let audiences = if audiences.is_empty() { vec![API_AUDIENCE.to_string()] } else { audiences };
        let bound_object = spec.get("boundObjectRef").filter(|v| !v.is_null()).cloned();
        Ok(TokenRequest { metadata, expiration_seconds, audiences, uid, bound_object })
    }

    /// The checks made once the ServiceAccount is found (uid `sa_uid`): the request's uid (409),
    /// the expiry's bounds (422), and no bound object (400: this server issues unbound tokens).
    pub fn check(&self, name: &str, sa_uid: &str) -> Result<(), ApiError> {
        if let Some(uid) = self.uid.as_deref().filter(|u| *u != sa_uid) {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {TOKEN_REQUEST_KIND}.{TOKEN_REQUEST_GROUP} \"{name}\": the UID in the token request ({uid}) does not match the UID of the service account ({sa_uid})"
                ),
            ));
        }
        let secs = self.expiration_seconds;
        let problem = if secs < MIN_EXPIRATION_SECONDS {
            Some("may not specify a duration less than 10 minutes")
        } else if secs > MAX_EXPIRATION_SECONDS {
            Some("may not specify a duration larger than 2^32 seconds")
        } else {
            None
        };
        if let Some(p) = problem {
            return Err(ApiError::invalid_kind(
                TOKEN_REQUEST_GROUP,
                TOKEN_REQUEST_KIND,
                "",
                vec![Cause::invalid_rendered("spec.expirationSeconds", &secs.to_string(), p)],
            ));
        }
        if let Some(r) = &self.bound_object {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
            let (group, version) = s("apiVersion").rsplit_once('/').unwrap_or(("", s("apiVersion")));
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {group}/{version}, Kind={} (this server issues unbound tokens only)",
                s("kind")
            )));
        }
        Ok(())
    }

    /// The claims of the token to issue at `now` (Unix seconds).
    pub fn claims(&self, namespace: &str, name: &str, sa_uid: &str, now: i64) -> ServiceAccountClaims {
        ServiceAccountClaims {
            namespace: namespace.into(),
            name: name.into(),
            uid: sa_uid.into(),
            exp: now.saturating_add(self.expiration_seconds),
            aud: self.audiences.clone(),
        }
    }

    /// The answer: the request with its defaults, name, namespace and creation time filled in,
    /// and `status.token` / `status.expirationTimestamp`.
    pub fn response(&self, claims: &ServiceAccountClaims, now: i64, token: &str) -> Value {
        let time = |secs: i64| {
            jiff::Timestamp::from_second(secs)
                .map(crate::object::rfc3339_seconds)
                .unwrap_or_else(|_| "9999-12-31T23:59:59Z".into())
        };
        let mut metadata = self.metadata.clone();
        metadata.insert("name".into(), json!(claims.name));
        metadata.insert("namespace".into(), json!(claims.namespace));
        metadata.insert("creationTimestamp".into(), json!(time(now)));
        json!({
            "kind": TOKEN_REQUEST_KIND,
            "apiVersion": format!("{TOKEN_REQUEST_GROUP}/v1"),
            "metadata": metadata,
            "spec": {
                "audiences": self.audiences,
                "expirationSeconds": self.expiration_seconds,
                "boundObjectRef": null,
            },
            "status": {"token": token, "expirationTimestamp": time(claims.exp)},
        })
    }
}

/// The media type of Kubernetes' protobuf encoding, which client-go's typed clients send
/// (`kubectl create token` posts its TokenRequest so).
pub const PROTOBUF_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// A `TokenRequest` in Kubernetes' protobuf encoding (`k8s\0`, then a `runtime.Unknown` whose
/// `raw` is the `TokenRequest` message), as the JSON object [`TokenRequest::parse`] reads:
/// `metadata.name`, `.namespace`, `.uid`; `spec.audiences`, `.expirationSeconds`,
/// `.boundObjectRef`. Other fields are skipped.
pub fn token_request_from_protobuf(body: &[u8]) -> Result<Value, String> {
    use proto::{Field, fields, string};
    let envelope = body.strip_prefix(b"k8s\0").ok_or("missing the k8s protobuf envelope (k8s\\0)")?;
    let mut raw: &[u8] = &[];
    for (num, f) in fields(envelope)? {
        if let (2, Field::Bytes(b)) = (num, f) {
            raw = b;
        }
    }
    let (mut metadata, mut spec) = (serde_json::Map::new(), serde_json::Map::new());
    for (num, f) in fields(raw)? {
        match (num, f) {
            (1, Field::Bytes(m)) => {
                for (num, f) in fields(m)? {
                    let key = match num {
                        1 => "name",
                        3 => "namespace",
                        5 => "uid",
                        _ => continue,
                    };
                    metadata.insert(key.into(), json!(string(f)?));
                }
            }
            (2, Field::Bytes(m)) => {
                let mut audiences = vec![];
                for (num, f) in fields(m)? {
                    match (num, f) {
                        (1, f) => audiences.push(string(f)?),
                        (4, Field::Varint(v)) => {
                            spec.insert("expirationSeconds".into(), json!(v as i64));
                        }
                        (3, Field::Bytes(r)) => {
                            let mut reference = serde_json::Map::new();
                            for (num, f) in fields(r)? {
                                let key = match num {
                                    1 => "kind",
                                    2 => "apiVersion",
                                    3 => "name",
                                    4 => "uid",
                                    _ => continue,
                                };
                                reference.insert(key.into(), json!(string(f)?));
                            }
                            spec.insert("boundObjectRef".into(), Value::Object(reference));
                        }
                        _ => {}
                    }
                }
                if !audiences.is_empty() {
                    spec.insert("audiences".into(), json!(audiences));
                }
            }
            _ => {}
        }
    }
    Ok(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": TOKEN_REQUEST_KIND, "metadata": metadata, "spec": spec}),
    )
}

/// Protobuf's wire format, as far as a `TokenRequest` and the review kinds need it.
pub(crate) mod proto {
    pub(crate) enum Field<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
        Fixed,
    }

    fn varint(b: &mut &[u8]) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = b.split_first().ok_or("truncated varint")?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }

    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if b.len() < n {
            return Err("truncated field".into());
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head)
    }

    /// The (field number, value) pairs of one message, in order.
    pub(crate) fn fields(mut b: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
        let mut out = vec![];
        while !b.is_empty() {
            let key = varint(&mut b)?;
            let field = match key & 7 {
                0 => Field::Varint(varint(&mut b)?),
                1 => take(&mut b, 8).map(|_| Field::Fixed)?,
                2 => {
                    let n = usize::try_from(varint(&mut b)?).map_err(|_| "field too long")?;
                    Field::Bytes(take(&mut b, n)?)
                }
                5 => take(&mut b, 4).map(|_| Field::Fixed)?,
                w => return Err(format!("unsupported wire type {w}")),
            };
            out.push((key >> 3, field));
        }
        Ok(out)
    }

    pub(crate) fn string(f: Field<'_>) -> Result<String, String> {
        match f {
            Field::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| "a string field is not UTF-8".to_string()),
            _ => Err("a string field has another wire type".into()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals and pod-bound tokens' authorization
// ---------------------------------------------------------------------------------------------

/// kube-apiserver's answer to a request its authorizer did not allow (`responsewriters.Forbidden`
/// with `forbiddenMessage`): `<resource>.<group> "<name>" is forbidden: User "<user>" cannot
/// <verb> resource "<resource>[/<subresource>]" in API group "<group>" in the namespace "<ns>"`
/// (or `at the cluster scope`), or `forbidden: User "<user>" cannot <verb> path "<path>"`; the
/// authorizer's `reason`, if any, after `: `.
pub fn forbidden(username: &str, r: &RequestInfo, reason: &str) -> ApiError {
    let mut why = if r.is_resource_request {
        let scope = if r.namespace.is_empty() {
            " at the cluster scope".to_string()
        } else {
            format!(" in the namespace \"{}\"", r.namespace)
        };
        format!(
            "User \"{username}\" cannot {} resource \"{}\" in API group \"{}\"{scope}",
            r.verb,
            r.combined_resource(),
            r.api_group
        )
    } else {
        format!("User \"{username}\" cannot {} path \"{}\"", r.verb, r.path)
    };
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    if r.is_resource_request {
        ApiError::forbidden_resource(&r.api_group, &r.resource, &r.name, why)
    } else {
        ApiError::forbidden_resource("", "", "", why)
    }
}

/// A request to a resource, as authorization sees it.
pub struct ResourceRequest<'a> {
    pub method: &'a Method,
    pub def: &'a ResourceDef,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
    pub watch: bool,
    pub field_selector: Option<&'a str>,
}

impl ResourceRequest<'_> {
    /// RBAC's verb for the request.
    pub fn verb(&self) -> &'static str {
        match (self.method, self.name.is_some()) {
            (&Method::GET, _) if self.watch => "watch",
            (&Method::GET, true) => "get",
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => "unknown",
        }
    }
}

/// Whether a pod-bound token may make this request (the content of a pod write is checked
/// afterwards by [`check_pod_write`]).
pub fn authorize(id: &PodIdentity, r: &ResourceRequest<'_>) -> Result<(), ApiError> {
    let own_ns = r.namespace == Some(id.namespace.as_str());
    let verb = r.verb();
    let allowed = own_ns
        && r.subresource.is_none()
        && match (r.def.group.as_str(), r.def.plural.as_str()) {
            ("", "pods") => r.name == Some(id.pod.as_str()) && matches!(verb, "get" | "patch"),
            ("jobset.x-k8s.io", "jobsets") => id.jobset.as_deref().is_some_and(|js| match verb {
                "get" => r.name == Some(js),
                "list" | "watch" => r.name.is_none() && selects_only(r.field_selector, js),
                _ => false,
            }),
            _ => false,
        };
    if allowed {
        return Ok(());
    }
    let info = RequestInfo {
        is_resource_request: true,
        path: String::new(),
        verb: verb.into(),
        api_group: r.def.group.clone(),
        api_version: r.def.version.clone(),
        namespace: r.namespace.unwrap_or_default().into(),
        resource: r.def.plural.clone(),
        subresource: r.subresource.unwrap_or_default().into(),
        name: r.name.unwrap_or_default().into(),
    };
    Err(forbidden(&id.username(), &info, ""))
}

/// A list or watch restricted by `metadata.name=<name>`.
fn selects_only(selector: Option<&str>, name: &str) -> bool {
    selector.and_then(|s| FieldSelector::parse(s).ok()).is_some_and(|f| f.exact_value("metadata.name") == Some(name))
}

/// A pod-bound token may change only the in-place restart attempt annotation of its pod.
pub fn check_pod_write(id: &PodIdentity, def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    if comparable(old) == comparable(new) {
        return Ok(());
    }
    Err(ApiError::forbidden(
        def,
        &id.pod,
        format!(
            "User \"{}\" may only change the annotation \"{IN_PLACE_RESTART_ATTEMPT}\" of its own pod",
            id.username()
        ),
    ))
}

/// The object without what the server maintains and the one annotation the agent may write.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["resourceVersion", "managedFields", "generation"] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(IN_PLACE_RESTART_ATTEMPT);
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use serde_json::json;

    fn id() -> PodIdentity {
        PodIdentity::of(&json!({
            "metadata": {"name": "w-0", "namespace": "ns", "uid": "u1",
                         "labels": {JOBSET_NAME: "js"}},
            "spec": {"serviceAccountName": "agent-sa"}
        }))
    }

    #[test]
    fn a_token_names_its_pod_and_a_forged_or_foreign_one_names_nobody() {
        let tokens = PodTokens::new("server-secret");
        let t = tokens.issue(&id());
        assert_eq!(tokens.verify(&t), Some(id()));
        assert_eq!(PodTokens::new("other-server").verify(&t), None);
        let (head, _) = t.rsplit_once('.').unwrap();
        let mut other = id();
        other.pod = "w-1".into();
        let forged =
            format!("jsp1.{}.{}", URL_SAFE_NO_PAD.encode(serde_json::to_vec(&other).unwrap()), &t[head.len() + 1..]);
        assert_eq!(tokens.verify(&forged), None);
        assert_eq!(tokens.verify("not-a-token"), None);
    }

    /// (case, (method, resource, name), namespace, subresource, fieldSelector, allowed)
    type Case<'a> =
        (&'a str, (&'a Method, &'a str, Option<&'a str>), Option<&'a str>, Option<&'a str>, Option<&'a str>, bool);

    #[test]
    fn a_pod_token_reaches_its_own_pod_and_jobset_only() {
        // JobSets are a preinstalled CRD: served once the server bootstrapped.
        let server = crate::ApiServer::in_memory();
        let reg = server.registry();
        let pods = reg.get("", "v1", "pods").unwrap();
        let jobsets = reg.get("jobset.x-k8s.io", "v1alpha2", "jobsets").unwrap();
        let secrets = reg.get("", "v1", "secrets").unwrap();
        let req = |method: &'static Method, def: &'static str, name: Option<&'static str>| (method, def, name);
        let cases: Vec<Case> = vec![
            // (case, (method, resource, name), namespace, subresource, fieldSelector, allowed)
            ("get own pod", req(&Method::GET, "pods", Some("w-0")), Some("ns"), None, None, true),
            ("patch own pod", req(&Method::PATCH, "pods", Some("w-0")), Some("ns"), None, None, true),
            ("patch another pod", req(&Method::PATCH, "pods", Some("w-1")), Some("ns"), None, None, false),
            ("own pod in another namespace", req(&Method::GET, "pods", Some("w-0")), Some("other"), None, None, false),
            ("own pod's status", req(&Method::PATCH, "pods", Some("w-0")), Some("ns"), Some("status"), None, false),
            ("delete own pod", req(&Method::DELETE, "pods", Some("w-0")), Some("ns"), None, None, false),
            ("list pods", req(&Method::GET, "pods", None), Some("ns"), None, None, false),
            ("get own jobset", req(&Method::GET, "jobsets", Some("js")), Some("ns"), None, None, true),
            ("get another jobset", req(&Method::GET, "jobsets", Some("other")), Some("ns"), None, None, false),
            (
                "list own jobset by name",
                req(&Method::GET, "jobsets", None),
                Some("ns"),
                None,
                Some("metadata.name=js"),
                true,
            ),
            ("list every jobset", req(&Method::GET, "jobsets", None), Some("ns"), None, None, false),
            (
                "list another jobset",
                req(&Method::GET, "jobsets", None),
                Some("ns"),
                None,
                Some("metadata.name=x"),
                false,
            ),
            ("patch own jobset", req(&Method::PATCH, "jobsets", Some("js")), Some("ns"), None, None, false),
            ("read a secret", req(&Method::GET, "secrets", Some("s")), Some("ns"), None, None, false),
        ];
        for (case, (method, resource, name), namespace, subresource, field_selector, allowed) in cases {
            let def = match resource {
                "pods" => &pods,
                "jobsets" => &jobsets,
                _ => &secrets,
            };
            let r = ResourceRequest { method, def, namespace, name, subresource, watch: false, field_selector };
            assert_eq!(authorize(&id(), &r).is_ok(), allowed, "{case}");
        }
    }

    #[test]
    fn a_refusal_reads_like_rbac() {
        let reg = Registry::with_builtins();
        let pods = reg.get("", "v1", "pods").unwrap();
        let r = ResourceRequest {
            method: &Method::PATCH,
            def: &pods,
            namespace: Some("ns"),
            name: Some("w-1"),
            subresource: None,
            watch: false,
            field_selector: None,
        };
        let e = authorize(&id(), &r).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"w-1\" is forbidden: User \"system:serviceaccount:ns:agent-sa\" cannot patch resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
    }

    fn claims(exp: i64) -> ServiceAccountClaims {
        ServiceAccountClaims {
            namespace: "ns".into(),
            name: "sa".into(),
            uid: "u1".into(),
            exp,
            aud: vec![API_AUDIENCE.into()],
        }
    }

    #[test]
    fn a_service_account_token_names_its_account_until_it_expires() {
        let tokens = ServiceAccountTokens::new("server-secret");
        let t = tokens.issue(&claims(1000));
        assert!(t.starts_with("jssa1."), "{t}");
        assert_eq!(tokens.verify(&t, 999), Some(claims(1000)));
        assert_eq!(tokens.verify(&t, 1000), None, "expired");
        assert_eq!(ServiceAccountTokens::new("other-server").verify(&t, 0), None);
        // Neither kind of token passes for the other, though both are keyed by the server token.
        assert_eq!(PodTokens::new("server-secret").verify(&t), None);
        assert_eq!(tokens.verify(&PodTokens::new("server-secret").issue(&id()), 0), None);
        let (head, tag) = t.rsplit_once('.').unwrap();
        let longer = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(i64::MAX)).unwrap());
        assert_eq!(tokens.verify(&format!("jssa1.{longer}.{tag}"), 2000), None, "forged expiry");
        assert_eq!(tokens.verify(&format!("{head}.{tag}x"), 0), None);
        let mut elsewhere = claims(1000);
        elsewhere.aud = vec!["vault".into()];
        assert_eq!(tokens.verify(&tokens.issue(&elsewhere), 0), None, "another audience");
    }

    /// (case, token, now, audiences asked) → what it claims and the audiences it is good for, or
    /// kube-apiserver's error.
    #[test]
    fn a_token_reads_as_its_kind_for_the_audiences_asked() {
        let a = Authenticator::new("server-secret");
        let sa = a.service_accounts().issue(&claims(1000));
        let mut vault_claims = claims(1000);
        vault_claims.aud = vec!["vault".into(), API_AUDIENCE.into()];
        let vault = a.service_accounts().issue(&vault_claims);
        let pod = PodTokens::new("server-secret").issue(&id());
        let foreign = ServiceAccountTokens::new("other").issue(&claims(1000));
        let api = || vec![API_AUDIENCE.to_string()];
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        type Case<'a> = (&'a str, &'a str, i64, Vec<String>, Result<(Claimed, Vec<String>), String>);
        let cases: Vec<Case> = vec![
            ("the server's token", "server-secret", 0, vec![], Ok((Claimed::Admin, api()))),
            ("the server's token for the API", "server-secret", 0, api(), Ok((Claimed::Admin, api()))),
            ("the server's token elsewhere", "server-secret", 0, strings(&["vault"]), Err(INVALID_BEARER_TOKEN.into())),
            ("a pod's token", &pod, 0, vec![], Ok((Claimed::Pod(id()), api()))),
            ("a pod's token elsewhere", &pod, 0, strings(&["vault"]), Err(INVALID_BEARER_TOKEN.into())),
            ("a service account's token", &sa, 999, vec![], Ok((Claimed::ServiceAccount(claims(1000)), api()))),
            (
                "an expired service account token",
                &sa,
                1000,
                vec![],
                Err("service account token has expired".into()),
            ),
            (
                "a service account token for another audience",
                &sa,
                0,
                strings(&["vault", "x"]),
                Err(
                    "token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"vault\" \"x\"]"
                        .into(),
                ),
            ),
            (
                "the audiences asked that the token has",
                &vault,
                0,
                strings(&["x", "vault"]),
                Ok((Claimed::ServiceAccount(vault_claims.clone()), strings(&["vault"]))),
            ),
            ("garbage", "garbage", 0, vec![], Err(INVALID_BEARER_TOKEN.into())),
            ("empty", "", 0, vec![], Err(INVALID_BEARER_TOKEN.into())),
            ("another server's token", &foreign, 0, vec![], Err(INVALID_BEARER_TOKEN.into())),
        ];
        for (case, token, now, audiences, want) in cases {
            assert_eq!(a.read(token, now, &audiences), want, "{case}");
        }
        // An empty server token is nobody's.
        assert_eq!(Authenticator::new("").read("", 0, &[]), Err(INVALID_BEARER_TOKEN.into()));
    }

    #[test]
    fn each_caller_has_kube_apiservers_identity() {
        let admin = User::Admin.identity(None);
        assert_eq!(
            (admin.username.as_str(), admin.uid.as_str(), admin.groups.as_slice(), admin.extra.is_empty()),
            ("jobset:admin", "", &["system:masters".to_string(), "system:authenticated".to_string()][..], true)
        );
        let sa = User::ServiceAccount(claims(0)).identity(None);
        assert_eq!(
            sa,
            Identity {
                username: "system:serviceaccount:ns:sa".into(),
                uid: "u1".into(),
                groups: vec!["system:serviceaccounts".into(), "system:serviceaccounts:ns".into(), AUTHENTICATED.into()],
                extra: Default::default(),
            }
        );
        let pod = User::Pod(id()).identity(Some("sa-uid"));
        assert_eq!(
            pod,
            Identity {
                username: "system:serviceaccount:ns:agent-sa".into(),
                uid: "sa-uid".into(),
                groups: vec!["system:serviceaccounts".into(), "system:serviceaccounts:ns".into(), AUTHENTICATED.into()],
                extra: [
                    ("authentication.kubernetes.io/pod-name".to_string(), vec!["w-0".to_string()]),
                    ("authentication.kubernetes.io/pod-uid".to_string(), vec!["u1".to_string()]),
                ]
                .into_iter()
                .collect(),
            }
        );
        assert_eq!(User::Pod(id()).identity(None).uid, "", "no ServiceAccount, no uid");
        assert_eq!(pod.user_info(), UserInfo { name: pod.username.clone(), groups: pod.groups.clone() });
    }

    #[test]
    fn a_service_account_is_a_user_in_the_service_account_groups() {
        let u = claims(0).user_info();
        assert_eq!(u.name, "system:serviceaccount:ns:sa");
        assert_eq!(u.groups, ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"]);
    }

    /// (case, body, ServiceAccount uid, expiration or error message)
    #[test]
    fn a_token_request_is_read_and_checked_as_kube_apiserver_does() {
        let cases: Vec<(&str, Value, Result<i64, &str>)> = vec![
            ("empty: an hour", json!({}), Ok(3600)),
            (
                "kubectl's body",
                json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": null}, "spec": {"audiences": null, "boundObjectRef": null},
                "status": {"token": ""}}),
                Ok(3600),
            ),
            ("an expiry", json!({"spec": {"expirationSeconds": 600}}), Ok(600)),
            ("matching name and uid", json!({"metadata": {"name": "sa", "namespace": "ns", "uid": "u1"}}), Ok(3600)),
            (
                "too short",
                json!({"spec": {"expirationSeconds": 599}}),
                Err(
                    "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
                ),
            ),
            (
                "too long",
                json!({"spec": {"expirationSeconds": 4294967297_i64}}),
                Err(
                    "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds",
                ),
            ),
            (
                "another name",
                json!({"metadata": {"name": "default"}}),
                Err(
                    "TokenRequest.authentication.k8s.io \"sa\" is invalid: metadata.name: Invalid value: \"default\": must match the service account name if specified",
                ),
            ),
            (
                "another namespace",
                json!({"metadata": {"namespace": "default"}}),
                Err(
                    "TokenRequest.authentication.k8s.io \"sa\" is invalid: metadata.namespace: Invalid value: \"default\": must match the service account namespace if specified",
                ),
            ),
            (
                "another uid",
                json!({"metadata": {"uid": "u2"}}),
                Err(
                    "Operation cannot be fulfilled on TokenRequest.authentication.k8s.io \"sa\": the UID in the token request (u2) does not match the UID of the service account (u1)",
                ),
            ),
            (
                "a bound pod",
                json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}}}),
                Err("cannot bind token to object of type /v1, Kind=Pod (this server issues unbound tokens only)"),
            ),
            (
                "expiry not a number",
                json!({"spec": {"expirationSeconds": "1h"}}),
                Err(
                    "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: spec.expirationSeconds: must be an integer",
                ),
            ),
            (
                "audiences not strings",
                json!({"spec": {"audiences": [1]}}),
                Err(
                    "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: spec.audiences: must be a list of strings",
                ),
            ),
            (
                "not an object",
                json!([]),
                Err(
                    "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: (body): must be a JSON object",
                ),
            ),
        ];
        for (case, body, want) in cases {
            let got =
                TokenRequest::parse(&body, "ns", "sa").and_then(|r| r.check("sa", "u1").map(|_| r.expiration_seconds));
            assert_eq!(got.map_err(|e| e.message), want.map_err(str::to_string), "{case}");
        }
    }

    /// Protobuf's encoding of a length-delimited or varint field.
    fn pb_bytes(num: u64, b: &[u8]) -> Vec<u8> {
        let mut out = pb_varint((num << 3) | 2);
        out.extend(pb_varint(b.len() as u64));
        out.extend_from_slice(b);
        out
    }

    fn pb_varint(mut v: u64) -> Vec<u8> {
        let mut out = vec![];
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    #[test]
    fn a_protobuf_token_request_reads_as_its_json() {
        // What client-go's typed client (`kubectl create token --duration=15m --audience=a
        // --audience=b`) sends: TypeMeta, then the TokenRequest with an empty metadata.
        let mut spec = [pb_bytes(1, b"a"), pb_bytes(1, b"b")].concat();
        spec.extend(pb_varint(4 << 3));
        spec.extend(pb_varint(900));
        let metadata = [pb_bytes(1, b"sa"), pb_bytes(3, b"ns"), pb_bytes(5, b"u1")].concat();
        let request = [pb_bytes(1, &metadata), pb_bytes(2, &spec), pb_bytes(3, &[])].concat();
        let type_meta = [pb_bytes(1, b"authentication.k8s.io/v1"), pb_bytes(2, b"TokenRequest")].concat();
        let body =
            [b"k8s\0".to_vec(), pb_bytes(1, &type_meta), pb_bytes(2, &request), pb_bytes(3, b""), pb_bytes(4, b"")]
                .concat();
        let v = token_request_from_protobuf(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "metadata": {"name": "sa", "namespace": "ns", "uid": "u1"},
                   "spec": {"audiences": ["a", "b"], "expirationSeconds": 900}})
        );
        let r = TokenRequest::parse(&v, "ns", "sa").unwrap();
        assert_eq!((r.expiration_seconds, r.audiences.as_slice()), (900, &["a".to_string(), "b".to_string()][..]));
        let bound = pb_bytes(3, &[pb_bytes(1, b"Pod"), pb_bytes(2, b"v1"), pb_bytes(3, b"p")].concat());
        let v = token_request_from_protobuf(&[b"k8s\0".to_vec(), pb_bytes(2, &pb_bytes(2, &bound))].concat()).unwrap();
        assert_eq!(v["spec"]["boundObjectRef"], json!({"kind": "Pod", "apiVersion": "v1", "name": "p"}));
        for bad in [&b"{}"[..], b"k8s\0\x12\x05ab", b"k8s\0\x0f"] {
            assert!(token_request_from_protobuf(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_token_request_is_answered_with_the_token_and_its_expiry() {
        let req = TokenRequest::parse(
            &json!({"metadata": {"labels": {"a": "b"}}, "spec": {"expirationSeconds": 7200}}),
            "ns",
            "sa",
        )
        .unwrap();
        let now = 1_700_000_000;
        let c = req.claims("ns", "sa", "u1", now);
        assert_eq!(c, ServiceAccountClaims { exp: now + 7200, ..claims(0) });
        assert_eq!(
            req.response(&c, now, "tok"),
            json!({
                "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"labels": {"a": "b"}, "name": "sa", "namespace": "ns", "creationTimestamp": "2023-11-14T22:13:20Z"},
                "spec": {"audiences": [API_AUDIENCE], "expirationSeconds": 7200, "boundObjectRef": null},
                "status": {"token": "tok", "expirationTimestamp": "2023-11-15T00:13:20Z"}
            })
        );
    }

    #[test]
    fn a_refusal_is_worded_as_kube_apiservers() {
        let user = "system:serviceaccount:jobset-system:jobset-controller-manager";
        let parse = |m: Method, path: &str, q: Option<&str>| RequestInfo::parse(&m, path, q).unwrap();
        let cases: Vec<(RequestInfo, &str, &str, Value)> = vec![
            (
                parse(Method::GET, "/apis/jobset.x-k8s.io/v1alpha2/jobsets", None),
                "",
                "jobsets.jobset.x-k8s.io is forbidden: User \"system:serviceaccount:jobset-system:jobset-controller-manager\" cannot list resource \"jobsets\" in API group \"jobset.x-k8s.io\" at the cluster scope",
                json!({"group": "jobset.x-k8s.io", "kind": "jobsets"}),
            ),
            (
                parse(Method::GET, "/api/v1/namespaces/default/pods/p", None),
                "",
                "pods \"p\" is forbidden: User \"system:serviceaccount:jobset-system:jobset-controller-manager\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\"",
                json!({"name": "p", "kind": "pods"}),
            ),
            (
                parse(Method::PUT, "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/x/status", None),
                "",
                "jobsets.jobset.x-k8s.io \"x\" is forbidden: User \"system:serviceaccount:jobset-system:jobset-controller-manager\" cannot update resource \"jobsets/status\" in API group \"jobset.x-k8s.io\" in the namespace \"default\"",
                json!({"name": "x", "group": "jobset.x-k8s.io", "kind": "jobsets"}),
            ),
            (
                parse(Method::GET, "/metrics", None),
                "",
                "forbidden: User \"system:serviceaccount:jobset-system:jobset-controller-manager\" cannot get path \"/metrics\"",
                json!({}),
            ),
            (
                parse(Method::GET, "/api/v1/pods", None),
                "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found",
                "pods is forbidden: User \"system:serviceaccount:jobset-system:jobset-controller-manager\" cannot list resource \"pods\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found",
                json!({"kind": "pods"}),
            ),
        ];
        for (r, reason, message, details) in cases {
            let e = forbidden(user, &r, reason);
            assert_eq!((e.code, e.reason), (403, "Forbidden"));
            assert_eq!(e.message, message);
            assert_eq!(e.details, Some(details), "{message}");
        }
    }

    #[test]
    fn a_pod_write_may_change_only_the_attempt_annotation() {
        let reg = Registry::with_builtins();
        let pods = reg.get("", "v1", "pods").unwrap();
        let old =
            json!({"metadata": {"name": "w-0", "resourceVersion": "5", "annotations": {"a": "1"}}, "spec": {"x": 1}});
        let ok = json!({"metadata": {"name": "w-0", "resourceVersion": "6", "managedFields": [],
                        "annotations": {"a": "1", IN_PLACE_RESTART_ATTEMPT: "3"}}, "spec": {"x": 1}});
        assert!(check_pod_write(&id(), &pods, &old, &ok).is_ok());
        for (case, new) in [
            ("another annotation", json!({"metadata": {"name": "w-0", "annotations": {"a": "2"}}, "spec": {"x": 1}})),
            (
                "a label",
                json!({"metadata": {"name": "w-0", "labels": {"l": "v"}, "annotations": {"a": "1"}}, "spec": {"x": 1}}),
            ),
            ("the spec", json!({"metadata": {"name": "w-0", "annotations": {"a": "1"}}, "spec": {"x": 2}})),
        ] {
            let e = check_pod_write(&id(), &pods, &old, &new).unwrap_err();
            assert_eq!(e.code, 403, "{case}");
        }
    }
}
