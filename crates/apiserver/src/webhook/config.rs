//! `MutatingWebhookConfiguration` / `ValidatingWebhookConfiguration`: defaults and validation as
//! kube-apiserver's (k8s.io/kubernetes pkg/apis/admissionregistration/{v1/defaults.go,
//! validation/validation.go}), and the parsed form admission calls webhooks from.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::policy::Expression;
use crate::error::Cause;
use crate::selector::{LabelSelector, from_label_selector_json};

/// Which of the two configuration kinds a webhook comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Mutating,
    Validating,
}

impl Phase {
    /// The phase of a configuration kind, if it is one.
    pub fn of_kind(kind: &str) -> Option<Phase> {
        match kind {
            "MutatingWebhookConfiguration" => Some(Phase::Mutating),
            "ValidatingWebhookConfiguration" => Some(Phase::Validating),
            _ => None,
        }
    }
}

/// One `rules[]` entry (`RuleWithOperations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (the default).
    pub scope: String,
}

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `clientConfig.url`, as written.
    Url(String),
    /// `clientConfig.service`.
    Service { namespace: String, name: String, path: String, port: u16 },
}

/// A webhook of a stored configuration, defaulted and parsed.
#[derive(Debug, Clone)]
pub struct Hook {
    /// `metadata.name` of the configuration (hooks are called in configuration name order).
    pub configuration: String,
    pub name: String,
    pub phase: Phase,
    pub rules: Vec<Rule>,
    /// `failurePolicy: Ignore` (the default is `Fail`).
    pub ignore_failures: bool,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    pub timeout: Duration,
    pub review_versions: Vec<String>,
    pub target: Target,
    /// The TLS client trusting `clientConfig.caBundle` only (or why there is none).
    pub tls: Result<Arc<rustls::ClientConfig>, String>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke_if_needed: bool,
    /// `matchConditions`: (name, CEL expression).
    pub match_conditions: Arc<Vec<(String, Expression)>>,
}

/// Sets what kube-apiserver's v1 defaulting sets on a configuration (`SetDefaults_*Webhook`,
/// `SetDefaults_Rule`, `SetDefaults_ServiceReference`).
pub fn default_configuration(obj: &mut Value, phase: Phase) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else { return };
    for h in hooks.iter_mut().filter_map(Value::as_object_mut) {
        h.entry("failurePolicy").or_insert_with(|| json!("Fail"));
        h.entry("matchPolicy").or_insert_with(|| json!("Equivalent"));
        h.entry("namespaceSelector").or_insert_with(|| json!({}));
        h.entry("objectSelector").or_insert_with(|| json!({}));
        h.entry("timeoutSeconds").or_insert_with(|| json!(10));
        if phase == Phase::Mutating {
            h.entry("reinvocationPolicy").or_insert_with(|| json!("Never"));
        }
        if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                r.entry("scope").or_insert_with(|| json!("*"));
            }
        }
        if let Some(svc) = h.get_mut("clientConfig").and_then(|c| c.get_mut("service")).and_then(Value::as_object_mut) {
            svc.entry("port").or_insert_with(|| json!(443));
        }
    }
}

