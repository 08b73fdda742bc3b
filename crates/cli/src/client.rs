//! kubeconfig → kube::Client, and how errors from the server are shown (kubectl's wording).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where the API server is: the flags every client command takes.
#[derive(Args, Debug, Clone, Default)]
pub struct ClientArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// A client and the namespace objects without one go to.
pub struct Conn {
    pub client: Client,
    pub namespace: String,
    /// The server's URL, for messages.
    pub server: String,
}

pub async fn connect(args: &ClientArgs) -> anyhow::Result<Conn> {
    let kubeconfig = match &args.kubeconfig {
        Some(path) => {
            Kubeconfig::read_from(path).with_context(|| format!("reading the kubeconfig {}", path.display()))?
        }
        None => Kubeconfig::read()
            .context("reading the kubeconfig ($KUBECONFIG or ~/.kube/config; or pass --kubeconfig)")?,
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading the kubeconfig")?;
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).context("building the client")?;
    Ok(Conn { client, namespace, server })
}

/// kubectl's `Error from server (Reason): message` for API errors; other errors as they are.
pub fn server_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("Error from server ({}): {}", reason(s), s.message),
        other => format!("error: {other}"),
    }
}

/// The Status reason, or one derived from the code when the server gave none.
pub fn reason(s: &kube::core::Status) -> String {
    if !s.reason.is_empty() {
        return s.reason.clone();
    }
    match s.code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        _ => "InternalError",
    }
    .to_string()
}

/// Whether the server rejected the request itself (4xx) rather than failing to answer.
pub fn is_client_error(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code))
}
