//! The HTTP server: the `/v1` REST API (documented by the OpenAPI
//! document at `/openapi.json`, generated from these handlers), the
//! mem0-compatible subset under `/mem0` ([`crate::mem0`]), MCP over
//! streamable HTTP at `/mcp` ([`crate::mcp`]), `/metrics`, and the
//! authentication every route but `/v1/health` passes through.

use crate::engine::Engine;
use crate::error::ServeError;
pub use crate::extract::{Json, MAX_BODY, Path, Query};
use crate::model::*;
use crate::registry::{DEFAULT_TENANT, Principal};
use axum::extract::{ConnectInfo, DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type Res<T> = Result<T, ServeError>;
type App = Arc<Engine>;

struct Security;

impl Modify for Security {
    fn modify(&self, o: &mut utoipa::openapi::OpenApi) {
        o.components.get_or_insert_with(Default::default).add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Dentate memory service",
        description = "Agent memory over HTTP: users, messages (ingested in the background), memories with provenance, search, prompt context, erasure with receipts. A mem0-compatible subset lives under /mem0; MCP at /mcp.",
        license(name = "MIT OR Apache-2.0")
    ),
    modifiers(&Security),
    security(("bearer" = [])),
    components(schemas(ErrorBody))
)]
struct ApiDoc;

/// The `/v1` and `/mem0` routes with their OpenAPI document.
fn api() -> OpenApiRouter<App> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(create_user, list_users))
        .routes(routes!(get_user, erase_user))
        .routes(routes!(append, list_messages))
        .routes(routes!(erase_message))
        .routes(routes!(get_job))
        .routes(routes!(search))
        .routes(routes!(list_memories, erase_memories))
        .routes(routes!(get_memory, correct_memory, forget_memory))
        .routes(routes!(history))
        .routes(routes!(context))
        .merge(crate::mem0::routes())
}

/// The OpenAPI document of the REST API (what `/openapi.json` serves).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().split_for_parts().1
}

/// The whole HTTP application for `engine`.
pub fn router(engine: Arc<Engine>) -> Router {
    let (api, doc) = api().split_for_parts();
    let doc = Arc::new(doc);
    let mcp = crate::mcp::http_service(engine.clone());
    api.route(
        "/openapi.json",
        axum::routing::get(move || {
            let d = doc.clone();
            async move { axum::Json(d.as_ref().clone()) }
        }),
    )
    .route("/metrics", axum::routing::get(metrics))
    .nest_service("/mcp", mcp)
    .fallback(|| async { ServeError::NotFound("no such route".into()) })
    .method_not_allowed_fallback(|| async {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            axum::Json(ErrorBody {
                error: ErrorDetail {
                    code: "method_not_allowed".into(),
                    message: "this route does not take that method".into(),
                },
            }),
        )
    })
    .layer(axum::middleware::from_fn_with_state(engine.clone(), authenticate))
    .layer(axum::middleware::from_fn_with_state(engine.clone(), observe))
    .layer(DefaultBodyLimit::max(MAX_BODY))
    .with_state(engine)
}

/// Counts and times every request by its route template.
async fn observe(State(e): State<App>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().to_string();
    let t = Instant::now();
    let r = next.run(req).await;
    e.metrics.request(&route, &method, r.status().as_u16(), t.elapsed());
    r
}

/// The key a request presents: `Authorization: Bearer KEY`, mem0's
/// `Authorization: Token KEY`, or `X-API-Key: KEY`.
fn presented_key(h: &axum::http::HeaderMap) -> Option<String> {
    if let Some(v) = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        for scheme in ["Bearer ", "bearer ", "Token ", "token "] {
            if let Some(k) = v.strip_prefix(scheme) {
                return Some(k.trim().to_string());
            }
        }
        return Some(v.to_string());
    }
    h.get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
}

/// Resolves the caller: with keys in the registry, a valid key (else 401);
/// without any, a loopback client gets the `default` tenant (anyone else
/// is refused). `/v1/health` needs neither.
async fn authenticate(State(e): State<App>, mut req: Request, next: Next) -> Response {
    if req.uri().path() == "/v1/health" {
        return next.run(req).await;
    }
    let principal = match e.registry.has_keys() {
        Err(err) => return err.into_response(),
        Ok(true) => match presented_key(req.headers()) {
            None => {
                return ServeError::Unauthorized(
                    "an API key is required: Authorization: Bearer KEY (made with `dentate keys create`)".into(),
                )
                .into_response();
            }
            Some(k) => match e.registry.authenticate(&k) {
                Ok(Some(p)) => p,
                Ok(None) => return ServeError::Unauthorized("unknown or revoked API key".into()).into_response(),
                Err(err) => return err.into_response(),
            },
        },
        Ok(false) => {
            let loopback = req
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .is_some_and(|c| c.0.ip().is_loopback());
            if !loopback {
                return ServeError::Forbidden(
                    "no API key exists yet, so this server answers loopback clients only; create one with `dentate keys create`".into(),
                )
                .into_response();
            }
            Principal::local(DEFAULT_TENANT)
        }
    };
    req.extensions_mut().insert(principal);
    next.run(req).await
}

