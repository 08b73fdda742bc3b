//! The object store: one global resourceVersion, per-resource tables, watch history and fan-out.
//!
//! Every write runs as a [`Txn`] under one lock: the change set (including garbage-collection
//! cascades) is persisted by the [`Backend`] first, and only then applied in memory and broadcast.
//! A write is therefore acknowledged only once it is durable, and watchers never see a change that
//! could be lost.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::object::{Obj, meta_mut};
use crate::persist::{Backend, PersistedChange};
use crate::resources::{Registry, ResourceDef};

/// (storage key, namespace, name).
pub type Key = (String, String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change; for DELETED, the last state stamped with the deletion's resourceVersion.
    pub obj: Arc<Obj>,
    pub prev: Option<Arc<Obj>>,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Events kept per resource for watches that start from a resourceVersion.
    pub watch_history: usize,
    /// Events a watcher may fall behind before it is sent a 410 and must relist.
    pub watch_buffer: usize,
    /// The same for a watcher routed by a `field=value` selector (a node agent's `spec.nodeName`):
    /// its channel carries only that value's events, and there is one channel per value watched,
    /// so it is smaller.
    pub route_buffer: usize,
    /// How long an Event is kept after its last write (kube-apiserver's `--event-ttl`, 1 h;
    /// there an etcd lease, renewed by each write). Zero: kept until deleted, as there.
    pub event_ttl: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            watch_history: 10_000,
            watch_buffer: 20_000,
            route_buffer: 1024,
            event_ttl: Duration::from_secs(3600),
        }
    }
}

/// The storage key of core/v1 Events (events.k8s.io/v1 is served over it).
const EVENTS: &str = "/events";

/// Event writes whose TTL runs out by `Expiry::at`, oldest first. Each write pushes one, so a
/// deadline whose Event has been written since (another resourceVersion) or deleted is stale
/// and skipped.
#[derive(Debug)]
struct Expiry {
    at: Instant,
    /// (namespace, name).
    key: (String, String),
    rv: u64,
}

/// Events deleted by one write, at most: a burst of expiries does not hold the store's lock for long.
const EXPIRY_BATCH: usize = 1000;

struct Table {
    objects: BTreeMap<(String, String), Arc<Obj>>,
    history: VecDeque<Arc<Event>>,
    /// Events at or below this resourceVersion are no longer in `history`.
    compacted: u64,
    tx: broadcast::Sender<Arc<Event>>,
    /// field → value → the channel of watchers whose selector requires `field=value`. An event goes
    /// to the channels of its object's and its previous state's values only, so 5,000 node agents
    /// do not each filter every pod event.
    routes: HashMap<String, HashMap<String, broadcast::Sender<Arc<Event>>>>,
    /// Routed subscriptions since the last sweep of channels nobody listens to any more.
    routed_since_sweep: usize,
}

impl Table {
    fn subscribe(&mut self, route: Option<(&str, &str)>, cfg: &StoreConfig) -> broadcast::Receiver<Arc<Event>> {
        let Some((field, value)) = route else { return self.tx.subscribe() };
        let values = self.routes.entry(field.to_string()).or_default();
        // Amortized: a sweep visits fewer than twice as many channels as subscriptions made since
        // the last one.
        self.routed_since_sweep += 1;
        if self.routed_since_sweep * 2 > values.len() {
            values.retain(|_, tx| tx.receiver_count() > 0);
            self.routed_since_sweep = 0;
        }
        values.entry(value.to_string()).or_insert_with(|| broadcast::channel(cfg.route_buffer.max(1)).0).subscribe()
    }

    fn send(&mut self, def: &ResourceDef, ev: &Arc<Event>) {
        // No receivers is fine: nobody watches this resource right now.
        let _ = self.tx.send(ev.clone());
        for (field, values) in &mut self.routes {
            let now = ev.obj.field(def, field).unwrap_or_default();
            let before = ev.prev.as_ref().map(|p| p.field(def, field).unwrap_or_default());
            for value in std::iter::once(now).chain(before.filter(|b| *b != now)) {
                if let Some(tx) = values.get(value)
                    && tx.send(ev.clone()).is_err()
                {
                    values.remove(value);
                }
            }
        }
    }
}

