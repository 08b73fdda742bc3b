//! Admission for built-in kinds, registered on every server: Job defaulting and validation
//! (the logic lives in `jobset_api::job`), JobSet defaulting and validation (upstream's
//! webhooks plus the CRD schema and CEL rules; the logic lives in `jobset_api::jobset`), with a
//! warning for an `InPlaceRestart` JobSet whose pods run no in-place restart agent, and AppWrapper
//! validation (upstream's validating webhook; the logic lives in `jobset_api::appwrapper`), and
//! RBAC objects' defaulting and validation (`crate::rbac`).

use std::sync::Arc;

use serde_json::Value;

use crate::admission::{Admission, AdmissionHook, Lookup};
use crate::error::Cause;

fn causes(errors: Vec<jobset_api::field::FieldError>) -> Vec<Cause> {
    errors.into_iter().map(|e| Cause { reason: e.reason(), message: e.message(), field: e.field }).collect()
}

struct JobAdmission;

impl AdmissionHook for JobAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        jobset_api::job::default_job(obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        causes(jobset_api::job::validate_job(obj, old))
    }
}

/// JobSet admission: upstream's webhook defaults and validation. Unlike upstream's mutating
/// webhook (create only), the defaults also apply on update, where they fill only what a request
/// left out: a client-side re-apply of a manifest that omits defaulted fields (say
/// `completionMode`) then compares equal instead of failing as an immutable change.
pub struct JobSetAdmission {
    pub features: jobset_api::jobset::Features,
}

impl AdmissionHook for JobSetAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        jobset_api::jobset::default_jobset(obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, lookup: &dyn Lookup) -> Vec<Cause> {
        let claim = |ns: &str, name: &str| lookup.get("", "persistentvolumeclaims", ns, name);
        causes(jobset_api::jobset::validate_jobset_in(obj, old, &self.features, &claim))
    }
    fn warnings(&self, obj: &Value, _old: Option<&Value>) -> Vec<String> {
        jobset_api::jobset::agent::missing_agent_warnings(obj)
    }
}

/// AppWrapper admission: upstream's validating webhook on create and update.
///
/// Upstream's defaulting webhook is left out: it labels the AppWrapper with the requesting user
/// (`workload.codeflare.dev/user`, `.../userid`), and hooks are not told who is requesting. (Its
/// default queue name needs Kueue, which is not here either.)
struct AppWrapperAdmission;

impl AdmissionHook for AppWrapperAdmission {
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        use jobset_api::appwrapper::validation::{validate_appwrapper, validate_appwrapper_update};
        match old {
            None => {
                let namespace = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
                causes(validate_appwrapper(obj, namespace))
            }
            Some(old) => causes(validate_appwrapper_update(obj, old)),
        }
    }
}

/// `extra` with the built-in hooks in front.
pub fn with_builtins(extra: Admission) -> Admission {
    let mut a = Admission::default();
    a.register("batch", "Job", Arc::new(JobAdmission));
    a.register(
        jobset_api::jobset::keys::GROUP,
        jobset_api::jobset::keys::KIND,
        Arc::new(JobSetAdmission { features: Default::default() }),
    );
    a.register(jobset_api::appwrapper::keys::GROUP, jobset_api::appwrapper::keys::KIND, Arc::new(AppWrapperAdmission));
    for kind in crate::rbac::KINDS {
        a.register(crate::rbac::GROUP, kind, Arc::new(crate::rbac::RbacAdmission { kind }));
    }
    a.extend(extra);
    a
}
