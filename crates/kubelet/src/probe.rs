//! Container probes (`startupProbe`, `readinessProbe`, `livenessProbe`) and lifecycle hook
//! handlers (`postStart`, `preStop`), as kubelet's prober runs them.
//!
//! - [`ProbeSpec`]: a probe's action and timings with kubelet's defaults (period 10 s, timeout
//!   1 s, success threshold 1, failure threshold 3);
//! - [`Tracker`]: the pure threshold logic (a result is reported only after `successThreshold`
//!   consecutive successes or `failureThreshold` consecutive failures, and only when it changes);
//! - [`run_action`]/[`run_handler`]: one probe or hook attempt (`exec` through
//!   [`Runtime::exec`], `httpGet` (hyper's HTTP/1.1 client), `tcpSocket`, `sleep`; `grpc`
//!   is not supported and fails with a message). An `httpGet` the runtime answers itself
//!   ([`Runtime::http_probe`]: the simulated in-place restart agent's barrier) is not sent; other
//!   network actions succeed at once when the runtime is not [`Runtime::reachable`] (simulated
//!   containers listen nowhere);
//! - [`supervise`]: the async loop of one container run, spawned by the pod worker when the run
//!   starts and aborted when it ends: `postStart` first, then the startup probe until it succeeds,
//!   then readiness and liveness side by side. It reports result *changes* as
//!   [`Event::Probe`]/[`Event::PostStart`] for the pod state machine, which decides what they mean.
//!
//! The first attempt of each probe runs as soon as `initialDelaySeconds` (counted from the
//! container's start) has passed, then every `periodSeconds`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, LifecycleHandler, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::sync::mpsc;

use crate::pod::{CRef, Event, ProbeKind};
use crate::runtime::{ContainerId, Runtime};

/// What a probe or hook does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Exec(Vec<String>),
    Http {
        host: Option<String>,
        port: IntOrString,
        path: String,
        scheme: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: Option<String>,
        port: IntOrString,
    },
    Grpc {
        port: i32,
        service: Option<String>,
    },
    Sleep(Duration),
    /// No handler set (invalid spec): always fails.
    None,
}

impl Action {
    fn http(h: &HTTPGetAction) -> Action {
        Action::Http {
            host: h.host.clone().filter(|h| !h.is_empty()),
            port: h.port.clone(),
            path: h.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into()),
            scheme: h.scheme.clone().unwrap_or_else(|| "HTTP".into()),
            headers: h.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
        }
    }

    pub fn of_probe(p: &Probe) -> Action {
        if let Some(e) = &p.exec {
            Action::Exec(e.command.clone().unwrap_or_default())
        } else if let Some(h) = &p.http_get {
            Action::http(h)
        } else if let Some(t) = &p.tcp_socket {
            Action::Tcp { host: t.host.clone().filter(|h| !h.is_empty()), port: t.port.clone() }
        } else if let Some(g) = &p.grpc {
            Action::Grpc { port: g.port, service: g.service.clone() }
        } else {
            Action::None
        }
    }

    pub fn of_handler(h: &LifecycleHandler) -> Action {
        if let Some(e) = &h.exec {
            Action::Exec(e.command.clone().unwrap_or_default())
        } else if let Some(g) = &h.http_get {
            Action::http(g)
        } else if let Some(t) = &h.tcp_socket {
            Action::Tcp { host: t.host.clone().filter(|h| !h.is_empty()), port: t.port.clone() }
        } else if let Some(s) = &h.sleep {
            Action::Sleep(Duration::from_secs(s.seconds.max(0) as u64))
        } else {
            Action::None
        }
    }
}

fn secs(v: Option<i32>, default: u64, min: u64) -> Duration {
    Duration::from_secs(v.map(|v| v.max(0) as u64).unwrap_or(default).max(min))
}

/// A probe with kubelet's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub action: Action,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// Probe-level `terminationGracePeriodSeconds` (liveness and startup kills).
    pub termination_grace: Option<Duration>,
}

impl ProbeSpec {
    pub fn of(p: &Probe) -> ProbeSpec {
        ProbeSpec {
            action: Action::of_probe(p),
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
            termination_grace: p.termination_grace_period_seconds.map(|s| Duration::from_secs(s.max(0) as u64)),
        }
    }
}

