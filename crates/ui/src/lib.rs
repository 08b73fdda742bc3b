//! Where restart time goes, as a picture: the restart timeline of a JobSet ([`timeline`]: a model
//! built from the JobSet's status, Jobs and pods; [`render`]: a self-contained HTML page with an
//! inline SVG Gantt chart) and the live web view ([`server`]) that `jobset up` serves at `/ui`.

pub mod render;
pub mod server;
pub mod timeline;

/// Flags for headless Chromium to render these pages (the timeline benchmark and the browser
/// tests): headless, as root too, and nothing that reaches out to the network on its own (a
/// closed network refuses those connections, which slows every run down).
pub const HEADLESS_CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];
