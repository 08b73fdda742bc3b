//! Every patch type against stored objects (`jobset_apiserver::ops`): the body parsed
//! (`PatchBody::parse`) or parsed and merged ahead of the store's lock (`PatchBody::prepare`),
//! then applied (`ops::patch`: JSON patch, merge patch, strategic merge patch, server-side apply)
//! to a stored pod, Job, JobSet, AppWrapper, ConfigMap or Node, through the server's admission,
//! in a transaction that is rolled back.
//!
//! The write paths must agree: a body prepared before the lock lands as one parsed under it,
//! and a pod's labels-or-annotations and status patches (which skip admission and splice the
//! stored bytes) store what the general path stores.
//!
//! Input: a header line (`merge`, `json`, `strategic`, `apply` or `apply-force`; a kind of
//! `jobset_fuzz::KINDS`; `status` for the status subresource), then the patch's body.
#![no_main]

use std::sync::{Arc, OnceLock};

use jobset_apiserver::ops::{self, Ctx, PatchBody, PatchType, Target};
use jobset_apiserver::{Admission, AdmissionHook};
use jobset_fuzz::{KINDS, POD, choose, header, rolled_back, server, verbose};
use libfuzzer_sys::fuzz_target;

/// A hook that checks nothing but says it sees every write: registered for pods, it sends every
/// patch down the general path.
struct General;

impl AdmissionHook for General {
    fn validates_status(&self) -> bool {
        true
    }
}

/// The server's admission, with [`General`] for pods.
fn general_admission() -> &'static Admission {
    static ADMISSION: OnceLock<Admission> = OnceLock::new();
    ADMISSION.get_or_init(|| {
        let mut admission = server().admission.clone();
        admission.register("", "Pod", Arc::new(General));
        admission
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = header(data) else { return };
    let kind = *choose(
        head,
        &[
            ("merge", PatchType::Merge),
            ("json", PatchType::Json),
            ("strategic", PatchType::Strategic),
            ("apply", PatchType::Apply { force: false }),
            ("apply-force", PatchType::Apply { force: true }),
        ],
    );
    let stored = *choose(head, KINDS);
    let target = if head.split_whitespace().any(|w| w == "status") { Target::Status } else { Target::Main };
    let server = server();
    let def = stored.def(server);
    let (ns, name) = (stored.namespace(), stored.name);
    let run = |admission: &Admission, prepared: bool| {
        let ctx = Ctx::new(admission);
        let body = if prepared {
            PatchBody::prepare(&server.store, &ctx, &def, ns, name, kind, body.as_bytes(), target, None)
        } else {
            PatchBody::parse(kind, body.as_bytes())
        };
        let out = body.and_then(|body| {
            rolled_back(server, |txn| ops::patch(txn, &ctx, &def, ns, name, kind, body, target, None))
        });
        let _ = ctx.take_warnings();
        out.map(|(o, created)| format!("{o:?} {created}")).map_err(|e| {
            assert!(e.code < 500, "bad input is a client error: {e}");
            e.to_string()
        })
    };
    let parsed = run(&server.admission, false);
    verbose(|| format!("{kind:?} {target:?} {}: {parsed:?}", stored.plural));
    let prepared = run(&server.admission, true);
    assert_eq!(prepared, parsed, "prepared before the lock vs parsed under it");
    if stored.plural == POD.plural {
        let general = run(general_admission(), false);
        assert_eq!(parsed, general, "the pod's fast paths vs the general path");
    }
});