/// A container's probes and postStart hook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerProbes {
    pub startup: Option<ProbeSpec>,
    pub readiness: Option<ProbeSpec>,
    pub liveness: Option<ProbeSpec>,
    pub post_start: Option<Action>,
}

impl ContainerProbes {
    pub fn of(c: &Container) -> ContainerProbes {
        ContainerProbes {
            startup: c.startup_probe.as_ref().map(ProbeSpec::of),
            readiness: c.readiness_probe.as_ref().map(ProbeSpec::of),
            liveness: c.liveness_probe.as_ref().map(ProbeSpec::of),
            post_start: c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()).map(Action::of_handler),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == ContainerProbes::default()
    }
}

/// kubelet's result bookkeeping for one probe of one container run: the result changes only
/// after `success_threshold` consecutive successes or `failure_threshold` consecutive failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracker {
    success_threshold: u32,
    failure_threshold: u32,
    /// The result in force (`None`: unknown yet).
    current: Option<bool>,
    last: Option<bool>,
    run: u32,
}

impl Tracker {
    /// Readiness starts as failure, liveness as success, startup as unknown (as kubelet does).
    pub fn new(kind: ProbeKind, spec: &ProbeSpec) -> Tracker {
        let current = match kind {
            ProbeKind::Readiness => Some(false),
            ProbeKind::Liveness => Some(true),
            ProbeKind::Startup => None,
        };
        Tracker {
            success_threshold: spec.success_threshold,
            failure_threshold: spec.failure_threshold,
            current,
            last: None,
            run: 0,
        }
    }

    /// Records one attempt; returns the new result when it changed.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        if self.last == Some(ok) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(ok);
            self.run = 1;
        }
        let threshold = if ok { self.success_threshold } else { self.failure_threshold };
        if self.run < threshold || self.current == Some(ok) {
            return None;
        }
        self.current = Some(ok);
        Some(ok)
    }
}

/// Where probes and hooks of one container run go.
#[derive(Clone)]
pub struct Target {
    pub runtime: Arc<dyn Runtime>,
    pub id: ContainerId,
    pub pod_ip: String,
    pub container: Container,
}

impl Target {
    fn port(&self, port: &IntOrString) -> Result<u16, String> {
        let n = match port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => match name.parse::<i32>() {
                Ok(n) => n,
                Err(_) => self
                    .container
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                    .map(|p| p.container_port)
                    .ok_or_else(|| format!("no container port named {name:?}"))?,
            },
        };
        u16::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| format!("invalid port {n}"))
    }

    fn host(&self, host: &Option<String>) -> String {
        host.clone().unwrap_or_else(|| self.pod_ip.clone())
    }
}

/// `host:port`, with IPv6 hosts bracketed.
fn address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// One GET over a fresh HTTP/1.1 connection (kubelet's probe client does not reuse them); the
/// response status.
async fn http_get(addr: &str, host_header: &str, path: &str, headers: &[(String, String)]) -> Result<u16, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("dial {addr}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let conn = tokio::spawn(conn);
    let path = if path.starts_with('/') { path.to_string() } else { format!("/{path}") };
    let mut req = http::Request::get(path);
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    for (name, default) in [("host", host_header), ("user-agent", "kube-probe/1.36"), ("accept", "*/*")] {
        if !has(name) {
            req = req.header(name, default);
        }
    }
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| format!("building the request to {addr}: {e}"))?;
    let status =
        sender.send_request(req).await.map(|r| r.status().as_u16()).map_err(|e| format!("GET from {addr}: {e}"));
    conn.abort();
    status
}

/// An HTTP status as a probe result (kubelet: 200-399 is success).
fn http_result(code: u16) -> Result<(), String> {
    if (200..400).contains(&code) { Ok(()) } else { Err(format!("HTTP probe failed with statuscode: {code}")) }
}