struct State {
    rv: u64,
    /// The resourceVersion the store opened at: a resource's history that starts later still
    /// covers everything since then (it had no events before its table existed).
    opened_rv: u64,
    tables: HashMap<String, Table>,
    uids: HashMap<String, Key>,
    /// owner uid → keys that named it in ownerReferences (a superset: entries are checked on use).
    dependents: HashMap<String, HashSet<Key>>,
}

impl State {
    fn table(&mut self, key: &str, cfg: &StoreConfig) -> &mut Table {
        let start = self.opened_rv;
        self.tables.entry(key.to_string()).or_insert_with(|| Table {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted: start,
            tx: broadcast::channel(cfg.watch_buffer.max(1)).0,
            routes: HashMap::new(),
            routed_since_sweep: 0,
        })
    }
    fn lookup(&self, key: &Key) -> Option<&Arc<Obj>> {
        self.tables.get(&key.0)?.objects.get(&(key.1.clone(), key.2.clone()))
    }
}

pub struct Store {
    state: Mutex<State>,
    backend: Box<dyn Backend>,
    pub registry: Arc<Registry>,
    config: StoreConfig,
    /// Bumped (under the store lock, once memory holds the change) by every committed write that
    /// changed an `rbac.authorization.k8s.io` object, so the authorizer rebuilds its parsed
    /// policy only when it changed ([`Store::rbac_generation`]).
    rbac_generation: AtomicU64,
    /// The same for `admissionregistration.k8s.io` objects (webhook configurations and
    /// policies), so admission re-reads them only when they changed.
    admission_generation: AtomicU64,
    /// The resourceVersion of the last committed write, for readers that wait for one
    /// ([`Store::wait_for_rv`]).
    rv_tx: tokio::sync::watch::Sender<u64>,
    /// When Events expire, in the order they were written (taken after the state's lock).
    expiring: Mutex<VecDeque<Expiry>>,
    /// Held by [`Store::expire_events`] throughout, so that only one caller takes from the front
    /// of `expiring` (taken before the state's lock).
    sweeping: Mutex<()>,
}

/// Why [`Store::list_at`] cannot serve a resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListAtError {
    /// Older than the history the store keeps of the resource.
    Compacted,
    /// Newer than the store's current resourceVersion (given).
    TooLarge(u64),
}

/// What a watch starts from: the events to replay and the live feed after them.
pub struct WatchStart {
    pub replay: Vec<Arc<Event>>,
    pub rx: broadcast::Receiver<Arc<Event>>,
    pub rv: u64,
}

