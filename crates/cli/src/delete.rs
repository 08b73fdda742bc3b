//! `jobset delete KIND NAME... | --all`: kubectl's `job.batch "x" deleted`, background cascade.

use clap::Args;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PropagationPolicy};

use crate::client::{self, ClientArgs};
use crate::kinds::{self, Resource};
use crate::{Failure, USAGE, get};

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The kind: `jobs`, `pods`, `po`, `jobs.batch`, ...
    pub kind: String,
    /// Names of the objects to delete.
    pub names: Vec<String>,
    /// Delete every object of the kind in the namespace.
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
    /// Only with --all: a label selector.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `job.batch "x" deleted`.
pub fn deleted_line(resource: &Resource, name: &str) -> String {
    format!("{} {name:?} deleted", resource.singular_ref())
}

pub async fn run(args: DeleteArgs) -> anyhow::Result<i32> {
    if args.names.is_empty() && !args.all && args.selector.is_none() {
        return Err(
            Failure::new(USAGE, "error: resource(s) were provided, but no name was specified (or --all)").into()
        );
    }
    let conn = client::connect(&args.client).await?;
    let resources = kinds::discover(&conn.client).await?;
    let resource = get::resolve_kind(&resources, &args.kind)?;
    let ar = resource.api_resource();
    let api: Api<DynamicObject> = if resource.namespaced {
        Api::namespaced_with(conn.client.clone(), &conn.namespace, &ar)
    } else {
        Api::all_with(conn.client.clone(), &ar)
    };
    let names = if args.names.is_empty() {
        let mut lp = ListParams::default();
        if let Some(l) = &args.selector {
            lp = lp.labels(l);
        }
        let list = api.list(&lp).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
        if list.items.is_empty() {
            eprintln!("No resources found");
            return Ok(0);
        }
        list.items.iter().map(|o| o.name_any()).collect()
    } else {
        args.names.clone()
    };
    let params = DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
    let mut code = 0;
    for name in names {
        match api.delete(&name, &params).await {
            Ok(_) => println!("{}", deleted_line(&resource, &name)),
            Err(e) => {
                eprintln!("{}", client::server_error(&e));
                code = 1;
            }
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_read_like_kubectl() {
        let job = crate::kinds::fake("batch", "Job", "jobs", &[], true);
        assert_eq!(super::deleted_line(&job, "x"), r#"job.batch "x" deleted"#);
    }
}