/// One attempt of `action` against `target`, bounded by `timeout`. `Ok` is success.
///
/// An `HTTP` `httpGet` the runtime answers itself ([`Runtime::http_probe`]) is not sent. The
/// runtime may hold that answer for up to `timeout` (a long poll): the simulated in-place restart
/// agent answers its barrier probe the moment the barrier lifts instead of with 503, so the
/// startup probe passes without waiting for the next period. With `periodSeconds` no longer
/// than `timeoutSeconds` (the agent's sidecar: both 1 s) the next attempt starts as soon as a
/// held one answers 503, so the barrier is watched without a gap; a longer period leaves one.
/// (Waking the prober early would need a second channel into [`probe_loop`]; the long poll keeps
/// probing a plain request/response.)
pub async fn run_action(target: &Target, action: &Action, timeout: Duration) -> Result<(), String> {
    let reachable = target.runtime.reachable();
    let answered = match action {
        Action::Http { port, path, scheme, .. } if scheme.eq_ignore_ascii_case("HTTP") => {
            target.port(port).ok().and_then(|port| target.runtime.http_probe(&target.id, path, port, timeout))
        }
        _ => None,
    };
    if let Some(answer) = answered {
        // The runtime answers within `timeout`; the margin only guards against one that does not.
        let bound = timeout.saturating_add(Duration::from_secs(1));
        return match tokio::time::timeout(bound, answer).await {
            Ok(code) => http_result(code?),
            Err(_) => Err(format!("timeout after {timeout:?}")),
        };
    }
    let attempt = async {
        match action {
            Action::Exec(argv) => {
                let out = target.runtime.exec(&target.id, argv.clone(), timeout).await.map_err(|e| e.0)?;
                if out.exit_code == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "command {argv:?} exited with {}: {}",
                        out.exit_code,
                        String::from_utf8_lossy(&out.output).trim_end()
                    ))
                }
            }
            Action::Http { .. } | Action::Tcp { .. } | Action::Grpc { .. } if !reachable => Ok(()),
            Action::Http { host, port, path, scheme, headers } => {
                if !scheme.eq_ignore_ascii_case("HTTP") {
                    return Err(format!("httpGet scheme {scheme} is not supported by this agent (HTTP only)"));
                }
                let host = target.host(host);
                let addr = address(&host, target.port(port)?);
                http_result(http_get(&addr, &addr, path, headers).await?)
            }
            Action::Tcp { host, port } => {
                let addr = address(&target.host(host), target.port(port)?);
                tokio::net::TcpStream::connect(&addr).await.map(drop).map_err(|e| format!("dial tcp {addr}: {e}"))
            }
            Action::Grpc { port, .. } => Err(format!("grpc probes (port {port}) are not supported by this agent")),
            Action::Sleep(d) => {
                tokio::time::sleep(*d).await;
                Ok(())
            }
            Action::None => Err("no probe or hook handler is set".to_string()),
        }
    };
    match action {
        // A sleep hook is bounded by the caller (the grace period), not by a probe timeout.
        Action::Sleep(_) => attempt.await,
        _ => tokio::time::timeout(timeout, attempt).await.unwrap_or_else(|_| Err(format!("timeout after {timeout:?}"))),
    }
}

/// Runs a lifecycle hook (`postStart`, `preStop`) within `timeout`.
pub async fn run_handler(target: &Target, action: &Action, timeout: Duration) -> Result<(), String> {
    tokio::time::timeout(timeout, run_action(target, action, timeout))
        .await
        .unwrap_or_else(|_| Err(format!("hook timed out after {timeout:?}")))
}

/// How long a postStart hook may take (kubelet does not bound it; the container's end aborts it).
pub const POST_START_TIMEOUT: Duration = Duration::from_secs(3600);

/// Probes one container run until it ends (the worker aborts the task) and reports changes.
pub async fn supervise(
    target: Target,
    probes: ContainerProbes,
    c: CRef,
    restart_count: u32,
    started: tokio::time::Instant,
    tx: mpsc::UnboundedSender<Event>,
) {
    let now = jiff::Timestamp::now;
    if let Some(hook) = &probes.post_start {
        let res = run_handler(&target, hook, POST_START_TIMEOUT).await;
        let ok = res.is_ok();
        let _ = tx.send(Event::PostStart { c, restart_count, error: res.err(), at: now() });
        if !ok {
            return;
        }
    }
    if let Some(spec) = &probes.startup
        && !probe_loop(&target, spec, ProbeKind::Startup, c, restart_count, started, &tx).await
    {
        return;
    }
    let readiness = async {
        if let Some(spec) = &probes.readiness {
            probe_loop(&target, spec, ProbeKind::Readiness, c, restart_count, started, &tx).await;
        }
    };
    let liveness = async {
        if let Some(spec) = &probes.liveness {
            probe_loop(&target, spec, ProbeKind::Liveness, c, restart_count, started, &tx).await;
        }
    };
    futures::join!(readiness, liveness);
}

