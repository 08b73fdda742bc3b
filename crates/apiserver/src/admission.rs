//! Admission hook points: per-kind defaulting and validation, called on create and update.
//!
//! The JobSet and Job webhooks of later work plug in here; built-in defaults live in `builtin`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::error::Cause;
use crate::resources::ResourceDef;

/// Read access to stored objects, for hooks that check a request against the cluster (as a
/// webhook would with GET), within the request's transaction.
pub trait Lookup {
    /// Object `name` of resource `group`/`plural` in `namespace`, as stored.
    fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value>;
}

pub trait AdmissionHook: Send + Sync {
    /// Mutates a new object (create) or the merged result of an update.
    fn default(&self, _obj: &mut Value, _old: Option<&Value>) {}
    /// Returns every problem found; an empty list admits the object.
    fn validate(&self, _obj: &Value, _old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        vec![]
    }
}

/// Hooks by (API group, kind).
#[derive(Default, Clone)]
pub struct Admission {
    hooks: HashMap<(String, String), Vec<Arc<dyn AdmissionHook>>>,
}

impl Admission {
    pub fn register(&mut self, group: &str, kind: &str, hook: Arc<dyn AdmissionHook>) {
        self.hooks.entry((group.to_string(), kind.to_string())).or_default().push(hook);
    }

    /// Adds every hook of `other` after this one's.
    pub fn extend(&mut self, other: Admission) {
        for (k, hooks) in other.hooks {
            self.hooks.entry(k).or_default().extend(hooks);
        }
    }

    fn for_def(&self, def: &ResourceDef) -> &[Arc<dyn AdmissionHook>] {
        self.hooks.get(&(def.group.clone(), def.kind.clone())).map(Vec::as_slice).unwrap_or_default()
    }

    pub fn apply_defaults(&self, def: &ResourceDef, obj: &mut Value, old: Option<&Value>) {
        for h in self.for_def(def) {
            h.default(obj, old);
        }
    }

    pub fn validate(&self, def: &ResourceDef, obj: &Value, old: Option<&Value>, lookup: &dyn Lookup) -> Vec<Cause> {
        self.for_def(def).iter().flat_map(|h| h.validate(obj, old, lookup)).collect()
    }
}
