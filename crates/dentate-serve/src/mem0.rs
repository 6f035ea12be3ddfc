//! The mem0-compatible subset, under `/mem0`: the paths and request and
//! response shapes of mem0's open-source REST server (`server/main.py`),
//! so an application written against it switches by setting its base URL
//! to `http://HOST:PORT/mem0`.
//!
//! | mem0 route | Dentate |
//! |---|---|
//! | `POST /memories` `{messages: [{role, content}], user_id \| agent_id \| run_id}` | append the messages, wait (up to 30 s) for their ingestion, answer the memories made from them as `{"results": [{id, memory, event: "ADD"}]}` |
//! | `GET /memories?user_id=` | the user's live memories (default pipeline) |
//! | `GET /memories/{id}` | one memory; an id of another tenant, or none, is 404 (mem0 answers `null`) |
//! | `POST /search` `{query, user_id, top_k? \| limit?, filters?}` | search with `k = top_k` (default 10) |
//! | `PUT /memories/{id}` `{text}` (also `data` or `memory`) | correct the memory |
//! | `GET /memories/{id}/history` | its history as mem0 history rows (`ADD`, `UPDATE`, `DELETE`) |
//! | `DELETE /memories/{id}` | forget it |
//! | `DELETE /memories?user_id=` | erase the user's messages and memories |
//!
//! `agent_id` and `run_id` name users as `user_id` does (the first given
//! is used). Ids are strings of Dentate's memory ids. `hash` is the SHA-256
//! of the text (mem0: MD5); `metadata` is always `null`. Errors keep
//! Dentate's one shape (`{"error": {"code", "message"}}`).

use crate::engine::Engine;
use crate::error::ServeError;
use crate::extract::{Json, Path, Query};
use crate::model::{ErrorBody, MemoryOut, MessageIn, SearchRequest};
use crate::registry::Principal;
use axum::Extension;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type Res<T> = Result<T, ServeError>;
type App = Arc<Engine>;

/// A chat message as mem0 takes it.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Message {
    /// `user`, `assistant`, …
    pub role: String,
    /// What was said.
    pub content: String,
}

/// mem0's `MemoryCreate`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Create {
    /// The messages.
    pub messages: Vec<Mem0Message>,
    /// The user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Read as the user when `user_id` is absent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Read as the user when `user_id` and `agent_id` are absent.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Accepted and ignored.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// Accepted and ignored (Dentate's pipelines decide what to keep).
    #[serde(default)]
    pub infer: Option<bool>,
}

/// mem0's `SearchRequest`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Search {
    /// What to look for.
    pub query: String,
    /// The user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Read as the user when `user_id` is absent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Read as the user when `user_id` and `agent_id` are absent.
    #[serde(default)]
    pub run_id: Option<String>,
    /// mem0's filters; `user_id`, `agent_id` or `run_id` in it name the user.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub filters: Option<serde_json::Value>,
    /// How many results (default 10).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Older clients' name for `top_k`.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// mem0's update body: the new text under `text` (also `data` or `memory`).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Update {
    /// The new text.
    #[serde(default)]
    pub text: Option<String>,
    /// Older clients' name for `text`.
    #[serde(default)]
    pub data: Option<String>,
    /// Another name for `text`.
    #[serde(default)]
    pub memory: Option<String>,
}

/// Which user a listing or deletion is for.
#[derive(Debug, Clone, Deserialize, Serialize, IntoParams, ToSchema)]
#[into_params(parameter_in = Query)]
pub struct Mem0Owner {
    /// The user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Read as the user when `user_id` is absent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Read as the user when `user_id` and `agent_id` are absent.
    #[serde(default)]
    pub run_id: Option<String>,
}

/// A memory as mem0 returns it.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Item {
    /// The memory id (a string, as mem0's UUIDs).
    pub id: String,
    /// Its text.
    pub memory: String,
    /// SHA-256 of the text, hex.
    pub hash: String,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// Similarity (search only; null elsewhere).
    pub score: Option<f32>,
    /// When it was made (ISO 8601).
    pub created_at: Option<String>,
    /// When it last changed (ISO 8601).
    pub updated_at: Option<String>,
    /// The user it belongs to.
    pub user_id: String,
}

/// `{"results": [...]}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Results {
    /// The memories.
    pub results: Vec<Mem0Item>,
}

/// One memory added (`event` is `ADD`).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Added {
    /// The memory id.
    pub id: String,
    /// Its text.
    pub memory: String,
    /// `ADD`.
    pub event: String,
}

