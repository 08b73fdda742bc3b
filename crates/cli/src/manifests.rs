//! `jobset manifests`: writes the deployment files that are generated from the code.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;

/// Default directory of `jobset manifests crds` (upstream's layout).
pub const DEFAULT_CRD_DIR: &str = "config/crd/bases";

#[derive(Subcommand, Debug)]
pub enum ManifestsCommand {
    /// Write the JobSet and AppWrapper CRDs, generated from the Rust types, under upstream's file
    /// names (`jobset.x-k8s.io_jobsets.yaml`, `workload.codeflare.dev_appwrappers.yaml`).
    Crds {
        /// Directory to write into (created if missing).
        #[arg(long, default_value = DEFAULT_CRD_DIR)]
        out: PathBuf,
    },
}

pub fn run(what: ManifestsCommand) -> anyhow::Result<()> {
    match what {
        ManifestsCommand::Crds { out } => {
            for path in write_crds(&out)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

/// Writes every generated CRD into `dir`; returns the files written.
pub fn write_crds(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating directory {}", dir.display()))?;
    let mut written = Vec::new();
    for crd in jobset_api::crdgen::generate().map_err(anyhow::Error::msg)? {
        let path = dir.join(crd.file);
        let yaml = crd.to_yaml().map_err(anyhow::Error::msg)?;
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        what: ManifestsCommand,
    }

    #[test]
    fn crds_are_written_under_upstream_file_names_as_the_embedded_copies() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new/bases");
        let written = write_crds(&out).unwrap();
        let names: Vec<_> = written.iter().map(|p| p.file_name().unwrap().to_str().unwrap().to_string()).collect();
        assert_eq!(names, ["jobset.x-k8s.io_jobsets.yaml", "workload.codeflare.dev_appwrappers.yaml"]);
        for (path, (file, embedded)) in written.iter().zip(jobset_api::crds::PREINSTALLED) {
            assert!(path.ends_with(file));
            assert!(std::fs::read_to_string(path).unwrap() == *embedded, "{file} differs from the embedded CRD");
        }
    }

    #[test]
    fn an_output_path_that_is_a_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("taken");
        std::fs::write(&file, "x").unwrap();
        let err = write_crds(&file).unwrap_err();
        assert_eq!(err.to_string(), format!("creating directory {}", file.display()));
    }

    #[test]
    fn crds_default_to_config_crd_bases() {
        let ManifestsCommand::Crds { out } = Cli::try_parse_from(["manifests", "crds"]).unwrap().what;
        assert_eq!(out, Path::new("config/crd/bases"));
        let ManifestsCommand::Crds { out } = Cli::try_parse_from(["manifests", "crds", "--out", "x"]).unwrap().what;
        assert_eq!(out, Path::new("x"));
    }
}
