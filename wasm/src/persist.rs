//! Saving indexes and memories in the page's own storage: the origin
//! private file system (OPFS) where the browser offers writable files,
//! IndexedDB otherwise. Both keep bytes per origin across reloads; the
//! bytes are the same as `save()`'s (checksummed, so a damaged entry is
//! refused on load, never half-read).
//!
//! Everything goes through `js_sys::Reflect` on the global object, so the
//! module needs no `web-sys` bindings and fails with a clear error where
//! neither store exists (Node, a page without storage access).

use crate::convert::err;
use js_sys::{Array, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The OPFS folder and the IndexedDB database and object store names.
const SPACE: &str = "dentate";
const STORE: &str = "files";

fn prop(obj: &JsValue, key: &str) -> Result<JsValue, JsValue> {
    if obj.is_undefined() || obj.is_null() {
        return Ok(JsValue::UNDEFINED);
    }
    Reflect::get(obj, &JsValue::from_str(key))
}

/// Calls method `name` of `obj` with `args`.
fn call(obj: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = prop(obj, name)?
        .dyn_into()
        .map_err(|_| err(format!("the browser's storage has no `{name}`")))?;
    f.apply(obj, &args.iter().collect::<Array>())
}

/// Awaits method `name` of `obj` (which returns a promise).
async fn call_async(obj: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let p: Promise = call(obj, name, args)?.dyn_into()?;
    JsFuture::from(p).await
}

fn create_option() -> JsValue {
    let o = Object::new();
    crate::convert::set(&o, "create", true);
    o.into()
}

/// A name that is one plain file name: 1–200 characters, no `/`, `\`,
/// NUL, and not `.` or `..`.
fn check_name(name: &str) -> Result<(), JsValue> {
    if name.is_empty() || name.chars().count() > 200 || name == "." || name == ".." || name.contains(['/', '\\', '\0'])
    {
        let shown: String = name.chars().take(40).collect();
        let more = if name.chars().count() > 40 { "…" } else { "" };
        return Err(err(format!(
            "{shown:?}{more} is not a storage name: use 1 to 200 characters without '/', '\\' or NUL, not '.' or '..'"
        )));
    }
    Ok(())
}

/// Where saved bytes go.
#[derive(Clone)]
enum Backend {
    /// OPFS: a directory handle of our folder.
    Opfs(JsValue),
    /// IndexedDB: an open database with our object store.
    Idb(JsValue),
}

thread_local! {
    /// The backend found first, kept for the page's life (opening it again
    /// for every call would cost a round trip each).
    static FOUND: std::cell::RefCell<Option<Backend>> = const { std::cell::RefCell::new(None) };
}

/// [`find_backend`], once.
async fn backend() -> Result<Backend, JsValue> {
    if let Some(b) = FOUND.with(|f| f.borrow().clone()) {
        return Ok(b);
    }
    let b = find_backend().await?;
    FOUND.with(|f| *f.borrow_mut() = Some(b.clone()));
    Ok(b)
}

/// The OPFS folder when the browser can write files there from this
/// context, else IndexedDB, else an error saying neither exists.
async fn find_backend() -> Result<Backend, JsValue> {
    if let Some(dir) = opfs().await? {
        return Ok(Backend::Opfs(dir));
    }
    if let Some(db) = idb().await? {
        return Ok(Backend::Idb(db));
    }
    Err(err(
        "no browser storage here: neither the origin private file system nor IndexedDB is available (save() gives the bytes to keep elsewhere)",
    ))
}

/// Our OPFS folder, when the browser can write files there from this context.
async fn opfs() -> Result<Option<JsValue>, JsValue> {
    let global = js_sys::global();
    let storage = prop(&prop(&global, "navigator")?, "storage")?;
    if !prop(&storage, "getDirectory")?.is_function() {
        return Ok(None);
    }
    // Safari gives OPFS without `createWritable` outside workers: check.
    let writable = prop(
        &prop(&prop(&global, "FileSystemFileHandle")?, "prototype")?,
        "createWritable",
    )?;
    if !writable.is_function() {
        return Ok(None);
    }
    let Ok(root) = call_async(&storage, "getDirectory", &[]).await else {
        return Ok(None);
    };
    Ok(Some(
        call_async(&root, "getDirectoryHandle", &[SPACE.into(), create_option()]).await?,
    ))
}

/// Our IndexedDB database, when the page has IndexedDB.
async fn idb() -> Result<Option<JsValue>, JsValue> {
    let idb = prop(&js_sys::global(), "indexedDB")?;
    if !idb.is_object() {
        return Ok(None);
    }
    Ok(Some(open_idb(&idb).await?))
}

thread_local! {
    /// `(req) => Promise` of `req.result` / `req.error`, and the handler
    /// that creates our object store on a database's first open: small
    /// JavaScript functions made once, so no Rust closure is left waiting
    /// for an event that never comes.
    static IDB_HELPERS: (Function, Function) = (
        Function::new_with_args(
            "req",
            "return new Promise((ok, fail) => { req.onsuccess = () => ok(req.result); req.onerror = () => fail(req.error); });",
        ),
        Function::new_with_args("req, store", "req.onupgradeneeded = () => req.result.createObjectStore(store);"),
    );
}

/// Resolves with `req.result` on success, rejects with `req.error`.
fn idb_request(req: &JsValue) -> Result<Promise, JsValue> {
    IDB_HELPERS
        .with(|(promise, _)| promise.call1(&JsValue::NULL, req))?
        .dyn_into()
}

async fn open_idb(idb: &JsValue) -> Result<JsValue, JsValue> {
    let req = call(idb, "open", &[SPACE.into(), 1.into()])?;
    // First open: create the object store (keys are the names).
    IDB_HELPERS.with(|(_, upgrade)| upgrade.call2(&JsValue::NULL, &req, &STORE.into()))?;
    JsFuture::from(idb_request(&req)?).await
}

/// The object store of `db` in a new transaction (`readonly` or `readwrite`).
fn idb_store(db: &JsValue, mode: &str) -> Result<JsValue, JsValue> {
    let tx = call(db, "transaction", &[STORE.into(), mode.into()])?;
    call(&tx, "objectStore", &[STORE.into()])
}

/// Keeps `bytes` under `name`, replacing what was there. OPFS writes go to
/// a swap file that replaces the old one only when complete.
pub(crate) async fn put(name: &str, bytes: &[u8]) -> Result<(), JsValue> {
    check_name(name)?;
    let data = Uint8Array::from(bytes);
    match backend().await? {
        Backend::Opfs(dir) => {
            let file = call_async(&dir, "getFileHandle", &[name.into(), create_option()]).await?;
            let w = call_async(&file, "createWritable", &[]).await?;
            if let Err(e) = call_async(&w, "write", &[data.into()]).await {
                let _ = call_async(&w, "abort", &[]).await;
                return Err(e);
            }
            call_async(&w, "close", &[]).await?;
        }
        Backend::Idb(db) => {
            let store = idb_store(&db, "readwrite")?;
            JsFuture::from(idb_request(&call(&store, "put", &[data.into(), name.into()])?)?).await?;
        }
    }
    Ok(())
}

/// The bytes kept under `name`.
pub(crate) async fn get(name: &str) -> Result<Vec<u8>, JsValue> {
    check_name(name)?;
    let missing = || err(format!("nothing is saved under {name:?}"));
    match backend().await? {
        Backend::Opfs(dir) => {
            let file = call_async(&dir, "getFileHandle", &[name.into()])
                .await
                .map_err(|e| if is_not_found(&e) { missing() } else { e })?;
            let blob = call_async(&file, "getFile", &[]).await?;
            let buf = call_async(&blob, "arrayBuffer", &[]).await?;
            Ok(Uint8Array::new(&buf).to_vec())
        }
        Backend::Idb(db) => {
            let store = idb_store(&db, "readonly")?;
            let v = JsFuture::from(idb_request(&call(&store, "get", &[name.into()])?)?).await?;
            if v.is_undefined() {
                return Err(missing());
            }
            let a: Uint8Array = v
                .dyn_into()
                .map_err(|_| err(format!("what is saved under {name:?} is not bytes")))?;
            Ok(a.to_vec())
        }
    }
}

/// Deletes what is kept under `name`; false when there was nothing.
pub(crate) async fn remove(name: &str) -> Result<bool, JsValue> {
    check_name(name)?;
    match backend().await? {
        Backend::Opfs(dir) => match call_async(&dir, "removeEntry", &[name.into()]).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(e),
        },
        Backend::Idb(db) => {
            let store = idb_store(&db, "readwrite")?;
            let n = JsFuture::from(idb_request(&call(&store, "count", &[name.into()])?)?).await?;
            JsFuture::from(idb_request(&call(&store, "delete", &[name.into()])?)?).await?;
            Ok(n.as_f64().unwrap_or(0.0) > 0.0)
        }
    }
}

