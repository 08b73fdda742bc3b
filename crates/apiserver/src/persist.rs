//! Durable storage behind the in-memory store: nothing (in memory) or a redb file.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::store::Key;

pub struct PersistedChange<'a> {
    pub key: &'a Key,
    /// The new bytes, or `None` for a removal.
    pub raw: Option<&'a Bytes>,
}

#[derive(Default)]
pub struct Loaded {
    pub rv: u64,
    pub objects: Vec<(Key, Bytes)>,
}

pub trait Backend: Send + Sync {
    fn load(&self) -> Result<Loaded, String>;
    /// Makes the change set and the new resourceVersion counter durable, atomically.
    fn persist(&self, rv: u64, changes: &[PersistedChange<'_>]) -> Result<(), String>;
    /// Whether `persist` waits for the disk.
    fn durable(&self) -> bool {
        true
    }
}

/// No persistence: the store lives and dies with the process.
pub struct Memory;

impl Backend for Memory {
    fn load(&self) -> Result<Loaded, String> {
        Ok(Loaded::default())
    }
    fn persist(&self, _rv: u64, _changes: &[PersistedChange<'_>]) -> Result<(), String> {
        Ok(())
    }
    fn durable(&self) -> bool {
        false
    }
}

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const FORMAT_KEY: &str = "format";
const FORMAT: &[u8] = b"jobset-apiserver/v1";
const RV_KEY: &str = "resourceVersion";

/// One redb file: every object under `storage-key\0namespace\0name`, plus the resourceVersion counter.
pub struct Redb {
    /// `None` between a failed I/O and the next successful re-open.
    db: Mutex<Option<Database>>,
    path: PathBuf,
}

fn encode(key: &Key) -> String {
    format!("{}\0{}\0{}", key.0, key.1, key.2)
}

fn decode(s: &str) -> Option<Key> {
    let mut it = s.split('\0');
    Some((it.next()?.to_string(), it.next()?.to_string(), it.next()?.to_string()))
}

impl Redb {
    pub const FILE: &'static str = "store.redb";

    /// Opens (or creates) `dir/store.redb`. A file that is not a jobset store is an error, never an empty cluster.
    pub fn open(dir: &Path) -> Result<Redb, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create data dir: {e}", dir.display()))?;
        let path = dir.join(Self::FILE);
        if !path.exists() {
            Self::create_new(dir, &path)?;
        }
        let db =
            Database::open(&path).map_err(|e| format!("{}: not a usable jobset data file: {e}", path.display()))?;
        let txn = db.begin_read().map_err(|e| format!("{}: {e}", path.display()))?;
        let ok = match txn.open_table(META) {
            Ok(t) => {
                t.get(FORMAT_KEY).map_err(|e| format!("{}: {e}", path.display()))?.is_some_and(|v| v.value() == FORMAT)
            }
            Err(_) => false,
        };
        if !ok {
            return Err(format!("{}: not a jobset data file (format marker missing)", path.display()));
        }
        drop(txn);
        Ok(Redb { db: Mutex::new(Some(db)), path })
    }

    /// Creates an empty store next to `path` and renames it into place once it is complete and
    /// durable, so that a crash during the first start never leaves a half-made `store.redb`
    /// (which later starts would refuse).
    fn create_new(dir: &Path, path: &Path) -> Result<(), String> {
        let tmp = dir.join(format!("{}.tmp", Self::FILE));
        let err = |e: &dyn std::fmt::Display| format!("{}: {e}", tmp.display());
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(&e)),
        }
        {
            let db = Database::create(&tmp).map_err(|e| err(&e))?;
            let txn = db.begin_write().map_err(|e| err(&e))?;
            {
                let mut meta = txn.open_table(META).map_err(|e| err(&e))?;
                meta.insert(FORMAT_KEY, FORMAT).map_err(|e| err(&e))?;
                meta.insert(RV_KEY, 0u64.to_be_bytes().as_slice()).map_err(|e| err(&e))?;
                txn.open_table(OBJECTS).map_err(|e| err(&e))?;
            }
            txn.commit().map_err(|e| err(&e))?;
        }
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| err(&e))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(())
    }

    fn err(&self, e: impl std::fmt::Display) -> String {
        format!("{}: {e}", self.path.display())
    }
}

impl Redb {
    /// The open database, opened again if an I/O error closed it.
    fn database(&self) -> Result<std::sync::MutexGuard<'_, Option<Database>>, String> {
        let mut db = self.db.lock().unwrap_or_else(|e| e.into_inner());
        if db.is_none() {
            *db = Some(Database::open(&self.path).map_err(|e| self.err(e))?);
        }
        Ok(db)
    }

    fn write(db: &Database, rv: u64, changes: &[PersistedChange<'_>]) -> Result<(), redb::Error> {
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(OBJECTS)?;
            for c in changes {
                let k = encode(c.key);
                match c.raw {
                    Some(raw) => table.insert(k.as_str(), raw.as_ref()).map(drop),
                    None => table.remove(k.as_str()).map(drop),
                }?;
            }
            let mut meta = txn.open_table(META)?;
            meta.insert(RV_KEY, rv.to_be_bytes().as_slice())?;
        }
        Ok(txn.commit()?)
    }
}

impl Backend for Redb {
    fn load(&self) -> Result<Loaded, String> {
        let db = self.database()?;
        let db = db.as_ref().expect("opened by database()");
        let txn = db.begin_read().map_err(|e| self.err(e))?;
        let meta = txn.open_table(META).map_err(|e| self.err(e))?;
        let rv = meta
            .get(RV_KEY)
            .map_err(|e| self.err(e))?
            .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| self.err("resourceVersion counter missing or corrupt"))?;
        let table = txn.open_table(OBJECTS).map_err(|e| self.err(e))?;
        let mut objects = vec![];
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            let key = decode(k.value()).ok_or_else(|| self.err(format!("corrupt key {:?}", k.value())))?;
            objects.push((key, Bytes::copy_from_slice(v.value())));
        }
        Ok(Loaded { rv, objects })
    }

    /// After a failed write (a full disk), redb refuses every later one ("Previous I/O error
    /// occurred"): the database is closed and opened again (redb repairs it from its last
    /// committed state), so writes succeed again once the disk has room, without a restart.
    fn persist(&self, rv: u64, changes: &[PersistedChange<'_>]) -> Result<(), String> {
        let mut db = self.database()?;
        let result = Self::write(db.as_ref().expect("opened by database()"), rv, changes);
        match result {
            Err(redb::Error::PreviousIo) => {
                // Closed before it is opened again: redb holds a lock on the file.
                *db = None;
                drop(db);
                let db = self.database()?;
                Self::write(db.as_ref().expect("opened by database()"), rv, changes).map_err(|e| self.err(e))
            }
            r => r.map_err(|e| self.err(e)),
        }
    }
}
