//! `ValidatingAdmissionPolicy` and `ValidatingAdmissionPolicyBinding` (`admissionregistration.k8s.io/v1`):
//! CEL validations evaluated on writes, as kube-apiserver's ValidatingAdmissionPolicy plugin
//! does (k8s.io/apiserver pkg/admission/plugin/policy/validating), with kube-cel's `cel`.
//!
//! Supported: `matchConstraints` (`resourceRules`, `excludeResourceRules`, `namespaceSelector`,
//! `objectSelector`), `matchConditions`, `variables`, `validations` (`expression`, `message`,
//! `messageExpression`, `reason`), `failurePolicy`, and bindings' `policyName`,
//! `validationActions` (`Deny`, `Warn`; `Audit` records nothing here) and `matchResources`.
//! The CEL variables are `object`, `oldObject`, `request` (an AdmissionRequest: `userInfo`,
//! `operation`, `name`, `namespace`, `kind`, `resource`, ...) and `variables`. Not supported:
//! `paramKind`/`paramRef` (a policy that needs params is skipped), `namespaceObject`,
//! `authorizer`, `auditAnnotations`. Policies are checked where webhooks mutate (after the
//! built-in defaults, before the built-in validation), so when both reject a request the
//! policy's error is the one answered.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel::{Context, Program};
use serde_json::Value;

use super::config::{Rule, rules_of};
use super::matching::{self, Attributes};
use super::review::{self, RequestInfo};
use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selector::{LabelSelector, from_label_selector_json};

/// A CEL expression and its program (or why it does not compile).
pub struct Expression {
    pub source: String,
    program: Result<Program, String>,
}

impl Expression {
    /// The expression compiled (a compile error is kept, and reported when it is run).
    pub fn compile(source: &str) -> Expression {
        Expression {
            source: source.to_string(),
            program: Program::compile(source).map_err(|e| format!("compilation failed: {e}")),
        }
    }

    /// Why it does not compile, if it does not.
    pub fn compile_error(&self) -> Option<&str> {
        self.program.as_ref().err().map(String::as_str)
    }

    fn run(&self, ctx: &Context<'_>) -> Result<kube_cel::cel::Value, String> {
        let program =
            self.program.as_ref().map_err(|e| format!("expression '{}' resulted in error: {e}", self.source))?;
        program.execute(ctx).map_err(|e| format!("expression '{}' resulted in error: {e}", self.source))
    }

    fn truth(&self, ctx: &Context<'_>) -> Result<bool, String> {
        match self.run(ctx)? {
            kube_cel::cel::Value::Bool(b) => Ok(b),
            _ => Err(format!("expression '{}' resulted in error: no such overload", self.source)),
        }
    }
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

/// What a policy or binding applies to.
#[derive(Debug, Default)]
pub struct Constraints {
    pub rules: Vec<Rule>,
    pub exclude: Vec<Rule>,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
}

impl Constraints {
    fn parse(v: Option<&Value>) -> Constraints {
        let Some(v) = v else { return Constraints::default() };
        // Stored objects were accepted: a selector that does not parse selects nothing.
        let selector = |k: &str| {
            v.get(k)
                .map_or(Ok(LabelSelector::everything()), from_label_selector_json)
                .unwrap_or_else(|_| LabelSelector::nothing())
        };
        Constraints {
            rules: rules_of(v.get("resourceRules")),
            exclude: rules_of(v.get("excludeResourceRules")),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
        }
    }

    /// Whether the rules match (a binding without rules takes its policy's).
    fn rules_match(&self, a: &Attributes<'_>, empty_matches: bool) -> bool {
        let included =
            if self.rules.is_empty() { empty_matches } else { self.rules.iter().any(|r| matching::rule_matches(r, a)) };
        included && !self.exclude.iter().any(|r| matching::rule_matches(r, a))
    }