/// The names kept, sorted.
pub(crate) async fn list() -> Result<Vec<String>, JsValue> {
    let mut names = Vec::new();
    match backend().await? {
        Backend::Opfs(dir) => {
            let it = call(&dir, "keys", &[])?;
            loop {
                let step = call_async(&it, "next", &[]).await?;
                if prop(&step, "done")?.is_truthy() {
                    break;
                }
                if let Some(n) = prop(&step, "value")?.as_string() {
                    names.push(n);
                }
            }
        }
        Backend::Idb(db) => {
            let store = idb_store(&db, "readonly")?;
            let keys = JsFuture::from(idb_request(&call(&store, "getAllKeys", &[])?)?).await?;
            names.extend(keys.dyn_into::<Array>()?.iter().filter_map(|k| k.as_string()));
        }
    }
    names.sort();
    Ok(names)
}

fn is_not_found(e: &JsValue) -> bool {
    prop(e, "name").ok().and_then(|n| n.as_string()).as_deref() == Some("NotFoundError")
}

/// Which store `saveTo` uses here: `"opfs"`, `"indexeddb"`, or `null`
/// where there is none (Node).
#[wasm_bindgen(js_name = storageBackend)]
pub async fn storage_backend() -> JsValue {
    match backend().await {
        Ok(Backend::Opfs(_)) => "opfs".into(),
        Ok(Backend::Idb(_)) => "indexeddb".into(),
        Err(_) => JsValue::NULL,
    }
}

