//! Reads the ConfigMaps and Secrets a pod references (env `valueFrom`, `envFrom`, `configMap`,
//! `secret` and `projected` volumes) when the pod is admitted, for the volume check and the
//! runtime; again before the next try when a mount or start failed for want of one.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Client;
use kube::api::Api;

use crate::runtime::PodResources;

/// The names of the ConfigMaps and Secrets `pod` refers to.
pub fn referenced(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut cms, mut secrets) = (BTreeSet::new(), BTreeSet::new());
    let Some(spec) = &pod.spec else { return (cms, secrets) };
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        for from in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
            cms.extend(from.config_map_key_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_key_ref.as_ref().map(|r| r.name.clone()));
        }
        for from in c.env_from.iter().flatten() {
            cms.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    for v in spec.volumes.iter().flatten() {
        cms.extend(v.config_map.as_ref().map(|c| c.name.clone()));
        secrets.extend(v.secret.as_ref().and_then(|s| s.secret_name.clone()));
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            cms.extend(p.config_map.as_ref().map(|c| c.name.clone()));
            secrets.extend(p.secret.as_ref().map(|s| s.name.clone()));
        }
    }
    cms.retain(|n| !n.is_empty());
    secrets.retain(|n| !n.is_empty());
    (cms, secrets)
}

/// Fetches what `pod` refers to. A missing object is left out (the runtime reports it when a
/// container needs it, unless the reference is optional); other API errors are returned.
pub async fn fetch(client: &Client, pod: &Pod) -> Result<PodResources, kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let (cm_names, secret_names) = referenced(pod);
    let mut out = PodResources::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for name in cm_names {
        if let Some(cm) = cms.get_opt(&name).await? {
            let mut data: BTreeMap<String, Vec<u8>> =
                cm.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
            data.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
            out.config_maps.insert(name, data);
        }
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for name in secret_names {
        if let Some(s) = secrets.get_opt(&name).await? {
            let mut data: BTreeMap<String, Vec<u8>> =
                s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            data.extend(s.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
            out.secrets.insert(name, data);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn collects_every_kind_of_reference() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "i", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}]}],
                "containers": [{"name": "m",
                    "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}}, {"name": "L", "value": "x"}],
                    "envFrom": [{"configMapRef": {"name": "c2"}}, {"secretRef": {"name": "s2"}}]}],
                "volumes": [
                    {"name": "v1", "configMap": {"name": "c3"}},
                    {"name": "v2", "secret": {"secretName": "s3"}},
                    {"name": "v3", "projected": {"sources": [{"configMap": {"name": "c4"}}, {"secret": {"name": "s4"}}]}},
                    {"name": "v4", "emptyDir": {}}
                ]
            }
        }))
        .unwrap();
        let (cms, secrets) = referenced(&pod);
        assert_eq!(cms.into_iter().collect::<Vec<_>>(), ["c1", "c2", "c3", "c4"]);
        assert_eq!(secrets.into_iter().collect::<Vec<_>>(), ["s1", "s2", "s3", "s4"]);
    }
}
