//! The live web view, served at `/ui`: JobSets and AppWrappers; a JobSet's replicated jobs,
//! Jobs, pods, restart history and restart timeline; refreshed in the browser on server-sent
//! events that kube watches drive. It reads the cluster only through a `kube::Client`, so the
//! same router serves `jobset up` (its embedded API server, in-process) and, later, a
//! `jobset manager` on a cluster.
//!
//! Authentication is its own (the router is mounted outside the API's): the login page shows
//! nothing of the cluster and takes the token from its form or from the URL fragment
//! `#token=...` (never sent to a server); a token the [`Authenticator`] accepts is kept in an
//! HttpOnly, Secure, SameSite=Strict cookie scoped to `/ui`. Every data route (pages, their
//! fragments, JSON, events) needs that cookie or an `Authorization: Bearer` header, else
//! answers 401 with no data.
//!
//! Routes: `GET /ui/` (overview), `GET /ui/jobsets/{namespace}/{name}` (a JobSet; either with
//! `?live=0`: a snapshot, no event stream), the same
//! under `/ui/partial/...` (the page's fragment, what the live view fetches again), as JSON
//! under `/ui/api/...` (`/ui/api/overview`, `/ui/api/jobsets/{namespace}/{name}`: its rows and
//! timeline), `GET /ui/events[?namespace=&jobset=]` (server-sent events), `GET`/`POST
//! /ui/login`, `POST /ui/logout`.

mod auth;
mod events;
mod model;
mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderValue, StatusCode, header};
use jobset_api::appwrapper::AppWrapper;
use jobset_api::jobset::keys;
use jobset_api::jobset::types::JobSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use maud::Markup;

pub use auth::{Authenticator, COOKIE};

use crate::{render, timeline};

/// Where the router is mounted: every route is under it (`jobset up` sends it every path below).
pub const BASE: &str = "/ui";
/// The events route, under [`BASE`].
const EVENTS: &str = "/events";

/// The web view's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long watch events are gathered into one `change` event (one refresh of the page).
    pub debounce: Duration,
    /// How often an idle event stream sends a keep-alive comment.
    pub keep_alive: Duration,
    /// Pods listed on a JobSet's page (the rest are counted; the timeline shows them all).
    pub max_pod_rows: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { debounce: Duration::from_millis(500), keep_alive: Duration::from_secs(15), max_pod_rows: 500 }
    }
}

/// What the handlers share.
#[derive(Clone)]
struct Ui {
    client: Client,
    auth: Authenticator,
    config: Arc<Config>,
}

/// The web view with the default [`Config`]: routes under [`BASE`], reading the cluster
/// through `client`, letting in whom `auth` accepts.
pub fn router(client: Client, auth: Authenticator) -> Router {
    router_with(client, auth, Config::default())
}

/// [`router`] with its settings.
pub fn router_with(client: Client, auth: Authenticator, config: Config) -> Router {
    let ui = Ui { client, auth, config: Arc::new(config) };
    let data = Router::new()
        .route("/ui", get(overview_page))
        .route("/ui/", get(overview_page))
        .route("/ui/jobsets/{namespace}/{name}", get(jobset_page))
        .route("/ui/partial/overview", get(overview_partial))
        .route("/ui/partial/jobsets/{namespace}/{name}", get(jobset_partial))
        .route("/ui/api/overview", get(overview_json))
        .route("/ui/api/jobsets/{namespace}/{name}", get(jobset_json))
        .route("/ui/events", get(events))
        .route_layer(middleware::from_fn_with_state(ui.clone(), auth::require));
    Router::new()
        .route("/ui/login", get(auth::login_page).post(auth::login))
        .route("/ui/logout", post(auth::logout))
        .merge(data)
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 Not Found\n") })
        .layer(middleware::from_fn(protect))
        .with_state(ui)
}

/// Headers on every answer: nothing cached (it is cluster data), no framing, no sniffing, no
/// referrer, and a policy letting the pages run only their own inline script and reach only
/// this server.
async fn protect(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    res
}

/// A failed read of the cluster: 502 and what kube said.
struct Failure(kube::Error);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (StatusCode::BAD_GATEWAY, format!("reading the cluster failed: {}\n", self.0)).into_response()
    }
}

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        Failure(e)
    }
}

async fn load_overview(client: &Client) -> Result<model::Overview, Failure> {
    let jobsets = Api::<JobSet>::all(client.clone()).list(&ListParams::default()).await?.items;
    let appwrappers = Api::<AppWrapper>::all(client.clone()).list(&ListParams::default()).await;
    let appwrappers = appwrappers.map(|l| l.items).map_err(|e| e.to_string());
    Ok(model::overview(&jobsets, appwrappers.as_deref().map_err(Clone::clone)))
}