impl Store {
    /// Opens the store, loading whatever the backend holds.
    pub fn open(backend: Box<dyn Backend>, registry: Arc<Registry>, config: StoreConfig) -> Result<Store, String> {
        let loaded = backend.load()?;
        let mut state = State {
            rv: loaded.rv,
            opened_rv: loaded.rv,
            tables: HashMap::new(),
            uids: HashMap::new(),
            dependents: HashMap::new(),
        };
        // CRDs first, so that custom resources stored after them can be indexed with their definition.
        for (skey, raw) in loaded.objects.iter().filter(|(k, _)| k.0.starts_with("apiextensions.k8s.io/")) {
            let v: Value =
                serde_json::from_slice(raw).map_err(|e| format!("stored object {skey:?} is not JSON: {e}"))?;
            for def in crate::resources::defs_from_crd(&v).unwrap_or_default() {
                registry.add(def);
            }
        }
        let store_defs: HashMap<String, Arc<ResourceDef>> =
            registry.all().into_iter().filter(|d| d.view.is_none()).map(|d| (d.storage_key(), d)).collect();
        for (key, raw) in loaded.objects {
            let v: Value =
                serde_json::from_slice(&raw).map_err(|e| format!("stored object {key:?} is not JSON: {e}"))?;
            let Some(def) = store_defs.get(&key.0) else {
                return Err(format!("stored object {key:?} is of a resource this server does not serve"));
            };
            let obj = Arc::new(Obj::new(def, &v));
            index(&mut state, &key, None, Some(&obj));
            state.table(&key.0, &config).objects.insert((key.1, key.2), obj);
        }
        for t in state.tables.values_mut() {
            t.compacted = loaded.rv;
        }
        // Loaded Events expire a TTL after the store opened (their last write's time is not stored).
        let mut expiring = VecDeque::new();
        if !config.event_ttl.is_zero()
            && let Some(events) = state.tables.get(EVENTS)
        {
            let at = Instant::now() + config.event_ttl;
            expiring.extend(events.objects.iter().map(|(key, o)| Expiry { at, key: key.clone(), rv: o.rv }));
        }
        let rv_tx = tokio::sync::watch::Sender::new(loaded.rv);
        Ok(Store {
            rv_tx,
            expiring: Mutex::new(expiring),
            sweeping: Mutex::new(()),
            state: Mutex::new(state),
            backend,
            registry,
            config,
            rbac_generation: AtomicU64::new(0),
            admission_generation: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn durable(&self) -> bool {
        self.backend.durable()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// How many committed writes have changed a Role, ClusterRole, RoleBinding or
    /// ClusterRoleBinding so far (0 after opening, whatever was loaded). A reader that saw `n`
    /// before listing those kinds has seen at least every change up to `n`.
    pub fn rbac_generation(&self) -> u64 {
        self.rbac_generation.load(Ordering::Acquire)
    }

    /// How many committed writes have changed an `admissionregistration.k8s.io` object (as
    /// [`Store::rbac_generation`] counts RBAC changes).
    pub fn admission_generation(&self) -> u64 {
        self.admission_generation.load(Ordering::Acquire)
    }

    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Option<Arc<Obj>> {
        self.lock().lookup(&(def.storage_key(), ns.to_string(), name.to_string())).cloned()
    }

    /// Objects of a resource (optionally in one namespace) in key order, starting after `after`.
    pub fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        after: Option<(&str, &str)>,
        mut filter: impl FnMut(&Obj) -> bool,
        limit: Option<usize>,
    ) -> (Vec<Arc<Obj>>, u64, bool) {
        let state = self.lock();
        let rv = state.rv;
        let Some(table) = state.tables.get(&def.storage_key()) else { return (vec![], rv, false) };
        let mut out = Vec::new();
        use std::ops::Bound;
        let start = match (ns, after) {
            (_, Some((an, aname))) => Bound::Excluded((an.to_string(), aname.to_string())),
            (Some(ns), None) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        for ((n, _), obj) in table.objects.range((start, Bound::Unbounded)) {
            if ns.is_some_and(|ns| n != ns) {
                break;
            }
            if filter(obj) {
                if limit.is_some_and(|l| out.len() >= l) {
                    return (out, rv, true);
                }
                out.push(obj.clone());
            }
        }
        (out, rv, false)
    }

    /// Starts a watch: from `from` (exclusive) when given, else with a synthetic ADDED per current
    /// object. With a `route` (field, value), the live feed carries only events whose object had
    /// or has that value: a superset of what a selector requiring `field=value` matches.
    pub fn watch(
        &self,
        def: &ResourceDef,
        from: Option<u64>,
        route: Option<(&str, &str)>,
    ) -> Result<WatchStart, ApiError> {
        let mut state = self.lock();
        let rv = state.rv;
        let table = state.table(&def.storage_key(), &self.config);
        let rx = table.subscribe(route, &self.config);
        let replay = match from {
            None => table
                .objects
                .values()
                .map(|o| Arc::new(Event { rv: o.rv, kind: EventType::Added, obj: o.clone(), prev: None }))
                .collect(),
            Some(from) if from < table.compacted => {
                return Err(ApiError::gone(format!("too old resource version: {from} ({})", table.compacted + 1)));
            }
            Some(from) => table.history.iter().filter(|e| e.rv > from).cloned().collect(),
        };
        Ok(WatchStart { replay, rx, rv })
    }

    /// Waits (at most `timeout`) until the store's resourceVersion is at least `rv`; on timeout,
    /// the current one.
    pub async fn wait_for_rv(&self, rv: u64, timeout: std::time::Duration) -> Result<(), u64> {
        let mut rx = self.rv_tx.subscribe();
        match tokio::time::timeout(timeout, rx.wait_for(|&now| now >= rv)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(self.current_rv()),
        }
    }

    /// The objects of a resource (optionally in one namespace) as they were at resourceVersion
    /// `rv`, in key order: the current ones with the changes after `rv` undone from the history.
    pub fn list_at(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        rv: u64,
        mut filter: impl FnMut(&Obj) -> bool,
    ) -> Result<Vec<Arc<Obj>>, ListAtError> {
        let state = self.lock();
        if rv > state.rv {
            return Err(ListAtError::TooLarge(state.rv));
        }
        let Some(table) = state.tables.get(&def.storage_key()) else {
            return if rv < state.opened_rv { Err(ListAtError::Compacted) } else { Ok(vec![]) };
        };
        if rv < table.compacted {
            return Err(ListAtError::Compacted);
        }
        let in_ns = |n: &str| ns.is_none_or(|ns| n == ns);
        let mut at: BTreeMap<(String, String), Arc<Obj>> =
            table.objects.iter().filter(|((n, _), _)| in_ns(n)).map(|(k, o)| (k.clone(), o.clone())).collect();
        for ev in table.history.iter().rev().take_while(|e| e.rv > rv) {
            if !in_ns(&ev.obj.namespace) {
                continue;
            }
            let key = (ev.obj.namespace.clone(), ev.obj.name.clone());
            match (ev.kind, &ev.prev) {
                (EventType::Added, _) | (_, None) => at.remove(&key),
                (_, Some(prev)) => at.insert(key, prev.clone()),
            };
        }
        Ok(at.into_values().filter(|o| filter(o)).collect())
    }

    /// Runs `f` as one atomic, durable write.
    pub fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> Result<R, ApiError>) -> Result<R, ApiError> {
        let mut state = self.lock();
        let mut txn =
            Txn { state: &state, registry: &self.registry, rv: state.rv, overlay: HashMap::new(), changes: vec![] };
        let out = f(&mut txn)?;
        let Txn { rv, overlay, changes, .. } = txn;
        if changes.is_empty() {
            return Ok(out);
        }
        let persisted: Vec<PersistedChange<'_>> =
            overlay.iter().map(|(k, v)| PersistedChange { key: k, raw: v.as_ref().map(|o| &o.raw) }).collect();
        self.backend.persist(rv, &persisted).map_err(|e| ApiError::internal(format!("storage: {e}")))?;
        drop(persisted);
        state.rv = rv;
        self.rv_tx.send_replace(rv);
        let rbac_changed = changes.iter().any(|c| c.def.group == crate::rbac::GROUP);
        let admission_changed = changes.iter().any(|c| c.def.group == crate::webhook::GROUP);
        for change in changes {
            let Change { key, def, obj, prev, kind } = change;
            if key.0 == EVENTS && kind != EventType::Deleted && !self.config.event_ttl.is_zero() {
                let at = Instant::now() + self.config.event_ttl;
                let expiry = Expiry { at, key: (key.1.clone(), key.2.clone()), rv: obj.rv };
                self.expiring.lock().unwrap_or_else(|e| e.into_inner()).push_back(expiry);
            }
            index(&mut state, &key, prev.as_ref(), if kind == EventType::Deleted { None } else { Some(&obj) });
            let table = state.table(&def.storage_key(), &self.config);
            match kind {
                EventType::Deleted => table.objects.remove(&(key.1.clone(), key.2.clone())),
                _ => table.objects.insert((key.1.clone(), key.2.clone()), obj.clone()),
            };
            let ev = Arc::new(Event { rv: obj.rv, kind, obj, prev });
            table.history.push_back(ev.clone());
            while table.history.len() > self.config.watch_history {
                if let Some(old) = table.history.pop_front() {
                    table.compacted = old.rv;
                }
            }
            table.send(&def, &ev);
            if def.is_crd() {
                self.crd_changed(&ev);
            }
        }
        if rbac_changed {
            self.rbac_generation.fetch_add(1, Ordering::Release);
        }
        if admission_changed {
            self.admission_generation.fetch_add(1, Ordering::Release);
        }
        Ok(out)
    }
}

impl Store {
    /// When the next Event may expire: the oldest pending deadline, or a TTL from now when none
    /// is pending (an Event written later expires later than that). `None`: Events do not expire.
    pub fn next_event_expiry(&self) -> Option<Instant> {
        if self.config.event_ttl.is_zero() {
            return None;
        }
        let expiring = self.expiring.lock().unwrap_or_else(|e| e.into_inner());
        Some(expiring.front().map_or_else(|| Instant::now() + self.config.event_ttl, |e| e.at))
    }

    /// Deletes the Events not written for a TTL by `now` (at most [`EXPIRY_BATCH`] in one write;
    /// call again while it returns that many), as kube-apiserver's lease expiry does: finalizers
    /// are not waited for, and watchers see DELETED. Returns how many deadlines it used up.
    pub fn expire_events(&self, now: Instant) -> Result<usize, ApiError> {
        let _sweeping = self.sweeping.lock().unwrap_or_else(|e| e.into_inner());
        let due: Vec<((String, String), u64)> = {
            let expiring = self.expiring.lock().unwrap_or_else(|e| e.into_inner());
            expiring.iter().take(EXPIRY_BATCH).take_while(|e| e.at <= now).map(|e| (e.key.clone(), e.rv)).collect()
        };
        if due.is_empty() {
            return Ok(0);
        }
        let def = self.registry.get("", "v1", "events").expect("built in");
        self.write(|txn| {
            for ((ns, name), rv) in &due {
                let key = Txn::key(&def, ns, name);
                if txn.get(&key).is_some_and(|o| o.rv == *rv) {
                    txn.remove(&def, &key);
                }
            }
            Ok(())
        })?;
        // Writes only push to the back meanwhile.
        self.expiring.lock().unwrap_or_else(|e| e.into_inner()).drain(..due.len());
        Ok(due.len())
    }

    /// Serves (or stops serving) what a CustomResourceDefinition defines.
    fn crd_changed(&self, ev: &Event) {
        let v = ev.obj.value();
        if let Some(prev) = &ev.prev {
            let p = prev.value();
            let group = p.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default();
            let plural = p.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default();
            self.registry.remove(group, plural);
        }
        if ev.kind != EventType::Deleted {
            for def in crate::resources::defs_from_crd(&v).unwrap_or_default() {
                self.registry.add(def);
            }
        }
    }

    /// A resourceVersion a watcher may bookmark: the current one, if the watcher has seen every event up to it.
    pub fn bookmark_rv(&self, rx: &broadcast::Receiver<Arc<Event>>) -> Option<u64> {
        let state = self.lock();
        rx.is_empty().then_some(state.rv)
    }
}

fn index(state: &mut State, key: &Key, prev: Option<&Arc<Obj>>, next: Option<&Arc<Obj>>) {
    if let Some(p) = prev {
        if next.is_none_or(|n| n.uid != p.uid) {
            state.uids.remove(&p.uid);
        }
        for o in &p.owners {
            if next.is_none_or(|n| !n.owners.iter().any(|x| x.uid == o.uid))
                && let Some(set) = state.dependents.get_mut(&o.uid)
            {
                set.remove(key);
                if set.is_empty() {
                    state.dependents.remove(&o.uid);
                }
            }
        }
    }
    if let Some(n) = next {
        state.uids.insert(n.uid.clone(), key.clone());
        for o in &n.owners {
            state.dependents.entry(o.uid.clone()).or_default().insert(key.clone());
        }
    }
}

struct Change {
    key: Key,
    def: Arc<ResourceDef>,
    obj: Arc<Obj>,
    prev: Option<Arc<Obj>>,
    kind: EventType,
}

/// A write in progress: reads see the transaction's own changes.
pub struct Txn<'a> {
    state: &'a State,
    pub registry: &'a Registry,
    rv: u64,
    overlay: HashMap<Key, Option<Arc<Obj>>>,
    changes: Vec<Change>,
}

impl Txn<'_> {
    pub fn key(def: &ResourceDef, ns: &str, name: &str) -> Key {
        (def.storage_key(), ns.to_string(), name.to_string())
    }

    /// An object as it was before this transaction.
    pub fn committed(&self, key: &Key) -> Option<Arc<Obj>> {
        self.state.lookup(key).cloned()
    }

    pub fn get(&self, key: &Key) -> Option<Arc<Obj>> {
        match self.overlay.get(key) {
            Some(v) => v.clone(),
            None => self.state.lookup(key).cloned(),
        }
    }

    pub fn by_uid(&self, uid: &str) -> Option<(Key, Arc<Obj>)> {
        let key = self.state.uids.get(uid)?;
        let obj = self.get(key)?;
        (obj.uid == uid).then(|| (key.clone(), obj))
    }

    /// Objects that currently list `uid` among their owners.
    pub fn dependents(&self, uid: &str) -> Vec<(Key, Arc<Obj>)> {
        let mut out: Vec<(Key, Arc<Obj>)> = self.iter_dependents(uid).map(|(k, o)| (k.clone(), o)).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The objects naming `uid` as an owner, unordered and without copying keys: a check over
    /// them runs each time one of a Job's pods goes.
    pub fn iter_dependents<'t>(&'t self, uid: &'t str) -> impl Iterator<Item = (&'t Key, Arc<Obj>)> + 't {
        let keys = self.state.dependents.get(uid).into_iter().flatten();
        keys.filter_map(|k| Some((k, self.get(k)?))).filter(move |(_, o)| o.owners.iter().any(|r| r.uid == uid))
    }