/// What an add made.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0AddResults {
    /// Memories made from the messages (empty when their ingestion is
    /// still running after 30 s).
    pub results: Vec<Mem0Added>,
}

/// `{"message": "..."}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0Message200 {
    /// What happened.
    pub message: String,
}

/// A mem0 history row.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Mem0History {
    /// Row id.
    pub id: String,
    /// The memory.
    pub memory_id: String,
    /// Text before.
    pub old_memory: Option<String>,
    /// Text after.
    pub new_memory: Option<String>,
    /// `ADD`, `UPDATE` or `DELETE`.
    pub event: String,
    /// When (ISO 8601).
    pub created_at: String,
    /// When (ISO 8601).
    pub updated_at: String,
    /// Whether this row deleted the memory.
    pub is_deleted: bool,
}

pub(crate) fn routes() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(add, list, delete_all))
        .routes(routes!(get_one, update, delete_one))
        .routes(routes!(history))
        .routes(routes!(search))
}

fn owner(user_id: &Option<String>, agent_id: &Option<String>, run_id: &Option<String>) -> Res<String> {
    user_id
        .clone()
        .or_else(|| agent_id.clone())
        .or_else(|| run_id.clone())
        .ok_or_else(|| ServeError::BadRequest("one of user_id, agent_id or run_id is required".into()))
}

fn memory_id(id: &str) -> Res<i64> {
    id.trim()
        .parse::<i64>()
        .map_err(|_| ServeError::NotFound(format!("no memory {id}")))
}

fn hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn iso_secs(t: i64) -> String {
    crate::engine::iso_time(t)
}

fn item(m: MemoryOut, user: &str) -> Mem0Item {
    let created = m.created_at.map(iso_secs);
    Mem0Item {
        id: m.id.to_string(),
        hash: hash(&m.text),
        memory: m.text,
        metadata: None,
        score: m.score,
        updated_at: created.clone(),
        created_at: created,
        user_id: user.to_string(),
    }
}

/// mem0's add: stores the messages, waits for their ingestion, answers
/// the memories made from them.
#[utoipa::path(post, path = "/mem0/memories", tag = "mem0", request_body = Mem0Create,
    responses((status = 200, description = "Memories made", body = Mem0AddResults),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 413, description = "Body too large", body = ErrorBody),
              (status = 429, description = "Ingest queue full", body = ErrorBody),
              (status = 503, description = "Shutting down", body = ErrorBody)))]
async fn add(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Json(b): Json<Mem0Create>,
) -> Res<Json<Mem0AddResults>> {
    let user = owner(&b.user_id, &b.agent_id, &b.run_id)?;
    let msgs = b
        .messages
        .into_iter()
        .map(|m| MessageIn {
            content: m.content,
            role: Some(m.role),
            session: None,
            timestamp: None,
            id: None,
        })
        .collect();
    let r = e.append(&p, &user, msgs).await?;
    if let Some(j) = r.job_id {
        e.wait_job(j, Duration::from_secs(30)).await?;
    }
    let made = e.memories_from(&p, &user, r.message_ids).await?;
    Ok(Json(Mem0AddResults {
        results: made
            .into_iter()
            .map(|m| Mem0Added {
                id: m.id.to_string(),
                memory: m.text,
                event: "ADD".into(),
            })
            .collect(),
    }))
}

/// mem0's get_all for one user.
#[utoipa::path(get, path = "/mem0/memories", tag = "mem0", params(Mem0Owner),
    responses((status = 200, description = "The user's memories", body = Mem0Results),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn list(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Query(q): Query<Mem0Owner>,
) -> Res<Json<Mem0Results>> {
    let user = owner(&q.user_id, &q.agent_id, &q.run_id)?;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let page = e
            .list(
                &p,
                &user,
                crate::model::ListQuery {
                    limit: Some(crate::engine::MAX_PAGE),
                    offset: Some(offset),
                    kind: None,
                    pipeline: None,
                },
            )
            .await?;
        let n = page.results.len();
        out.extend(page.results.into_iter().map(|m| item(m, &user)));
        if n < crate::engine::MAX_PAGE {
            break;
        }
        offset += n;
    }
    Ok(Json(Mem0Results { results: out }))
}

