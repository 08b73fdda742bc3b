//! kubeconfig → kube::Client, and how errors and warnings from the server are shown (kubectl's
//! wording).

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
    // kube's default client retries 429 (the server's in-flight limits), waiting its Retry-After.
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

/// What kube puts in `reason` when an error body is not a Status (a 429 of kube-apiserver's
/// in-flight limit is plain text).
const UNPARSED: &str = "Failed to parse error data";

/// The Status reason, or one derived from the code when the server gave none.
pub fn reason(s: &kube::core::Status) -> String {
    if !s.reason.is_empty() && s.reason != UNPARSED {
        return s.reason.clone();
    }
    match s.code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        _ => "InternalError",
    }
    .to_string()
}

/// Whether the server rejected the request itself (4xx) rather than failing to answer.
pub fn is_client_error(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code))
}

/// Sends `req` and decodes the object it answers, first printing each warning the server sent
/// (`Warning` headers, e.g. from admission) as kubectl does. Errors are what kube's `Api` returns.
pub async fn send_warned(
    client: &Client,
    req: http::Request<Vec<u8>>,
) -> Result<kube::api::DynamicObject, kube::Error> {
    let resp = client.send(req.map(kube::client::Body::from)).await?;
    print_warnings(resp.headers());
    let code = resp.status();
    let body = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .map_err(|e| kube::Error::Service(e.into()))?;
    if code.is_client_error() || code.is_server_error() {
        let text = String::from_utf8_lossy(&body);
        let status = serde_json::from_str::<kube::core::Status>(&text)
            .unwrap_or_else(|_| kube::core::Status::failure(text.trim(), UNPARSED).with_code(code.as_u16()));
        return Err(kube::Error::Api(status.boxed()));
    }
    serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
}

/// kubectl's warning printer: `Warning: <text>` on stderr for each code-299 warning, each text
/// once per process.
fn print_warnings(headers: &http::HeaderMap) {
    static SHOWN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    for text in headers.get_all(http::header::WARNING).iter().filter_map(|v| parse_warning(v.as_bytes())) {
        if !shown.contains(&text) {
            eprintln!("Warning: {text}");
            shown.push(text);
        }
    }
}

/// The text of a `Warning` header value `299 <agent> "<text>" ["<date>"]` (client-go's
/// `ParseWarningHeader`); `None` for another code, an empty text or a malformed value.
fn parse_warning(value: &[u8]) -> Option<String> {
    let value = std::str::from_utf8(value).ok()?;
    let (code, rest) = value.split_once(' ')?;
    let (_agent, rest) = rest.split_once(' ')?;
    if code != "299" {
        return None;
    }
    let mut chars = rest.strip_prefix('"')?.chars();
    let mut text = String::new();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => text.push(chars.next()?),
            c => text.push(c),
        }
    }
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_are_read_like_client_go() {
        for (value, want) in [
            (r#"299 - "plain""#, Some("plain")),
            (r#"299 - "say \"hi\" \\ bye""#, Some(r#"say "hi" \ bye"#)),
            (r#"299 kube-apiserver "with a date" "Wed, 21 Oct 2015 07:28:00 GMT""#, Some("with a date")),
            (r#"199 - "not a 299""#, None),
            (r#"299 - """#, None),
            (r#"299 - "unterminated"#, None),
            ("299 -", None),
        ] {
            assert_eq!(parse_warning(value.as_bytes()).as_deref(), want, "{value}");
        }
    }
}