    /// Keys of every object in a namespace, across all resources.
    pub fn keys_in_namespace(&self, ns: &str) -> Vec<Key> {
        let mut out = vec![];
        for (skey, table) in &self.state.tables {
            for ((n, name), _) in
                table.objects.range((ns.to_string(), String::new())..).take_while(|((n, _), _)| n == ns)
            {
                let key = (skey.clone(), n.clone(), name.clone());
                if self.get(&key).is_some() {
                    out.push(key);
                }
            }
        }
        out.sort();
        out
    }

    /// The objects of `storage_key` in namespace `ns` (in name order) as this transaction sees
    /// them: what is stored, with the transaction's own writes in place (objects it created
    /// included, objects it removed left out). A resource nothing was ever stored for costs one
    /// hash lookup and a pass over the transaction's own writes.
    pub fn objects_in(&self, storage_key: &str, ns: &str) -> Vec<Arc<Obj>> {
        let mut seen: BTreeMap<&str, &Arc<Obj>> = BTreeMap::new();
        if let Some(table) = self.state.tables.get(storage_key) {
            let stored = table.objects.range((ns.to_string(), String::new())..).take_while(|((n, _), _)| n == ns);
            seen.extend(stored.map(|((_, name), o)| (name.as_str(), o)));
        }
        for (k, v) in self.overlay.iter().filter(|(k, _)| k.0 == storage_key && k.1 == ns) {
            match v {
                Some(o) => seen.insert(k.2.as_str(), o),
                None => seen.remove(k.2.as_str()),
            };
        }
        seen.into_values().cloned().collect()
    }

