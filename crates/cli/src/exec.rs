//! `jobset exec POD [-c CONTAINER] -- CMD...`: runs a command inside a running container of the
//! process runtime on this machine (its mount and UTS namespaces, environment and working
//! directory). The pod is looked up through the API; the container's host pid comes from the
//! `containerID` the runtime reports (`process://<pid>-<n>`).

use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use crate::client::{self, ClientArgs};
use crate::{Failure, USAGE};

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The pod (or `pod/NAME`).
    pub pod: String,
    /// The container (default: the pod's first container).
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The host pid of `container` (or the first container) of a pod run by the process runtime.
pub fn target_pid(pod: &Pod, container: Option<&str>) -> Result<u32, String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    let statuses = status.and_then(|s| s.container_statuses.as_ref());
    let wanted = container
        .map(str::to_string)
        .or_else(|| pod.spec.as_ref().and_then(|s| s.containers.first()).map(|c| c.name.clone()))
        .ok_or_else(|| format!("pod {name:?} has no containers"))?;
    let init = status.and_then(|s| s.init_container_statuses.as_ref());
    let cs = statuses
        .into_iter()
        .flatten()
        .chain(init.into_iter().flatten())
        .find(|c| c.name == wanted)
        .ok_or_else(|| format!("container {wanted:?} is not valid for pod {name:?}"))?;
    if cs.state.as_ref().and_then(|s| s.running.as_ref()).is_none() {
        return Err(format!("container {wanted:?} of pod {name:?} is not running"));
    }
    let id = cs.container_id.as_deref().unwrap_or_default();
    jobset_kubelet::runtime::sandbox::container_pid(id).ok_or_else(|| {
        format!("container {wanted:?} of pod {name:?} is not run by the process runtime on this machine (containerID {id:?})")
    })
}

pub async fn run(args: ExecArgs) -> anyhow::Result<i32> {
    let conn = client::connect(&args.client).await?;
    let name = args.pod.strip_prefix("pod/").unwrap_or(&args.pod);
    let pods: Api<Pod> = Api::namespaced(conn.client.clone(), &conn.namespace);
    let pod = pods.get(name).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
    let pid = target_pid(&pod, args.container.as_deref()).map_err(|e| Failure::new(1, format!("error: {e}")))?;
    let mut cmd = jobset_kubelet::runtime::sandbox::exec_command(pid, &args.command)
        .map_err(|e| Failure::new(1, format!("error: entering the container (pid {pid}): {e}")))?;
    let status = tokio::task::spawn_blocking(move || cmd.status())
        .await?
        .map_err(|e| Failure::new(USAGE, format!("error: running {:?}: {e}", args.command[0])))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn picks_the_container_and_explains_why_not() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main"}, {"name": "side"}]},
            "status": {"containerStatuses": [
                {"name": "main", "ready": true, "restartCount": 0, "image": "", "imageID": "",
                 "containerID": "process://4242-1", "state": {"running": {}}},
                {"name": "side", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                 "containerID": "sim://01", "state": {"running": {}}}
            ]}
        }))
        .unwrap();
        assert_eq!(target_pid(&pod, None), Ok(4242));
        assert_eq!(target_pid(&pod, Some("main")), Ok(4242));
        assert!(target_pid(&pod, Some("side")).unwrap_err().contains("not run by the process runtime"));
        assert!(target_pid(&pod, Some("nope")).unwrap_err().contains("not valid for pod"));
    }
}