/// Runs one probe: the first attempt once the initial delay has passed, then every period.
/// Returns `true` when a startup probe succeeded; `false` when a startup or liveness probe
/// failed for good (the container will be killed) or the receiver is gone. Readiness runs on.
async fn probe_loop(
    target: &Target,
    spec: &ProbeSpec,
    kind: ProbeKind,
    c: CRef,
    restart_count: u32,
    started: tokio::time::Instant,
    tx: &mpsc::UnboundedSender<Event>,
) -> bool {
    let mut tracker = Tracker::new(kind, spec);
    let mut next = started + spec.initial_delay;
    loop {
        tokio::time::sleep_until(next).await;
        next += spec.period;
        let res = run_action(target, &spec.action, spec.timeout).await;
        if let Err(e) = &res {
            tracing::debug!(container = %target.container.name, ?kind, error = %e, "probe failed");
        }
        if let Some(success) = tracker.observe(res.is_ok()) {
            let ev = Event::Probe { c, restart_count, kind, success, at: jiff::Timestamp::now() };
            if tx.send(ev).is_err() {
                return false;
            }
            match (kind, success) {
                (ProbeKind::Startup, true) => return true,
                (ProbeKind::Startup | ProbeKind::Liveness, false) => return false,
                _ => {}
            }
        }
        let now = tokio::time::Instant::now();
        if next < now {
            next = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(success: u32, failure: u32) -> ProbeSpec {
        ProbeSpec {
            action: Action::None,
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
            termination_grace: None,
        }
    }

    #[test]
    fn thresholds_table() {
        use ProbeKind::*;
        // (kind, success threshold, failure threshold, attempts, reported changes)
        type Case = (&'static str, ProbeKind, u32, u32, Vec<bool>, Vec<Option<bool>>);
        let cases: Vec<Case> = vec![
            ("readiness_reports_first_success", Readiness, 1, 3, vec![true, true], vec![Some(true), None]),
            (
                "readiness_starts_unready_so_failures_report_nothing",
                Readiness,
                1,
                1,
                vec![false, false],
                vec![None, None],
            ),
            (
                "readiness_needs_consecutive_successes",
                Readiness,
                2,
                3,
                vec![true, false, true, true],
                vec![None, None, None, Some(true)],
            ),
            (
                "readiness_drops_after_failure_threshold",
                Readiness,
                1,
                2,
                vec![true, false, false, false],
                vec![Some(true), None, Some(false), None],
            ),
            ("liveness_starts_healthy", Liveness, 1, 3, vec![true], vec![None]),
            (
                "liveness_fails_after_threshold_consecutive",
                Liveness,
                1,
                3,
                vec![false, false, true, false, false, false],
                vec![None, None, None, None, None, Some(false)],
            ),
            ("startup_reports_success_at_once", Startup, 1, 3, vec![true], vec![Some(true)]),
            ("startup_fails_after_threshold", Startup, 1, 2, vec![false, false], vec![None, Some(false)]),
        ];
        for (name, kind, s, f, attempts, want) in cases {
            let mut t = Tracker::new(kind, &spec(s, f));
            let got: Vec<Option<bool>> = attempts.into_iter().map(|ok| t.observe(ok)).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn probe_defaults_and_actions() {
        let p: Probe =
            serde_json::from_value(serde_json::json!({"httpGet": {"port": "http", "path": "healthz"}})).unwrap();
        let s = ProbeSpec::of(&p);
        assert_eq!(
            (s.period, s.timeout, s.success_threshold, s.failure_threshold),
            (Duration::from_secs(10), Duration::from_secs(1), 1, 3)
        );
        assert_eq!(s.initial_delay, Duration::ZERO);
        let Action::Http { port, path, scheme, .. } = s.action else { panic!() };
        assert_eq!((port, path.as_str(), scheme.as_str()), (IntOrString::String("http".into()), "healthz", "HTTP"));
        let p: Probe = serde_json::from_value(serde_json::json!({
            "exec": {"command": ["true"]}, "periodSeconds": 2, "timeoutSeconds": 3, "initialDelaySeconds": 4,
            "successThreshold": 1, "failureThreshold": 5, "terminationGracePeriodSeconds": 7
        }))
        .unwrap();
        let s = ProbeSpec::of(&p);
        assert_eq!(s.action, Action::Exec(vec!["true".into()]));
        assert_eq!(
            (s.period.as_secs(), s.timeout.as_secs(), s.initial_delay.as_secs(), s.failure_threshold),
            (2, 3, 4, 5)
        );
        assert_eq!(s.termination_grace, Some(Duration::from_secs(7)));
    }

    struct Reachable;
    impl Runtime for Reachable {
        fn start(
            &self,
            _: crate::runtime::StartRequest,
        ) -> futures::future::BoxFuture<'static, Result<crate::runtime::Started, crate::runtime::RuntimeError>>
        {
            unimplemented!()
        }
        fn kill(&self, _: &ContainerId, _: Duration) {}
        fn exec(
            &self,
            _: &ContainerId,
            argv: Vec<String>,
            _: Duration,
        ) -> futures::future::BoxFuture<'static, Result<crate::runtime::ExecOutput, crate::runtime::RuntimeError>>
        {
            let code = if argv[0] == "true" { 0 } else { 1 };
            Box::pin(async move { Ok(crate::runtime::ExecOutput { exit_code: code, output: b"out".to_vec() }) })
        }
        fn reachable(&self) -> bool {
            true
        }
    }

    fn target(ports: serde_json::Value) -> Target {
        Target {
            runtime: Arc::new(Reachable),
            id: ContainerId("x".into()),
            pod_ip: "127.0.0.1".into(),
            container: serde_json::from_value(serde_json::json!({"name": "c", "ports": ports})).unwrap(),
        }
    }

    /// Serves one canned status per connection; returns the port and the requests seen.
    async fn server(status: u16) -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(vec![]));
        let s = seen.clone();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut sock, _)) = l.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                s.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ = sock.write_all(format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n").as_bytes()).await;
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn actions_against_real_sockets() {
        let t = Duration::from_secs(2);
        let (ok_port, seen) = server(200).await;
        let (redirect, _) = server(302).await;
        let (bad, _) = server(500).await;
        let tg = target(serde_json::json!([{"name": "web", "containerPort": ok_port}]));
        let http = |port: IntOrString, scheme: &str| Action::Http {
            host: None,
            port,
            path: "/healthz".into(),
            scheme: scheme.into(),
            headers: vec![("X-Probe".into(), "yes".into())],
        };
        // (behaviour, action, success)
        let cases = vec![
            ("http_200_by_port_name", http(IntOrString::String("web".into()), "HTTP"), true),
            ("http_302_is_success", http(IntOrString::Int(redirect as i32), "HTTP"), true),
            ("http_500_fails", http(IntOrString::Int(bad as i32), "HTTP"), false),
            ("https_is_refused_clearly", http(IntOrString::Int(ok_port as i32), "HTTPS"), false),
            ("unknown_port_name_fails", http(IntOrString::String("nope".into()), "HTTP"), false),
            ("tcp_open_port", Action::Tcp { host: None, port: IntOrString::Int(ok_port as i32) }, true),
            ("exec_exit_0", Action::Exec(vec!["true".into()]), true),
            ("exec_exit_1", Action::Exec(vec!["false".into()]), false),
            ("grpc_unsupported", Action::Grpc { port: 1, service: None }, false),
            ("sleep_hook", Action::Sleep(Duration::from_millis(1)), true),
        ];
        for (name, action, want) in cases {
            let res = run_action(&tg, &action, t).await;
            assert_eq!(res.is_ok(), want, "{name}: {res:?}");
        }
        let req = seen.lock().unwrap()[0].clone();
        assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
        let lower = req.to_ascii_lowercase();
        assert!(lower.contains("x-probe: yes\r\n") && lower.contains("user-agent: kube-probe/"), "{req}");
        // A closed port fails a tcpSocket probe.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let res = run_action(&tg, &Action::Tcp { host: None, port: IntOrString::Int(closed as i32) }, t).await;
        assert!(res.is_err());
        let msg = run_action(&tg, &http(IntOrString::Int(ok_port as i32), "HTTPS"), t).await.unwrap_err();
        assert!(msg.contains("not supported"), "{msg}");
    }

    /// Not reachable, but answers httpGet probes on port 8081 itself: `/ok` 200, `/held` never
    /// (until the probe's wait), anything else 503; `None` on other ports.
    struct Answering(Arc<std::sync::Mutex<Vec<(String, u16, Duration)>>>);
    impl Runtime for Answering {
        fn start(
            &self,
            _: crate::runtime::StartRequest,
        ) -> futures::future::BoxFuture<'static, Result<crate::runtime::Started, crate::runtime::RuntimeError>>
        {
            unimplemented!()
        }
        fn kill(&self, _: &ContainerId, _: Duration) {}
        fn exec(
            &self,
            _: &ContainerId,
            _: Vec<String>,
            _: Duration,
        ) -> futures::future::BoxFuture<'static, Result<crate::runtime::ExecOutput, crate::runtime::RuntimeError>>
        {
            unimplemented!()
        }
        fn http_probe(
            &self,
            _: &ContainerId,
            path: &str,
            port: u16,
            wait: Duration,
        ) -> Option<futures::future::BoxFuture<'static, Result<u16, String>>> {
            self.0.lock().unwrap().push((path.to_string(), port, wait));
            if port != 8081 {
                return None;
            }
            let path = path.to_string();
            Some(Box::pin(async move {
                match path.as_str() {
                    "/ok" => Ok(200),
                    "/held" => std::future::pending().await,
                    _ => Ok(503),
                }
            }))
        }
    }

    #[tokio::test]
    async fn http_probes_the_runtime_answers_are_not_sent() {
        let asked = Arc::new(std::sync::Mutex::new(vec![]));
        let tg = Target {
            runtime: Arc::new(Answering(asked.clone())),
            id: ContainerId("x".into()),
            pod_ip: "127.0.0.1".into(),
            container: serde_json::from_value(
                serde_json::json!({"name": "c", "ports": [{"name": "barrier", "containerPort": 8081}]}),
            )
            .unwrap(),
        };
        let http = |port: IntOrString, path: &str, scheme: &str| Action::Http {
            host: None,
            port,
            path: path.into(),
            scheme: scheme.into(),
            headers: vec![],
        };
        let t = Duration::from_millis(100);
        assert_eq!(run_action(&tg, &http(IntOrString::String("barrier".into()), "/ok", "HTTP"), t).await, Ok(()));
        let err = run_action(&tg, &http(IntOrString::Int(8081), "/down", "HTTP"), t).await.unwrap_err();
        assert!(err.contains("statuscode: 503"), "{err}");
        // A runtime that holds its answer past the timeout: the probe still ends, as a failure.
        let err = run_action(&tg, &http(IntOrString::Int(8081), "/held", "HTTP"), t).await.unwrap_err();
        assert!(err.contains("timeout"), "{err}");
        // Not answered (another port): unreachable, so success as before; HTTPS is never asked.
        assert_eq!(run_action(&tg, &http(IntOrString::Int(80), "/down", "HTTP"), t).await, Ok(()));
        assert_eq!(run_action(&tg, &http(IntOrString::Int(8081), "/down", "HTTPS"), t).await, Ok(()));
        let asked: Vec<(String, u16, Duration)> = asked.lock().unwrap().clone();
        let want = ["/ok", "/down", "/held", "/down"].map(|p| p.to_string());
        assert_eq!(asked.iter().map(|a| a.0.clone()).collect::<Vec<_>>(), want);
        assert_eq!(asked.iter().map(|a| a.1).collect::<Vec<_>>(), [8081, 8081, 8081, 80], "named port resolved");
        assert!(asked.iter().all(|a| a.2 == t), "the runtime may hold its answer for the probe's timeout");
    }
}