    /// Stores `value` (already validated) under a new resourceVersion and returns the stored object.
    pub fn put(&mut self, def: &Arc<ResourceDef>, mut value: Value) -> Arc<Obj> {
        self.rv += 1;
        meta_mut(&mut value).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        self.record(def, Obj::new(def, &value))
    }

    /// Stores `cur` with its `metadata` replaced by `meta` (serialized ahead), which differs only
    /// in labels and annotations, under a new resourceVersion. The bytes around `cur`'s metadata
    /// are copied as they are, so the object is neither parsed nor serialized whole (the bytes
    /// are those [`Txn::put`] would store).
    pub fn put_metadata(&mut self, def: &Arc<ResourceDef>, cur: &Obj, meta: crate::object::Relabel) -> Arc<Obj> {
        self.rv += 1;
        self.record(def, cur.relabelled(self.rv, meta))
    }

    /// Stores `cur` with its `status` replaced by `status` (serialized; `fields` the selectable
    /// fields with it) under a new resourceVersion, the bytes around both copied as they are
    /// ([`Obj::with_status`]: the bytes [`Txn::put`] would store).
    pub fn put_status(&mut self, def: &Arc<ResourceDef>, cur: &Obj, status: &[u8], fields: Vec<String>) -> Arc<Obj> {
        self.rv += 1;
        self.record(def, cur.with_status(self.rv, status, fields))
    }