    fn selectors_match(
        &self,
        a: &Attributes<'_>,
        ns_labels: Option<&BTreeMap<String, String>>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> bool {
        matching::namespace_selector_matches(&self.namespace_selector, a, ns_labels)
            && matching::object_selector_matches(&self.object_selector, obj, old)
    }
}

/// One of a policy's `validations`.
#[derive(Debug)]
pub struct Validation {
    pub expression: Expression,
    pub message: Option<String>,
    pub message_expression: Option<Expression>,
    pub reason: Option<String>,
}

/// A stored ValidatingAdmissionPolicy, compiled.
#[derive(Debug)]
pub struct Policy {
    pub name: String,
    /// `failurePolicy: Ignore` (the default is `Fail`).
    pub ignore_failures: bool,
    pub needs_params: bool,
    pub constraints: Constraints,
    pub match_conditions: Vec<Expression>,
    pub variables: Vec<(String, Expression)>,
    pub validations: Vec<Validation>,
}

impl Policy {
    /// The policy of a stored object.
    pub fn parse(v: &Value) -> Policy {
        let spec = v.get("spec").cloned().unwrap_or(Value::Null);
        let list = |k: &str| spec.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
        let text =
            |v: &Value, k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.trim().is_empty()).map(str::to_string);
        Policy {
            name: v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string(),
            ignore_failures: spec.get("failurePolicy").and_then(Value::as_str) == Some("Ignore"),
            needs_params: spec.get("paramKind").is_some_and(|p| !p.is_null()),
            constraints: Constraints::parse(spec.get("matchConstraints")),
            match_conditions: list("matchConditions")
                .iter()
                .map(|c| Expression::compile(c.get("expression").and_then(Value::as_str).unwrap_or_default()))
                .collect(),
            variables: list("variables")
                .iter()
                .map(|c| {
                    let name = c.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                    (name, Expression::compile(c.get("expression").and_then(Value::as_str).unwrap_or_default()))
                })
                .collect(),
            validations: list("validations")
                .iter()
                .map(|c| Validation {
                    expression: Expression::compile(c.get("expression").and_then(Value::as_str).unwrap_or_default()),
                    message: text(c, "message"),
                    message_expression: text(c, "messageExpression").map(|m| Expression::compile(&m)),
                    reason: text(c, "reason"),
                })
                .collect(),
        }
    }
}

/// A stored ValidatingAdmissionPolicyBinding.
#[derive(Debug)]
pub struct Binding {
    pub name: String,
    pub policy: String,
    pub deny: bool,
    pub warn: bool,
    pub constraints: Constraints,
}

impl Binding {
    pub fn parse(v: &Value) -> Binding {
        let actions: Vec<&str> = v
            .pointer("/spec/validationActions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        Binding {
            name: v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string(),
            policy: v.pointer("/spec/policyName").and_then(Value::as_str).unwrap_or_default().to_string(),
            deny: actions.contains(&"Deny"),
            warn: actions.contains(&"Warn"),
            constraints: Constraints::parse(v.pointer("/spec/matchResources")),
        }
    }
}

/// kube-apiserver's v1 defaults of a policy: `failurePolicy: Fail`, `matchPolicy: Equivalent`,
/// empty selectors.
pub fn default_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    spec.entry("failurePolicy").or_insert_with(|| serde_json::json!("Fail"));
    if let Some(mc) = spec.get_mut("matchConstraints").and_then(Value::as_object_mut) {
        mc.entry("matchPolicy").or_insert_with(|| serde_json::json!("Equivalent"));
        mc.entry("namespaceSelector").or_insert_with(|| serde_json::json!({}));
        mc.entry("objectSelector").or_insert_with(|| serde_json::json!({}));
    }
}

/// The problems of each CEL expression of `list` (its `expression` field and, if `message`,
/// `messageExpression`): required and compiling.
fn check_expressions(causes: &mut Vec<crate::error::Cause>, spec: &Value, list: &str, required_name: bool) {
    use crate::error::Cause;
    for (i, item) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
        let f = format!("spec.{list}[{i}]");
        if required_name && item.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            causes.push(Cause::required(format!("{f}.name")));
        }
        for (key, required) in [("expression", true), ("messageExpression", false)] {
            match item.get(key).and_then(Value::as_str).filter(|e| !e.trim().is_empty()) {
                None if required => {
                    causes.push(Cause::required_because(format!("{f}.{key}"), &format!("{key} is not specified")))
                }
                None => {}
                Some(e) => {
                    if let Some(why) = Expression::compile(e).compile_error() {
                        causes.push(Cause::invalid(format!("{f}.{key}"), e, why));
                    }
                }
            }
        }
    }
}