/// Chooses the store `saveTo`, `loadFrom`, `listSaved` and `removeSaved`
/// use from now on: `"opfs"`, `"indexeddb"`, or `"auto"` (the default:
/// OPFS where it can write, else IndexedDB). The two hold separate
/// entries. Throws when the one asked for is not available here.
#[wasm_bindgen(js_name = useStorage)]
pub async fn use_storage(kind: String) -> Result<(), JsValue> {
    let chosen = match kind.as_str() {
        "opfs" => opfs().await?.map(Backend::Opfs),
        "indexeddb" => idb().await?.map(Backend::Idb),
        "auto" => {
            FOUND.with(|f| *f.borrow_mut() = None);
            return backend().await.map(|_| ());
        }
        other => {
            return Err(err(format!(
                "storage must be \"opfs\", \"indexeddb\" or \"auto\", not {other:?}"
            )));
        }
    };
    let b = chosen.ok_or_else(|| err(format!("{kind} is not available in this context")))?;
    FOUND.with(|f| *f.borrow_mut() = Some(b));
    Ok(())
}

/// The names of the indexes and memories saved in this origin's storage
/// (`saveTo`), sorted.
#[wasm_bindgen(js_name = listSaved)]
pub async fn list_saved() -> Result<Array, JsValue> {
    Ok(list().await?.into_iter().map(JsValue::from).collect())
}

/// Deletes a saved index or memory; false when nothing was saved under
/// `name`.
#[wasm_bindgen(js_name = removeSaved)]
pub async fn remove_saved(name: String) -> Result<bool, JsValue> {
    remove(&name).await
}