    fn record(&mut self, def: &Arc<ResourceDef>, obj: Obj) -> Arc<Obj> {
        let obj = Arc::new(obj);
        let key = Txn::key(def, &obj.namespace, &obj.name);
        let prev = self.get(&key);
        let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
        self.overlay.insert(key.clone(), Some(obj.clone()));
        self.changes.push(Change { key, def: def.clone(), obj: obj.clone(), prev, kind });
        obj
    }

    /// Removes an object; the DELETED event carries its last state at a new resourceVersion.
    pub fn remove(&mut self, def: &Arc<ResourceDef>, key: &Key) -> Option<Arc<Obj>> {
        let prev = self.get(key)?;
        self.rv += 1;
        let mut value = prev.value();
        meta_mut(&mut value).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let obj = Arc::new(Obj::new(def, &value));
        self.overlay.insert(key.clone(), None);
        self.changes.push(Change {
            key: key.clone(),
            def: def.clone(),
            obj: obj.clone(),
            prev: Some(prev),
            kind: EventType::Deleted,
        });
        Some(obj)
    }

    /// The last state of an object this transaction removed.
    pub fn removed_obj(&self, key: &Key) -> Option<Arc<Obj>> {
        self.changes.iter().rev().find(|c| &c.key == key && c.kind == EventType::Deleted).map(|c| c.obj.clone())
    }

