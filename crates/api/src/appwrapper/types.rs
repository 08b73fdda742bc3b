//! The `workload.codeflare.dev/v1beta2` AppWrapper, field for field as upstream's
//! `api/v1beta2/appwrapper_types.go`. A component's `template` is kept as raw JSON (upstream's
//! `runtime.RawExtension`): it may be any kind the cluster serves.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSchedulingGate, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppWrapper {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::crdgen::any_object")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: AppWrapperSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AppWrapperStatus>,
}

impl kube_core::Resource for AppWrapper {
    type DynamicType = ();
    type Scope = kube_core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        keys::KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        keys::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        keys::VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        keys::PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl kube_core::object::HasStatus for AppWrapper {
    type Status = AppWrapperStatus;
    fn status(&self) -> Option<&AppWrapperStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<AppWrapperStatus> {
        &mut self.status
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["components"]))]
pub struct AppWrapperSpec {
    #[serde(default)]
    pub components: Vec<AppWrapperComponent>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["template"]))]
pub struct AppWrapperComponent {
    /// Free-form; not read by the fault-tolerance logic (as upstream).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Upstream's `DeclaredPodSets`: optional for the kinds whose podSets are inferred.
    #[serde(default, rename = "podSets", skip_serializing_if = "Vec::is_empty")]
    pub declared_pod_sets: Vec<AppWrapperPodSet>,
    /// Written by Kueue on admission, one per podSet in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_set_infos: Vec<AppWrapperPodSetInfo>,
    #[serde(default)]
    #[schemars(schema_with = "crate::crdgen::embedded_resource")]
    pub template: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["path"]))]
pub struct AppWrapperPodSet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Where the pod template sits in the component, e.g. `template.spec.template`.
    #[serde(default)]
    pub path: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppWrapperPodSetInfo {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduling_gates: Vec<PodSchedulingGate>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppWrapperStatus {
    // Upstream's phase is a plain string in the schema (no enum marker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub phase: Option<AppWrapperPhase>,
    /// Upstream's `Retries`: how many times the AppWrapper entered Resetting on a counted failure.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resetting_count: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Parallel to `spec.components`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub component_status: Vec<AppWrapperComponentStatus>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["apiVersion", "kind", "name", "podSets"]))]
pub struct AppWrapperComponentStatus {
    /// The created object's actual name (a template may use `generateName`).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub api_version: String,
    /// The validated or inferred podSets, frozen on the first reconcile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_sets: Vec<AppWrapperPodSet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AppWrapperPhase {
    Suspended,
    Resuming,
    Running,
    Resetting,
    Suspending,
    Succeeded,
    Failed,
    Terminating,
}

impl AppWrapperPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            AppWrapperPhase::Suspended => "Suspended",
            AppWrapperPhase::Resuming => "Resuming",
            AppWrapperPhase::Running => "Running",
            AppWrapperPhase::Resetting => "Resetting",
            AppWrapperPhase::Suspending => "Suspending",
            AppWrapperPhase::Succeeded => "Succeeded",
            AppWrapperPhase::Failed => "Failed",
            AppWrapperPhase::Terminating => "Terminating",
        }
    }
}

impl std::fmt::Display for AppWrapperPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AppWrapper {
    pub fn phase(&self) -> Option<AppWrapperPhase> {
        self.status.as_ref()?.phase
    }

    /// The AppWrapper condition of type `t`.
    pub fn condition(&self, t: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == t)
    }

    /// Whether condition `t` is `True`.
    pub fn is_true(&self, t: &str) -> bool {
        self.condition(t).is_some_and(|c| c.status == "True")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_sample_round_trips_with_upstream_field_names() {
        let yaml = r#"
apiVersion: workload.codeflare.dev/v1beta2
kind: AppWrapper
metadata:
  name: sample-job
  annotations:
    workload.codeflare.dev.appwrapper/retryLimit: "2"
spec:
  components:
  - podSets:
    - replicas: 2
      path: template.spec.template
    podSetInfos:
    - nodeSelector: {zone: a}
    template:
      apiVersion: batch/v1
      kind: Job
      metadata: {name: sample-job}
      spec: {parallelism: 2, template: {spec: {containers: [{name: c, image: busybox}]}}}
status:
  phase: Running
  resettingCount: 1
  componentStatus:
  - {name: sample-job, kind: Job, apiVersion: batch/v1, podSets: [{replicas: 2, path: template.spec.template}]}
"#;
        let aw: AppWrapper = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(aw.phase(), Some(AppWrapperPhase::Running));
        assert_eq!(aw.spec.components[0].declared_pod_sets[0].replicas, Some(2));
        assert_eq!(aw.spec.components[0].pod_set_infos[0].node_selector["zone"], "a");
        assert_eq!(aw.status.as_ref().unwrap().resetting_count, 1);
        let json = serde_json::to_value(&aw).unwrap();
        assert_eq!(json.pointer("/spec/components/0/podSets/0/path").unwrap(), "template.spec.template");
        assert_eq!(json.pointer("/status/componentStatus/0/apiVersion").unwrap(), "batch/v1");
        assert!(json.pointer("/spec/suspend").is_none(), "false suspend is omitted as upstream's omitempty");
        let back: AppWrapper = serde_json::from_value(json).unwrap();
        assert_eq!(back, aw);
    }
}