/// The AdmissionReview versions kube-apiserver accepts in `admissionReviewVersions`.
const ACCEPTED_REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Go's `%v` of a `[]string`: `[a b]`.
fn go_list(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

/// `utilvalidation.IsFullyQualifiedName`.
fn fully_qualified_name(field: &str, name: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![Cause::required(field)];
    }
    let problems = crate::names::dns1123_subdomain(name);
    if !problems.is_empty() {
        return vec![Cause::invalid(field, name, &problems.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![Cause::invalid(field, name, "should be a domain with at least three segments separated by dots")];
    }
    vec![]
}

fn has_wildcard(v: &[String]) -> bool {
    v.iter().any(|s| s == "*")
}

/// `validateResources`: subresource forms (`pods/status`, `*/scale`, `pods/*`) allowed.
fn validate_resources(field: &str, resources: &[String]) -> Vec<Cause> {
    let mut causes = vec![];
    if resources.is_empty() {
        causes.push(Cause::required(field));
    }
    let (mut res_wild_sub, mut sub_wild_res) = (vec![], vec![]);
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            causes.push(Cause::required(format!("{field}[{i}]")));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if res_wild_sub.contains(&res) {
            causes.push(Cause::invalid(
                format!("{field}[{i}]"),
                rs,
                &format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if sub_wild_res.contains(&sub) {
            causes.push(Cause::invalid(
                format!("{field}[{i}]"),
                rs,
                &format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            res_wild_sub.push(res);
        }
        if res == "*" {
            sub_wild_res.push(sub);
        }
    }
    if resources.len() > 1 && double {
        causes.push(Cause::invalid_rendered(
            field,
            &go_list(resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        causes.push(Cause::invalid_rendered(
            field,
            &go_list(resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    causes
}

/// The strings of `rule[key]`, which must not be empty nor have `*` among other `what`.
fn listed(field: &str, rule: &Value, key: &str, what: &str, causes: &mut Vec<Cause>) -> Vec<String> {
    let items = strings(rule.get(key));
    if items.is_empty() {
        causes.push(Cause::required(format!("{field}.{key}")));
    }
    if items.len() > 1 && has_wildcard(&items) {
        causes.push(Cause::invalid_rendered(
            format!("{field}.{key}"),
            &go_list(&items),
            &format!("if '*' is present, must not specify other {what}"),
        ));
    }
    items
}

/// `validateRuleWithOperations`.
fn validate_rule(field: &str, rule: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    let ops = listed(field, rule, "operations", "operations", &mut causes);
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            causes.push(Cause::not_supported(format!("{field}.operations[{i}]"), op, &OPERATIONS));
        }
    }
    listed(field, rule, "apiGroups", "API groups", &mut causes);
    let versions = listed(field, rule, "apiVersions", "API versions", &mut causes);
    for (i, v) in versions.iter().enumerate() {
        if v.is_empty() {
            causes.push(Cause::required(format!("{field}.apiVersions[{i}]")));
        }
    }
    causes.extend(validate_resources(&format!("{field}.resources"), &strings(rule.get("resources"))));
    if let Some(scope) = rule.get("scope").and_then(Value::as_str)
        && !["*", "Cluster", "Namespaced"].contains(&scope)
    {
        causes.push(Cause::not_supported(format!("{field}.scope"), scope, &["*", "Cluster", "Namespaced"]));
    }
    causes
}

/// `webhook.ValidateWebhookURL` with https forced.
fn validate_url(field: &str, url: &str) -> Vec<Cause> {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut causes = vec![];
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if scheme != "https" {
        causes.push(Cause::invalid(field, scheme, &format!("'https' is the only allowed URL scheme{FORM}")));
    }
    let authority = if scheme.is_empty() { "" } else { rest.split(['/', '?', '#']).next().unwrap_or_default() };
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() {
        causes.push(Cause::invalid(field, host, &format!("host must be specified{FORM}")));
    }
    if let Some(u) = user {
        causes.push(Cause::invalid(field, u, "user information is not permitted in the URL"));
    }
    if let Some((_, fragment)) = url.split_once('#') {
        causes.push(Cause::invalid(field, fragment, "fragments are not permitted in the URL"));
    }
    let before_fragment = url.split('#').next().unwrap_or_default();
    if let Some((_, query)) = before_fragment.split_once('?')
        && !query.is_empty()
    {
        causes.push(Cause::invalid(field, query, "query parameters are not permitted in the URL"));
    }
    causes
}

/// `webhook.ValidateWebhookService` (the path's segment checks cut to its leading `/`).
fn validate_service(field: &str, svc: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    if svc.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
        causes.push(Cause::required_because(format!("{field}.name"), "service name is required"));
    }
    if svc.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty) {
        causes.push(Cause::required_because(format!("{field}.namespace"), "service namespace is required"));
    }
    let port = svc.get("port").and_then(Value::as_i64).unwrap_or(443);
    if !(1..=65535).contains(&port) {
        causes.push(Cause::invalid_rendered(
            format!("{field}.port"),
            &port.to_string(),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(path) = svc.get("path").and_then(Value::as_str)
        && !path.is_empty()
        && path != "/"
        && !path.starts_with('/')
    {
        causes.push(Cause::invalid(format!("{field}.path"), path, "must start with a '/'"));
    }
    causes
}

fn validate_hook(field: &str, hook: &Value, phase: Phase) -> Vec<Cause> {
    let mut causes =
        fully_qualified_name(&format!("{field}.name"), hook.get("name").and_then(Value::as_str).unwrap_or(""));
    for (i, rule) in hook.get("rules").and_then(Value::as_array).into_iter().flatten().enumerate() {
        causes.extend(validate_rule(&format!("{field}.rules[{i}]"), rule));
    }
    if let Some(p) = hook.get("failurePolicy").and_then(Value::as_str)
        && !["Fail", "Ignore"].contains(&p)
    {
        causes.push(Cause::not_supported(format!("{field}.failurePolicy"), p, &["Fail", "Ignore"]));
    }
    if let Some(p) = hook.get("matchPolicy").and_then(Value::as_str)
        && !["Equivalent", "Exact"].contains(&p)
    {
        causes.push(Cause::not_supported(format!("{field}.matchPolicy"), p, &["Equivalent", "Exact"]));
    }
    const NO_SIDE_EFFECTS: [&str; 2] = ["None", "NoneOnDryRun"];
    match hook.get("sideEffects").and_then(Value::as_str) {
        None => causes.push(Cause::required_because(
            format!("{field}.sideEffects"),
            &format!("must specify one of {}", NO_SIDE_EFFECTS.join(", ")),
        )),
        Some(s) if !NO_SIDE_EFFECTS.contains(&s) => {
            causes.push(Cause::not_supported(format!("{field}.sideEffects"), s, &NO_SIDE_EFFECTS))
        }
        Some(_) => {}
    }
    if let Some(t) = hook.get("timeoutSeconds").and_then(Value::as_i64)
        && !(1..=30).contains(&t)
    {
        causes.push(Cause::invalid_rendered(
            format!("{field}.timeoutSeconds"),
            &t.to_string(),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        if let Some(s) = hook.get(sel)
            && let Err(e) = from_label_selector_json(s)
        {
            causes.push(Cause { reason: "FieldValueInvalid", field: format!("{field}.{sel}"), message: e.0 });
        }
    }
    if phase == Phase::Mutating
        && let Some(p) = hook.get("reinvocationPolicy").and_then(Value::as_str)
        && !["IfNeeded", "Never"].contains(&p)
    {
        causes.push(Cause::not_supported(format!("{field}.reinvocationPolicy"), p, &["IfNeeded", "Never"]));
    }
    for (j, c) in hook.get("matchConditions").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let f = format!("{field}.matchConditions[{j}]");
        if c.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            causes.push(Cause::required(format!("{f}.name")));
        }
        match c.get("expression").and_then(Value::as_str).filter(|e| !e.trim().is_empty()) {
            None => causes.push(Cause::required(format!("{f}.expression"))),
            Some(e) => {
                if let Some(why) = Expression::compile(e).compile_error() {
                    causes.push(Cause::invalid(format!("{f}.expression"), e, why));
                }
            }
        }
    }
    let cc = hook.get("clientConfig").cloned().unwrap_or(Value::Null);
    match (cc.get("url").and_then(Value::as_str), cc.get("service").filter(|s| !s.is_null())) {
        (Some(url), None) => causes.extend(validate_url(&format!("{field}.clientConfig.url"), url)),
        (None, Some(svc)) => causes.extend(validate_service(&format!("{field}.clientConfig.service"), svc)),
        _ => causes.push(Cause::required_because(
            format!("{field}.clientConfig"),
            "exactly one of url or service is required",
        )),
    }
    if let Some(ca) = cc.get("caBundle").and_then(Value::as_str)
        && decode_ca_bundle(ca).is_none()
    {
        causes.push(Cause::invalid(format!("{field}.clientConfig.caBundle"), ca, "must be base64-encoded"));
    }
    causes
}

/// `validateAdmissionReviewVersions` (a recognized version required).
fn validate_review_versions(field: &str, versions: &[String]) -> Vec<Cause> {
    if versions.is_empty() {
        return vec![Cause::required_because(
            field,
            &format!("must specify one of {}", ACCEPTED_REVIEW_VERSIONS.join(", ")),
        )];
    }
    let mut causes = vec![];
    let mut seen: Vec<&str> = vec![];
    for (i, v) in versions.iter().enumerate() {
        if seen.contains(&v.as_str()) {
            causes.push(Cause::invalid(format!("{field}[{i}]"), v, "duplicate version"));
            continue;
        }
        seen.push(v);
    }
    if !versions.iter().any(|v| ACCEPTED_REVIEW_VERSIONS.contains(&v.as_str())) {
        causes.push(Cause::invalid_rendered(
            field,
            &go_list(versions),
            &format!("must include at least one of {}", ACCEPTED_REVIEW_VERSIONS.join(", ")),
        ));
    }
    causes
}

/// kube-apiserver's validation of a (defaulted) webhook configuration: every problem, worded as
/// upstream's, with `webhooks[i]...` field paths.
pub fn validate_configuration(obj: &Value, phase: Phase) -> Vec<Cause> {
    let mut causes = vec![];
    let mut names: Vec<&str> = vec![];
    for (i, hook) in obj.get("webhooks").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let field = format!("webhooks[{i}]");
        causes.extend(validate_hook(&field, hook, phase));
        causes.extend(validate_review_versions(
            &format!("{field}.admissionReviewVersions"),
            &strings(hook.get("admissionReviewVersions")),
        ));
        if let Some(name) = hook.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            if names.contains(&name) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    field: format!("{field}.name"),
                    message: format!("Duplicate value: {name:?}"),
                });
            } else {
                names.push(name);
            }
        }
    }
    causes
}

/// `caBundle` is `[]byte`: base64 in JSON.
fn decode_ca_bundle(b64: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// `rules` (or a policy's `resourceRules`), parsed; the scope defaults to `*`.
pub fn rules_of(rules: Option<&Value>) -> Vec<Rule> {
    rules
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| Rule {
            operations: strings(r.get("operations")),
            api_groups: strings(r.get("apiGroups")),
            api_versions: strings(r.get("apiVersions")),
            resources: strings(r.get("resources")),
            scope: r.get("scope").and_then(Value::as_str).unwrap_or("*").to_string(),
        })
        .collect()
}

/// The webhooks of a stored (validated, defaulted) configuration.
pub fn hooks_of(obj: &Value, phase: Phase) -> Vec<Hook> {
    let configuration = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    let selector = |v: Option<&Value>| v.map_or(Ok(LabelSelector::everything()), from_label_selector_json);
    let mut out = vec![];
    for h in obj.get("webhooks").and_then(Value::as_array).into_iter().flatten() {
        let cc = h.get("clientConfig").cloned().unwrap_or(Value::Null);
        let target = match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
            (Some(url), _) => Target::Url(url.to_string()),
            (None, Some(svc)) if svc.is_object() => Target::Service {
                namespace: svc.get("namespace").and_then(Value::as_str).unwrap_or_default().to_string(),
                name: svc.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                path: svc.get("path").and_then(Value::as_str).unwrap_or_default().to_string(),
                port: svc.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
            },
            _ => continue,
        };
        // Stored configurations were validated: a selector that no longer parses selects nothing.
        let (Ok(namespace_selector), Ok(object_selector)) =
            (selector(h.get("namespaceSelector")), selector(h.get("objectSelector")))
        else {
            continue;
        };
        let rules = rules_of(h.get("rules"));
        out.push(Hook {
            configuration: configuration.clone(),
            name: h.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
            phase,
            rules,
            ignore_failures: h.get("failurePolicy").and_then(Value::as_str) == Some("Ignore"),
            namespace_selector,
            object_selector,
            timeout: Duration::from_secs(h.get("timeoutSeconds").and_then(Value::as_u64).unwrap_or(10).clamp(1, 30)),
            review_versions: strings(h.get("admissionReviewVersions")),
            target,
            tls: super::client::tls_config(
                &cc.get("caBundle").and_then(Value::as_str).and_then(decode_ca_bundle).unwrap_or_default(),
            ),
            reinvoke_if_needed: h.get("reinvocationPolicy").and_then(Value::as_str) == Some("IfNeeded"),
            match_conditions: Arc::new(
                h.get("matchConditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
                        (text("name").to_string(), Expression::compile(text("expression")))
                    })
                    .collect(),
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(extra: Value) -> Value {
        let mut h = json!({
            "name": "vjobset.kb.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": "/validate"}},
            "rules": [{"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "operations": ["CREATE"], "resources": ["jobsets"]}]
        });
        json_patch::merge(&mut h, &extra);
        h
    }

    fn problems(hooks: Vec<Value>) -> Vec<String> {
        let mut obj = json!({"metadata": {"name": "c"}, "webhooks": hooks});
        default_configuration(&mut obj, Phase::Validating);
        validate_configuration(&obj, Phase::Validating).iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn webhook_configurations_are_validated_with_kube_apiservers_messages() {
        let cases: Vec<(&str, Vec<Value>, Vec<&str>)> = vec![
            ("a valid webhook", vec![hook(json!({}))], vec![]),
            (
                "sideEffects missing",
                vec![hook(json!({"sideEffects": null}))],
                vec!["webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"],
            ),
            (
                "sideEffects Some",
                vec![hook(json!({"sideEffects": "Some"}))],
                vec![r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#],
            ),
            (
                "admissionReviewVersions missing",
                vec![hook(json!({"admissionReviewVersions": null}))],
                vec!["webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"],
            ),
            (
                "only unknown review versions",
                vec![hook(json!({"admissionReviewVersions": ["v2"]}))],
                vec![
                    "webhooks[0].admissionReviewVersions: Invalid value: [v2]: must include at least one of v1, v1beta1",
                ],
            ),
            (
                "duplicate webhook names",
                vec![hook(json!({})), hook(json!({}))],
                vec![r#"webhooks[1].name: Duplicate value: "vjobset.kb.io""#],
            ),
            (
                "neither url nor service",
                vec![hook(json!({"clientConfig": {"service": null}}))],
                vec!["webhooks[0].clientConfig: Required value: exactly one of url or service is required"],
            ),
            (
                "both url and service",
                vec![hook(json!({"clientConfig": {"url": "https://example.com/x"}}))],
                vec!["webhooks[0].clientConfig: Required value: exactly one of url or service is required"],
            ),
            (
                "an http url",
                vec![hook(json!({"clientConfig": {"service": null, "url": "http://example.com/x"}}))],
                vec![
                    r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#,
                ],
            ),
            (
                "a name with two segments",
                vec![hook(json!({"name": "kb.io"}))],
                vec![
                    r#"webhooks[0].name: Invalid value: "kb.io": should be a domain with at least three segments separated by dots"#,
                ],
            ),
            (
                "a timeout over 30 seconds",
                vec![hook(json!({"timeoutSeconds": 31}))],
                vec![
                    "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
                ],
            ),
            (
                "an unknown operation",
                vec![hook(
                    json!({"rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["PATCH"], "resources": ["pods"]}]}),
                )],
                vec![
                    r#"webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE""#,
                ],
            ),
            (
                "a match condition that does not compile",
                vec![hook(json!({"matchConditions": [{"name": "c", "expression": "object.("}]}))],
                vec!["webhooks[0].matchConditions[0].expression"],
            ),
            (
                "a service without a namespace",
                vec![hook(json!({"clientConfig": {"service": {"namespace": null}}}))],
                vec!["webhooks[0].clientConfig.service.namespace: Required value: service namespace is required"],
            ),
        ];
        for (what, hooks, want) in cases {
            let got = problems(hooks);
            // CEL's own wording of a parse error is the parser's: only its field is compared.
            assert_eq!(got.len(), want.len(), "{what}: {got:?}");
            for (g, w) in got.iter().zip(&want) {
                assert!(g == w || (g.starts_with(w) && g.contains("compilation failed")), "{what}: {g}");
            }
        }
    }

    #[test]
    fn defaults_are_kube_apiservers_and_parsed_hooks_carry_them() {
        let mut obj = json!({"metadata": {"name": "c"}, "webhooks": [hook(json!({}))]});
        default_configuration(&mut obj, Phase::Mutating);
        let h = &obj["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        let hooks = hooks_of(&obj, Phase::Mutating);
        assert_eq!(hooks.len(), 1);
        assert!(!hooks[0].ignore_failures);
        assert_eq!(hooks[0].timeout, Duration::from_secs(10));
        assert_eq!(
            hooks[0].target,
            Target::Service {
                namespace: "system".into(),
                name: "webhook-service".into(),
                path: "/validate".into(),
                port: 443
            }
        );
    }
}