/// The checks kube-apiserver makes of a ValidatingAdmissionPolicy that matter here.
pub fn validate_policy(obj: &Value) -> Vec<crate::error::Cause> {
    use crate::error::Cause;
    let mut causes = vec![];
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(p) = spec.get("failurePolicy").and_then(Value::as_str)
        && !["Fail", "Ignore"].contains(&p)
    {
        causes.push(Cause::not_supported("spec.failurePolicy", p, &["Fail", "Ignore"]));
    }
    if spec.pointer("/matchConstraints/resourceRules").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        causes.push(Cause::required("spec.matchConstraints.resourceRules"));
    }
    let empty = |k: &str| spec.get(k).and_then(Value::as_array).is_none_or(Vec::is_empty);
    if empty("validations") && empty("auditAnnotations") {
        causes.push(Cause::required_because(
            "spec.validations",
            "validations or auditAnnotations must contain at least one item",
        ));
    }
    check_expressions(&mut causes, &spec, "validations", false);
    check_expressions(&mut causes, &spec, "matchConditions", true);
    check_expressions(&mut causes, &spec, "variables", true);
    causes
}

/// The checks kube-apiserver makes of a ValidatingAdmissionPolicyBinding that matter here.
pub fn validate_binding(obj: &Value) -> Vec<crate::error::Cause> {
    use crate::error::Cause;
    let mut causes = vec![];
    if obj.pointer("/spec/policyName").and_then(Value::as_str).is_none_or(str::is_empty) {
        causes.push(Cause::required("spec.policyName"));
    }
    const ACTIONS: [&str; 3] = ["Audit", "Deny", "Warn"];
    match obj.pointer("/spec/validationActions").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => {
            for (i, action) in a.iter().enumerate() {
                let action = action.as_str().unwrap_or_default();
                if !ACTIONS.contains(&action) {
                    causes.push(Cause::not_supported(format!("spec.validationActions[{i}]"), action, &ACTIONS));
                }
            }
        }
        _ => {
            causes.push(Cause::required_because("spec.validationActions", "at least one validation action is required"))
        }
    }
    causes
}

/// Every binding with its policy (bindings of missing policies, or of policies needing
/// params, are left out).
pub fn bind(policies: Vec<Policy>, bindings: Vec<Binding>) -> Vec<(Arc<Policy>, Arc<Binding>)> {
    let policies: HashMap<String, Arc<Policy>> =
        policies.into_iter().filter(|p| !p.needs_params).map(|p| (p.name.clone(), Arc::new(p))).collect();
    bindings.into_iter().filter_map(|b| Some((policies.get(&b.policy)?.clone(), Arc::new(b)))).collect()
}

/// Whether a binding's policy may apply to requests of these attributes (rules only).
pub fn rules_match(policy: &Policy, binding: &Binding, a: &Attributes<'_>) -> bool {
    policy.constraints.rules_match(a, false) && binding.constraints.rules_match(a, true)
}

/// The CEL context of an admission request: `object`, `oldObject` (null when absent) and
/// `request` (an AdmissionRequest), with Kubernetes' CEL libraries.
fn admission_context(info: &RequestInfo, obj: Option<&Value>, old: Option<&Value>) -> Context<'static> {
    let request = review::request("v1", &uuid::Uuid::new_v4().to_string(), info, None, None)["request"].clone();
    let mut ctx = Context::default();
    ctx.register_all();
    ctx.add_variable_from_value("object", obj.map_or(kube_cel::cel::Value::Null, to_cel));
    ctx.add_variable_from_value("oldObject", old.map_or(kube_cel::cel::Value::Null, to_cel));
    ctx.add_variable_from_value("request", to_cel(&request));
    ctx
}

