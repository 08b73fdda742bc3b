//! Admission of JobSets, Jobs and AppWrappers, on create and on update of the stored one:
//! upstream's defaulting and validation webhooks as `jobset_api` implements them (called directly,
//! on any JSON), then the whole write through the API server (`ops::create` / `ops::update`:
//! schema pruning, defaulting and CEL rules, the admission hooks, metadata validation), in a
//! transaction that is rolled back.
//!
//! Input: a header line (`create` or `update`; `jobset`, `job` or `appwrapper`; `gated` turns
//! the JobSet feature gates off), then the object as JSON.
#![no_main]

use jobset_api::admission::{aggregate, default_appwrapper_user, invalid_status};
use jobset_api::field::FieldError;
use jobset_api::jobset::Features;
use jobset_apiserver::ops::{self, Ctx, Target};
use jobset_fuzz::{APPWRAPPER, JOB, JOBSET, Kind, NAMESPACE, choose, header, rolled_back, server, verbose};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Where objects are created (a system namespace every server has).
const CREATE_NAMESPACE: &str = "kube-system";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Create,
    Update,
}

/// Errors render as the webhook's answer without panicking.
fn render(kind: &str, obj: &Value, errs: &[FieldError]) {
    if errs.is_empty() {
        return;
    }
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let status = invalid_status("fuzz.example.com", kind, name, errs);
    assert_eq!(status["code"], 422, "{status}");
    assert!(!aggregate(errs).is_empty());
}

/// The webhooks' logic, called as `jobset manager`'s webhooks and the embedded server's hooks call it.
fn webhooks(kind: &Kind, new: &Value, old: Option<&Value>, features: &Features) {
    let mut obj = new.clone();
    if kind.plural == JOBSET.plural {
        jobset_api::jobset::default_jobset(&mut obj);
        let errs = jobset_api::jobset::validate_jobset(&obj, old, features);
        render("JobSet", &obj, &errs);
        let _ = jobset_api::jobset::agent::missing_agent_warnings(&obj);
    } else if kind.plural == JOB.plural {
        jobset_api::job::default_job(&mut obj);
        let errs = jobset_api::job::validate_job(&obj, old);
        render("Job", &obj, &errs);
        if let Some(old) = old {
            render("Job", &obj, &jobset_api::job_status::validate_job_status_update(&obj, old));
        }
    } else {
        let errs = match old {
            None => {
                default_appwrapper_user(&mut obj, "fuzz-user", "fuzz-uid");
                jobset_api::appwrapper::validation::validate_appwrapper(&obj, NAMESPACE)
            }
            Some(old) => jobset_api::appwrapper::validation::validate_appwrapper_update(&obj, old),
        };
        render("AppWrapper", &obj, &errs);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = header(data) else { return };
    let op = *choose(head, &[("create", Op::Create), ("update", Op::Update)]);
    let kind = *choose(head, &[("jobset", JOBSET), ("job", JOB), ("appwrapper", APPWRAPPER)]);
    let features = if head.contains("gated") { Features::none() } else { Features::default() };
    let Ok(mut obj) = serde_json::from_str::<Value>(body) else { return };
    let server = server();
    let def = kind.def(server);
    let stored = server.store.get(&def, NAMESPACE, kind.name).expect("stored");
    let old = (op == Op::Update).then(|| stored.value());
    webhooks(&kind, &obj, old.as_ref(), &features);

    // Through the server: what a client leaves out that the server would refuse first is filled
    // in, so that the input reaches admission.
    if let Some(map) = obj.as_object_mut() {
        let api_version =
            if kind.group.is_empty() { kind.version.to_string() } else { format!("{}/{}", kind.group, kind.version) };
        map.entry("apiVersion").or_insert(Value::String(api_version));
        map.entry("kind").or_insert(Value::String(def.kind.clone()));
        if let Some(meta) = map.entry("metadata").or_insert_with(|| Value::Object(Default::default())).as_object_mut() {
            let name = if op == Op::Update { kind.name.to_string() } else { format!("{}-new", kind.name) };
            meta.entry("name").or_insert(Value::String(name));
            if op == Op::Update {
                meta.entry("resourceVersion").or_insert(Value::String(stored.rv.to_string()));
            }
        }
    }
    let ctx = Ctx::new(&server.admission);
    let written = rolled_back(server, |txn| match op {
        // Beside the stored objects: an example's name does not collide with theirs.
        Op::Create => ops::create(txn, &ctx, &def, CREATE_NAMESPACE, obj),
        Op::Update => ops::update(txn, &ctx, &def, NAMESPACE, kind.name, obj, Target::Main, None, None),
    });
    verbose(|| match &written {
        Ok(o) => format!("{op:?} {}: stored {}", kind.plural, String::from_utf8_lossy(&o.raw)),
        Err(e) => format!("{op:?} {}: {} {e}", kind.plural, e.code),
    });
    match written {
        Ok(o) => assert_eq!(o.namespace, if op == Op::Create { CREATE_NAMESPACE } else { NAMESPACE }),
        Err(e) => assert!(e.code < 500, "bad input is a client error: {e}"),
    }
    let _ = ctx.take_warnings();
});