async fn metrics(State(e): State<App>, Extension(p): Extension<Principal>) -> Res<Response> {
    p.require(crate::registry::Role::Read)?;
    let text = e.metrics.render(e.queue_depth(), e.llm_stats().as_ref());
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response())
}

/// Health (no key needed).
#[utoipa::path(get, path = "/v1/health", tag = "service", security(()),
    responses((status = 200, description = "The server is up", body = Health)))]
async fn health(State(e): State<App>) -> Json<Health> {
    Json(Health {
        status: if e.closing() { "shutting_down" } else { "ok" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        pipelines: e.pipeline_names(),
        embedder: e.embedder_name(),
        queue_depth: e.queue_depth(),
    })
}

/// Creates a user (write key); creating one that exists returns it.
#[utoipa::path(post, path = "/v1/users", tag = "users", request_body = CreateUser,
    responses((status = 201, description = "Created", body = UserOut),
              (status = 200, description = "It existed", body = UserOut),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not allowed", body = ErrorBody)))]
async fn create_user(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Json(b): Json<CreateUser>,
) -> Res<(StatusCode, Json<UserOut>)> {
    let (u, made) = e.create_user(&p, &b.user_id).await?;
    Ok((if made { StatusCode::CREATED } else { StatusCode::OK }, Json(u)))
}

/// Lists the tenant's users.
#[utoipa::path(get, path = "/v1/users", tag = "users", params(PageQuery),
    responses((status = 200, description = "Users", body = UserList),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody)))]
async fn list_users(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Query(q): Query<PageQuery>,
) -> Res<Json<UserList>> {
    Ok(Json(e.list_users(&p, q.limit, q.offset)?))
}

/// A user with its message count.
#[utoipa::path(get, path = "/v1/users/{user_id}", tag = "users",
    params(("user_id" = String, Path, description = "The user's id")),
    responses((status = 200, description = "The user", body = UserOut),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn get_user(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
) -> Res<Json<UserOut>> {
    Ok(Json(e.get_user(&p, &user).await?))
}

/// Erases a user for good (admin key): messages, memories, history,
/// index files, jobs. Returns the receipt.
#[utoipa::path(delete, path = "/v1/users/{user_id}", tag = "users",
    params(("user_id" = String, Path, description = "The user's id")),
    responses((status = 200, description = "Erased", body = EraseReceipt),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not an admin key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn erase_user(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
) -> Res<Json<EraseReceipt>> {
    Ok(Json(e.erase_user(&p, &user).await?))
}

/// Appends messages (write key); the user is created if new. The messages
/// are durable when this answers; ingestion runs in the background.
#[utoipa::path(post, path = "/v1/users/{user_id}/messages", tag = "messages", request_body = AppendRequest,
    params(("user_id" = String, Path, description = "The user's id")),
    responses((status = 202, description = "Stored; ingestion queued", body = AppendResponse),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 413, description = "Body too large", body = ErrorBody),
              (status = 429, description = "Ingest queue full; see Retry-After", body = ErrorBody),
              (status = 503, description = "Shutting down", body = ErrorBody)))]
async fn append(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
    Json(b): Json<AppendRequest>,
) -> Res<(StatusCode, Json<AppendResponse>)> {
    Ok((StatusCode::ACCEPTED, Json(e.append(&p, &user, b.messages).await?)))
}