    /// Keys of every object stored under one storage key.
    pub fn keys_of(&self, storage_key: &str) -> Vec<Key> {
        let Some(table) = self.state.tables.get(storage_key) else { return vec![] };
        table
            .objects
            .keys()
            .map(|(ns, name)| (storage_key.to_string(), ns.clone(), name.clone()))
            .filter(|k| self.get(k).is_some())
            .collect()
    }
}

impl crate::admission::Lookup for Txn<'_> {
    fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<serde_json::Value> {
        Txn::get(self, &(format!("{group}/{plural}"), namespace.to_string(), name.to_string())).map(|o| o.value())
    }

    fn list(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        selector: &crate::selector::LabelSelector,
    ) -> Vec<serde_json::Value> {
        let storage = format!("{group}/{plural}");
        self.objects_in(&storage, namespace).iter().filter(|o| selector.matches(&o.labels)).map(|o| o.value()).collect()
    }

    fn list_containing(&self, group: &str, plural: &str, namespace: &str, needle: &[u8]) -> Vec<serde_json::Value> {
        let storage = format!("{group}/{plural}");
        let finder = memchr::memmem::Finder::new(needle);
        let objects = self.objects_in(&storage, namespace);
        objects.iter().filter(|o| finder.find(&o.raw).is_some()).map(|o| o.value()).collect()
    }
}