/// A webhook's `matchConditions`: whether all hold (a false one decides before any error), or
/// the first error.
pub fn conditions_hold(
    conditions: &[(String, Expression)],
    info: &RequestInfo,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, String> {
    if conditions.is_empty() {
        return Ok(true);
    }
    let ctx = admission_context(info, obj, old);
    let mut error = None;
    for (name, c) in conditions {
        match c.truth(&ctx) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(why) => {
                error.get_or_insert(format!("matchCondition '{name}': {why}"));
            }
        }
    }
    error.map_or(Ok(true), Err)
}

/// The policies a write must pass, checked at the admission point.
#[derive(Clone)]
pub struct PolicyCheck {
    pub pairs: Vec<(Arc<Policy>, Arc<Binding>)>,
    /// The request, its operation, name and uid set at the admission point.
    pub info: RequestInfo,
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// What `Warn` bindings said, for the request's `Warning` headers.
    pub warnings: Vec<String>,
}

/// `admission.NewForbidden` as the policy plugin words a denial (code and reason from the
/// validation's `reason`, default `Invalid` and 422).
fn denial(def: &ResourceDef, name: &str, message: &str, reason: Option<&str>) -> ApiError {
    let mut e = ApiError::forbidden_resource(&def.group, &def.plural, name, message);
    let (code, reason) = match reason.unwrap_or("Invalid") {
        "Unauthorized" => (401, "Unauthorized"),
        "Forbidden" => (403, "Forbidden"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    e.code = code;
    e.reason = reason;
    if let Some(d) = e.details.as_mut() {
        d["causes"] = serde_json::json!([{"message": message}]);
    }
    e
}

fn to_cel(v: &Value) -> kube_cel::cel::Value {
    kube_cel::cel::to_value(v).unwrap_or(kube_cel::cel::Value::Null)
}

impl PolicyCheck {
    /// Checks `obj` (and `old`, for an update) against every bound policy that applies.
    pub fn check(&mut self, def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
        let mut info = self.info.clone();
        info.operation = if old.is_none() { matching::Operation::Create } else { matching::Operation::Update };
        info.name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let is_namespace = def.group.is_empty() && def.plural == "namespaces";
        let attrs = Attributes {
            operation: info.operation,
            group: &def.group,
            version: &def.version,
            resource: &def.plural,
            subresource: &info.subresource,
            namespace: if is_namespace { &info.name } else { &info.namespace },
        };
        let ns_labels = if is_namespace { matching::labels_of(Some(obj)) } else { self.namespace_labels.clone() };
        let base = admission_context(&info, Some(obj), old);
        for (policy, binding) in &self.pairs {
            if !rules_match(policy, binding, &attrs)
                || !policy.constraints.selectors_match(&attrs, ns_labels.as_ref(), Some(obj), old)
                || !binding.constraints.selectors_match(&attrs, ns_labels.as_ref(), Some(obj), old)
            {
                continue;
            }
            // A failed validation, or (`failurePolicy: Fail`) a failure to evaluate, goes where
            // the binding's `validationActions` say.
            let mut decide = |message: &str, reason: Option<&str>| -> Result<(), ApiError> {
                if binding.warn {
                    self.warnings.push(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                        policy.name, binding.name
                    ));
                }
                if binding.deny {
                    let said = format!(
                        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
                        policy.name, binding.name
                    );
                    return Err(denial(def, &info.name, &said, reason));
                }
                Ok(())
            };
            let mut ctx = base.new_inner_scope();
            let mut variables: HashMap<String, kube_cel::cel::Value> = HashMap::new();
            let mut failure = None;
            for (name, e) in &policy.variables {
                match e.run(&ctx) {
                    Ok(v) => {
                        variables.insert(name.clone(), v);
                        ctx.add_variable_from_value("variables", variables.clone());
                    }
                    Err(why) => {
                        failure = Some(why);
                        break;
                    }
                }
            }
            ctx.add_variable_from_value("variables", variables);
            let mut applies = true;
            if failure.is_none() {
                for c in &policy.match_conditions {
                    match c.truth(&ctx) {
                        Ok(true) => {}
                        Ok(false) => {
                            applies = false;
                            break;
                        }
                        Err(why) => {
                            failure = Some(why);
                            break;
                        }
                    }
                }
            }
            if let Some(why) = failure {
                if !policy.ignore_failures {
                    decide(&why, None)?;
                }
                continue;
            }
            if !applies {
                continue;
            }
            for v in &policy.validations {
                match v.expression.truth(&ctx) {
                    Ok(true) => {}
                    Ok(false) => {
                        let message = v
                            .message_expression
                            .as_ref()
                            .and_then(|m| match m.run(&ctx) {
                                Ok(kube_cel::cel::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                                _ => None,
                            })
                            .or_else(|| v.message.clone())
                            .unwrap_or_else(|| format!("failed expression: {}", v.expression.source.trim()));
                        decide(&message, v.reason.as_deref())?;
                    }
                    Err(why) if !policy.ignore_failures => decide(&why, None)?,
                    Err(_) => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(causes: Vec<crate::error::Cause>) -> Vec<String> {
        causes.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn policies_and_bindings_are_checked_as_kube_apiserver_checks_them() {
        let rules = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}]});
        let ok = json!({"spec": {"matchConstraints": rules, "validations": [{"expression": "true"}]}});
        assert!(validate_policy(&ok).is_empty());
        let none = json!({"spec": {"matchConstraints": rules}});
        assert_eq!(
            fields(validate_policy(&none)),
            ["spec.validations: Required value: validations or auditAnnotations must contain at least one item"]
        );
        let blank = json!({"spec": {"matchConstraints": rules, "validations": [{"expression": " "}]}});
        assert_eq!(
            fields(validate_policy(&blank)),
            ["spec.validations[0].expression: Required value: expression is not specified"]
        );
        let broken = json!({"spec": {"matchConstraints": rules, "validations": [{"expression": "object.("}]}});
        let got = fields(validate_policy(&broken));
        assert!(
            got.len() == 1
                && got[0]
                    .starts_with("spec.validations[0].expression: Invalid value: \"object.(\": compilation failed"),
            "{got:?}"
        );
        assert_eq!(
            fields(validate_binding(&json!({"spec": {"policyName": "p", "validationActions": ["Reject"]}}))),
            [r#"spec.validationActions[0]: Unsupported value: "Reject": supported values: "Audit", "Deny", "Warn""#]
        );
        assert_eq!(
            fields(validate_binding(&json!({"spec": {}}))),
            [
                "spec.policyName: Required value",
                "spec.validationActions: Required value: at least one validation action is required"
            ]
        );
    }

    #[test]
    fn match_conditions_decide_on_a_false_one_before_any_error() {
        let info = RequestInfo {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            resource: "pods".into(),
            subresource: String::new(),
            name: "p".into(),
            namespace: "default".into(),
            operation: matching::Operation::Update,
            user: crate::auth::Identity { username: "alice".into(), ..Default::default() },
            dry_run: false,
            options: Value::Null,
        };
        let conds = |exprs: &[&str]| -> Vec<(String, Expression)> {
            exprs.iter().enumerate().map(|(i, e)| (format!("c{i}"), Expression::compile(e))).collect()
        };
        let obj = json!({"metadata": {"name": "p", "labels": {"a": "1"}}});
        let run = |exprs: &[&str]| conditions_hold(&conds(exprs), &info, Some(&obj), None);
        assert_eq!(run(&[]), Ok(true));
        assert_eq!(run(&["request.userInfo.username == 'alice'", "object.metadata.labels.a == '1'"]), Ok(true));
        assert_eq!(run(&["oldObject == null", "request.operation == 'UPDATE'"]), Ok(true));
        assert_eq!(run(&["object.missing == 1", "request.name == 'q'"]), Ok(false));
        assert!(
            run(&["object.missing == 1"])
                .unwrap_err()
                .starts_with("matchCondition 'c0': expression 'object.missing == 1' resulted in error")
        );
    }
}