/// mem0's delete_all for one user: erases its messages and memories.
#[utoipa::path(delete, path = "/mem0/memories", tag = "mem0", params(Mem0Owner),
    responses((status = 200, description = "Deleted", body = Mem0Message200),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn delete_all(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Query(q): Query<Mem0Owner>,
) -> Res<Json<Mem0Message200>> {
    let user = owner(&q.user_id, &q.agent_id, &q.run_id)?;
    e.erase_all(&p, &user, false).await?;
    Ok(Json(Mem0Message200 {
        message: "All relevant memories deleted".into(),
    }))
}

async fn owner_name(e: &App, p: &Principal, id: i64) -> Res<String> {
    e.owner_external(p, id).await
}

/// mem0's get.
#[utoipa::path(get, path = "/mem0/memories/{memory_id}", tag = "mem0",
    params(("memory_id" = String, Path, description = "Memory id")),
    responses((status = 200, description = "The memory", body = Mem0Item),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such memory", body = ErrorBody)))]
async fn get_one(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Res<Json<Mem0Item>> {
    let id = memory_id(&id)?;
    let m = e.get(&p, None, id).await?;
    if m.forgotten == Some(true) {
        return Err(ServeError::NotFound(format!("no memory {id}")));
    }
    let user = owner_name(&e, &p, id).await?;
    Ok(Json(item(m, &user)))
}

/// mem0's update.
#[utoipa::path(put, path = "/mem0/memories/{memory_id}", tag = "mem0", request_body = Mem0Update,
    params(("memory_id" = String, Path, description = "Memory id")),
    responses((status = 200, description = "Updated", body = Mem0Message200),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such memory", body = ErrorBody)))]
async fn update(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    Json(b): Json<Mem0Update>,
) -> Res<Json<Mem0Message200>> {
    let id = memory_id(&id)?;
    let text = b
        .text
        .or(b.data)
        .or(b.memory)
        .ok_or_else(|| ServeError::BadRequest("the new text goes under `text`".into()))?;
    e.correct(&p, None, id, text).await?;
    Ok(Json(Mem0Message200 {
        message: "Memory updated successfully!".into(),
    }))
}

/// mem0's delete.
#[utoipa::path(delete, path = "/mem0/memories/{memory_id}", tag = "mem0",
    params(("memory_id" = String, Path, description = "Memory id")),
    responses((status = 200, description = "Deleted", body = Mem0Message200),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such memory", body = ErrorBody)))]
async fn delete_one(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Res<Json<Mem0Message200>> {
    let id = memory_id(&id)?;
    e.forget(&p, None, id).await?;
    Ok(Json(Mem0Message200 {
        message: "Memory deleted successfully".into(),
    }))
}

/// mem0's history.
#[utoipa::path(get, path = "/mem0/memories/{memory_id}/history", tag = "mem0",
    params(("memory_id" = String, Path, description = "Memory id")),
    responses((status = 200, description = "History rows, oldest first", body = Vec<Mem0History>),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such memory", body = ErrorBody)))]
async fn history(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Res<Json<Vec<Mem0History>>> {
    let id = memory_id(&id)?;
    let h = e.history(&p, None, id).await?;
    Ok(Json(
        h.history
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let at = iso_secs(c.at);
                Mem0History {
                    id: format!("{id}-{i}"),
                    memory_id: id.to_string(),
                    is_deleted: c.event == "forget",
                    event: match c.event.as_str() {
                        "add" => "ADD",
                        "correct" => "UPDATE",
                        _ => "DELETE",
                    }
                    .into(),
                    old_memory: c.old_text,
                    new_memory: c.new_text,
                    created_at: at.clone(),
                    updated_at: at,
                }
            })
            .collect(),
    ))
}

/// mem0's search.
#[utoipa::path(post, path = "/mem0/search", tag = "mem0", request_body = Mem0Search,
    responses((status = 200, description = "Results, best first", body = Mem0Results),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn search(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Json(b): Json<Mem0Search>,
) -> Res<Json<Mem0Results>> {
    let from_filters = |k: &str| {
        b.filters
            .as_ref()
            .and_then(|f| f.get(k))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let user = owner(&b.user_id, &b.agent_id, &b.run_id).or_else(|_| {
        owner(
            &from_filters("user_id"),
            &from_filters("agent_id"),
            &from_filters("run_id"),
        )
    })?;
    let r = e
        .search(
            &p,
            &user,
            SearchRequest {
                query: b.query,
                k: Some(b.top_k.or(b.limit).unwrap_or(10)),
                budget: None,
                from: None,
                to: None,
                pipeline: None,
            },
        )
        .await?;
    Ok(Json(Mem0Results {
        results: r.results.into_iter().map(|m| item(m, &user)).collect(),
    }))
}