impl Txn<'_> {
    /// Objects naming an owner uid that no object has, or an owner waiting in foreground deletion
    /// (a dependent created after that deletion began).
    pub fn orphan_candidates(&self) -> Vec<(Key, Arc<Obj>)> {
        let mut out: Vec<(Key, Arc<Obj>)> = self
            .state
            .dependents
            .iter()
            // Owners gone, or waiting in foreground deletion for dependents created after it began.
            .filter(|(uid, _)| {
                self.by_uid(uid)
                    .is_none_or(|(_, o)| o.deleting && o.finalizers.iter().any(|f| f == crate::ops::FOREGROUND))
            })
            .flat_map(|(_, keys)| keys.iter())
            .filter_map(|k| Some((k.clone(), self.get(k)?)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::Memory;
    use serde_json::json;

    fn pods_store() -> (Store, Arc<ResourceDef>) {
        let registry = Arc::new(Registry::with_builtins());
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        (Store::open(Box::new(Memory), registry, StoreConfig::default()).unwrap(), def)
    }

    fn put_pod(store: &Store, def: &Arc<ResourceDef>, name: &str, node: &str) {
        let pod = json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}});
        store.write(|txn| Ok(txn.put(def, pod))).unwrap();
    }

    /// (pod, node) of each event received so far.
    fn received(def: &ResourceDef, rx: &mut broadcast::Receiver<Arc<Event>>) -> Vec<(String, String)> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| (e.obj.name.clone(), e.obj.field(def, "spec.nodeName").unwrap_or_default().to_string()))
            .collect()
    }

    #[test]
    fn an_admission_lookup_lists_by_namespace_and_labels_with_the_transaction_s_own_writes() {
        use crate::admission::Lookup;
        use crate::selector::LabelSelector;
        let (store, def) = pods_store();
        let pod = |ns: &str, name: &str, app: &str| json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}}});
        store
            .write(|txn| {
                for (ns, name, app) in
                    [("default", "a", "x"), ("default", "b", "x"), ("default", "c", "y"), ("other", "d", "x")]
                {
                    txn.put(&def, pod(ns, name, app));
                }
                Ok(())
            })
            .unwrap();
        let app_x = LabelSelector::parse("app=x").unwrap();
        let names = |found: Vec<Value>| -> Vec<String> {
            found.iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect()
        };
        store
            .write(|txn| {
                assert_eq!(names(txn.list("", "pods", "default", &app_x)), ["a", "b"]);
                txn.put(&def, pod("default", "e", "x"));
                let b = Txn::key(&def, "default", "b");
                txn.remove(&def, &b);
                assert_eq!(names(txn.list("", "pods", "default", &app_x)), ["a", "e"]);
                assert_eq!(names(txn.list("", "pods", "other", &LabelSelector::everything())), ["d"]);
                assert!(txn.list("", "nodes", "", &app_x).is_empty());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn an_admission_lookup_lists_the_objects_whose_stored_json_contains_a_needle_as_the_default_does() {
        use crate::admission::Lookup;
        /// The trait's default `list_containing`, over the transaction's `list`.
        struct Default<'t, 'a>(&'t Txn<'a>);
        impl Lookup for Default<'_, '_> {
            fn get(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
                Lookup::get(self.0, group, plural, ns, name)
            }
            fn list(&self, g: &str, p: &str, ns: &str, s: &crate::selector::LabelSelector) -> Vec<Value> {
                self.0.list(g, p, ns, s)
            }
        }
        let (store, def) = pods_store();
        let pod = |name: &str, spec: Value| json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec});
        store
            .write(|txn| {
                txn.put(&def, pod("a", json!({"hostNetwork": true})));
                txn.put(&def, pod("b", json!({"hostNetwork": false})));
                txn.put(&def, pod("c", json!({"x": {"hostNetwork": true}})));
                Ok(())
            })
            .unwrap();
        let names = |found: Vec<Value>| -> Vec<String> {
            found.iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect()
        };
        store
            .write(|txn| {
                txn.put(&def, pod("d", json!({"hostNetwork": true})));
                let needle = br#""hostNetwork":true"#;
                let found = names(txn.list_containing("", "pods", "default", needle));
                assert_eq!(found, ["a", "c", "d"], "stored and the transaction's own writes");
                assert_eq!(found, names(Default(txn).list_containing("", "pods", "default", needle)));
                assert!(txn.list_containing("", "pods", "other", needle).is_empty());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_routed_watch_receives_only_events_whose_object_had_or_has_its_value() {
        let (store, def) = pods_store();
        let mut n1 = store.watch(&def, None, Some(("spec.nodeName", "n1"))).unwrap().rx;
        let mut all = store.watch(&def, None, None).unwrap().rx;
        put_pod(&store, &def, "a", "");
        put_pod(&store, &def, "b", "n2");
        put_pod(&store, &def, "a", "n1");
        put_pod(&store, &def, "a", "n1");
        // Leaving the value is delivered too, so the watcher can turn it into DELETED.
        put_pod(&store, &def, "a", "n3");
        put_pod(&store, &def, "b", "n3");
        let moved = |n: &str| ("a".to_string(), n.to_string());
        assert_eq!(received(&def, &mut n1), [moved("n1"), moved("n1"), moved("n3")]);
        assert_eq!(received(&def, &mut all).len(), 6);
    }

    #[test]
    fn channels_of_values_nobody_watches_any_more_are_dropped() {
        let (store, def) = pods_store();
        for i in 0..100 {
            drop(store.watch(&def, None, Some(("spec.nodeName", &format!("n{i}")))).unwrap());
        }
        let _live = store.watch(&def, None, Some(("spec.nodeName", "kept"))).unwrap();
        let state = store.lock();
        let values = &state.tables[&def.storage_key()].routes["spec.nodeName"];
        assert!(values.len() < 100, "{} channels kept for 1 watcher", values.len());
        assert!(values.contains_key("kept"));
    }
}
