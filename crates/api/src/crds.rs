//! The CustomResourceDefinitions every jobset-rs API server serves from its first start: the
//! files `jobset manifests crds` generates into `config/crd/bases/` ([`crate::crdgen`]), embedded
//! as checked in (a test fails when they are not what the generator writes).

/// (file name, YAML) of each preinstalled CRD.
pub const PREINSTALLED: &[(&str, &str)] = &[
    ("jobset.x-k8s.io_jobsets.yaml", include_str!("../../../config/crd/bases/jobset.x-k8s.io_jobsets.yaml")),
    (
        "workload.codeflare.dev_appwrappers.yaml",
        include_str!("../../../config/crd/bases/workload.codeflare.dev_appwrappers.yaml"),
    ),
];

/// The preinstalled CRDs as JSON objects.
pub fn preinstalled() -> Result<Vec<serde_json::Value>, String> {
    PREINSTALLED.iter().map(|(file, yaml)| serde_saphyr::from_str(yaml).map_err(|e| format!("{file}: {e}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preinstalled_crds_parse_with_names_and_status_subresource() {
        let crds = preinstalled().expect("CRD YAML parses");
        let plurals: Vec<&str> = crds.iter().filter_map(|c| c.pointer("/spec/names/plural")?.as_str()).collect();
        assert_eq!(plurals, ["jobsets", "appwrappers"]);
        for c in &crds {
            assert!(c.pointer("/spec/versions/0/subresources/status").is_some(), "{c}");
        }
    }

    #[test]
    fn jobset_printer_columns_are_upstreams_the_last_restart_and_kep_1186_s_start_time() {
        let crds = preinstalled().unwrap();
        let cols: Vec<&str> = crds[0]
            .pointer("/spec/versions/0/additionalPrinterColumns")
            .and_then(|c| c.as_array())
            .unwrap()
            .iter()
            .filter_map(|c| c.get("name")?.as_str())
            .collect();
        assert_eq!(cols, ["TerminalState", "Restarts", "Last Restart", "Completed", "Suspended", "StartTime", "Age"]);
    }

    #[test]
    fn checked_in_crds_are_what_the_generator_writes() {
        let generated = crate::crdgen::generate().unwrap();
        assert_eq!(generated.len(), PREINSTALLED.len());
        for (g, (file, yaml)) in generated.iter().zip(PREINSTALLED) {
            assert_eq!(g.file, *file);
            assert!(
                g.to_yaml().unwrap() == *yaml,
                "config/crd/bases/{file} is not what the generator writes: run `jobset manifests crds` and check in the result"
            );
        }
    }
}
