//! The cost of `jobset bench apiserver`'s creates, per pod: the same pods (`crates/cli`'s bench
//! `pod(i)`), created one at a time in memory, either through the in-process `kube::Client` (as
//! the bench: client serialization, routing, admission, the store's write and the client's
//! decoding of the answer) or straight through the HTTP router (the server's part alone).
//!
//! A counting global allocator gives what the heap costs without valgrind: bytes and
//! allocations per create, and the bytes still live per stored pod (the server holds every pod
//! and its watch history). Only this crate's public API is used, so the same file builds
//! against an older commit's tree (`jobset bench compare` unpacks it under
//! `target/bench-compare/src-*`) for a side-by-side count.
//!
//! Deterministic (one request at a time on one thread), for `valgrind --tool=callgrind`:
//!
//! ```text
//! cargo build --release -p jobset-apiserver --example create_cost
//! valgrind --tool=callgrind --toggle-collect='*create_cost::creates*' \
//!     target/release/examples/create_cost 2000 router    # Ir / 2000 = instructions per create
//! ```
//!
//! Arguments: pods (default 2000), `client` (default) or `router`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use jobset_apiserver::persist::Memory;
use jobset_apiserver::{Admission, ApiServer, ServerConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use tokio::runtime::Runtime;
use tower::ServiceExt;

/// The system allocator, counting.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Relaxed);
        ALLOCATED.fetch_add(layout.size(), Relaxed);
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Relaxed);
        LIVE.fetch_sub(layout.size(), Relaxed);
        ALLOCATED.fetch_add(new_size, Relaxed);
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Heap {
    live: usize,
    allocated: usize,
    allocations: usize,
}

fn heap() -> Heap {
    Heap { live: LIVE.load(Relaxed), allocated: ALLOCATED.load(Relaxed), allocations: ALLOCATIONS.load(Relaxed) }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().map_or(2000, |a| a.parse().expect("arguments: PODS [client|router]"));
    let via_client = match args.next().as_deref() {
        None | Some("client") => true,
        Some("router") => false,
        Some(other) => panic!("unknown mode {other:?}: client or router"),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let _guard = rt.enter();
    let mut config = ServerConfig::default();
    // As the bench: every watcher must be able to hold a burst of the bench's own writes.
    config.store.watch_buffer = 1 << 16;
    let server = ApiServer::new(Box::new(Memory), Admission::default(), config).expect("a server");
    let inputs_from = heap().live;
    let pods_in: Vec<Pod> = if via_client { (0..pods).map(pod).collect() } else { vec![] };
    let bodies: Vec<Vec<u8>> = if via_client {
        vec![]
    } else {
        (0..pods).map(|i| serde_json::to_vec(&pod(i)).expect("a pod serializes")).collect()
    };
    // The inputs are consumed as they are sent: their bytes leave the count of live ones.
    let input = heap().live - inputs_from;
    // Warm-up outside the count: one create of another name.
    let mut warm = pod(0);
    warm.metadata.name = Some("warm-up".into());
    let router = server.router();
    rt.block_on(send(&router, serde_json::to_vec(&warm).expect("a pod serializes")));

    let before = heap();
    let start = Instant::now();
    let stored_bytes =
        if via_client { creates_client(&rt, &server.client(), pods_in) } else { creates_router(&rt, &router, bodies) };
    let wall = start.elapsed();
    let after = heap();
    let per = |a: usize, b: usize| (a as f64 - b as f64) / pods as f64;
    println!("pods {pods}, through the {}", if via_client { "in-process kube::Client" } else { "HTTP router" });
    println!("create: {:.1} µs (wall)", wall.as_secs_f64() * 1e6 / pods as f64);
    println!(
        "per create: {:.0} bytes allocated in {:.1} allocations",
        per(after.allocated, before.allocated),
        per(after.allocations, before.allocations)
    );
    println!(
        "per stored pod: {:.0} bytes live on the heap (served object {:.0} bytes)",
        per(after.live + input, before.live),
        stored_bytes as f64 / pods as f64
    );
    drop(router);
    drop(server);
}

// Not inlined: callgrind counts them by name (`--toggle-collect`).
#[inline(never)]
fn creates_client(rt: &Runtime, client: &kube::Client, pods: Vec<Pod>) -> usize {
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    rt.block_on(async {
        let mut bytes = 0;
        for p in pods {
            let created = api.create(&PostParams::default(), &p).await.expect("the pod is created");
            bytes += serde_json::to_vec(&created).map_or(0, |b| b.len());
        }
        bytes
    })
}

#[inline(never)]
fn creates_router(rt: &Runtime, router: &axum::Router, bodies: Vec<Vec<u8>>) -> usize {
    rt.block_on(async {
        let mut bytes = 0;
        for b in bodies {
            bytes += send(router, b).await;
        }
        bytes
    })
}

/// Posts one pod as kube's client does; the answer's length.
async fn send(router: &axum::Router, body: Vec<u8>) -> usize {
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/namespaces/default/pods?")
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Body::from(body))
        .expect("a request");
    let resp = router.clone().oneshot(req).await.expect("the router answers");
    let code = resp.status();
    let body = resp.into_body().collect().await.expect("a body").to_bytes();
    assert_eq!(code, StatusCode::CREATED, "{}", String::from_utf8_lossy(&body));
    body.len()
}

/// `jobset bench apiserver`'s pod `i`.
fn pod(i: usize) -> Pod {
    serde_json::from_value(jobset_apiserver::fixtures::worker_pod(i)).expect("static pod")
}