/// A page's options: `live=0` serves a snapshot, which opens no event stream (for a headless
/// browser that waits for the network to go idle, which an event stream never does).
#[derive(serde::Deserialize)]
struct PageQuery {
    live: Option<String>,
}

impl PageQuery {
    fn live(&self) -> bool {
        self.live.as_deref() != Some("0")
    }
}

async fn overview_page(State(ui): State<Ui>, Query(q): Query<PageQuery>) -> Result<Html<String>, Failure> {
    let o = load_overview(&ui.client).await?;
    let events = format!("{BASE}{EVENTS}");
    let page = views::page("JobSets", "/ui/partial/overview", q.live().then_some(events.as_str()), views::overview(&o));
    Ok(Html(page.into_string()))
}

async fn overview_partial(State(ui): State<Ui>) -> Result<Html<String>, Failure> {
    Ok(Html(views::overview(&load_overview(&ui.client).await?).into_string()))
}

async fn overview_json(State(ui): State<Ui>) -> Result<axum::Json<model::Overview>, Failure> {
    Ok(axum::Json(load_overview(&ui.client).await?))
}

/// A JobSet, its Jobs and pods, its rows and timeline.
struct Loaded {
    detail: model::Detail,
    timeline: timeline::Timeline,
}

/// The JobSet `namespace/name` as its page shows it; `None` if there is none.
async fn load_jobset(ui: &Ui, namespace: &str, name: &str) -> Result<Option<Loaded>, Failure> {
    let Some(jobset) = Api::<JobSet>::namespaced(ui.client.clone(), namespace).get_opt(name).await? else {
        return Ok(None);
    };
    let children = ListParams::default().labels(&format!("{}={name}", keys::JOBSET_NAME));
    let jobs = Api::<Job>::namespaced(ui.client.clone(), namespace).list(&children).await?.items;
    let pods = Api::<Pod>::namespaced(ui.client.clone(), namespace).list(&children).await?.items;
    let detail = model::detail(&jobset, &jobs, &pods, ui.config.max_pod_rows);
    let timeline =
        timeline::build(&timeline::Inputs { jobset: &jobset, jobs: &jobs, pods: &pods, now: jiff::Timestamp::now() });
    Ok(Some(Loaded { detail, timeline }))
}

fn jobset_fragment(loaded: &Loaded) -> Markup {
    views::detail(&loaded.detail, &loaded.timeline.restarts, render::chart(&loaded.timeline))
}

async fn jobset_page(
    State(ui): State<Ui>,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<PageQuery>,
) -> Result<Response, Failure> {
    let title = format!("{namespace}/{name}");
    let (status, fragment) = match load_jobset(&ui, &namespace, &name).await? {
        Some(loaded) => (StatusCode::OK, jobset_fragment(&loaded)),
        None => (StatusCode::NOT_FOUND, views::missing(&namespace, &name)),
    };
    let events = views::jobset_events_url(&namespace, &name);
    let page = views::page(
        &title,
        &views::jobset_fragment_url(&namespace, &name),
        q.live().then_some(events.as_str()),
        fragment,
    );
    Ok((status, Html(page.into_string())).into_response())
}

/// The fragment of a JobSet's page. A JobSet deleted while its page is open gets the "no such
/// JobSet" fragment with 200: the page shows it, and the browser logs no failed request.
async fn jobset_partial(
    State(ui): State<Ui>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Html<String>, Failure> {
    let fragment = match load_jobset(&ui, &namespace, &name).await? {
        Some(loaded) => jobset_fragment(&loaded),
        None => views::missing(&namespace, &name),
    };
    Ok(Html(fragment.into_string()))
}

#[derive(serde::Serialize)]
struct JobSetJson {
    #[serde(flatten)]
    detail: model::Detail,
    timeline: timeline::Timeline,
}

async fn jobset_json(
    State(ui): State<Ui>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, Failure> {
    Ok(match load_jobset(&ui, &namespace, &name).await? {
        Some(Loaded { detail, timeline }) => axum::Json(JobSetJson { detail, timeline }).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": format!("jobset {namespace}/{name} not found")})),
        )
            .into_response(),
    })
}

async fn events(State(ui): State<Ui>, Query(scope): Query<events::Scope>) -> Response {
    events::stream(&ui.client, &scope, ui.config.debounce, ui.config.keep_alive).into_response()
}
