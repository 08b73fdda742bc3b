//! Recognising the in-place restart agent in a pod template (docs/in-place-restart.md).
//!
//! Upstream publishes no agent image yet (its examples say `image: <CHANGE ME>`). jobset-rs names
//! one, [`AGENT_IMAGE`], as an extension: the process runtime maps it (any tag or digest) to
//! `jobset agent`, the simulated runtime runs the agent logic in-process for it, and admission
//! warns about an `InPlaceRestart` JobSet none of whose containers runs an agent.

use k8s_openapi::api::core::v1::Container;
use serde_json::Value;

/// The agent image jobset-rs recognises, without tag.
pub const AGENT_IMAGE: &str = "registry.k8s.io/jobset/in-place-restart-agent";

/// `image` without its `:tag` and `@digest` (a registry port such as `host:5000/x` is kept).
pub fn image_repository(image: &str) -> &str {
    let image = image.split_once('@').map_or(image, |(repo, _)| repo);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

/// Whether `image` is [`AGENT_IMAGE`] at any tag or digest.
pub fn is_agent_image(image: &str) -> bool {
    image_repository(image.trim()) == AGENT_IMAGE
}

/// Whether `c` runs an in-place restart agent: the agent image, `jobset agent` as its command,
/// or, for any other agent build, upstream's required env var `JOBSET_NAME` together with
/// `POD_NAME`.
pub fn runs_agent(c: &Container) -> bool {
    let image = c.image.as_deref().is_some_and(is_agent_image);
    let argv: Vec<&str> = c.command.iter().flatten().chain(c.args.iter().flatten()).map(String::as_str).collect();
    let command = argv.windows(2).any(|w| (w[0] == "jobset" || w[0].ends_with("/jobset")) && w[1] == "agent");
    let has = |name: &str| c.env.iter().flatten().any(|e| e.name == name);
    image || command || (has("JOBSET_NAME") && has("POD_NAME"))
}

/// Admission's warnings for a JobSet (JSON, as stored): with `spec.failurePolicy.restartStrategy:
/// InPlaceRestart`, one for each replicated job whose pod template has no container (init or
/// regular) that [`runs_agent`]: its pods would never report an in-place restart attempt.
pub fn missing_agent_warnings(jobset: &Value) -> Vec<String> {
    if jobset.pointer("/spec/failurePolicy/restartStrategy").and_then(Value::as_str) != Some("InPlaceRestart") {
        return vec![];
    }
    let rjobs = jobset.pointer("/spec/replicatedJobs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    rjobs
        .iter()
        .enumerate()
        .filter(|(_, rjob)| {
            let pod = rjob.pointer("/template/spec/template/spec");
            let containers = ["initContainers", "containers"]
                .into_iter()
                .filter_map(|k| pod.and_then(|p| p.get(k)).and_then(Value::as_array))
                .flatten();
            !containers.filter_map(|c| serde_json::from_value::<Container>(c.clone()).ok()).any(|c| runs_agent(&c))
        })
        .map(|(i, _)| {
            format!(
                "spec.replicatedJobs[{i}].template.spec.template.spec: no container runs the in-place restart agent \
                 (image {AGENT_IMAGE}, \"jobset agent\", or env JOBSET_NAME and POD_NAME); its pods will not take \
                 part in in-place restarts"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_repository_drops_tag_and_digest_but_keeps_a_registry_port() {
        for (image, want) in [
            ("registry.k8s.io/jobset/in-place-restart-agent", AGENT_IMAGE),
            ("registry.k8s.io/jobset/in-place-restart-agent:v0.11.0", AGENT_IMAGE),
            ("registry.k8s.io/jobset/in-place-restart-agent@sha256:abc", AGENT_IMAGE),
            ("registry.k8s.io/jobset/in-place-restart-agent:v1@sha256:abc", AGENT_IMAGE),
            ("localhost:5000/agent", "localhost:5000/agent"),
            ("localhost:5000/agent:v1", "localhost:5000/agent"),
            ("busybox", "busybox"),
        ] {
            assert_eq!(image_repository(image), want, "{image}");
        }
        assert!(is_agent_image("registry.k8s.io/jobset/in-place-restart-agent:latest"));
        assert!(!is_agent_image("registry.k8s.io/jobset/jobset-controller:v0.11.0"));
    }

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_container_runs_the_agent_by_image_command_or_env_contract() {
        use serde_json::json;
        for (c, want) in [
            (json!({"name": "a", "image": "registry.k8s.io/jobset/in-place-restart-agent:v1"}), true),
            (json!({"name": "a", "image": "x", "command": ["/usr/local/bin/jobset", "agent"]}), true),
            (json!({"name": "a", "image": "x", "command": ["jobset"], "args": ["agent"]}), true),
            (json!({"name": "a", "image": "x", "env": [{"name": "JOBSET_NAME"}, {"name": "POD_NAME"}]}), true),
            (json!({"name": "a", "image": "x", "env": [{"name": "JOBSET_NAME"}]}), false),
            (json!({"name": "a", "image": "x", "command": ["jobset", "run"]}), false),
            (json!({"name": "a", "image": "debian:12"}), false),
        ] {
            assert_eq!(runs_agent(&container(c.clone())), want, "{c}");
        }
    }

    #[test]
    fn in_place_restart_jobsets_are_warned_about_replicated_jobs_without_an_agent() {
        use serde_json::json;
        let agent = json!({"name": "agent", "image": "registry.k8s.io/jobset/in-place-restart-agent:v1"});
        let main = json!({"name": "main", "image": "busybox"});
        let env_agent = json!({"name": "a", "image": "x", "env": [{"name": "JOBSET_NAME"}, {"name": "POD_NAME"}]});
        let jobset = |strategy: &str, pods: Vec<serde_json::Value>| {
            let rjobs: Vec<_> = pods
                .into_iter()
                .enumerate()
                .map(|(i, pod)| json!({"name": format!("r{i}"), "template": {"spec": {"template": {"spec": pod}}}}))
                .collect();
            json!({"spec": {"failurePolicy": {"restartStrategy": strategy}, "replicatedJobs": rjobs}})
        };
        let warning = |i: usize| {
            format!(
                "spec.replicatedJobs[{i}].template.spec.template.spec: no container runs the in-place restart agent (image registry.k8s.io/jobset/in-place-restart-agent, \"jobset agent\", or env JOBSET_NAME and POD_NAME); its pods will not take part in in-place restarts"
            )
        };
        for (name, v, want) in [
            ("no failure policy", json!({"spec": {"replicatedJobs": [{"name": "r"}]}}), vec![]),
            ("recreate without agents", jobset("Recreate", vec![json!({"containers": [main.clone()]})]), vec![]),
            (
                "an agent as a sidecar (init container) or as a container",
                jobset(
                    "InPlaceRestart",
                    vec![
                        json!({"initContainers": [agent.clone()], "containers": [main.clone()]}),
                        json!({"containers": [main.clone(), env_agent.clone()]}),
                    ],
                ),
                vec![],
            ),
            (
                "each replicated job without one",
                jobset(
                    "InPlaceRestart",
                    vec![
                        json!({"containers": [main.clone()]}),
                        json!({"initContainers": [agent.clone()], "containers": [main.clone()]}),
                        json!({"initContainers": [main.clone()], "containers": [{"name": "x", "image": "debian:12"}]}),
                        json!({}),
                    ],
                ),
                vec![warning(0), warning(2), warning(3)],
            ),
        ] {
            assert_eq!(missing_agent_warnings(&v), want, "{name}");
        }
    }
}