/// A page of the user's source messages, oldest first.
#[utoipa::path(get, path = "/v1/users/{user_id}/messages", tag = "messages", params(("user_id" = String, Path, description = "The user's id"), PageQuery),
    responses((status = 200, description = "Messages", body = MessageList),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn list_messages(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
    Query(q): Query<PageQuery>,
) -> Res<Json<MessageList>> {
    Ok(Json(e.messages(&p, &user, q.limit, q.offset).await?))
}

/// Erases one source message and every memory derived from it (write
/// key). Returns the receipt.
#[utoipa::path(delete, path = "/v1/users/{user_id}/messages/{message_id}", tag = "messages",
    params(("user_id" = String, Path, description = "The user's id"), ("message_id" = i64, Path, description = "Store id of the message")),
    responses((status = 200, description = "Erased", body = EraseReceipt),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such user or message", body = ErrorBody)))]
async fn erase_message(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path((user, id)): Path<(String, i64)>,
) -> Res<Json<EraseReceipt>> {
    Ok(Json(e.erase_message(&p, &user, id).await?))
}

/// An ingest job: state and progress.
#[utoipa::path(get, path = "/v1/jobs/{job_id}", tag = "messages",
    params(("job_id" = i64, Path, description = "Job id")),
    responses((status = 200, description = "The job", body = Job),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such job", body = ErrorBody)))]
async fn get_job(State(e): State<App>, Extension(p): Extension<Principal>, Path(id): Path<i64>) -> Res<Json<Job>> {
    Ok(Json(e.job(&p, id)?))
}

/// Searches the user's memories by `k` or by a token `budget`, optionally
/// within a time range.
#[utoipa::path(post, path = "/v1/users/{user_id}/search", tag = "memories", request_body = SearchRequest,
    params(("user_id" = String, Path, description = "The user's id")),
    responses((status = 200, description = "Results, best first", body = SearchResponse),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn search(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
    Json(b): Json<SearchRequest>,
) -> Res<Json<SearchResponse>> {
    Ok(Json(e.search(&p, &user, b).await?))
}

/// A page of the user's live memories, oldest first.
#[utoipa::path(get, path = "/v1/users/{user_id}/memories", tag = "memories", params(("user_id" = String, Path, description = "The user's id"), ListQuery),
    responses((status = 200, description = "Memories", body = MemoryList),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn list_memories(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
    Query(q): Query<ListQuery>,
) -> Res<Json<MemoryList>> {
    Ok(Json(e.list(&p, &user, q).await?))
}

/// Erases every message and memory of the user, keeping the user (write
/// key). Returns the receipt.
#[utoipa::path(delete, path = "/v1/users/{user_id}/memories", tag = "memories", params(("user_id" = String, Path, description = "The user's id")),
    responses((status = 200, description = "Erased", body = EraseReceipt),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn erase_memories(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
) -> Res<Json<EraseReceipt>> {
    Ok(Json(e.erase_all(&p, &user, false).await?))
}

/// A memory with its provenance and source messages.
#[utoipa::path(get, path = "/v1/users/{user_id}/memories/{memory_id}", tag = "memories",
    params(("user_id" = String, Path, description = "The user's id"), ("memory_id" = i64, Path, description = "Memory id")),
    responses((status = 200, description = "The memory", body = MemoryOut),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user or memory", body = ErrorBody)))]
async fn get_memory(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path((user, id)): Path<(String, i64)>,
) -> Res<Json<MemoryOut>> {
    Ok(Json(e.get(&p, Some(&user), id).await?))
}

/// Corrects a memory's text (write key); it keeps its id and provenance.
#[utoipa::path(put, path = "/v1/users/{user_id}/memories/{memory_id}", tag = "memories", request_body = CorrectRequest,
    params(("user_id" = String, Path, description = "The user's id"), ("memory_id" = i64, Path, description = "Memory id")),
    responses((status = 200, description = "The corrected memory", body = MemoryOut),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such user or memory", body = ErrorBody)))]
async fn correct_memory(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path((user, id)): Path<(String, i64)>,
    Json(b): Json<CorrectRequest>,
) -> Res<Json<MemoryOut>> {
    Ok(Json(e.correct(&p, Some(&user), id, b.text).await?))
}

/// Forgets a memory (write key): it leaves search and lists.
#[utoipa::path(delete, path = "/v1/users/{user_id}/memories/{memory_id}", tag = "memories",
    params(("user_id" = String, Path, description = "The user's id"), ("memory_id" = i64, Path, description = "Memory id")),
    responses((status = 204, description = "Forgotten"),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 403, description = "Not a write key", body = ErrorBody),
              (status = 404, description = "No such user or live memory", body = ErrorBody)))]
async fn forget_memory(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path((user, id)): Path<(String, i64)>,
) -> Res<StatusCode> {
    e.forget(&p, Some(&user), id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A memory's history: made, corrected, forgotten.
#[utoipa::path(get, path = "/v1/users/{user_id}/memories/{memory_id}/history", tag = "memories",
    params(("user_id" = String, Path, description = "The user's id"), ("memory_id" = i64, Path, description = "Memory id")),
    responses((status = 200, description = "History, oldest first", body = HistoryResponse),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user or memory", body = ErrorBody)))]
async fn history(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path((user, id)): Path<(String, i64)>,
) -> Res<Json<HistoryResponse>> {
    Ok(Json(e.history(&p, Some(&user), id).await?))
}

/// The prompt context for a question, within a token budget (what
/// `dentate memory ask` prints).
#[utoipa::path(post, path = "/v1/users/{user_id}/context", tag = "memories", request_body = ContextRequest,
    params(("user_id" = String, Path, description = "The user's id")),
    responses((status = 200, description = "The composed context", body = ContextResponse),
              (status = 400, description = "Bad input", body = ErrorBody),
              (status = 401, description = "No or bad key", body = ErrorBody),
              (status = 404, description = "No such user", body = ErrorBody)))]
async fn context(
    State(e): State<App>,
    Extension(p): Extension<Principal>,
    Path(user): Path<String>,
    Json(b): Json<ContextRequest>,
) -> Res<Json<ContextResponse>> {
    Ok(Json(e.context(&p, &user, b).await?))
}
