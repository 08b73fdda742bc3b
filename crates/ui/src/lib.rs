//! Where restart time goes, as a picture: the restart timeline of a JobSet ([`timeline`]: a model
//! built from the JobSet's status, Jobs and pods; [`render`]: a self-contained HTML page with an
//! inline SVG Gantt chart) and the live web view ([`server`]) that `jobset up` serves at `/ui`.

pub mod render;
pub mod server;
pub mod timeline;
