//! Helpers shared by the local-mode integration tests: waiting for objects through watches.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use jobset_api::jobset::JobSet;
use jobset_api::jobset::keys::JOBSET_NAME;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

pub const TIMEOUT: Duration = Duration::from_secs(60);

pub trait Obj: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Obj for K {}

pub fn name_of(o: &impl Resource) -> String {
    o.meta().name.clone().unwrap_or_default()
}

pub fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

pub fn of_jobset(name: &str) -> watcher::Config {
    watcher::Config::default().labels(&format!("{JOBSET_NAME}={name}"))
}

/// Waits (through a watch, bounded) until the objects matching `cfg` satisfy `pred`, and
/// returns them (sorted by name).
pub async fn wait_for<K: Obj>(api: &Api<K>, cfg: watcher::Config, what: &str, pred: impl Fn(&[K]) -> bool) -> Vec<K> {
    let mut s = watcher(api.clone(), cfg).default_backoff().boxed();
    let mut state: BTreeMap<String, K> = BTreeMap::new();
    let mut init: BTreeMap<String, K> = BTreeMap::new();
    let mut synced = false;
    let found = tokio::time::timeout(TIMEOUT, async {
        while let Some(ev) = s.next().await {
            match ev {
                Ok(watcher::Event::Init) => init.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    init.insert(name_of(&o), o);
                }
                Ok(watcher::Event::InitDone) => {
                    state = std::mem::take(&mut init);
                    synced = true;
                }
                Ok(watcher::Event::Apply(o)) => {
                    state.insert(name_of(&o), o);
                }
                Ok(watcher::Event::Delete(o)) => {
                    state.remove(&name_of(&o));
                }
                Err(_) => continue,
            }
            if synced {
                let all: Vec<K> = state.values().cloned().collect();
                if pred(&all) {
                    return all;
                }
            }
        }
        panic!("watch ended")
    })
    .await;
    match found {
        Ok(all) => all,
        Err(_) => {
            let last: Vec<&K> = state.values().collect();
            panic!("timed out waiting for {what}; last seen: {last:#?}")
        }
    }
}

pub async fn wait_jobset(api: &Api<JobSet>, name: &str, what: &str, pred: impl Fn(&JobSet) -> bool) -> JobSet {
    let found = wait_for(api, by_name(name), &format!("jobset {name}: {what}"), |v| v.first().is_some_and(&pred)).await;
    found.into_iter().next().unwrap()
}
